package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/spec"
)

// Admission inside the application's transaction. On SQLite the store gives
// the transaction out (BeginTx) rather than taking the caller's *sql.Tx,
// because only its own transaction can be correct under SQLite's one writer:
//
//   - It begins IMMEDIATE, behind this process's writer queue, as every
//     write of the store does: the admission decides under the database's
//     write lock, reads the clock after it, and queues in order with the
//     store's other writers. A caller's deferred transaction would take the
//     lock only at its first write, and could be refused it
//     (SQLITE_BUSY_SNAPSHOT, which no busy timeout waits out) after
//     deciding from an older snapshot; one begun outside the queue would
//     make the store's writers poll for the lock instead of queueing.
//   - A refusal must leave the transaction uncommittable. SQLite has no
//     aborted state: a *sql.Tx commits whatever it wrote, and rolling it
//     back underneath database/sql would leave the caller's next
//     statements running outside any transaction. The store's Tx rolls
//     back at the refusal and refuses to commit.
//   - It is on the store's own database by construction.

// ErrTxAborted is returned (wrapped, with the refusal) by a Tx's Commit, and
// by its statements, once an operation in it was refused: the transaction
// was rolled back, the application's writes in it included.
var ErrTxAborted = errors.New("sqlite: the transaction was rolled back because an operation in it was refused")

// Tx is a write transaction on the store's database, for the application's
// own statements (ExecContext, QueryContext, QueryRowContext, PrepareContext:
// *sql.Tx's, and the usual interface of generated query code) and for
// admissions (Store.CreateRunTx), which commit together when Commit
// succeeds, or not at all.
//
// It holds the database's one write lock from BeginTx to Commit or Rollback:
// every other writer, the store's included, waits for it (readers do not).
// Keep it short, end it on every path (defer Rollback: after Commit it does
// nothing), and do not use it from several goroutines at once. It ends by
// itself, rolled back, when the context given to BeginTx ends.
type Tx struct {
	s   *Store
	txn *txn
	// stop cancels the rollback at the end of BeginTx's context.
	stop func() bool

	mu      sync.Mutex
	done    bool  // committed or rolled back
	aborted error // the refusal that rolled it back (ErrTxAborted wraps it)
}

// BeginTx begins a write transaction on the store's database: it waits its
// turn behind this process's other writers, then takes the database's write
// lock (BEGIN IMMEDIATE). A database that stays locked by another process is
// unavailable, as for any write.
func (s *Store) BeginTx(ctx context.Context) (*Tx, error) {
	if err := s.writer.lock(ctx, &s.waiting); err != nil {
		return nil, typed(ctx, err)
	}
	var t *txn
	err := s.retryBusy(ctx, func() (err error) {
		t, err = s.stmts.begin(ctx, nil)
		return err
	})
	if err != nil {
		s.writer.unlock()
		return nil, err
	}
	tx := &Tx{s: s, txn: t}
	tx.stop = context.AfterFunc(ctx, func() { tx.Rollback() })
	return tx, nil
}

// CreateRunTx admits req inside tx: the run, its run_queued event, its
// job, its idempotency record and its outbox messages are written in tx and
// commit with the application's writes in it, when Commit succeeds, or not
// at all. It decides exactly as CreateRun does, from what tx sees (the
// committed database, and tx's own writes: a second admission of a key in
// one transaction replays the first), at one reading of the store's clock,
// and returns what CreateRun would: the created run, a replay (the original
// run, nothing written: tx stays usable), or idempotency_conflict,
// already_exists, invalid_argument. Another transaction admitting the key
// waits for tx to end (one writer), then sees what tx committed.
//
// On every error, refusals included, tx is rolled back at once (the
// application's writes in it too) and its Commit returns ErrTxAborted: a
// refused admission and the application's writes never commit one without
// the other. tx must be from BeginTx of a store on the same database file.
// The store's hooks do not run (the caller commits).
func (s *Store) CreateRunTx(ctx context.Context, tx *Tx, req spec.CreateRunRequest) (res spec.CreateRunResult, err error) {
	if tx == nil || tx.s.writer != s.writer {
		return res, spec.Errorf(spec.CodeInvalidArgument, "sqlite: CreateRunTx needs a transaction of this store's database (Store.BeginTx)")
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if err := tx.usable(); err != nil {
		return res, &spec.Error{Code: spec.CodeFailedPrecondition, Message: err.Error(), Err: err}
	}
	defer func() {
		if err != nil {
			tx.abort(err)
		}
	}()
	outs, err := s.admit(ctx, tx.txn, []spec.CreateRunRequest{req}, s.clock.Now(), false)
	if err != nil {
		return res, typed(ctx, err)
	}
	return outs[0].Result, outs[0].Err
}

// usable returns why tx can run no more statements, or nil. t.mu is held.
func (t *Tx) usable() error {
	switch {
	case t.aborted != nil:
		return fmt.Errorf("%w: %v", ErrTxAborted, t.aborted)
	case t.done:
		return sql.ErrTxDone
	}
	return nil
}

// abort rolls tx back after the refusal err. t.mu is held.
func (t *Tx) abort(err error) {
	t.aborted = err
	t.end(false)
}

// end commits or rolls back the SQLite transaction and gives the writer
// queue back. t.mu is held and the transaction is open.
func (t *Tx) end(commit bool) error {
	t.done = true
	t.stop()
	defer t.s.writer.unlock()
	if commit {
		return t.txn.Commit()
	}
	return t.txn.Rollback()
}

// Commit commits the transaction: the application's writes and every
// admission in it. After a refusal it returns ErrTxAborted (wrapped, with
// the refusal): nothing was committed.
func (t *Tx) Commit() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return err
	}
	return t.end(true)
}

// Rollback rolls the transaction back. After Commit, or once it ended, it
// returns sql.ErrTxDone and does nothing.
func (t *Tx) Rollback() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return sql.ErrTxDone
	}
	return t.end(false)
}

// ExecContext is (*sql.Tx).ExecContext.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tx, err := t.sqlTx()
	if err != nil {
		return nil, err
	}
	return tx.ExecContext(ctx, query, args...)
}

// QueryContext is (*sql.Tx).QueryContext.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	tx, err := t.sqlTx()
	if err != nil {
		return nil, err
	}
	return tx.QueryContext(ctx, query, args...)
}

// QueryRowContext is (*sql.Tx).QueryRowContext. Once the transaction has
// ended, its Row's error is sql.ErrTxDone.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.txn.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext is (*sql.Tx).PrepareContext.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	tx, err := t.sqlTx()
	if err != nil {
		return nil, err
	}
	return tx.PrepareContext(ctx, query)
}

// sqlTx returns the transaction while it is open, else why not.
func (t *Tx) sqlTx() (*sql.Tx, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	return t.txn.tx, nil
}

var _ spec.TxAdmitter = (*Store)(nil)

// AdmitInTx implements spec.TxAdmitter: CreateRunTx in a transaction from
// BeginTx, as an application's, then its commit or rollback with the hooks
// around it.
func (s *Store) AdmitInTx(ctx context.Context, req spec.CreateRunTxRequest) (spec.CreateRunResult, error) {
	tx, err := s.BeginTx(ctx)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	defer tx.Rollback()
	res, err := s.CreateRunTx(ctx, tx, req.Request)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	if err := s.runHook(ctx, spec.OpCreateRunTx, spec.BeforeCommit); err != nil {
		return spec.CreateRunResult{}, typed(ctx, err)
	}
	if req.Rollback {
		err = tx.Rollback()
	} else {
		err = tx.Commit()
	}
	if err != nil {
		return spec.CreateRunResult{}, typed(ctx, err)
	}
	if err := s.runHook(ctx, spec.OpCreateRunTx, spec.AfterCommit); err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnknownOutcome, Message: "create_run_tx ended but its result was lost; read back before acting", Err: err}
	}
	return res, nil
}

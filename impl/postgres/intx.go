package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/spec"
)

// Operations inside the caller's transaction (ADR-042,
// docs/adr/ADR-042-completion-in-the-callers-transaction.md): the application's
// own writes and the store's commit together, when the caller commits, or
// not at all. They share three rules. The store's statements run with the
// store's schema on the search_path, whatever the caller's connection has,
// and the caller's setting is restored before they return. Every error
// leaves the transaction aborted (poison), so that a caller who ignores it
// and commits anyway gets a rollback: a refused operation and the
// application's writes never commit one without the other. The store's
// hooks do not run (the caller commits), and a commit whose answer is lost
// is the caller's to resolve: read the run back before acting.

// poisonTx makes the caller's transaction unable to commit: it raises an
// error inside it, after which PostgreSQL refuses every statement and turns
// COMMIT into ROLLBACK (pgx reports pgx.ErrTxCommitRollback).
const poisonTx = `DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'P0001',
	MESSAGE = 'leasehold: an operation in this transaction was refused; the transaction must roll back'; END $$`

// The caller's settings an operation inside its transaction reads first, and
// the statement that puts the store's schema on its search_path until the
// transaction ends (set_config's third argument: local), or until restored.
const (
	readTxSettings = `SELECT pg_catalog.current_setting('search_path'), pg_catalog.current_setting('transaction_isolation'),
		pg_catalog.current_setting('transaction_read_only')`
	setSearchPath = `SELECT pg_catalog.set_config('search_path', @path, true)`
)

// CompleteTx completes req's run inside the caller's transaction (ADR-042):
// the application's own writes in tx and the job's completion commit
// together, when the caller commits tx, or not at all.
//
// It makes exactly Complete's checks and writes: the job row is locked, the
// store's clock read once (the database clock, inside tx, unless an injected
// clock was configured), and the guarded transition applied. When the lease
// is not current it returns the lease error (lost_lease, cancelled,
// already_terminal, as Complete would) — and on every error it leaves tx
// aborted, so that a caller who ignores the error and commits anyway gets a
// rollback: a refused completion and the application's writes can never
// commit one without the other. Roll tx back on any error.
//
// tx may come from any connection to the store's database, whatever its
// search_path: the store's statements run with the store's schema on the
// path and the caller's setting is restored before CompleteTx returns. The
// store's hooks do not run (the caller commits), and a commit whose answer
// is lost is the caller's to resolve: read the run back before acting. Call
// it at most once per transaction and do not use tx concurrently.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, req spec.CompleteRequest) (run spec.Run, err error) {
	defer func() {
		if err != nil {
			poison(ctx, tx)
		}
	}()
	if err := s.precheck(func(now int64) error { _, err := s.cfg.CheckComplete(req, now); return err }); err != nil {
		return run, err
	}
	var saved string
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path')`).Scan(&saved); err != nil {
		return run, typed(ctx, err)
	}
	if _, err := tx.Exec(ctx, setSearchPath, args{"path": pgx.Identifier{s.schema}.Sanitize()}); err != nil {
		return run, typed(ctx, err)
	}
	t := &txn{Tx: tx, ctx: ctx, s: s}
	now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
	if err != nil {
		return run, typed(ctx, err)
	}
	if run, err = s.completeIn(t, req, now); err != nil {
		return spec.Run{}, typed(ctx, err)
	}
	if _, err := tx.Exec(ctx, setSearchPath, args{"path": saved}); err != nil {
		return spec.Run{}, typed(ctx, err)
	}
	return run, nil
}

// admissionSavepoint bounds what one attempt of CreateRunTx writes, so that
// an attempt that raced a concurrent admission or purge is undone without
// the caller's own writes.
const admissionSavepoint = `leasehold_admission`

// CreateRunTx admits req inside the caller's transaction tx: the run, its
// run_queued event, its job, its idempotency record and its outbox messages
// are written in tx and commit with the application's own writes, when the
// caller commits tx, or not at all.
//
// It decides exactly as CreateRun does, and returns what CreateRun would:
// the created run; a replay of the key's live record (the original run,
// Replayed, nothing written: tx stays usable); idempotency_conflict,
// already_exists or invalid_argument. It takes the key's admission lock
// (the one CreateRun takes) and holds it until tx ends, then reads the
// key's record, then the store's clock (the database clock, inside tx,
// unless an injected clock was configured). So a concurrent admission of
// the key — CreateRun, or CreateRunTx in another transaction — waits for tx
// to end and then sees what it committed: a replay or a conflict when tx
// committed, nothing when it rolled back (that admission then creates the
// run). Hold tx briefly. Admitting several keys in one transaction takes
// several such locks: take them in one order everywhere, or two
// transactions may deadlock (PostgreSQL then aborts one: unavailable).
//
// tx must be READ COMMITTED (PostgreSQL's default) and read-write; any
// other is refused (invalid_argument), since a snapshot taken before the
// lock would hide the record a concurrent admission committed. tx may
// come from any connection to the store's database, whatever its
// search_path (see CompleteTx). An attempt that finds a row it decided
// from changed by a concurrent bulk admission or purge is undone to a
// savepoint (leasehold_admission) and made again, at most three times in
// all, as CreateRun runs again; the application's writes before it are
// kept. The run_created notification (Notifier) is sent inside tx, so
// PostgreSQL delivers it only when tx commits.
//
// On every error, refusals included, tx is left aborted, so that a caller
// who ignores the error and commits anyway gets a rollback
// (pgx.ErrTxCommitRollback): a refused admission and the application's
// writes never commit one without the other. Roll tx back on any error.
// Do not use tx concurrently.
func (s *Store) CreateRunTx(ctx context.Context, tx pgx.Tx, req spec.CreateRunRequest) (res spec.CreateRunResult, err error) {
	defer func() {
		if err != nil {
			poison(ctx, tx)
		}
	}()
	if err := s.precheck(func(now int64) error { _, err := s.cfg.NormalizeCreate(req, now); return err }); err != nil {
		return res, err
	}
	saved, err := s.enterTx(ctx, tx)
	if err != nil {
		return res, typedTx(ctx, err)
	}
	reqs := []spec.CreateRunRequest{req}
	for attempt := 1; ; attempt++ {
		p := s.planAdmission(reqs, false, true)
		var b pgx.Batch
		if attempt == 1 {
			b.Queue(`SAVEPOINT ` + admissionSavepoint)
		} else {
			b.Queue(`ROLLBACK TO SAVEPOINT ` + admissionSavepoint)
		}
		p.queueReads(&b)
		br := tx.SendBatch(ctx, &b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return res, typedTx(ctx, err)
		}
		t := &txn{Tx: tx, ctx: ctx, s: s}
		outs, err := s.admit(t, br, p, reqs)
		if err == nil {
			res, err = outs[0].Result, outs[0].Err
			if err == nil {
				return res, s.leaveTx(t, saved)
			}
			return spec.CreateRunResult{}, err
		}
		if !raced(err) || attempt == maxAdmissionAttempts || ctx.Err() != nil {
			return spec.CreateRunResult{}, typedTx(ctx, err)
		}
		s.retried.Add(1)
	}
}

// enterTx reads the caller's settings and puts the store's schema on the
// search_path, in one round trip (before any statement that names a table:
// pgx prepares a batch's statements before it runs them). It returns the
// caller's search_path, to be restored; an isolation level or access mode
// CreateRunTx cannot admit in is an invalid_argument.
func (s *Store) enterTx(ctx context.Context, tx pgx.Tx) (saved string, err error) {
	var b pgx.Batch
	b.Queue(readTxSettings)
	b.Queue(setSearchPath, args{"path": pgx.Identifier{s.schema}.Sanitize()})
	br := tx.SendBatch(ctx, &b)
	defer br.Close()
	var isolation, readOnly string
	if err := br.QueryRow().Scan(&saved, &isolation, &readOnly); err != nil {
		return "", err
	}
	switch {
	case isolation != "read committed":
		return "", spec.Errorf(spec.CodeInvalidArgument,
			"postgres: the transaction's isolation is %s; admit in a READ COMMITTED transaction (a snapshot taken before the admission lock would hide a record committed meanwhile)", isolation)
	case readOnly != "off":
		return "", spec.Errorf(spec.CodeInvalidArgument, "postgres: the transaction is read-only; admit in a read-write transaction")
	}
	return saved, br.Close()
}

// leaveTx ends a successful admission inside the caller's transaction, in
// one round trip: the savepoint released (its writes and locks now the
// transaction's), the notifications of what it wrote sent inside the
// transaction (delivered only if it commits), the caller's search_path
// restored.
func (s *Store) leaveTx(t *txn, saved string) error {
	var b pgx.Batch
	b.Queue(`RELEASE SAVEPOINT ` + admissionSavepoint)
	if len(t.notes) > 0 {
		b.Queue(notifyEach, args{"channel": s.Channel(), "payloads": t.notes})
	}
	b.Queue(setSearchPath, args{"path": saved})
	if err := t.SendBatch(t.ctx, &b).Close(); err != nil {
		return typedTx(t.ctx, err)
	}
	return nil
}

// typedTx is typed for an operation inside the caller's transaction: what
// it wrote can no longer commit (the transaction is aborted), so the caller
// must roll back, and may then retry the whole transaction.
func typedTx(ctx context.Context, err error) error {
	var e *spec.Error
	if errors.As(err, &e) {
		return err
	}
	return &spec.Error{Code: spec.CodeUnavailable, Message: unavailableReason(ctx, err) +
		"; the transaction is aborted: roll it back, and retry it", Err: err}
}

// poison leaves tx aborted (see poisonTx). It runs even when ctx is done; if
// the statement cannot be sent the connection is gone and the server rolls
// the transaction back anyway.
func poison(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = tx.Exec(ctx, poisonTx)
}

var _ spec.TxAdmitter = (*Store)(nil)

// AdmitInTx implements spec.TxAdmitter: CreateRunTx in a READ COMMITTED
// transaction of the store's pool, as an application's, then the hooks
// around its end. A commit is the store's own (its commit marker, and a
// lost answer resolved by asking the server); a rollback after a
// successful admission returns the admission's answer, nothing written.
func (s *Store) AdmitInTx(ctx context.Context, req spec.CreateRunTxRequest) (spec.CreateRunResult, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return spec.CreateRunResult{}, typed(ctx, err)
	}
	defer rollback(tx)
	res, err := s.CreateRunTx(ctx, tx, req.Request)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	if !req.Rollback {
		if err := s.commit(ctx, spec.OpCreateRunTx, &txn{Tx: tx, ctx: ctx, s: s}); err != nil {
			return spec.CreateRunResult{}, err
		}
		return res, nil
	}
	if err := s.runHook(ctx, spec.OpCreateRunTx, spec.BeforeCommit); err != nil {
		return spec.CreateRunResult{}, typed(ctx, err)
	}
	// A rollback that fails leaves the connection broken, and the server
	// rolls the transaction back with it: nothing was written either way.
	rollback(tx)
	if err := s.runHook(ctx, spec.OpCreateRunTx, spec.AfterCommit); err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnknownOutcome, Message: "create_run_tx rolled back but its result was lost", Err: err}
	}
	return res, nil
}

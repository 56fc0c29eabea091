// Package sqlite is leasehold's reference store on embedded SQLite
// (modernc.org/sqlite, no cgo).
//
// Every operation is one BEGIN IMMEDIATE transaction: SQLite has one writer at
// a time, so taking the write lock first makes each operation's clock read,
// checks and writes one atomic step, ordered against every other writer. The
// database runs in WAL mode, flushing the log at every commit (Options.Sync:
// durable by default), with a busy timeout; a writer that still cannot
// get the lock is retried a few times and then reported as CodeUnavailable
// with a message that says what to do, never as a bare "database is locked".
// BeginTx gives the application such a transaction for its own statements
// and its admissions (CreateRunTx), which commit together or not at all.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// Options configures a Store. The zero value of every field but Config has a
// working default.
type Options struct {
	Config spec.Config
	// Clock is read once per writing operation. Default: the system clock.
	Clock clock.Clock
	// Random draws retry jitter. Default: a PCG seeded from the time.
	Random spec.Random
	// MaxConns bounds the connection pool. Default 8.
	MaxConns int
	// BusyTimeout is how long one transaction waits for the write lock before
	// SQLite reports it busy. Default 10s.
	BusyTimeout time.Duration
	// Hook, when set, runs at every spec.HookPoint (tests and fault injection).
	Hook spec.Hook
	// Logger receives one debug line per refused guarded write. Default: none.
	Logger *slog.Logger
	// Sync is how a commit reaches the disk. The zero value, SyncFull, is
	// durable: every write the store acknowledged survives a power loss.
	Sync Sync
}

// Sync is SQLite's synchronous setting for the write-ahead log the store
// runs in (PRAGMA synchronous).
type Sync int

const (
	// SyncFull flushes the write-ahead log at every commit (synchronous
	// FULL): a write the store acknowledged survives a power loss or an
	// operating-system crash. The default.
	SyncFull Sync = iota
	// SyncNormal flushes the write-ahead log only when SQLite checkpoints
	// it (synchronous NORMAL): a commit costs no fsync, so writes are
	// faster, but every write acknowledged since the last checkpoint can
	// roll back after a power loss or an operating-system crash, as
	// SQLite's documentation says and the power-loss check
	// (powerloss/sqlite) shows: an admission acknowledged to a caller is
	// gone, a completed run is leased again and runs a second time. A crash
	// of the process alone loses nothing, and the database stays
	// consistent. Choose it only where losing the last acknowledged writes
	// to a power loss is acceptable.
	SyncNormal
)

// String is the setting's PRAGMA synchronous value: FULL or NORMAL.
func (s Sync) String() string {
	if p, err := s.pragma(); err == nil {
		return p
	}
	return fmt.Sprintf("Sync(%d)", int(s))
}

// pragma is the setting's PRAGMA synchronous value.
func (s Sync) pragma() (string, error) {
	switch s {
	case SyncFull:
		return "FULL", nil
	case SyncNormal:
		return "NORMAL", nil
	}
	return "", spec.Errorf(spec.CodeInvalidArgument, "sqlite: Options.Sync %d: want SyncFull or SyncNormal", int(s))
}

// Store is the SQLite implementation of spec.Store. It is safe for concurrent
// use by many goroutines; several Stores may open the same file.
type Store struct {
	db     *sql.DB
	stmts  *stmtCache
	writer writerLock
	// waiting counts this Store's writers queued behind another's (LockWaits).
	waiting atomic.Int64
	cfg     spec.Config
	clock   clock.Clock
	random  spec.Random
	hook    spec.Hook
	log     *slog.Logger
}

var _ spec.Store = (*Store)(nil)

// busyRetries is how many more times a transaction that found the database
// busy (after waiting BusyTimeout) is tried before CodeUnavailable.
const busyRetries = 3

// Open opens (creating if needed) the database file at path, applies the
// embedded migrations, and returns a Store. path must name a file (a
// temporary one in tests), so that every connection of the pool sees the same
// database: "" and ":memory:" are invalid_argument. An invalid Config is
// invalid_argument too.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if path == "" || path == ":memory:" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "sqlite: give a file path; an in-memory database is private to one connection")
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	if opts.Random == nil {
		opts.Random = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6c65617365))
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 8
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	synchronous, err := opts.Sync.pragma()
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+synchronous+")")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(opts.MaxConns)
	db.SetMaxIdleConns(opts.MaxConns)
	abs, err := filepath.Abs(path)
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &Store{db: db, stmts: newStmtCache(db), writer: writerLockFor(abs), cfg: opts.Config, clock: opts.Clock, random: opts.Random, hook: opts.Hook, log: opts.Logger}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the prepared statements and the connection pool.
func (s *Store) Close() error {
	s.stmts.close()
	err := s.db.Close()
	s.stmts.pending.Wait()
	return err
}

// DB exposes the connection pool for tests that must reach past the contract
// (constraint checks, fault injection). Do not write through it.
func (s *Store) DB() *sql.DB { return s.db }

func (s *Store) migrate(ctx context.Context) error {
	list, err := migrations.For(migrations.SQLite)
	if err != nil {
		return err
	}
	return s.retryBusy(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+migrations.VersionTable+` (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
			return err
		}
		for _, m := range list {
			var recorded string
			err := tx.QueryRowContext(ctx, `SELECT checksum FROM `+migrations.VersionTable+` WHERE version = ?`, m.Version).Scan(&recorded)
			switch {
			case err == nil:
				if err := m.CheckApplied(recorded); err != nil {
					return err
				}
				continue
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("sqlite: migration %d (%s): %w", m.Version, m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+migrations.VersionTable+` (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)`,
				m.Version, m.Name, m.Checksum, time.Now().UnixMilli()); err != nil {
				return err
			}
		}
		return tx.Commit()
	})
}

// write runs fn in one immediate transaction with the operation's single
// clock reading, then the hooks and the commit. fn may run more than once if
// the database is busy, so it must only assign its results, never append.
func (s *Store) write(ctx context.Context, op spec.Op, fn func(tx *txn, now int64) error) error {
	return s.retryBusy(ctx, func() error {
		if err := s.commit(ctx, op, fn); err != nil {
			return err
		}
		// The writer queue is free again: a caller held here (a test's
		// barrier) has committed and blocks no one.
		if err := s.runHook(ctx, op, spec.AfterCommit); err != nil {
			return &spec.Error{Code: spec.CodeUnknownOutcome, Message: fmt.Sprintf("%s committed but its result was lost; read back before acting", op), Err: err}
		}
		return nil
	})
}

// commit runs fn and the BeforeCommit hook in one immediate transaction,
// holding this process's writer queue until the commit returns.
func (s *Store) commit(ctx context.Context, op spec.Op, fn func(tx *txn, now int64) error) error {
	if err := s.writer.lock(ctx, &s.waiting); err != nil {
		return err
	}
	defer s.writer.unlock()
	tx, err := s.stmts.begin(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx, s.clock.Now()); err != nil {
		return err
	}
	if err := s.runHook(ctx, op, spec.BeforeCommit); err != nil {
		return err
	}
	err = tx.Commit()
	if err != nil && !isBusy(err) && ctx.Err() == nil {
		// SQLite had begun writing the transaction to its log: after an I/O
		// error there (a failed fsync) the log may hold all of it, and the
		// next open recovers it.
		return &spec.Error{Code: spec.CodeUnknownOutcome, Message: fmt.Sprintf("%s: the commit failed and may have reached the disk all the same; read back before acting", op), Err: err}
	}
	return err
}

// read runs fn in one transaction; reads take no clock reading and run no hooks.
func (s *Store) read(ctx context.Context, fn func(tx *txn) error) error {
	return s.retryBusy(ctx, func() error {
		tx, err := s.stmts.begin(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}

func (s *Store) runHook(ctx context.Context, op spec.Op, p spec.HookPoint) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(ctx, op, p)
}

// retryBusy runs attempt, retrying while SQLite reports the database busy, and
// turns every error that is not already a *spec.Error into one.
func (s *Store) retryBusy(ctx context.Context, attempt func() error) error {
	var err error
	for i := 0; i <= busyRetries; i++ {
		err = attempt()
		if !isBusy(err) || ctx.Err() != nil {
			break
		}
	}
	return typed(ctx, err)
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

func typed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var e *spec.Error
	if errors.As(err, &e) {
		return err
	}
	if ctx.Err() != nil {
		return &spec.Error{Code: spec.CodeUnavailable, Message: "the caller's context ended before the operation finished; nothing was written", Err: err}
	}
	if isBusy(err) {
		return &spec.Error{Code: spec.CodeUnavailable, Message: fmt.Sprintf("the database stayed locked by another writer through %d attempts; nothing was written. Retry, and look for a long-running transaction on the same file", busyRetries+1), Err: err}
	}
	return &spec.Error{Code: spec.CodeUnavailable, Message: "the database failed the operation; nothing was written", Err: err}
}

// writerLock queues this process's writers to one database file in FIFO
// order before they ask SQLite for its write lock. SQLite's own busy handler
// makes a waiting connection sleep (1, 2, 5, … 100 ms) while the holder
// takes the lock again and again, so without this queue writers from one
// process starve each other; with it, SQLite's busy timeout only arbitrates
// between processes. It is a one-slot channel so that waiting honours ctx.
type writerLock chan struct{}

var writerLocks = struct {
	sync.Mutex
	byPath map[string]writerLock
}{byPath: map[string]writerLock{}}

// writerLockFor returns the process-wide queue for the file at path.
func writerLockFor(path string) writerLock {
	writerLocks.Lock()
	defer writerLocks.Unlock()
	l, ok := writerLocks.byPath[path]
	if !ok {
		l = make(writerLock, 1)
		writerLocks.byPath[path] = l
	}
	return l
}

// lock takes the queue's slot, counting the caller in waiting while it
// waits for another writer to give it up.
func (l writerLock) lock(ctx context.Context, waiting *atomic.Int64) error {
	select {
	case l <- struct{}{}:
		return nil
	default:
	}
	waiting.Add(1)
	defer waiting.Add(-1)
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l writerLock) unlock() { <-l }

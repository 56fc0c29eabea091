// Package postgres is leasehold's PostgreSQL store, on pgx v5 (pgxpool). It
// implements spec.Store with the same results, error codes and check order as
// the reference SQLite store (impl/sqlite) and passes the same conformance
// suite (impl/storetest).
//
// # Transactions and locks
//
// Every operation is one READ COMMITTED transaction. Where SQLite serializes
// all writers with BEGIN IMMEDIATE, this store orders only the writers that
// touch the same rows:
//
//   - A write made under a lease (renew, complete, retry, fail, release, the
//     effect-ledger writes), a cancel and a replay first lock the job row
//     (SELECT … FOR NO KEY UPDATE), then read the clock, then make their
//     guarded writes. Two writers of one run are therefore serialized, and the
//     second reads its time after the first committed.
//   - Claim and Reap lock the jobs they take with FOR NO KEY UPDATE SKIP LOCKED
//     in the statement that selects them, so they never wait behind another
//     transaction's job; they read the clock first, because the selection
//     needs it. Purge reads the clock first too, but waits for a record an
//     admission holds instead of skipping it, so that its count is exact
//     (see purgeIdempotency).
//   - CreateRun takes a transaction-scoped advisory lock on its idempotency
//     scope (tenant, operation, key), then reads the records it decides
//     from, then the clock, so concurrent admissions of one key run one
//     after the other: the second sees the first's record and returns the
//     replay or idempotency_conflict. A request with no record and a free
//     run id is written by one statement that takes the lock, then the
//     clock (createFresh); it writes nothing where a unique index shows a
//     record or the run id, and the request is then decided as above. A
//     bulk admission first runs without those locks (a thousand of them,
//     held to the commit, would fill the server's lock table); a write
//     that then finds a row gone or a key
//     taken rolls it back, and it runs again under the locks (admitAll), as
//     does one that refuses a member already_exists (a refusal that rests
//     on its scope having no record, which no write of the batch guards). A
//     CreateRun whose record such a batch wrote first runs again too, and
//     so does one whose record's run a purge of runs deleted after it read
//     the record (the purge takes no admission lock). A bulk admission that
//     writes locks the stored runs it decided members from before its
//     writes (lockDecidedRuns: a run id taken FOR KEY SHARE, which only a
//     purge's lock conflicts with; a record replayed or conflicted with FOR
//     SHARE, which a deletion of that record waits for too; an expired
//     record it replaces FOR NO KEY UPDATE, its deletion's lock; a run it
//     replays FOR NO KEY UPDATE on its job row too, which a claim skips), so
//     nothing changes them before it commits. One that writes nothing
//     reads them all again in one statement, its single point.
//   - Every writer of a run locks its job row first (claim, the terminal
//     writes and cancel write only that row; a purge of runs locks each
//     run's job row and then its run row, in run id order, before deleting
//     any), so these operations cannot deadlock one another. An admission
//     locks run rows: the bulk one all it decided from or replaces the
//     expired records of in one pass in (tenant, run id) order, each once
//     in the mode it needs (never upgraded), a replayed run's job row
//     before its run row; PurgeIdempotency locks run rows in expiry order,
//     and can deadlock with a purge of runs or a bulk admission, as can a
//     purge's later rounds (which lock what they picked anew) with a bulk
//     admission. PostgreSQL then aborts one of
//     the two: an admission runs again, a purge is unavailable; neither
//     has written anything. Attempt and effect rows are only written by the
//     holder of their job's lock.
//
// # Clocks
//
// The clock is chosen at Open. With Options.Clock set (tests, the harness, a
// model comparison) the store reads that clock once per writing operation,
// inside the transaction, after the operation's ordering lock. With
// Options.Clock nil the store uses the database clock: it runs
// clockQuery (clock_timestamp(), in milliseconds) once, at the same point
// inside the transaction. Two operations read it elsewhere: Claim, which
// takes no ordering lock, reads an injected clock before its transaction
// and the database clock in the statement before its claim (setClaimNow);
// a fresh CreateRun reads it inside its one statement, after the lock that
// statement takes (insertFresh). Production should use the database clock:
// every lease expiry is then decided by the one server's clock and never by a
// worker's wall clock, so clock skew between workers cannot let two of them
// believe they hold a job. Use an injected clock when a test or harness must
// own time (crossing expiry boundaries without sleeping).
//
// # Errors and commit outcomes
//
// Contract outcomes are *spec.Error values with the SQLite store's codes. A
// database failure before COMMIT was sent (lost connection, serialization
// failure, deadlock, lock or statement timeout, shutdown, the caller's context
// ending) is CodeUnavailable: nothing was written and the call may be
// retried. When COMMIT was sent and its answer lost, the store asks the
// server what happened to the transaction (see resolveCommit): committed is a
// success, aborted is CodeUnavailable, and anything it cannot establish is
// CodeUnknownOutcome. An operation whose transaction wrote nothing (an empty
// claim, an admission replay) cannot have changed anything, so a failed
// COMMIT there is CodeUnavailable. TestBackendKilledBeforeCommit and
// TestCommitAnswerLost reproduce each case on a live server.
//
// # Requirements
//
// PostgreSQL 13 or later (pg_current_xact_id_if_assigned and pg_xact_status
// on xid8 resolve lost commits). The tests run on 15 and 16; their fault
// injection uses pg_terminate_backend with a timeout (14 or later).
//
// # Indexes
//
// migrations/postgres/0001_init.sql says why each index exists. The plan
// test (TestPlansAtDepth) loads 180,000 jobs and checks that claim, reclaim,
// reap, admission's key lookup and purge are index scans, both in the plan
// for their parameters and in the generic plan a prepared statement may
// cache.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/internal/coalesce"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// DefaultSchema is the schema the store uses when Options.Schema is empty.
// A dedicated schema keeps leasehold's tables (runs, jobs, …) apart from an
// application's own.
const DefaultSchema = "leasehold"

// Options configures a Store. Every field but Config has a working default.
type Options struct {
	Config spec.Config
	// Clock, when set, is read once per writing operation (tests and the
	// harness). When nil the store uses the database clock, which is what
	// production should do (see the package documentation).
	Clock clock.Clock
	// Random draws retry jitter. Default: a PCG seeded from the time. The
	// store serializes its calls, so it need not be safe for concurrent use.
	Random spec.Random
	// Hook, when set, runs at every spec.HookPoint (tests and fault injection).
	Hook spec.Hook
	// Logger receives a debug line per refused guarded write and a warning
	// per commit whose answer was lost. Default: none.
	Logger *slog.Logger

	// Schema is the PostgreSQL schema holding the tables; Open creates it
	// and migrates it. It must be a plain lower-case identifier
	// ([a-z_][a-z0-9_]*, at most 63 bytes). Default DefaultSchema.
	Schema string
	// MaxConns bounds the connection pool. Default 8. The announcer's
	// connection and each Listen's are not the pool's and do not count:
	// a store with notifications on holds at most MaxConns + 1 server
	// connections, plus one per running Listen.
	MaxConns int32
	// MinConns is the number of idle connections the pool keeps. Default 0.
	MinConns int32
	// MaxConnLifetime and MaxConnIdleTime recycle connections (pgxpool's
	// defaults when zero: one hour and thirty minutes).
	MaxConnLifetime time.Duration
	MaxConnIdleTime time.Duration
	// ApplicationName is reported in pg_stat_activity. Default "leasehold".
	ApplicationName string
	// RuntimeParams are extra session settings for every connection, for
	// example {"lock_timeout": "5s", "statement_timeout": "30s"}. A
	// statement stopped by one of them is CodeUnavailable. search_path and
	// application_name are always the store's (Schema, ApplicationName);
	// these settings override the planner settings of indexPlans.
	RuntimeParams map[string]string
	// ResolveTimeout bounds how long the store spends finding out whether a
	// transaction whose COMMIT answer was lost committed. Default 5s.
	ResolveTimeout time.Duration
	// WaitForServer bounds how long Open waits for a database that cannot
	// be reached yet or is not accepting connections yet (connection
	// refused or reset, "the database system is starting up", recovery):
	// it tries again with a growing delay (100 ms doubling to 2 s), logging
	// a warning per try, until the connection and the migration succeed,
	// WaitForServer has passed (then the last error, CodeUnavailable), or
	// ctx ends. Any other failure (authentication, a bad database name, a
	// migration error) is returned at once. Zero, the default, tries once:
	// a service that must start during a database outage (a worker started
	// with it, say) sets it.
	WaitForServer time.Duration
	// DisableNotify stops the store from announcing its admissions,
	// replays and cancels with pg_notify (see listen.go: it announces them
	// after they commit, in batches); without notifications workers find
	// new runs by polling and cancels through their next renewal.
	DisableNotify bool
	// NotifyQueue bounds the notifications waiting to be announced (while
	// PostgreSQL is slow or unreachable, say). When it is full, each new
	// notification drops the oldest waiting, counted in
	// NotifyStats.Dropped: a worker that misses a run_created finds the
	// run at its next poll (worker.Config.Idle), one that misses a
	// run_cancelled at its next renewal, so a drop costs a delay, never a
	// job. Default DefaultNotifyQueue.
	NotifyQueue int
	// CoalesceCreateRun, when above zero, merges concurrent CreateRun calls
	// on this Store into shared admission transactions (group commit), at
	// most this many at a time: a call that finds them all busy waits for
	// the next, which takes every call waiting (up to 128) as one bulk
	// admission. Each call's result is exactly CreateRun's — its run
	// and job are written in the one transaction that holds its lock and
	// its clock reading — and a call that finds a slot free runs at once,
	// alone; nothing waits for a batch to fill. A call whose context ends
	// after its transaction started returns CodeUnknownOutcome. Hooks see
	// the shared transaction as one spec.OpCreateRun. Zero, the default:
	// every call is a transaction of its own.
	CoalesceCreateRun int
}

// Store is the PostgreSQL implementation of spec.Store. It is safe for
// concurrent use by many goroutines, and any number of Stores (in any number
// of processes) may share one schema.
type Store struct {
	pool           *pgxpool.Pool
	schema         string
	cfg            spec.Config
	clock          clock.Clock // nil: the database clock
	random         *lockedRandom
	hook           spec.Hook
	log            *slog.Logger
	resolveTimeout time.Duration
	announcer      *announcer // nil: DisableNotify
	backends       *backends  // the pool's sessions (LockWaits)
	// admissions merges concurrent CreateRun calls (nil: each its own
	// transaction; Options.CoalesceCreateRun).
	admissions *coalesce.Group[spec.CreateRunRequest, spec.CreateOutcome]
	retried    atomic.Int64 // admission attempts run again (AdmissionStats)
	fresh      atomic.Int64 // CreateRun calls admitted fresh (AdmissionStats)
	// lockedOnly: CreateRun never tries the fresh admission (tests only).
	lockedOnly bool
}

var _ spec.Store = (*Store)(nil)

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to the database at dsn (a libpq URL or key/value string),
// creates and migrates Options.Schema, and returns a Store whose connections
// all use that schema. Migration is safe to run concurrently from many
// processes: migrators of one schema are serialized by an advisory lock.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if !schemaName.MatchString(opts.Schema) {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "postgres: schema %q: want a lower-case identifier [a-z_][a-z0-9_]* of at most 63 bytes", opts.Schema)
	}
	if opts.Random == nil {
		opts.Random = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6c65617365))
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 8
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ApplicationName == "" {
		opts.ApplicationName = "leasehold"
	}
	if opts.ResolveTimeout <= 0 {
		opts.ResolveTimeout = 5 * time.Second
	}
	if opts.NotifyQueue <= 0 {
		opts.NotifyQueue = DefaultNotifyQueue
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error may echo the DSN; pgx redacts passwords in it.
		return nil, spec.Errorf(spec.CodeInvalidArgument, "postgres: bad connection string: %v", err)
	}
	pc.MaxConns, pc.MinConns = opts.MaxConns, opts.MinConns
	if opts.MaxConnLifetime > 0 {
		pc.MaxConnLifetime = opts.MaxConnLifetime
	}
	if opts.MaxConnIdleTime > 0 {
		pc.MaxConnIdleTime = opts.MaxConnIdleTime
	}
	params := pc.ConnConfig.RuntimeParams
	for k, v := range indexPlans {
		params[k] = v
	}
	for k, v := range opts.RuntimeParams {
		params[k] = v
	}
	// The schema is the only one on the path, so every unqualified name in
	// this package's SQL means the store's own table.
	params["search_path"] = pgx.Identifier{opts.Schema}.Sanitize()
	params["application_name"] = opts.ApplicationName
	// Which sessions are this Store's, for LockWaits.
	own := newBackends()
	pc.AfterConnect, pc.BeforeClose = own.afterConnect, own.beforeClose
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, &spec.Error{Code: spec.CodeUnavailable, Message: "postgres: cannot create the connection pool", Err: err}
	}
	s := &Store{pool: pool, schema: opts.Schema, cfg: opts.Config, clock: opts.Clock,
		random: &lockedRandom{r: opts.Random}, hook: opts.Hook, log: opts.Logger, resolveTimeout: opts.ResolveTimeout, backends: own}
	if err := s.migrateWaiting(ctx, opts.WaitForServer); err != nil {
		pool.Close()
		return nil, err
	}
	if !opts.DisableNotify {
		s.announcer = newAnnouncer(pool.Config().ConnConfig, s.Channel(), opts.NotifyQueue, s.log)
	}
	if opts.CoalesceCreateRun > 0 {
		s.admissions = coalesce.New(s.admitGroup, coalescedBatch, opts.CoalesceCreateRun, abandonedAdmission)
	}
	return s, nil
}

// migrateWaiting runs migrate, trying again while the server is not ready
// (serverNotReady) and wait allows (see Options.WaitForServer).
func (s *Store) migrateWaiting(ctx context.Context, wait time.Duration) error {
	giveUp := time.Now().Add(wait)
	delay := 100 * time.Millisecond
	for try := 1; ; try++ {
		err := s.migrate(ctx)
		if err == nil || wait <= 0 || !serverNotReady(err) {
			return err
		}
		if time.Now().Add(delay).After(giveUp) {
			return fmt.Errorf("postgres: the database did not accept connections within Options.WaitForServer (%v): %w", wait, err)
		}
		s.log.WarnContext(ctx, "postgres: the database is not accepting connections yet; waiting for it", "try", try, "delay", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return typed(ctx, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Close sends the notifications still waiting (giving up on them 5 s after
// it was called), closes the announcer's connection, then closes the
// connection pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	if s.announcer != nil {
		s.announcer.close()
	}
	s.pool.Close()
	return nil
}

// announce hands a committed transaction's notifications to the announcer.
func (s *Store) announce(notes []string) {
	if s.announcer != nil {
		s.announcer.add(notes)
	}
}

// Pool exposes the connection pool (every connection's search_path is the
// store's schema) for tests that must reach past the contract: constraint
// checks, plans, fault injection. Do not write through it. Its connections
// plan with indexPlans: a query of your own that needs a hash join or a
// scan of a whole table should SET LOCAL them back on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// UsesDatabaseClock reports whether the store reads time from the database
// (Options.Clock was nil).
func (s *Store) UsesDatabaseClock() bool { return s.clock == nil }

// lockedRandom serializes draws: math/rand/v2 sources are not safe for
// concurrent use, and unlike SQLite's single writer, PostgreSQL runs retries
// of different jobs at the same time.
type lockedRandom struct {
	mu sync.Mutex
	r  spec.Random
}

func (l *lockedRandom) Int64N(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}

const (
	// createVersionTable is the migration ledger; its columns are fixed by
	// the migrations package (version, name, checksum, applied_at in ms).
	createVersionTable = `CREATE TABLE IF NOT EXISTS ` + migrations.VersionTable + ` (
		version BIGINT PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)`
	// migrateLock serializes migrators of one schema (the key is a hash of
	// the schema name). It is transaction-scoped, so a crashed migrator
	// cannot leave it held.
	migrateLock      = `SELECT pg_advisory_xact_lock(hashtextextended(@lock_name, 0))`
	selectMigration  = `SELECT checksum FROM ` + migrations.VersionTable + ` WHERE version = @version`
	recordMigration  = `INSERT INTO ` + migrations.VersionTable + ` (version, name, checksum, applied_at) VALUES (@version, @name, @checksum, ` + clockMs + `)`
	migrateLockScope = "leasehold.migrate/"
)

// migrate creates the schema and applies every embedded migration not yet
// recorded, in one transaction, under an advisory lock. A recorded migration
// whose checksum differs from the embedded file is an error: an applied
// migration was edited.
func (s *Store) migrate(ctx context.Context) error {
	list, err := migrations.For(migrations.Postgres)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrateLock, args{"lock_name": migrateLockScope + s.schema}); err != nil {
			return err
		}
		// Under the lock, so two first-time migrators cannot race on the
		// schema's catalog row.
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, createVersionTable); err != nil {
			return err
		}
		for _, m := range list {
			var recorded string
			err := tx.QueryRow(ctx, selectMigration, args{"version": m.Version}).Scan(&recorded)
			switch {
			case err == nil:
				if err := m.CheckApplied(recorded); err != nil {
					return spec.Errorf(spec.CodeFailedPrecondition, "postgres: schema %s: %v", s.schema, err)
				}
				continue
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			// No arguments: pgx sends the file with the simple protocol, which
			// runs a multi-statement script in this transaction.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("postgres: migration %d (%s) in schema %s: %w", m.Version, m.Name, s.schema, err)
			}
			if _, err := tx.Exec(ctx, recordMigration, args{"version": m.Version, "name": m.Name, "checksum": m.Checksum}); err != nil {
				return err
			}
		}
		return nil
	})
	return typed(ctx, err)
}

// txn is one writing operation's transaction: the pgx transaction plus the
// operation's single clock reading.
type txn struct {
	pgx.Tx
	ctx   context.Context
	s     *Store
	now   int64
	timed bool
	// locked is the job row lockJob locked and read, before the
	// transaction wrote it; a refusal is explained from it.
	locked *lockedRow
	// marked is set by an operation that ran markCommitQuery itself, in
	// its last pipelined batch (xid its answer), or that wrote nothing
	// (xid ""); write then does not run it again.
	marked bool
	xid    string
	// notes are the notifications of the transaction's change (notify),
	// announced once it has committed.
	notes []string
}

// lockedRow is the job row of one run as lockJob read it under its lock.
type lockedRow struct {
	key   jobKey
	job   spec.Job
	found bool
}

// clockMs is the database clock in integer milliseconds. clock_timestamp()
// is the time at which it is evaluated, so reading it after the operation's
// locks gives a time no earlier than any commit the operation waited for.
// now() and transaction_timestamp() would not do: they are fixed when the
// transaction starts, before any lock wait.
const clockMs = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// clockQuery reads the database clock.
const clockQuery = `SELECT ` + clockMs

// clock returns the operation's time, reading the store's clock on the first
// call only (every writing operation reads its clock exactly once).
func (t *txn) clock() (int64, error) {
	if t.timed {
		return t.now, nil
	}
	t.timed = true
	if t.s.clock != nil {
		t.now = t.s.clock.Now()
		return t.now, nil
	}
	return t.now, t.QueryRow(t.ctx, clockQuery).Scan(&t.now)
}

// readClock reads, with the database clock, the answer of clockQuery, queued
// last in br, and closes br: it becomes the operation's one clock reading.
func (t *txn) readClock(br pgx.BatchResults) error {
	defer br.Close()
	if t.s.clock == nil {
		if err := br.QueryRow().Scan(&t.now); err != nil {
			return err
		}
		t.timed = true
	}
	return br.Close()
}

// readMark reads the answer of markCommitQuery, queued last in br, and
// closes br: the commit then needs no marker of its own (txn.marked).
func (t *txn) readMark(br pgx.BatchResults) error {
	defer br.Close()
	var locked bool
	switch err := br.QueryRow().Scan(&t.xid, &locked); {
	case errors.Is(err, pgx.ErrNoRows):
		t.xid = "" // nothing written: the COMMIT cannot change anything
	case err != nil:
		return err
	}
	t.marked = true
	return br.Close()
}

// precheck runs an operation's validation before any database access, so
// malformed input never reaches SQL. check is the spec.Config.Check* function
// at a given time; at time 0 only the time-independent checks can fail. When
// one does, the error must still be the one SQLite returns, where the clock
// check comes first: an injected clock is read (this is then the operation's
// one reading) and the check repeated with it. The database clock is never
// negative, so it need not be read.
func (s *Store) precheck(check func(now int64) error) error {
	err := check(0)
	if err == nil {
		return nil
	}
	if s.clock != nil {
		return check(s.clock.Now())
	}
	return err
}

// write runs fn as one READ COMMITTED transaction, then marks the transaction
// for commit resolution (unless fn did, see txn.marked), runs the
// BeforeCommit hook, commits and runs the AfterCommit hook. fn runs once;
// it must read the clock through t.clock after taking its ordering lock.
func (s *Store) write(ctx context.Context, op spec.Op, fn func(t *txn) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return typed(ctx, err)
	}
	defer rollback(tx)
	t := &txn{Tx: tx, ctx: ctx, s: s}
	if err := fn(t); err != nil {
		return typed(ctx, err)
	}
	return s.commit(ctx, op, t)
}

// writePipelined is write for an operation whose first round trip is a
// pipelined batch (admission): first queues the batch's statements, which
// are sent with the transaction's BEGIN ahead of them (pgx.Batch.BeginTx:
// BEGIN costs no round trip of its own), and fn reads their results from
// br and closes it before it uses t, then goes on as write's fn.
func (s *Store) writePipelined(ctx context.Context, op spec.Op, first func(b *pgx.Batch), fn func(t *txn, br pgx.BatchResults) error) error {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	first(&b)
	br := s.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	defer rollback(tx)
	defer br.Close() // before the rollback: the connection is busy until then
	if _, err := br.Exec(); err != nil {
		return typed(ctx, err)
	}
	t := &txn{Tx: tx, ctx: ctx, s: s}
	if err := fn(t, br); err != nil {
		return typed(ctx, err)
	}
	return s.commit(ctx, op, t)
}

// commit is the end of every writing transaction: the commit marker
// (unless the operation ran it, see txn.marked), the BeforeCommit hook,
// COMMIT and the AfterCommit hook.
func (s *Store) commit(ctx context.Context, op spec.Op, t *txn) error {
	xid := t.xid
	if !t.marked {
		var err error
		if xid, err = markCommit(ctx, t.Tx); err != nil {
			return typed(ctx, err)
		}
	}
	if err := s.runHook(ctx, op, spec.BeforeCommit); err != nil {
		return typed(ctx, err)
	}
	if err := t.Commit(ctx); err != nil {
		err = s.commitFailed(ctx, op, xid, err)
		if err == nil {
			s.announce(t.notes)
		}
		return err
	}
	s.announce(t.notes)
	if err := s.runHook(ctx, op, spec.AfterCommit); err != nil {
		return &spec.Error{Code: spec.CodeUnknownOutcome, Message: fmt.Sprintf("%s committed but its result was lost; read back before acting", op), Err: err}
	}
	return nil
}

// read runs fn in one read-only REPEATABLE READ transaction, so that a read
// of several tables (a run and its events, a Snapshot) sees one snapshot.
// Reads take no clock reading and run no hooks.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return typed(ctx, err)
	}
	defer rollback(tx)
	if err := fn(tx); err != nil {
		return typed(ctx, err)
	}
	return typed(ctx, tx.Commit(ctx))
}

// rollback ends a transaction that was not committed. It uses its own
// context because the caller's may be done; a failed rollback closes the
// connection, which also ends the transaction on the server.
func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

func (s *Store) runHook(ctx context.Context, op spec.Op, p spec.HookPoint) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(ctx, op, p)
}

// args is a set of named statement parameters (@name in the SQL). Unlike
// pgx.NamedArgs it refuses a statement that names a parameter the map lacks,
// instead of silently sending NULL; extra entries are allowed so that one
// map can serve several statements.
type args map[string]any

var placeholder = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

// rewritten is a statement text with its @names replaced by $1, $2, … as
// pgx.NamedArgs replaces them, and the names in that order.
type rewritten struct {
	sql   string
	names []string
}

// rewrites caches the rewriting of each statement text: pgx.NamedArgs
// lexes the whole text on every call, a cost the hot statements (admission,
// claim) paid per operation.
var rewrites sync.Map // string -> *rewritten

// rewrite returns sql's rewriting. pgx's lexer (which skips literals,
// comments and casts) rewrites it once, with each parameter's name as its
// value: the values come back in $n order.
func rewrite(ctx context.Context, sql string) (*rewritten, error) {
	if r, ok := rewrites.Load(sql); ok {
		return r.(*rewritten), nil
	}
	marks := pgx.NamedArgs{}
	for _, m := range placeholder.FindAllStringSubmatch(sql, -1) {
		marks[m[1]] = m[1]
	}
	out, values, err := marks.RewriteQuery(ctx, nil, sql, nil)
	if err != nil {
		return nil, err
	}
	r := &rewritten{sql: out, names: make([]string, len(values))}
	for i, v := range values {
		name, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("postgres: statement parameter $%d has a name this package cannot read (a bug in this package)", i+1)
		}
		r.names[i] = name
	}
	cached, _ := rewrites.LoadOrStore(sql, r)
	return cached.(*rewritten), nil
}

// RewriteQuery implements pgx.QueryRewriter.
func (a args) RewriteQuery(ctx context.Context, _ *pgx.Conn, sql string, _ []any) (string, []any, error) {
	r, err := rewrite(ctx, sql)
	if err != nil {
		return "", nil, err
	}
	values := make([]any, len(r.names))
	for i, n := range r.names {
		v, ok := a[n]
		if !ok {
			return "", nil, fmt.Errorf("postgres: statement parameter @%s has no value (a bug in this package)", n)
		}
		values[i] = v
	}
	return r.sql, values, nil
}

// with returns a copy of a with more parameters.
func (a args) with(kv args) args {
	out := make(args, len(a)+len(kv))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range kv {
		out[k] = v
	}
	return out
}

// Package control is leasehold's own stores behind the queue-adapter
// protocol (docs/ADAPTERS.md): the control rows of the probe matrix, which
// must hold every probe, and their deliberately broken variants (Variants),
// each of which must make its probe fail.
//
// A job is a run of the store (tenant "probe", operation "work"); the worker
// is leasehold's own runtime (package worker) with its defaults but for a
// shorter housekeeping round (Hello lists the configuration). Time moves by
// rewinding the job row's lease_expires_at or available_at in SQL.
package control

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/queueproto"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// The control rows' stores.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

const (
	tenant    = "probe"
	operation = "work"
	// The worker's housekeeping round (Maintenance.Every, Jitter): shorter
	// than the default 30s so that a reaped job ends within seconds.
	maintainEvery  = time.Second
	maintainJitter = 500 * time.Millisecond
)

// Options chooses the store and, for the probes that must bite, a broken
// variant (one of Variants' names, "" for none).
type Options struct {
	Store  string
	Broken string
}

// Queue is one adapter process's view of a namespace: a store, the SQL
// connection that moves its timestamps, and at most one worker.
type Queue struct {
	opts    Options
	log     *slog.Logger
	process string

	store spec.Store
	lite  *sql.DB // SQLite: the file, for the timestamps
	lites *sqlite.Store
	pg    *pgxpool.Pool // PostgreSQL: the schema, for timestamps and transactions
	pgs   *postgres.Store
	jobs  string // the jobs table, qualified

	mu      sync.Mutex
	pending []spec.CreateRunRequest // ack-before-write: acknowledged, not written

	stopWorker context.CancelFunc
	workerDone chan error
}

// New returns a Queue for opts, or an error naming what is wrong with them.
func New(opts Options) (*Queue, error) {
	if opts.Store != SQLite && opts.Store != Postgres {
		return nil, fmt.Errorf("control: store %q: want %s or %s", opts.Store, SQLite, Postgres)
	}
	if opts.Broken != "" && Variant(opts.Broken) == nil {
		return nil, fmt.Errorf("control: no broken variant %q (the variants: %v)", opts.Broken, VariantNames())
	}
	return &Queue{opts: opts, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, nil
}

func (q *Queue) broken(name string) bool { return q.opts.Broken == name }

// System is the row's name in the matrix.
func (q *Queue) System() string {
	name := "leasehold-" + q.opts.Store
	if q.opts.Broken != "" {
		name += "-broken-" + q.opts.Broken
	}
	return name
}

// Hello implements queueproto.Queue.
func (q *Queue) Hello() queueproto.Hello {
	needs := queueproto.NeedDir
	if q.opts.Store == Postgres {
		needs = queueproto.NeedPostgres
	}
	txComplete := queueproto.Feature{Supported: true, Doc: "worker/doc.go (Batched and in-transaction completion); impl/postgres/intx.go CompleteTx"}
	txEnqueue := queueproto.Feature{Supported: true, Doc: "impl/postgres/intx.go CreateRunTx (in the caller's pgx.Tx)"}
	if q.opts.Store == SQLite {
		txComplete = queueproto.Feature{Supported: false, Doc: "worker/doc.go: \"On PostgreSQL a handler may instead complete the run inside its own transaction\" (ADR-042): the SQLite store has no CompleteTx"}
		txEnqueue = queueproto.Feature{Supported: true, Doc: "impl/sqlite/intx.go CreateRunTx (in the store's BeginTx, the application's transaction)"}
	}
	h := queueproto.Hello{
		Protocol: queueproto.Version,
		System:   q.System(),
		Version:  "this checkout",
		Language: "go",
		Needs:    needs,
		Features: map[string]queueproto.Feature{
			queueproto.FeatureKey:         {Supported: true, Doc: "spec/SPEC.md (CreateRun: idempotent admission; another payload under a live key is idempotency_conflict)"},
			queueproto.FeatureMaxAttempts: {Supported: true, Doc: "spec/SPEC.md (CreateRun max_attempts)"},
			queueproto.FeatureCancel:      {Supported: true, Doc: "spec/SPEC.md (Cancel)"},
			queueproto.FeatureTxEnqueue:   txEnqueue,
			queueproto.FeatureTxComplete:  txComplete,
			queueproto.FeatureHeartbeat:   {Supported: true, Doc: "spec/SPEC.md (Renew)"},
		},
		Delivery: queueproto.Delivery{Semantics: queueproto.AtLeastOnce, Doc: "worker/doc.go (Effects)",
			Quote: "Delivery is at least once: after a crash, a lost lease or a retry the handler runs again."},
		Exhausted:        queueproto.Exhausted{RawState: string(spec.JobDead), Doc: "spec/SPEC.md (Retry: at the budget the job becomes dead, the run failed; Reap)"},
		DeletesCompleted: false,
		RecoveryMs:       (maintainEvery + maintainJitter + worker.DefaultIdle + worker.DefaultIdle/2).Milliseconds(),
		Config: []queueproto.Setting{
			{Name: "spec.Config", Value: "spec.DefaultConfig() (3 attempts, backoff 1s base, 60s cap, 250ms jitter)", Doc: "spec/config.go"},
			{Name: "worker.Config.Lease", Value: worker.DefaultLease.String() + " (default), renewed every third", Doc: "worker/config.go"},
			{Name: "worker.Config.Idle", Value: worker.DefaultIdle.String() + " (default) + up to half as much jitter", Doc: "worker/config.go"},
			{Name: "worker.Config.Maintenance", Value: fmt.Sprintf("Every %s, Jitter %s (default 30s, 15s)", maintainEvery, maintainJitter), Doc: "worker/config.go",
				Why: "a round reaps the jobs whose lease expired with no attempt left; a shorter round changes when, not what"},
			{Name: "expire", Value: "jobs.lease_expires_at := now - 1 ms", Why: "the lease's own timestamp, rewound in SQL (docs/ADAPTERS.md, Time)"},
			{Name: "make_due", Value: "jobs.available_at := now", Why: "the retry's own timestamp, rewound in SQL"},
		},
		References: []queueproto.Reference{},
	}
	if q.opts.Store == SQLite {
		h.Config = append(h.Config, queueproto.Setting{Name: "sqlite.Options", Value: "defaults (WAL, synchronous FULL, busy_timeout 10s)", Doc: "impl/sqlite/store.go"})
	} else {
		h.Config = append(h.Config, queueproto.Setting{Name: "postgres.Options", Value: "defaults (the database clock; LISTEN/NOTIFY wake-ups); Schema = the namespace", Doc: "impl/postgres/store.go"})
	}
	if v := Variant(q.opts.Broken); v != nil {
		h.Config = append(h.Config, queueproto.Setting{Name: "BROKEN", Value: v.Name, Why: v.What})
	}
	return h
}

// Open implements queueproto.Queue.
func (q *Queue) Open(ctx context.Context, p queueproto.OpenParams) error {
	q.process = p.Process
	cfg := spec.DefaultConfig()
	switch q.opts.Store {
	case SQLite:
		if p.Dir == "" {
			return queueproto.Errorf(queueproto.ErrBadRequest, "open: no dir (this adapter needs %s)", queueproto.NeedDir)
		}
		path := filepath.Join(p.Dir, "leasehold.db")
		s, err := sqlite.Open(ctx, path, sqlite.Options{Config: cfg})
		if err != nil {
			return err
		}
		q.store, q.lites = s, s
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		q.lite, q.jobs = db, "jobs"
	case Postgres:
		if p.Postgres == "" {
			return queueproto.Errorf(queueproto.ErrBadRequest, "open: no postgres DSN (this adapter needs %s)", queueproto.NeedPostgres)
		}
		s, err := postgres.Open(ctx, p.Postgres, postgres.Options{Config: cfg, Schema: p.Namespace, ApplicationName: "leasehold-probe-" + p.Process})
		if err != nil {
			return err
		}
		q.store, q.pgs = s, s
		pool, err := pgxpool.New(ctx, p.Postgres)
		if err != nil {
			return err
		}
		q.pg, q.jobs = pool, pgx.Identifier{p.Namespace, "jobs"}.Sanitize()
	}
	if q.opts.Broken != "" {
		q.store = &brokenStore{Store: q.store, q: q}
	}
	return nil
}

// Enqueue implements queueproto.Queue.
func (q *Queue) Enqueue(ctx context.Context, p queueproto.EnqueueParams) (queueproto.EnqueueResult, error) {
	key := p.Key
	switch {
	case key == "":
		key = "auto-" + randomID()
	case q.broken(VariantKeyIgnored):
		key += "-" + randomID()
	}
	req := spec.CreateRunRequest{Tenant: tenant, Operation: operation, IdempotencyKey: key, RunID: randomID(),
		Payload: p.Payload, MaxAttempts: p.MaxAttempts}
	if q.broken(VariantBudgetOffByOne) && req.MaxAttempts > 0 {
		req.MaxAttempts++
	}
	if p.Tx != "" {
		return q.enqueueTx(ctx, req, p.Tx == queueproto.TxCommit)
	}
	if q.broken(VariantAckBeforeWrite) {
		q.mu.Lock()
		defer q.mu.Unlock()
		if err := q.flushLocked(ctx); err != nil {
			return queueproto.EnqueueResult{}, err
		}
		q.pending = append(q.pending, req)
		return queueproto.EnqueueResult{Job: req.RunID, Duplicate: new(bool)}, nil
	}
	res, err := q.store.CreateRun(ctx, req)
	if spec.CodeOf(err) == spec.CodeIdempotencyConflict {
		return queueproto.EnqueueResult{}, queueproto.Errorf(queueproto.ErrRejected, "%v", err)
	}
	if err != nil {
		return queueproto.EnqueueResult{}, err
	}
	dup := res.Replayed
	return queueproto.EnqueueResult{Job: res.Run.ID, Duplicate: &dup}, nil
}

// flushLocked writes the enqueues ack-before-write acknowledged earlier.
func (q *Queue) flushLocked(ctx context.Context) error {
	for len(q.pending) > 0 {
		if _, err := q.store.CreateRun(ctx, q.pending[0]); err != nil {
			return err
		}
		q.pending = q.pending[1:]
	}
	return nil
}

// enqueueTx admits inside a transaction of the adapter's own
// (PostgreSQL: Store.CreateRunTx in a pgx.Tx; SQLite: Store.CreateRunTx in
// the store's BeginTx), reads the job back inside it, and commits or rolls
// back.
func (q *Queue) enqueueTx(ctx context.Context, req spec.CreateRunRequest, commit bool) (queueproto.EnqueueResult, error) {
	var (
		res    spec.CreateRunResult
		n      int
		err    error
		finish func(commit bool) error
	)
	if q.pgs != nil {
		tx, berr := q.pg.Begin(ctx)
		if berr != nil {
			return queueproto.EnqueueResult{}, berr
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if q.broken(VariantEnqueueOutsideTx) {
			res, err = q.store.CreateRun(ctx, req)
		} else {
			res, err = q.pgs.CreateRunTx(ctx, tx, req)
		}
		if err == nil {
			err = tx.QueryRow(ctx, fmt.Sprintf(pgCount, q.jobs), tenant, res.Run.ID).Scan(&n)
		}
		finish = func(commit bool) error {
			if commit {
				return tx.Commit(ctx)
			}
			return tx.Rollback(ctx)
		}
	} else {
		tx, berr := q.lites.BeginTx(ctx)
		if berr != nil {
			return queueproto.EnqueueResult{}, berr
		}
		defer tx.Rollback()
		if q.broken(VariantEnqueueOutsideTx) {
			// The store's own writer waits for tx: admit on a second
			// connection after it ends, as an admission outside it would
			// commit whatever tx does.
			if rerr := tx.Rollback(); rerr != nil {
				return queueproto.EnqueueResult{}, rerr
			}
			res, err = q.store.CreateRun(ctx, req)
			if err == nil {
				err = q.lite.QueryRowContext(ctx, liteCount, tenant, res.Run.ID).Scan(&n)
			}
			finish = func(bool) error { return nil }
		} else {
			res, err = q.lites.CreateRunTx(ctx, tx, req)
			if err == nil {
				err = tx.QueryRowContext(ctx, liteCount, tenant, res.Run.ID).Scan(&n)
			}
			finish = func(commit bool) error {
				if commit {
					return tx.Commit()
				}
				return tx.Rollback()
			}
		}
	}
	if spec.CodeOf(err) == spec.CodeIdempotencyConflict {
		return queueproto.EnqueueResult{}, queueproto.Errorf(queueproto.ErrRejected, "%v", err)
	}
	if err != nil {
		return queueproto.EnqueueResult{}, err
	}
	if err := finish(commit); err != nil {
		return queueproto.EnqueueResult{}, err
	}
	dup := res.Replayed
	return queueproto.EnqueueResult{Job: res.Run.ID, Duplicate: &dup, SeenInTx: n == 1}, nil
}

func stateOf(j spec.JobState) string {
	switch j {
	case spec.JobQueued:
		return queueproto.StateWaiting
	case spec.JobLeased:
		return queueproto.StateRunning
	case spec.JobCompleted:
		return queueproto.StateCompleted
	case spec.JobDead:
		return queueproto.StateFailed
	case spec.JobCancelled:
		return queueproto.StateCancelled
	}
	return "unknown job state " + string(j)
}

func info(run spec.Run, job spec.Job, key string) queueproto.JobInfo {
	return queueproto.JobInfo{Job: run.ID, Key: key, State: stateOf(job.State), RawState: string(job.State),
		Attempt: job.Attempts, MaxAttempts: job.MaxAttempts, Payload: json.RawMessage(run.Payload)}
}

// State implements queueproto.Queue.
func (q *Queue) State(ctx context.Context, id string) (queueproto.JobInfo, error) {
	run, err := q.store.GetRun(ctx, tenant, id)
	if spec.CodeOf(err) == spec.CodeNotFound {
		return queueproto.JobInfo{Job: id, State: queueproto.StateMissing}, nil
	}
	if err != nil {
		return queueproto.JobInfo{}, err
	}
	job, err := q.store.GetJob(ctx, tenant, id)
	if err != nil {
		return queueproto.JobInfo{}, err
	}
	return info(run, job, ""), nil
}

// Jobs implements queueproto.Queue.
func (q *Queue) Jobs(ctx context.Context) ([]queueproto.JobInfo, error) {
	snap, err := q.store.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	keys := map[string]string{}
	for _, r := range snap.Idempotency {
		keys[r.RunID] = r.Key
	}
	jobs := map[string]spec.Job{}
	for _, j := range snap.Jobs {
		jobs[j.RunID] = j
	}
	var out []queueproto.JobInfo
	for _, r := range snap.Runs {
		out = append(out, info(r, jobs[r.ID], keys[r.ID]))
	}
	return out, nil
}

// Rows implements queueproto.Queue: the run, its job, its attempts and its
// events, as the store returns them.
func (q *Queue) Rows(ctx context.Context, id string) ([]json.RawMessage, error) {
	var rows []json.RawMessage
	add := func(table string, v any, err error) error {
		if spec.CodeOf(err) == spec.CodeNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		raw, err := json.Marshal(map[string]any{table: v})
		rows = append(rows, raw)
		return err
	}
	run, err := q.store.GetRun(ctx, tenant, id)
	if err := add("run", run, err); err != nil {
		return nil, err
	}
	job, err := q.store.GetJob(ctx, tenant, id)
	if err := add("job", job, err); err != nil {
		return nil, err
	}
	attempts, err := q.store.Attempts(ctx, tenant, id)
	if err := add("attempts", attempts, err); err != nil {
		return nil, err
	}
	events, err := q.store.Events(ctx, tenant, id)
	if err := add("events", events, err); err != nil {
		return nil, err
	}
	return rows, nil
}

// Cancel implements queueproto.Queue.
func (q *Queue) Cancel(ctx context.Context, id string) (queueproto.CancelResult, error) {
	run, err := q.store.Cancel(ctx, spec.CancelRequest{Tenant: tenant, RunID: id})
	switch {
	case err == nil:
		return queueproto.CancelResult{Outcome: queueproto.CancelCancelled, RawState: string(run.State)}, nil
	case spec.CodeOf(err) == spec.CodeAlreadyTerminal:
		if q.broken(VariantCancelReportsSuccess) {
			return queueproto.CancelResult{Outcome: queueproto.CancelCancelled, RawState: string(spec.RunCancelled)}, nil
		}
		return queueproto.CancelResult{Outcome: queueproto.CancelRefused, RawState: string(spec.StateOf(err))}, nil
	}
	return queueproto.CancelResult{}, err
}

// The timestamps Expire and MakeDue rewind, per store. nowMs is the
// store's clock: the system clock for SQLite, the database's for PostgreSQL.
const (
	liteExpire  = `UPDATE jobs SET lease_expires_at = ? WHERE tenant = ? AND run_id = ? AND state = 'leased' AND lease_expires_at > ?`
	liteMakeDue = `UPDATE jobs SET available_at = ? WHERE tenant = ? AND run_id = ? AND state = 'queued' AND available_at > ?`
	pgNowMs     = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	pgExpire    = `UPDATE %s SET lease_expires_at = ` + pgNowMs + ` - 1 WHERE tenant = $1 AND run_id = $2 AND state = 'leased' AND lease_expires_at >= ` + pgNowMs
	pgMakeDue   = `UPDATE %s SET available_at = ` + pgNowMs + ` WHERE tenant = $1 AND run_id = $2 AND state = 'queued' AND available_at > ` + pgNowMs
	// A transactional enqueue reads its job back inside its transaction.
	liteCount = `SELECT count(*) FROM jobs WHERE tenant = ? AND run_id = ?`
	pgCount   = `SELECT count(*) FROM %s WHERE tenant = $1 AND run_id = $2`
	// claim-live-leases: every live lease of the tenant expired before a claim.
	liteExpireAll = `UPDATE jobs SET lease_expires_at = ? WHERE tenant = ? AND state = 'leased' AND lease_expires_at > ?`
	pgExpireAll   = `UPDATE %s SET lease_expires_at = ` + pgNowMs + ` - 1 WHERE tenant = $1 AND state = 'leased' AND lease_expires_at >= ` + pgNowMs
)

func (q *Queue) rewind(ctx context.Context, lite, pg string, id string) error {
	if q.lite != nil {
		now := time.Now().UnixMilli()
		value := now - 1
		if lite == liteMakeDue {
			value = now
		}
		args := []any{value, tenant, id, value}
		if id == "" {
			args = []any{value, tenant, value}
		}
		_, err := q.lite.ExecContext(ctx, lite, args...)
		return err
	}
	args := []any{tenant, id}
	if id == "" {
		args = []any{tenant}
	}
	_, err := q.pg.Exec(ctx, fmt.Sprintf(pg, q.jobs), args...)
	return err
}

// Expire implements queueproto.Queue.
func (q *Queue) Expire(ctx context.Context, id string) error {
	return q.rewind(ctx, liteExpire, pgExpire, id)
}

// MakeDue implements queueproto.Queue.
func (q *Queue) MakeDue(ctx context.Context, id string) error {
	return q.rewind(ctx, liteMakeDue, pgMakeDue, id)
}

// heldJob is what a held handler keeps for heartbeat and complete_in_tx.
type heldJob struct {
	job           *worker.Job
	completedInTx bool
}

// Start implements queueproto.Queue.
func (q *Queue) Start(ctx context.Context, concurrency int, h *queueproto.Holder) error {
	if q.stopWorker != nil {
		return queueproto.Errorf(queueproto.ErrBadRequest, "start: the worker already runs")
	}
	handler := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) ([]byte, error) {
		held := &heldJob{job: job}
		switch h.Hold(job.RunID, job.Attempt, job.Payload, held) {
		case queueproto.DoComplete:
			if held.completedInTx {
				return nil, worker.ErrCompletedInTx
			}
			return nil, nil
		case queueproto.DoRetry:
			return nil, worker.Retryable(errors.New("probe: the runner asked for a retry"), 0)
		}
		return nil, fmt.Errorf("the session ended: %w", worker.ErrShutdown)
	})
	w, err := worker.New(worker.Config{
		Store: q.store, Tenants: []string{tenant}, Handler: handler, ID: q.process + "-" + randomID()[:8],
		Concurrency: concurrency, Logger: q.log,
		Maintenance: worker.MaintenancePolicy{Every: maintainEvery, Jitter: maintainJitter, Off: q.broken(VariantNoReaper)},
	})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	q.stopWorker, q.workerDone = cancel, make(chan error, 1)
	go func() { q.workerDone <- w.Run(wctx) }()
	return nil
}

// Stop implements queueproto.Queue.
func (q *Queue) Stop(ctx context.Context) error {
	if q.stopWorker == nil {
		return nil
	}
	q.stopWorker()
	select {
	case err := <-q.workerDone:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Heartbeat implements queueproto.Queue: an explicit Renew of the held
// attempt's lease.
func (q *Queue) Heartbeat(ctx context.Context, held any) (bool, error) {
	h := held.(*heldJob)
	_, err := q.store.Renew(ctx, spec.RenewRequest{Lease: h.job.Lease(), LeaseMs: worker.DefaultLease.Milliseconds()})
	switch spec.CodeOf(err) {
	case "":
		return err == nil, err
	case spec.CodeLostLease, spec.CodeCancelled, spec.CodeAlreadyTerminal:
		return false, nil
	}
	return false, err
}

// CompleteInTx implements queueproto.Queue (PostgreSQL: Store.CompleteTx).
func (q *Queue) CompleteInTx(ctx context.Context, held any, commit bool) (bool, error) {
	h := held.(*heldJob)
	if q.pgs == nil {
		return false, queueproto.Errorf(queueproto.ErrUnsupported, "tx_complete: the SQLite store has no CompleteTx")
	}
	tx, err := q.pg.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	req := h.job.CompleteRequest(nil)
	if q.broken(VariantCompleteOutsideTx) {
		_, err = q.store.Complete(ctx, req)
	} else {
		_, err = q.pgs.CompleteTx(ctx, tx, req)
	}
	if err != nil {
		return false, err
	}
	var state string
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT state FROM %s WHERE tenant = $1 AND run_id = $2`, q.jobs), tenant, h.job.RunID).Scan(&state); err != nil {
		return false, err
	}
	seen := state == string(spec.JobCompleted)
	if commit {
		if err := tx.Commit(ctx); err != nil {
			return false, err
		}
		h.completedInTx = true
	} else if err := tx.Rollback(ctx); err != nil {
		return false, err
	}
	return seen, nil
}

// Close implements queueproto.Queue: it writes what ack-before-write still
// holds (a clean exit loses nothing; a SIGKILL does) and closes the store.
func (q *Queue) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if q.stopWorker != nil {
		q.stopWorker()
	}
	var errs []error
	if q.store != nil {
		q.mu.Lock()
		errs = append(errs, q.flushLocked(ctx))
		q.mu.Unlock()
		errs = append(errs, q.store.Close())
	}
	if q.lite != nil {
		errs = append(errs, q.lite.Close())
	}
	if q.pg != nil {
		q.pg.Close()
	}
	return errors.Join(errs...)
}

func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// VariantNames lists the broken variants' names.
func VariantNames() []string {
	var names []string
	for _, v := range Variants {
		names = append(names, v.Name)
	}
	return slices.Clip(names)
}

// Command river is the queue adapter (docs/ADAPTERS.md) for River v0.51.2 on
// PostgreSQL (riverpgxv5): leasehold probe's River row.
//
// It is a Go module of its own, so that River never enters leasehold's
// module graph; it speaks the protocol through queueproto.Serve, from the
// repository root by a replace (../..). River is configured with its
// documented defaults; the only choices are the namespace (River's Schema
// option) and the queue's worker count (the runner's concurrency). Hello
// lists every setting with the documentation it follows.
//
//	go build -o .bin/adapter . && .bin/adapter   (what peers/river/probe.json runs)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/leasehold/leasehold/queueproto"
)

// version is the River release this module pins (go.mod).
const version = "0.51.2"

// rescueAfter is River's RescueStuckJobsAfter default (Config's doc: "Defaults
// to 1 hour"); expire rewinds attempted_at past it.
const rescueAfter = time.Hour

// godoc is River's API documentation at the pinned version.
const godoc = "https://pkg.go.dev/github.com/riverqueue/river@v" + version

func main() {
	q := &queue{log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := queueproto.Serve(context.Background(), os.Stdin, os.Stdout, q); err != nil {
		fmt.Fprintln(os.Stderr, "river adapter:", err)
		os.Exit(1)
	}
}

// probeArgs is every probe job: the key (River's unique args: only it is
// hashed, UniqueOpts.ByArgs with the river:"unique" tag) and the payload.
type probeArgs struct {
	Key     string          `json:"key,omitempty" river:"unique"`
	Payload json.RawMessage `json:"payload"`
}

// Kind implements river.JobArgs.
func (probeArgs) Kind() string { return "leasehold_probe" }

type queue struct {
	log     *slog.Logger
	pool    *pgxpool.Pool
	schema  string
	process string
	// client inserts, cancels and reads; worker works (after start).
	client *river.Client[pgx.Tx]
	worker *river.Client[pgx.Tx]
}

// held is what a held handler keeps: its work context (JobCompleteTx finds
// the client in it) and its job.
type held struct {
	ctx context.Context
	job *river.Job[probeArgs]
}

type probeWorker struct {
	river.WorkerDefaults[probeArgs]
	h *queueproto.Holder
}

// Work holds the handler for the runner and returns what it says: nil
// completes, an error retries under River's retry policy.
func (w *probeWorker) Work(ctx context.Context, job *river.Job[probeArgs]) error {
	switch w.h.Hold(strconv.FormatInt(job.ID, 10), job.Attempt, job.Args.Payload, &held{ctx: ctx, job: job}) {
	case queueproto.DoComplete:
		return nil
	case queueproto.DoRetry:
		return errors.New("probe: the runner asked for a retry")
	}
	return errors.New("probe: the session ended")
}

func (q *queue) Hello() queueproto.Hello {
	return queueproto.Hello{
		Protocol: queueproto.Version,
		System:   "river",
		Version:  version,
		Language: "go",
		Needs:    queueproto.NeedPostgres,
		Features: map[string]queueproto.Feature{
			queueproto.FeatureKey: {Supported: true, Doc: godoc + "#UniqueOpts",
				Note: "UniqueOpts.ByArgs, with only the key field tagged river:\"unique\""},
			queueproto.FeatureMaxAttempts: {Supported: true, Doc: godoc + "#InsertOpts"},
			queueproto.FeatureCancel:      {Supported: true, Doc: godoc + "#Client.JobCancel"},
			queueproto.FeatureTxEnqueue:   {Supported: true, Doc: godoc + "#Client.InsertTx"},
			queueproto.FeatureTxComplete:  {Supported: true, Doc: godoc + "#JobCompleteTx"},
			queueproto.FeatureHeartbeat: {Supported: false, Doc: "https://github.com/riverqueue/river/issues/773",
				Note: "no lease to extend: a running job is rescued after the global RescueStuckJobsAfter since attempted_at (\"jobs are only rescued based on a global rescue timeout\")"},
		},
		Delivery: queueproto.Delivery{Semantics: queueproto.AtLeastOnce, Doc: godoc + "#Config",
			Quote: "Note that this can result in repeat or duplicate execution of a job that is not actually stuck but is still working. (RescueStuckJobsAfter)"},
		Exhausted:        queueproto.Exhausted{RawState: string(rivertype.JobStateDiscarded), Doc: "https://pkg.go.dev/github.com/riverqueue/river/rivertype@v" + version + "#JobState"},
		DeletesCompleted: false,
		// The rescuer's fixed 30 s interval, the elector's 5 s (+1 s jitter),
		// the scheduler's 5 s and a 1 s fetch poll.
		RecoveryMs: (30*time.Second + 6*time.Second + 5*time.Second + time.Second).Milliseconds(),
		Config: []queueproto.Setting{
			{Name: "driver", Value: "riverpgxv5 over a pgxpool.Pool (pgx defaults)", Doc: godoc},
			{Name: "Config.Schema", Value: "the probe's namespace, migrated with rivermigrate (DirectionUp)", Doc: godoc + "#Config",
				Why: "one schema per run, as River's own tests isolate themselves"},
			{Name: "Config.Queues", Value: "{default: {MaxWorkers: the runner's concurrency}}", Doc: godoc + "#QueueConfig"},
			{Name: "Config.RescueStuckJobsAfter", Value: "1h (default)", Doc: godoc + "#Config"},
			{Name: "Config.JobTimeout", Value: "1m (default)", Doc: godoc + "#Config"},
			{Name: "Config.RetryPolicy", Value: "DefaultClientRetryPolicy (default: attempt^4 s with jitter)", Doc: godoc + "#DefaultClientRetryPolicy"},
			{Name: "Config.FetchPollInterval, FetchCooldown", Value: "1s, 100ms (defaults; LISTEN/NOTIFY wakes producers sooner)", Doc: godoc + "#Config"},
			{Name: "completion", Value: "the default batch completer (Stop flushes it)", Doc: godoc + "#Client.Stop"},
			{Name: "expire", Value: "river_job.attempted_at := now() - RescueStuckJobsAfter - 1s; river_leader.expires_at := now() - 1s",
				Why: "River's own timestamps: the rescuer takes a running job whose attempted_at is older than RescueStuckJobsAfter, and runs only on the leader, whose lease is river_leader.expires_at (a paused or killed leader would hold it for its TTL)"},
			{Name: "make_due", Value: "river_job.scheduled_at := now() for a retryable or scheduled job", Why: "the retry's own timestamp; the scheduler makes it available"},
		},
		References: []queueproto.Reference{
			{Probe: "stale-completion", URL: "https://github.com/riverqueue/river/blob/v" + version + "/riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql",
				Title: "River v" + version + ": the completer's update (JobSetStateIfRunningMany)",
				Says:  "a worker's completion updates WHERE river_job.id = job_input.id AND river_job.state = 'running': no attempt or owner is compared, so an older attempt's result lands on a newer one"},
			{Probe: "stale-completion", URL: "https://github.com/riverqueue/river/issues/1135", Title: "Discarded job continues execution (context not cancelled)",
				Says: "a running job that the rescuer moved on keeps executing in its worker, which is not notified"},
			{Probe: "stale-completion", URL: "https://github.com/riverqueue/river/pull/1373", Title: "Guard job rescue against stale snapshots (in 0.48.0)",
				Says: "fenced the rescuer's update by state and attempted_at; the worker's completion path was left as it was"},
		},
	}
}

func (q *queue) Open(ctx context.Context, p queueproto.OpenParams) error {
	if p.Postgres == "" {
		return queueproto.Errorf(queueproto.ErrBadRequest, "open: no postgres DSN")
	}
	q.schema, q.process = p.Namespace, p.Process
	cfg, err := pgxpool.ParseConfig(p.Postgres)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "leasehold-probe-river-" + p.Process
	if q.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	driver := riverpgxv5.New(q.pool)
	if p.Create {
		if _, err := q.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{q.schema}.Sanitize()); err != nil {
			return err
		}
		m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: q.schema, Logger: q.log})
		if err != nil {
			return err
		}
		if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("migrating River into %s: %w", q.schema, err)
		}
	}
	q.client, err = river.NewClient(driver, &river.Config{Schema: q.schema, Logger: q.log})
	return err
}

// The adapter's own SQL on River's tables; {schema} is the namespace.
const (
	jobColumns  = "id, state, attempt, max_attempts, args"
	sqlJob      = "SELECT " + jobColumns + " FROM {schema}.river_job WHERE id = $1"
	sqlJobs     = "SELECT " + jobColumns + " FROM {schema}.river_job ORDER BY id"
	sqlJobState = "SELECT state FROM {schema}.river_job WHERE id = $1"
	sqlCountJob = "SELECT count(*) FROM {schema}.river_job WHERE id = $1"
	sqlRows     = "SELECT json_build_object('river_job', row_to_json(j)) FROM {schema}.river_job j WHERE id = $1"
	// expire: the running job's attempted_at past RescueStuckJobsAfter ($2),
	// and the leader's lease past its end, so a live client leads and
	// rescues it.
	sqlExpireJob    = "UPDATE {schema}.river_job SET attempted_at = now() - $2::interval - interval '1 second' WHERE id = $1 AND state = 'running'"
	sqlExpireLeader = "UPDATE {schema}.river_leader SET expires_at = now() - interval '1 second'"
	// make_due: a retryable or scheduled job's scheduled_at now.
	sqlMakeDue = "UPDATE {schema}.river_job SET scheduled_at = now() WHERE id = $1 AND state IN ('retryable', 'scheduled') AND scheduled_at > now()"
)

// sql returns a statement with the namespace's schema in it.
func (q *queue) sql(stmt string) string {
	return strings.ReplaceAll(stmt, "{schema}", pgx.Identifier{q.schema}.Sanitize())
}

func (q *queue) insertOpts(p queueproto.EnqueueParams) *river.InsertOpts {
	opts := &river.InsertOpts{MaxAttempts: p.MaxAttempts}
	if p.Key != "" {
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true}
	}
	return opts
}

func (q *queue) Enqueue(ctx context.Context, p queueproto.EnqueueParams) (queueproto.EnqueueResult, error) {
	args := probeArgs{Key: p.Key, Payload: p.Payload}
	if p.Tx == "" {
		res, err := q.client.Insert(ctx, args, q.insertOpts(p))
		if err != nil {
			return queueproto.EnqueueResult{}, err
		}
		dup := res.UniqueSkippedAsDuplicate
		return queueproto.EnqueueResult{Job: strconv.FormatInt(res.Job.ID, 10), Duplicate: &dup}, nil
	}
	tx, err := q.pool.Begin(ctx)
	if err != nil {
		return queueproto.EnqueueResult{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	res, err := q.client.InsertTx(ctx, tx, args, q.insertOpts(p))
	if err != nil {
		return queueproto.EnqueueResult{}, err
	}
	var n int
	if err := tx.QueryRow(ctx, q.sql(sqlCountJob), res.Job.ID).Scan(&n); err != nil {
		return queueproto.EnqueueResult{}, err
	}
	if p.Tx == queueproto.TxCommit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		return queueproto.EnqueueResult{}, err
	}
	dup := res.UniqueSkippedAsDuplicate
	return queueproto.EnqueueResult{Job: strconv.FormatInt(res.Job.ID, 10), Duplicate: &dup, SeenInTx: n == 1}, nil
}

func stateOf(s rivertype.JobState) string {
	switch s {
	case rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable, rivertype.JobStatePending:
		return queueproto.StateWaiting
	case rivertype.JobStateRunning:
		return queueproto.StateRunning
	case rivertype.JobStateCompleted:
		return queueproto.StateCompleted
	case rivertype.JobStateDiscarded:
		return queueproto.StateFailed
	case rivertype.JobStateCancelled:
		return queueproto.StateCancelled
	}
	return "unknown River state " + string(s)
}

func (q *queue) scan(row pgx.Row) (queueproto.JobInfo, error) {
	var (
		id                int64
		state             string
		attempt, attempts int
		args              []byte
	)
	if err := row.Scan(&id, &state, &attempt, &attempts, &args); err != nil {
		return queueproto.JobInfo{}, err
	}
	var a probeArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return queueproto.JobInfo{}, fmt.Errorf("job %d: args %s: %w", id, args, err)
	}
	return queueproto.JobInfo{Job: strconv.FormatInt(id, 10), Key: a.Key, State: stateOf(rivertype.JobState(state)), RawState: state,
		Attempt: attempt, MaxAttempts: attempts, Payload: a.Payload}, nil
}

func jobID(job string) (int64, error) {
	id, err := strconv.ParseInt(job, 10, 64)
	if err != nil {
		return 0, queueproto.Errorf(queueproto.ErrBadRequest, "job %q: River's ids are integers", job)
	}
	return id, nil
}

func (q *queue) State(ctx context.Context, job string) (queueproto.JobInfo, error) {
	id, err := jobID(job)
	if err != nil {
		return queueproto.JobInfo{}, err
	}
	info, err := q.scan(q.pool.QueryRow(ctx, q.sql(sqlJob), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return queueproto.JobInfo{Job: job, State: queueproto.StateMissing}, nil
	}
	return info, err
}

func (q *queue) Jobs(ctx context.Context) ([]queueproto.JobInfo, error) {
	rows, err := q.pool.Query(ctx, q.sql(sqlJobs))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []queueproto.JobInfo
	for rows.Next() {
		info, err := q.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, rows.Err()
}

func (q *queue) Rows(ctx context.Context, job string) ([]json.RawMessage, error) {
	id, err := jobID(job)
	if err != nil {
		return nil, err
	}
	var row json.RawMessage
	err = q.pool.QueryRow(ctx, q.sql(sqlRows), id).Scan(&row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return []json.RawMessage{row}, err
}

// Cancel reports what JobCancel returned: a job cancelled at once, one
// still running (marked for cancellation: its worker's context is
// cancelled), or one already finalized (left unchanged).
func (q *queue) Cancel(ctx context.Context, job string) (queueproto.CancelResult, error) {
	id, err := jobID(job)
	if err != nil {
		return queueproto.CancelResult{}, err
	}
	row, err := q.client.JobCancel(ctx, id)
	if err != nil {
		return queueproto.CancelResult{}, err
	}
	res := queueproto.CancelResult{RawState: string(row.State)}
	switch row.State {
	case rivertype.JobStateCancelled:
		res.Outcome = queueproto.CancelCancelled
	case rivertype.JobStateRunning:
		res.Outcome = queueproto.CancelRequested
	default:
		res.Outcome = queueproto.CancelRefused
	}
	return res, nil
}

func (q *queue) Expire(ctx context.Context, job string) error {
	id, err := jobID(job)
	if err != nil {
		return err
	}
	tx, err := q.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, q.sql(sqlExpireJob),
		id, rescueAfter); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q.sql(sqlExpireLeader)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (q *queue) MakeDue(ctx context.Context, job string) error {
	id, err := jobID(job)
	if err != nil {
		return err
	}
	_, err = q.pool.Exec(ctx, q.sql(sqlMakeDue), id)
	return err
}

func (q *queue) Start(ctx context.Context, concurrency int, h *queueproto.Holder) error {
	if q.worker != nil {
		return queueproto.Errorf(queueproto.ErrBadRequest, "start: the worker already runs")
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &probeWorker{h: h}); err != nil {
		return err
	}
	c, err := river.NewClient(riverpgxv5.New(q.pool), &river.Config{
		Schema:  q.schema,
		ID:      q.process + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Logger:  q.log,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: concurrency}},
		Workers: workers,
	})
	if err != nil {
		return err
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	q.worker = c
	return nil
}

func (q *queue) Stop(ctx context.Context) error {
	if q.worker == nil {
		return nil
	}
	return q.worker.Stop(ctx)
}

func (q *queue) Heartbeat(context.Context, any) (bool, error) {
	return false, queueproto.Errorf(queueproto.ErrUnsupported, "River has no heartbeat")
}

// CompleteInTx completes the held job with JobCompleteTx inside a
// transaction of its own, reads it back, and commits or rolls back.
func (q *queue) CompleteInTx(ctx context.Context, v any, commit bool) (bool, error) {
	h := v.(*held)
	tx, err := q.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](h.ctx, tx, h.job); err != nil {
		return false, err
	}
	var state string
	if err := tx.QueryRow(ctx, q.sql(sqlJobState), h.job.ID).Scan(&state); err != nil {
		return false, err
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	return state == string(rivertype.JobStateCompleted), err
}

func (q *queue) Close() error {
	if q.worker != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		q.worker.StopAndCancel(ctx)
		cancel()
	}
	if q.pool != nil {
		q.pool.Close()
	}
	return nil
}

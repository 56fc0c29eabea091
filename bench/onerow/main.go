// Command onerow measures a schema the store does not use, to price a design
// decision (bench/findings.md §31): one row per run, the claim a heap-only
// (HOT) update, against the store's two rows per run (a runs row with the
// idempotency record, a jobs row the drain writes).
//
// Both schemas are cut-down copies in raw SQL, with the same columns,
// indexes and foreign keys as migrations 1–10 and the same shape of
// statements as impl/postgres (a bulk insert over arrays; a claim of up to
// 100 by SKIP LOCKED and its update; a completion that locks its rows by key
// and updates them by ctid under the lease's generation). Row checks,
// attempts history, clock reads and notifications are left out of both.
//
//   - two rows (the store's shape): the claim takes queued jobs from
//     jobs_due and expired leases from jobs_expired, and changes state, an
//     indexed predicate's column, so both of the drain's updates add index
//     entries; the claim and the completion read the payload and the run from
//     runs by key.
//   - one row: the run's columns and its idempotency record are on the job
//     row; jobs_due holds every job not finished (available_at IS NOT
//     NULL), so the claim changes no indexed column and can be a HOT update,
//     and finds expired leases in the same scan (ordered by available_at,
//     not by the lease's expiry: a change of the claim order); the
//     completion clears available_at.
//
// Each round makes a fresh schema, bulk-inserts -n jobs in calls of 1,000,
// then drains them on one connection, claiming the next batch while
// -inflight batches are leased and not yet completed. It prints per round
// and per schema the server CPU per job of the one backend
// (/proc/PID/schedstat: run it on the database's host), rates and WAL per
// job, and at the end the medians, each schema's rounds alternating.
//
//	go run ./bench/onerow -dsn postgres://postgres@127.0.0.1:5432/test -n 30000 -rounds 5 -inflight 1,100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// schemaName is the scratch schema each round creates and drops.
const schemaName = "leasehold_onerow_experiment"

// runsTwoRows is the runs table of migrations 1–10, without its row check.
const runsTwoRows = `CREATE TABLE runs (tenant text COLLATE "C" NOT NULL, run_id text COLLATE "C" NOT NULL, operation text COLLATE "C" NOT NULL,
	payload text NOT NULL, fingerprint text NOT NULL, max_attempts bigint NOT NULL, created_at bigint NOT NULL, deadline_at bigint NOT NULL,
	replay_of text COLLATE "C", replay_depth bigint NOT NULL DEFAULT 0, queued_payload text, idempotency_key text COLLATE "C",
	idempotency_expires_at bigint, PRIMARY KEY (tenant, run_id), FOREIGN KEY (tenant, replay_of) REFERENCES runs (tenant, run_id));
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, operation, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_idempotency_expiry ON runs (idempotency_expires_at, tenant, operation, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX runs_replayed ON runs (tenant, replay_of) WHERE replay_of IS NOT NULL;`

// jobColumns is the jobs table's columns of migrations 1–10; %s is
// available_at's nullability.
const jobColumns = `tenant text COLLATE "C" NOT NULL, run_id text COLLATE "C" NOT NULL, operation text COLLATE "C" NOT NULL,
	state text NOT NULL, available_at bigint %s, lease_owner text, lease_expires_at bigint, lease_generation bigint NOT NULL DEFAULT 0,
	attempts bigint NOT NULL DEFAULT 0, max_attempts bigint NOT NULL, last_error_code text, run_state text NOT NULL,
	run_version bigint NOT NULL, run_last_seq bigint NOT NULL, run_error_code text, run_result text, run_finished_at bigint,
	run_event_payload text, attempt_generation bigint, attempt_number bigint, attempt_worker text, attempt_claimed_at bigint,
	attempt_renewed_at bigint, attempt_finished_at bigint, attempt_outcome text, attempt_error_code text, attempt_error_class text,
	attempt_retry_at bigint`

// twoRows is the store's schema: runs, and jobs with its four partial
// indexes and its foreign key to runs.
var twoRows = runsTwoRows + `
CREATE TABLE jobs (` + fmt.Sprintf(jobColumns, "NOT NULL") + `, PRIMARY KEY (tenant, run_id), FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id));
CREATE INDEX jobs_due ON jobs (tenant, available_at, run_id) WHERE state = 'queued';
CREATE INDEX jobs_expired ON jobs (tenant, lease_expires_at, run_id) WHERE state = 'leased' AND attempts < max_attempts;
CREATE INDEX jobs_finished ON jobs (tenant, run_finished_at, run_id) WHERE run_finished_at IS NOT NULL;
CREATE INDEX jobs_reap ON jobs (tenant, lease_expires_at, run_id) WHERE state = 'leased' AND attempts >= max_attempts;`

// oneRow is the schema under study: the run's columns and record on the job
// row, at the given fillfactor (room on the page is what lets a claim be
// HOT); jobs_due keyed on nothing the claim changes.
func oneRow(fillfactor int) string {
	return `CREATE TABLE jobs (` + fmt.Sprintf(jobColumns, "") + `,
	payload text NOT NULL, fingerprint text NOT NULL, created_at bigint NOT NULL, deadline_at bigint NOT NULL,
	replay_of text COLLATE "C", replay_depth bigint NOT NULL DEFAULT 0, queued_payload text, idempotency_key text COLLATE "C",
	idempotency_expires_at bigint, PRIMARY KEY (tenant, run_id), FOREIGN KEY (tenant, replay_of) REFERENCES jobs (tenant, run_id))
	WITH (fillfactor = ` + strconv.Itoa(fillfactor) + `);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, operation, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_idempotency_expiry ON jobs (idempotency_expires_at, tenant, operation, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX jobs_replayed ON jobs (tenant, replay_of) WHERE replay_of IS NOT NULL;
CREATE INDEX jobs_due ON jobs (tenant, available_at, run_id) WHERE available_at IS NOT NULL;
CREATE INDEX jobs_finished ON jobs (tenant, run_finished_at, run_id) WHERE run_finished_at IS NOT NULL;`
}

// members is a bulk insert's arrays: run ids, payloads, fingerprints,
// idempotency keys; $5 is the time.
const members = `WITH m AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS m(run_id, payload, fingerprint, ikey))`

const bulkTwoRows = members + `, r AS (
	INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at, replay_of, replay_depth,
		idempotency_key, idempotency_expires_at)
	SELECT 'acme', run_id, 'work', payload, fingerprint, 3, $5::bigint, $5::bigint + 3600000, NULL, 0, ikey, $5::bigint + 86400000 FROM m
	RETURNING 1
), j AS (
	INSERT INTO jobs (tenant, run_id, operation, state, available_at, attempts, lease_generation, max_attempts, run_state, run_version, run_last_seq)
	SELECT 'acme', run_id, 'work', 'queued', $5::bigint, 0, 0, 3, 'queued', 1, 1 FROM m RETURNING 1
) SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM j)`

const bulkOneRow = members + `
	INSERT INTO jobs (tenant, run_id, operation, state, available_at, attempts, lease_generation, max_attempts, run_state, run_version,
		run_last_seq, payload, fingerprint, created_at, deadline_at, replay_of, replay_depth, idempotency_key, idempotency_expires_at)
	SELECT 'acme', run_id, 'work', 'queued', $5::bigint, 0, 0, 3, 'queued', 1, 1, payload, fingerprint, $5::bigint, $5::bigint + 3600000,
		NULL, 0, ikey, $5::bigint + 86400000 FROM m`

// claimSet is the claim's write, as impl/postgres's claimStatement; $1 is
// the time, $3 the worker.
const claimSet = `state = 'leased', lease_owner = $3, lease_expires_at = $1::bigint + 600000,
	lease_generation = lease_generation + 1, attempts = attempts + 1,
	run_state = 'running', run_version = run_version + CASE WHEN run_state = 'queued' THEN 1 ELSE 0 END,
	attempt_generation = lease_generation + 1, attempt_number = attempts + 1, attempt_worker = $3,
	attempt_claimed_at = $1, attempt_renewed_at = $1, attempt_finished_at = NULL,
	attempt_outcome = 'running', attempt_error_code = NULL, attempt_error_class = NULL, attempt_retry_at = NULL`

// claimTwoRows: two branches (due, expired), each a range scan of its
// partial index, merged in claim order; the payload from runs by key.
const claimTwoRows = `WITH due AS (
	SELECT ctid AS pc, run_id AS prid, available_at AS pat FROM jobs
	WHERE tenant = 'acme' AND state = 'queued' AND available_at <= $1 AND attempts < max_attempts
	ORDER BY available_at, run_id LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED
), expired AS (
	SELECT ctid AS pc, run_id AS prid, lease_expires_at AS pat FROM jobs
	WHERE tenant = 'acme' AND state = 'leased' AND lease_expires_at <= $1 AND available_at <= $1 AND attempts < max_attempts
	ORDER BY lease_expires_at, run_id LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED
), picked AS (SELECT * FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) e ORDER BY pat, prid LIMIT $2
), c AS (UPDATE jobs SET ` + claimSet + ` FROM picked WHERE ctid = pc
	AND ((state = 'queued' AND available_at <= $1 AND attempts < max_attempts)
		OR (state = 'leased' AND lease_expires_at <= $1 AND attempts < max_attempts))
	RETURNING run_id, lease_generation)
SELECT c.run_id, c.lease_generation, r.payload, r.deadline_at
FROM c, LATERAL (SELECT payload, deadline_at FROM runs WHERE tenant = 'acme' AND run_id = c.run_id OFFSET 0) r`

// claimableOneRow is the one-row claim predicate: due, and queued or its
// lease expired; the leases in flight are in jobs_due and are stepped over.
const claimableOneRow = `available_at <= $1 AND attempts < max_attempts
	AND (state = 'queued' OR (state = 'leased' AND lease_expires_at <= $1))`

const claimOneRow = `WITH picked AS (
	SELECT ctid AS pc FROM jobs WHERE tenant = 'acme' AND ` + claimableOneRow + `
	ORDER BY available_at, run_id LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED
) UPDATE jobs SET ` + claimSet + ` FROM picked WHERE ctid = pc AND ` + claimableOneRow + `
	RETURNING run_id, lease_generation, payload, deadline_at`

// lockJobs locks a batch's rows by key, in the order given (sorted).
const lockJobs = `SELECT x.ctid, x.run_id FROM unnest($1::text[]) AS m(run_id)
	CROSS JOIN LATERAL (SELECT ctid, * FROM jobs WHERE tenant = 'acme' AND run_id = m.run_id OFFSET 0 FOR NO KEY UPDATE) AS x`

// completeSet and completeWhere are the completion's write and its lease
// guard per member ($1 ctids, $2 generations, $3 the time, $4 event payloads).
const (
	completeSet = `state = 'completed', lease_owner = NULL, lease_expires_at = NULL,
	run_state = 'completed', run_version = run_version + 1, run_last_seq = run_last_seq + 1, run_result = NULL,
	run_finished_at = $3::bigint, run_event_payload = m.pl, attempt_finished_at = $3::bigint, attempt_outcome = 'completed'`
	completeWhere = `FROM unnest($1::tid[], $2::bigint[], $4::text[]) AS m(mc, gen, pl)
	WHERE jobs.ctid = ANY ($1::tid[]) AND jobs.ctid = m.mc AND jobs.state = 'leased' AND jobs.lease_owner = 'w'
		AND jobs.lease_generation = m.gen`
)

const completeTwoRows = `WITH j AS (UPDATE jobs SET ` + completeSet + ` ` + completeWhere + ` RETURNING jobs.*)
	SELECT j.*, r.* FROM j, LATERAL (SELECT * FROM runs WHERE tenant = j.tenant AND run_id = j.run_id OFFSET 0) AS r`

const completeOneRow = `UPDATE jobs SET available_at = NULL, ` + completeSet + ` ` + completeWhere + ` RETURNING jobs.*`

// design is one schema and its statements.
type design struct {
	name                  string
	ddl                   string
	bulk, claim, complete string
}

// measure is one round of one design.
type measure struct {
	bulkCPU, drainCPU   float64 // server µs per job
	bulkRate, drainRate float64 // jobs/s
	walPerJob, hotShare float64 // drain WAL bytes per job, HOT share of updates
}

func main() {
	dsn := flag.String("dsn", os.Getenv("LEASEHOLD_PG_DSN"), "PostgreSQL on this host (default $LEASEHOLD_PG_DSN)")
	n := flag.Int("n", 30000, "jobs per round")
	rounds := flag.Int("rounds", 5, "rounds per design and in-flight depth")
	fillfactor := flag.Int("fillfactor", 50, "the one-row table's fillfactor")
	inflight := flag.String("inflight", "1,100", "batches of 100 leased and not completed at each claim (comma-separated)")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "onerow: no database: pass -dsn or set LEASEHOLD_PG_DSN")
		os.Exit(2)
	}
	if *n < 1 || *rounds < 1 || *fillfactor < 10 || *fillfactor > 100 {
		fmt.Fprintln(os.Stderr, "onerow: -n and -rounds must be at least 1, -fillfactor between 10 and 100")
		os.Exit(2)
	}
	designs := []design{{"two rows", twoRows, bulkTwoRows, claimTwoRows, completeTwoRows},
		{fmt.Sprintf("one row (fillfactor %d)", *fillfactor), oneRow(*fillfactor), bulkOneRow, claimOneRow, completeOneRow}}
	ctx := context.Background()
	var summary []string
	for _, f := range strings.Split(*inflight, ",") {
		depth, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || depth < 1 {
			fmt.Fprintf(os.Stderr, "onerow: -inflight %q: want positive integers\n", *inflight)
			os.Exit(2)
		}
		got := make([][]measure, len(designs))
		for round := range *rounds {
			for i, d := range designs {
				m, err := runRound(ctx, *dsn, d, *n, depth)
				if err != nil {
					fmt.Fprintf(os.Stderr, "onerow: %s: %v\n", d.name, err)
					os.Exit(1)
				}
				fmt.Printf("in flight %5d, round %d, %-24s bulk %6.0f jobs/s %5.1f µs/job; drain %6.0f jobs/s %5.1f µs/job, WAL %4.0f B/job, HOT %3.0f %% of updates\n",
					depth*100, round+1, d.name, m.bulkRate, m.bulkCPU, m.drainRate, m.drainCPU, m.walPerJob, 100*m.hotShare)
				got[i] = append(got[i], m)
			}
		}
		for i, d := range designs {
			summary = append(summary, fmt.Sprintf("| %d | %s | %.1f | %.1f | %.0f | %.0f %% |", depth*100, d.name,
				median(got[i], func(m measure) float64 { return m.bulkCPU }), median(got[i], func(m measure) float64 { return m.drainCPU }),
				median(got[i], func(m measure) float64 { return m.walPerJob }), 100*median(got[i], func(m measure) float64 { return m.hotShare })))
		}
	}
	fmt.Printf("\nMedians of %d rounds, %d jobs each; server CPU of the one backend, µs per job.\n\n", *rounds, *n)
	fmt.Println("| leases in flight | schema | bulk insert µs/job | drain µs/job | drain WAL B/job | HOT updates |")
	fmt.Println("|---:|---|---:|---:|---:|---:|")
	for _, l := range summary {
		fmt.Println(l)
	}
}

func median(ms []measure, f func(measure) float64) float64 {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = f(m)
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// backendCPU is the scheduler run time of the backend pid (this host's
// /proc).
func backendCPU(pid uint32) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, fmt.Errorf("the backend's CPU (run this on the database's host): %w", err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	return time.Duration(ns), err
}

// lease is a claimed job: its run id and lease generation.
type lease struct {
	runID      string
	generation int64
}

// runRound makes d's schema afresh, bulk-inserts n jobs, drains them with
// depth batches in flight at each claim, and drops the schema.
func runRound(ctx context.Context, dsn string, d design, n, depth int) (m measure, err error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return m, err
	}
	defer c.Close(ctx)
	schema := pgx.Identifier{schemaName}.Sanitize()
	for _, s := range append([]string{`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`, `CREATE SCHEMA ` + schema,
		`SET search_path = ` + schema, `SET enable_seqscan = off`, `SET enable_bitmapscan = off`, `SET enable_hashjoin = off`,
		`SET enable_mergejoin = off`, `SET jit = off`}, strings.Split(d.ddl, ";")...) {
		if strings.TrimSpace(s) == "" {
			continue
		}
		if _, err := c.Exec(ctx, s); err != nil {
			return m, fmt.Errorf("%s: %w", s, err)
		}
	}
	defer c.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
	var pid uint32
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return m, err
	}
	now := time.Now().UnixMilli()

	cpu0, err := backendCPU(pid)
	if err != nil {
		return m, err
	}
	t0 := time.Now()
	for start := 0; start < n; start += 1000 {
		var ids, payloads, fingerprints, keys []string
		for i := start; i < min(start+1000, n); i++ {
			ids = append(ids, fmt.Sprintf("job-%010d", i))
			payloads = append(payloads, `{"n":`+strconv.Itoa(i)+`}`)
			fingerprints = append(fingerprints, fmt.Sprintf("%064x", i))
			keys = append(keys, "key-"+strconv.Itoa(i))
		}
		if _, err := c.Exec(ctx, d.bulk, ids, payloads, fingerprints, keys, now); err != nil {
			return m, fmt.Errorf("bulk insert: %w", err)
		}
	}
	cpu1, err := backendCPU(pid)
	if err != nil {
		return m, err
	}
	m.bulkCPU, m.bulkRate = perJob(cpu1-cpu0, n), float64(n)/time.Since(t0).Seconds()
	for _, s := range []string{`VACUUM ANALYZE jobs`, `CHECKPOINT`} {
		if _, err := c.Exec(ctx, s); err != nil {
			return m, err
		}
	}

	var lsn0 string
	var upd0, hot0 int64
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0); err != nil {
		return m, err
	}
	if err := updates(ctx, c, &upd0, &hot0); err != nil {
		return m, err
	}
	if cpu0, err = backendCPU(pid); err != nil {
		return m, err
	}
	t0 = time.Now()
	var inFlight [][]lease
	done := 0
	for {
		batch, err := claim(ctx, c, d, now+1)
		if err != nil {
			return m, err
		}
		if len(batch) > 0 {
			inFlight = append(inFlight, batch)
		}
		if len(inFlight) > depth || (len(batch) == 0 && len(inFlight) > 0) {
			if err := complete(ctx, c, d, inFlight[0], now+2); err != nil {
				return m, err
			}
			done += len(inFlight[0])
			inFlight = inFlight[1:]
		}
		if len(batch) == 0 && len(inFlight) == 0 {
			break
		}
	}
	if done != n {
		return m, fmt.Errorf("drained %d of %d jobs", done, n)
	}
	if cpu1, err = backendCPU(pid); err != nil {
		return m, err
	}
	m.drainCPU, m.drainRate = perJob(cpu1-cpu0, n), float64(n)/time.Since(t0).Seconds()
	var wal float64
	if err := c.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8`, lsn0).Scan(&wal); err != nil {
		return m, err
	}
	m.walPerJob = wal / float64(n)
	var upd1, hot1 int64
	if err := updates(ctx, c, &upd1, &hot1); err != nil {
		return m, err
	}
	if upd1 > upd0 {
		m.hotShare = float64(hot1-hot0) / float64(upd1-upd0)
	}
	return m, nil
}

func perJob(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

// updates reads the jobs table's update counts after flushing this
// backend's pending statistics (a backend flushes when it goes idle).
func updates(ctx context.Context, c *pgx.Conn, upd, hot *int64) error {
	if _, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Exec(ctx, `SELECT 1`); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	return c.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass`).Scan(upd, hot)
}

func claim(ctx context.Context, c *pgx.Conn, d design, now int64) ([]lease, error) {
	rows, err := c.Query(ctx, d.claim, now, 100, "w")
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	var out []lease
	for rows.Next() {
		var l lease
		var payload string // read as a worker would, not used
		var deadline int64
		if err := rows.Scan(&l.runID, &l.generation, &payload, &deadline); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// complete locks the batch's rows by key and completes them by ctid under
// each lease's generation, in one transaction; every one must complete.
func complete(ctx context.Context, c *pgx.Conn, d design, batch []lease, now int64) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	generation := make(map[string]int64, len(batch))
	ids := make([]string, 0, len(batch))
	for _, l := range batch {
		generation[l.runID] = l.generation
		ids = append(ids, l.runID)
	}
	slices.Sort(ids)
	rows, err := tx.Query(ctx, lockJobs, ids)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	var ctids []any
	var generations []int64
	var payloads []string
	for rows.Next() {
		var ctid any
		var runID string
		if err := rows.Scan(&ctid, &runID); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		ctids = append(ctids, ctid)
		generations = append(generations, generation[runID])
		payloads = append(payloads, `{"generation":`+strconv.FormatInt(generation[runID], 10)+`}`)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	tag, err := tx.Exec(ctx, d.complete, ctids, generations, now, payloads)
	if err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	if int(tag.RowsAffected()) != len(batch) {
		return fmt.Errorf("completed %d of %d leases", tag.RowsAffected(), len(batch))
	}
	return tx.Commit(ctx)
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/spec"
)

// openPG opens a leasehold PostgreSQL store on a fresh schema of the
// benchmark database, with the database clock (what production runs) and a
// pool of o.Conns connections.
func openPG(ctx context.Context, dsn, schema string, o Options) (*postgres.Store, error) {
	return openPGWith(ctx, dsn, schema, o, 0)
}

// openPGWith is openPG with postgres.Options.CoalesceCreateRun = coalesce.
func openPGWith(ctx context.Context, dsn, schema string, o Options, coalesce int) (*postgres.Store, error) {
	if err := dropSchema(ctx, dsn, schema); err != nil {
		return nil, err
	}
	return postgres.Open(ctx, dsn, postgres.Options{Config: config(), Schema: schema, MaxConns: int32(o.Conns),
		MinConns: int32(o.Conns), ApplicationName: "leasehold-bench", CoalesceCreateRun: coalesce})
}

func dropSchema(ctx context.Context, dsn, schema string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	return err
}

// closePG closes the store and drops its schema.
func closePG(ctx context.Context, dsn string, s *postgres.Store) {
	schema := s.Schema()
	s.Close()
	_ = dropSchema(context.WithoutCancel(ctx), dsn, schema)
}

// The bulk loader writes queued runs straight into the store's schema with
// INSERT … SELECT generate_series: for each i in [from, to] a run (payload
// {"n":i}, its real fingerprint, the default policy's 3 attempts and 1h
// deadline, its idempotency record of 24h retention on its row) and its
// job (queued, available now, generation 0, attempts 0): exactly the rows
// CreateRun writes (bench_test.go holds it to that), minutes faster at
// depth. One statement: the foreign key is checked as the rows go in.
const loadQueuedSQL = `WITH clock AS (
	SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), src AS (
	SELECT 'job-' || lpad(i::text, 10, '0') AS run_id, '{"n":' || i || '}' AS payload, i, now
	FROM generate_series($2::bigint, $3::bigint) AS i, clock
), r AS (
	INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at,
		idempotency_key, idempotency_expires_at)
	SELECT $1, run_id, 'work', payload,
		'fp1:' || encode(sha256(convert_to('{"max_attempts":3,"operation":"work","payload":' || payload
			|| ',"schema_version":1,"tenant":' || to_json($1::text)::text || ',"timeout_ms":3600000}', 'UTF8')), 'hex'),
		3, now, now + 3600000, 'key-' || i, now + 86400000
	FROM src
	RETURNING tenant, run_id, created_at
)
INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts,
	run_state, run_version, run_last_seq)
SELECT tenant, run_id, 'work', 'queued', created_at, 0, 0, 3, 'queued', 1, 1 FROM r`

// loadChunk bounds one loader statement, so a 1M load is a few statements
// whose progress can be seen.
const loadChunk = 250_000

// loadQueued bulk-loads jobs [from, to] of tenant into the store's schema
// and then VACUUM ANALYZEs the tables it loaded, as autovacuum would have
// done on tables of that size. Not attempts: it is still empty, and
// autovacuum never analyzes an empty table (analyzing it empty once made
// cached plans scan it as it grew, bench/findings.md §8).
func loadQueued(ctx context.Context, pool *pgxpool.Pool, from, to int64) error {
	for lo := from; lo <= to; lo += loadChunk {
		hi := min(lo+loadChunk-1, to)
		if _, err := pool.Exec(ctx, loadQueuedSQL, tenant, lo, hi); err != nil {
			return fmt.Errorf("bulk load %d..%d: %w", lo, hi, err)
		}
	}
	_, err := pool.Exec(ctx, `VACUUM ANALYZE runs, jobs`)
	return err
}

// expireSQL turns the first $2 queued jobs (in claim order) into leases
// held by a crashed worker with budget left, which expired before any job
// still queued became available, so that they come first in claim order
// (SPEC.md: by when each became claimable): job leased (generation 1,
// attempts 1, owner, expiry 1 s before its former available_at, made
// available 3 s before that), its attempt running (claimed 2 s before),
// its run running (version 2). These are the rows a claim then has to
// reclaim.
const expireSQL = `WITH v AS (
	SELECT run_id FROM jobs WHERE tenant = $1 AND state = 'queued'
	ORDER BY available_at, run_id LIMIT $2
)
UPDATE jobs SET state = 'leased', lease_owner = 'crashed-worker', lease_expires_at = jobs.available_at - 1000,
	available_at = jobs.available_at - 3000, lease_generation = 1, attempts = 1, run_state = 'running', run_version = 2,
	attempt_generation = 1, attempt_number = 1, attempt_worker = 'crashed-worker', attempt_outcome = 'running',
	attempt_claimed_at = jobs.available_at - 2000, attempt_renewed_at = jobs.available_at - 2000
FROM v WHERE jobs.tenant = $1 AND jobs.run_id = v.run_id`

// expireLeases applies expireSQL to k jobs and re-analyzes.
func expireLeases(ctx context.Context, pool *pgxpool.Pool, k int) error {
	if _, err := pool.Exec(ctx, expireSQL, tenant, k); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `VACUUM ANALYZE jobs`)
	return err
}

// insertLeaseholdPG measures one round of admission by method on a fresh
// schema: o.InsertN CreateRun calls from W goroutines (methodOne; with
// concurrent calls coalesced, methodCoalesced), or o.BulkN runs through
// spec.BatchCreator.CreateRuns in batches of o.BulkBatch from one goroutine
// (methodBulk; not measured when the store lacks it).
func insertLeaseholdPG(ctx context.Context, pg *server, dsn string, o Options, method string, round int, logf func(string, ...any)) (InsertResult, error) {
	bulk, coalesce := method == methodBulk, 0
	n := o.admissionN(bulk)
	res := InsertResult{System: "leasehold", Store: "postgres", Method: method, Jobs: n, Round: round}
	if method == methodCoalesced {
		coalesce = o.Coalesce
	}
	s, err := openPGWith(ctx, dsn, "bench_insert", o, coalesce)
	if err != nil {
		return res, err
	}
	defer closePG(ctx, dsn, s)
	elapsed, c, err := pg.measure(ctx, n, DBLeasehold, func() error {
		if bulk {
			return insertBulkAPI(ctx, s, n, o.BulkBatch)
		}
		return insertAPI(ctx, s, n, o.Workers)
	}, func() { s.Close() })
	if err == errNoBatchCreator {
		res.NotMeasured = notMeasuredCreateRuns
		logf("leasehold postgres %s: not measured (%s)", res.Method, res.NotMeasured)
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Seconds, res.JobsPerSec, res.Cost = elapsed.Seconds(), float64(n)/elapsed.Seconds(), c
	st := s.AdmissionStats()
	res.Admission = &AdmissionStats{Coalesced: st.Coalesced, SharedTransactions: st.SharedTransactions, Retried: st.Retried, Fresh: st.Fresh}
	logf("round %d: leasehold postgres %s: %.0f jobs/s (%d admission attempts retried; %d calls coalesced into %d transactions)",
		round, res.Method, res.JobsPerSec, st.Retried, st.Coalesced, st.SharedTransactions)
	return res, nil
}

// Admission methods, as the report names them (the ratios find them by
// these names).
const (
	methodOne       = "one per call"
	methodCoalesced = "one per call, coalesced"
	methodBulk      = "bulk"
	// methodOneUnique and methodBulkUnique are a peer's inserts with its
	// duplicate check on every job (UniquePeer).
	methodOneUnique  = "one per call, unique"
	methodBulkUnique = "bulk, unique"
)

// drainLeaseholdPG bulk-loads N jobs into a fresh schema and drains them
// with variant v, its database's horizon held back by pin (pinNone: not).
func drainLeaseholdPG(ctx context.Context, pg *server, dsn string, o Options, v drainMode, pm pinMode, round int, logf func(string, ...any)) (DrainResult, error) {
	res := DrainResult{System: "leasehold", Store: "postgres", Variant: v.key, Name: v.name, Jobs: o.N, Round: round, Pin: string(pm)}
	s, err := openPG(ctx, dsn, "bench_"+v.key, o)
	if err != nil {
		return res, err
	}
	defer closePG(ctx, dsn, s)
	if err := loadQueued(ctx, s.Pool(), 1, int64(o.N)); err != nil {
		return res, err
	}
	if _, err := s.Pool().Exec(ctx, `CHECKPOINT`); err != nil {
		return res, err
	}
	if round == 1 && pm == pinNone {
		// The drain's first claim batch as the planner runs it (rolled back;
		// after the checkpoint, so that it does not write the loader's dirty
		// pages out itself):
		// what one claim of the drain reads and costs.
		plan, err := s.ExplainClaim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "bench-explain", LeaseMs: leaseMs, Limit: o.ClaimBatch})
		if err != nil {
			return res, fmt.Errorf("explain: %w", err)
		}
		res.ClaimPlan = plan
		res.ClaimPlanBuffers, res.ClaimPlanMs = planFigures(plan)
	}
	target := leaseholdClaims(s.Schema())
	before, err := readClaims(ctx, dsn, target)
	if err != nil {
		return res, err
	}
	p, err := openPin(ctx, dsn, pm, o.N)
	if err != nil {
		return res, err
	}
	defer p.release()
	st := &drainStats{progress: func(done int) { p.progress(ctx, done) }}
	elapsed, c, err := pg.measure(ctx, o.N, DBLeasehold, func() error {
		err := profiled(o.ProfileDir, fmt.Sprintf("postgres-%s%s-%d", v.key, pinSuffix(pm), round), func() error { return drain(ctx, s, o.N, o, v, st) })
		if err == nil {
			err = p.held(ctx, pg.conn)
		}
		return err
	}, func() { s.Close(); p.release() })
	if err == errNoBatchCompleter {
		res.NotMeasured = "the PostgreSQL store does not implement spec.BatchCompleter yet"
		logf("leasehold postgres %s: not measured (%s)", v.key, res.NotMeasured)
		return res, nil
	}
	if err != nil {
		return res, err
	}
	after, err := readClaims(ctx, dsn, target)
	if err != nil {
		return res, err
	}
	if completed, err := countCompleted(ctx, dsn, s.Schema()); err != nil || completed != o.N {
		return res, fmt.Errorf("%d jobs completed in the table after the drain, want %d (%v)", completed, o.N, err)
	}
	res.fill(elapsed, c, st)
	res.fillClaims(before, after)
	logf("round %d: leasehold postgres %s, %s: %.0f jobs/s (%.2f write transactions/job, %.1f claim-index entries read/job)", round, v.key, pm.text(),
		res.JobsPerSec, c.WriteTxPerJob, res.ClaimIndexReadsPerJob)
	return res, nil
}

// pinSuffix tells a pinned drain's profile from the unpinned one's.
func pinSuffix(pm pinMode) string {
	if pm == pinNone {
		return ""
	}
	return "-pinned-" + string(pm)
}

// countCompleted counts the completed jobs of the store's schema, on a
// connection of its own (the drain's pool is closed by then).
func countCompleted(ctx context.Context, dsn, schema string) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+` WHERE state = 'completed'`).Scan(&n)
	return n, err
}

func (r *DrainResult) fill(elapsed time.Duration, c Cost, st *drainStats) {
	r.Seconds = elapsed.Seconds()
	r.JobsPerSec = float64(r.Jobs) / elapsed.Seconds()
	r.Cost = c
	r.Retries = st.retries.Load()
	if n := st.claims.Load(); n > 0 {
		r.JobsPerClaim = float64(st.claimed.Load()) / float64(n)
	}
	if n := st.completeCalls.Load(); n > 0 {
		r.JobsPerCompleteCall = float64(st.complete.Load()) / float64(n)
		r.CompleteCallMs = float64(st.completeNanos.Load()) / 1e6 / float64(n)
	}
	if n := st.claims.Load(); n > 0 {
		r.ClaimCallMs = float64(st.claimNanos.Load()) / 1e6 / float64(n)
	}
}

// ceiling measures the database's own commit rate with the benchmark's
// connections and no queue logic: Conns connections, each committing one
// single-row UPDATE per round trip (autocommit) on its own row, o.N commits
// in all. A no-op job needs at least one commit in a one-commit-per-job
// design, so this is the most such a design can do on this server.
func ceiling(ctx context.Context, pg *server, dsn string, o Options, logf func(string, ...any)) (CeilingResult, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return CeilingResult{}, err
	}
	pc.MaxConns, pc.MinConns = int32(o.Conns), int32(o.Conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return CeilingResult{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS bench_ceiling;
		CREATE TABLE bench_ceiling (id int PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO bench_ceiling SELECT g, 0 FROM generate_series(0, 1023) AS g`); err != nil {
		return CeilingResult{}, err
	}
	defer pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS bench_ceiling`)
	n := o.N
	elapsed, c, err := pg.measure(ctx, n, DBLeasehold, func() error {
		errs := make(chan error, o.Conns)
		per := n / o.Conns
		for w := range o.Conns {
			count := per
			if w == 0 {
				count += n - per*o.Conns
			}
			go func() {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				defer conn.Release()
				for range count {
					if _, err := conn.Exec(ctx, `UPDATE bench_ceiling SET n = n + 1 WHERE id = $1`, w); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		var first error
		for range o.Conns {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}, nil)
	if err != nil {
		return CeilingResult{}, err
	}
	res := CeilingResult{Method: "pgx loop: Conns connections, one single-row UPDATE committed per round trip",
		Commits: n, Seconds: elapsed.Seconds(), CommitsPerSec: float64(n) / elapsed.Seconds(), Cost: c}
	logf("ceiling: %.0f commits/s", res.CommitsPerSec)
	return res, nil
}

// peerPG is the peer on its own database of the server.
type peerPG struct {
	p   Peer
	dsn string
}

// openPeerPG recreates the peer's database and migrates it once.
func openPeerPG(ctx context.Context, pg *server, o Options) (*peerPG, error) {
	if err := pg.recreate(ctx, DBPeer); err != nil {
		return nil, err
	}
	dsn, err := withDatabase(o.DSN, DBPeer)
	if err != nil {
		return nil, err
	}
	if err := o.Peer.Open(ctx, dsn, o.Conns); err != nil {
		return nil, err
	}
	err = o.Peer.Close()
	return &peerPG{p: o.Peer, dsn: dsn}, err
}

// methods are the peer's admission methods of one kind (one per call, or
// bulk): its plain insert and, when it has one, the same with a duplicate
// check (UniquePeer).
func (pp *peerPG) methods(bulk bool) []string {
	plain, unique := methodOne, methodOneUnique
	if bulk {
		plain, unique = methodBulk, methodBulkUnique
	}
	if _, ok := pp.p.(UniquePeer); ok {
		return []string{plain, unique}
	}
	return []string{plain}
}

// insert measures one round of the peer's admission by method (methodBulk:
// o.BulkN jobs by its bulk insert in batches of o.BulkBatch; methodOne
// o.InsertN jobs, one per call from W goroutines; methodBulkUnique and
// methodOneUnique the same with its duplicate check) into an emptied job
// table. The peer's pool is opened
// for the phase and closed after it, so that its commits are counted.
func (pp *peerPG) insert(ctx context.Context, pg *server, o Options, method string, round int, logf func(string, ...any)) (InsertResult, error) {
	name := pp.p.Name()
	n := o.admissionN(method == methodBulk || method == methodBulkUnique)
	res := InsertResult{System: name, Store: "postgres", Method: method, Jobs: n, Round: round}
	if err := pp.p.Open(ctx, pp.dsn, o.Conns); err != nil {
		return res, err
	}
	if err := pp.p.Reset(ctx); err != nil {
		pp.p.Close()
		return res, err
	}
	elapsed, c, err := pg.measure(ctx, n, DBPeer, func() error {
		switch method {
		case methodBulk:
			return pp.p.InsertBulk(ctx, n, o.BulkBatch)
		case methodBulkUnique:
			return pp.p.(UniquePeer).InsertBulkUnique(ctx, n, o.BulkBatch)
		case methodOneUnique:
			return pp.p.(UniquePeer).InsertOneUnique(ctx, n, o.Workers)
		}
		return pp.p.InsertOne(ctx, n, o.Workers)
	}, func() { pp.p.Close() })
	if err != nil {
		return res, err
	}
	res.Seconds, res.JobsPerSec, res.Cost = elapsed.Seconds(), float64(n)/elapsed.Seconds(), c
	if err := pp.empty(ctx); err != nil {
		return res, err
	}
	logf("round %d: %s %s: %.0f jobs/s", round, name, res.Method, res.JobsPerSec)
	return res, nil
}

// drain measures one round of the peer's drain: N jobs bulk-inserted,
// VACUUM ANALYZE and CHECKPOINT (as for leasehold's loader), then drained,
// its database's horizon held back by pin (pinNone: not; a pinned drain
// needs a PinnablePeer).
func (pp *peerPG) drain(ctx context.Context, pg *server, o Options, pm pinMode, round int, logf func(string, ...any)) (DrainResult, error) {
	name := pp.p.Name()
	res := DrainResult{System: name, Store: "postgres", Variant: "peer", Name: name + " (its defaults for completion: batch completer)", Jobs: o.N, Round: round, Pin: string(pm)}
	pinnable, _ := pp.p.(PinnablePeer)
	if pm != pinNone && pinnable == nil {
		return res, fmt.Errorf("a pinned drain of %s: it is not a bench.PinnablePeer", name)
	}
	if err := pp.p.Open(ctx, pp.dsn, o.Conns); err != nil {
		return res, err
	}
	closed := false
	closePeer := func() {
		if !closed {
			closed = true
			pp.p.Close()
		}
	}
	defer closePeer()
	if err := pp.p.Reset(ctx); err != nil {
		return res, err
	}
	if err := pp.p.InsertBulk(ctx, o.N, peerLoadBatch); err != nil {
		return res, err
	}
	conn, err := pgx.Connect(ctx, pp.dsn)
	if err != nil {
		return res, err
	}
	_, err = conn.Exec(ctx, `VACUUM ANALYZE`)
	if err == nil {
		_, err = conn.Exec(ctx, `CHECKPOINT`)
	}
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return res, err
	}
	var target ClaimTarget
	var before claimCounters
	if pinnable != nil {
		target = pinnable.ClaimTarget()
		if before, err = readClaims(ctx, pp.dsn, target); err != nil {
			return res, err
		}
	}
	p, err := openPin(ctx, pp.dsn, pm, o.N)
	if err != nil {
		return res, err
	}
	defer p.release()
	elapsed, c, err := pg.measure(ctx, o.N, DBPeer, func() error {
		var err error
		if pinnable != nil {
			err = pinnable.DrainObserved(ctx, o.N, o.Workers, func(done int) { p.progress(ctx, done) })
		} else {
			err = pp.p.Drain(ctx, o.N, o.Workers)
		}
		if err == nil {
			err = p.held(ctx, pg.conn)
		}
		return err
	}, func() { closePeer(); p.release() })
	if err != nil {
		return res, err
	}
	if pinnable != nil {
		after, err := readClaims(ctx, pp.dsn, target)
		if err != nil {
			return res, err
		}
		res.fillClaims(before, after)
	}
	completed, err := pp.completed(ctx)
	if err != nil {
		return res, err
	}
	if completed != o.N {
		return res, fmt.Errorf("%d jobs completed after the drain, want %d", completed, o.N)
	}
	res.fill(elapsed, c, &drainStats{})
	if err := pp.empty(ctx); err != nil {
		return res, err
	}
	logf("round %d: %s drain, %s: %.0f jobs/s (%.2f write transactions/job, %.1f claim-index entries read/job)", round, name, pm.text(),
		res.JobsPerSec, c.WriteTxPerJob, res.ClaimIndexReadsPerJob)
	return res, nil
}

// completed counts the peer's completed jobs on a pool of its own (the
// phase's is closed by then).
func (pp *peerPG) completed(ctx context.Context) (int, error) {
	if err := pp.p.Open(ctx, pp.dsn, 1); err != nil {
		return 0, err
	}
	n, err := pp.p.Completed(ctx)
	return n, errors.Join(err, pp.p.Close())
}

// empty empties the peer's job table once a phase is measured (Reset on a
// pool of its own), so that the jobs it leaves give autovacuum no work to
// do during the next phase, which may be leasehold's (leasehold drops its
// schema after each phase).
func (pp *peerPG) empty(ctx context.Context) error {
	if err := pp.p.Open(ctx, pp.dsn, 1); err != nil {
		return err
	}
	err := pp.p.Reset(ctx)
	return errors.Join(err, pp.p.Close())
}

// peerLoadBatch is the batch of the peer's bulk insert when it only loads
// a drain's jobs (not measured).
const peerLoadBatch = 5_000

// checkLoaderFingerprint compares the loader's SQL fingerprint of job i
// with the one spec computes for the same request.
func checkLoaderFingerprint(ctx context.Context, pool *pgxpool.Pool, i int64) error {
	var got string
	if err := pool.QueryRow(ctx, `SELECT fingerprint FROM runs WHERE tenant = $1 AND run_id = $2`, tenant, runIDOf(i)).Scan(&got); err != nil {
		return err
	}
	want := spec.Fingerprint(spec.FingerprintInput{Tenant: tenant, Operation: operation, SchemaVersion: 1, MaxAttempts: 3,
		TimeoutMs: 3_600_000, Payload: fmt.Sprintf(`{"n":%d}`, i)})
	if got != want {
		return fmt.Errorf("bulk loader fingerprint of job %d is %s, spec computes %s", i, got, want)
	}
	return nil
}

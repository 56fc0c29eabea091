package postgres

import (
	"fmt"
	"strings"
)

// SQL for the PostgreSQL store. Parameters are named (@name, see args). Each
// guarded statement shows its predicate inline; the lease guard is written
// once, here. Unqualified table names resolve in the store's schema (the
// connection's search_path).

// leaseGuard is the predicate of every write made under a lease (renew,
// complete, retry, fail, release, effect writes): the row is this tenant's
// run, leased, by this owner, at this generation, and not expired at @now.
// Zero matching rows means the caller's lease is not current; spec.LeaseError
// then names the precise reason from the row as it is.
const leaseGuard = `tenant = @tenant AND run_id = @run_id AND state = 'leased'
	AND lease_owner = @owner AND lease_generation = @generation AND lease_expires_at > @now`

// The claim predicate of SPEC.md (available_at <= now, attempts < max, and
// queued or leased with an expired lease) is the disjunction of two branches,
// each read from its own partial index (see the migrations) in its own
// order, which is the claim order (SPEC.md: when the job became claimable,
// then run id) restricted to the branch:
//
//   - claimDue: queued jobs that are due, from jobs_due in (available_at,
//     run_id) order;
//   - claimExpired: leases that expired with budget left, from jobs_expired
//     in (lease_expires_at, run_id) order.
//
// Each is a range scan that stops at the limit, so a claim costs the same at
// any depth and however many leases expired at once. One index for both
// (the SQLite shape of migration 1) made every claim step over every lease in
// flight; the plan test (TestPlansAtDepth) holds each branch to its index.
type claimBranch struct {
	pred string // the branch's predicate
	at   string // the column that says since when its jobs are claimable
}

var (
	claimDue = claimBranch{
		pred: `tenant = @tenant AND state = 'queued' AND available_at <= ` + claimNow + ` AND attempts < max_attempts`,
		at:   "available_at"}
	claimExpired = claimBranch{
		pred: `tenant = @tenant AND state = 'leased' AND lease_expires_at <= ` + claimNow + `
		AND available_at <= ` + claimNow + ` AND attempts < max_attempts`,
		at: "lease_expires_at"}
)

// claimNow and claimExpiresAt are the claim's time and its leases' expiry:
// @now, or when @now is NULL the database clock as setClaimNow read it, and
// that plus @lease_ms, from the claim statement's CTE "ok", which holds
// them only when the time is in [0, @latest] (@latest: the last time whose
// expiry is a valid time, as spec.Deadline). Each is an InitPlan, evaluated
// once per statement; when the time is out of range both are NULL, every
// comparison with them is unknown, and the statement claims nothing.
const (
	claimNow       = `(SELECT now FROM ok)`
	claimExpiresAt = `(SELECT expires_at FROM ok)`
)

// setClaimNow reads the database clock for the claim statement, which runs
// next in the same transaction: read before the statement takes its
// snapshot, the time is one that every job committed before it is visible
// at, as it is when the clock is read in a round trip of its own. A
// transaction-local setting carries it, so the two go in one round trip.
const setClaimNow = `SELECT set_config('leasehold.claim_now', (` + clockMs + `)::text, true)`

const jobColumns = `tenant, run_id, operation, state, available_at, lease_owner, lease_expires_at,
	lease_generation, attempts, max_attempts, last_error_code`

// A run's row of the spec is split across two rows here (migration 0004):
// runs holds what admission fixed, the job row the run's state, its
// terminal event and its latest attempt, so that claiming and completing a
// job write that one row. The constants below map them back; r is the runs
// row and j the job row.

// runRow is spec.Run's columns (scanRun's order) from r and j.
const runRow = `r.tenant, r.run_id, r.operation, j.run_state, j.run_version, j.run_last_seq, r.payload,
	r.fingerprint, r.max_attempts, j.run_error_code, j.run_result, r.created_at, r.deadline_at, r.replay_of,
	r.replay_depth`

// runsJoined is the source of runRow.
const runsJoined = `runs AS r JOIN jobs AS j ON j.tenant = r.tenant AND j.run_id = r.run_id`

// returningRun turns a statement that updates job rows into one that
// returns their runs (runRow) — one round trip, not an update and a read.
// Each run is a lookup by its key for its job row: a lateral subquery that
// OFFSET 0 keeps from being flattened into a join, so no plan, whatever
// statistics it was made from, can read the runs of the tenant instead.
func returningRun(update string) string {
	return `WITH j AS (` + update + ` RETURNING jobs.*) SELECT ` + runRow + ` FROM j,
	LATERAL (SELECT * FROM runs WHERE tenant = j.tenant AND run_id = j.run_id OFFSET 0) AS r`
}

// latestAttempt is the job row's latest attempt, in attempts' column order
// (after tenant and run_id).
var latestAttempt = []string{"attempt_generation", "attempt_number", "attempt_worker", "attempt_claimed_at",
	"attempt_renewed_at", "attempt_finished_at", "attempt_outcome", "attempt_error_code", "attempt_error_class",
	"attempt_retry_at"}

const attemptColumns = `tenant, run_id, generation, number, worker, claimed_at, renewed_at, finished_at,
	outcome, error_code, error_class, retry_at`

// attemptRows is every attempt: the earlier ones from attempts, each job's
// latest from its row.
var attemptRows = `SELECT ` + attemptColumns + ` FROM attempts
	UNION ALL SELECT tenant, run_id, ` + strings.Join(latestAttempt, ", ") + ` FROM jobs
	WHERE attempt_generation IS NOT NULL`

const eventColumns = `tenant, run_id, seq, kind, at, payload`

// eventRows is every event: each run's run_queued from its runs row
// (migration 0007: seq 1 at its creation, its payload '{}' unless it is a
// replay's audit record), and the terminal event of a finished run (there
// is at most one) from its job row. run_state names it: completed, failed,
// cancelled -> run_completed, run_failed, run_cancelled.
const eventRows = `SELECT tenant, run_id, 1::bigint AS seq, 'run_queued' AS kind, created_at AS at,
	coalesce(queued_payload, '{}') AS payload FROM runs
	UNION ALL SELECT tenant, run_id, run_last_seq, 'run_' || run_state, run_finished_at, run_event_payload FROM jobs
	WHERE run_finished_at IS NOT NULL`

const effectColumns = `tenant, run_id, step, effect_key, state, provider_ref, generation, updated_at`

const idempotencyColumns = `tenant, operation, idempotency_key, fingerprint, run_id, created_at, expires_at`

// idempotencyRows is every idempotency record, in idempotencyColumns: the
// record of a run's admission lives on its runs row (migration 0008), with
// the run's tenant, operation, fingerprint and creation time; a run whose
// idempotency_key is NULL holds none. A record is deleted by setting both
// of its columns NULL (clearRecord).
const idempotencyRows = `SELECT tenant, operation, idempotency_key, fingerprint, run_id, created_at,
	idempotency_expires_at AS expires_at FROM runs WHERE idempotency_key IS NOT NULL`

// clearRecord is the SET clause that deletes a run's idempotency record.
const clearRecord = `SET idempotency_key = NULL, idempotency_expires_at = NULL`

const outboxColumns = `tenant, run_id, seq, message_id, subject, payload, generation, created_at, state, relay,
	claim_expires_at, claims, delivered_at`

// outboxClaimable is the claim predicate of an outbox message: pending, and
// never claimed or its claim expired at @now.
const outboxClaimable = `state = 'pending' AND (relay IS NULL OR claim_expires_at <= @now)`

// claimOutboxStatement builds the claim of outbox messages: one statement
// that picks up to @limit claimable messages (of the tenant, when tenant is
// set) in claim order, locking each with SKIP LOCKED, and claims them,
// repeating the predicate (under READ COMMITTED a row that changed after
// the pick's snapshot is re-checked when locked). The rows come back in no
// particular order; the store sorts them.
func claimOutboxStatement(tenant bool) string {
	pred, order := outboxClaimable, "created_at, tenant, run_id, seq"
	if tenant {
		pred, order = "tenant = @tenant AND "+outboxClaimable, "created_at, run_id, seq"
	}
	return `WITH picked AS (
		SELECT tenant AS p_tenant, run_id AS p_run_id, seq AS p_seq FROM outbox
		WHERE ` + pred + `
		ORDER BY ` + order + ` LIMIT @limit
		FOR NO KEY UPDATE SKIP LOCKED)
	UPDATE outbox SET relay = @relay, claim_expires_at = @expires_at, claims = claims + 1
	FROM picked WHERE tenant = p_tenant AND run_id = p_run_id AND seq = p_seq AND ` + outboxClaimable + `
	RETURNING ` + outboxColumns
}

var (
	claimOutboxAll    = claimOutboxStatement(false)
	claimOutboxTenant = claimOutboxStatement(true)
)

// admittedRunColumns are the columns an admission writes of its run's
// runs row: the run and its idempotency record.
const admittedRunColumns = `tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at,
	replay_of, replay_depth, idempotency_key, idempotency_expires_at`

// queuedJobColumns are the columns an admission or a replay writes of its
// run's job row: the job queued, and its run queued at version 1 with its
// run_queued event (seq 1).
const queuedJobColumns = `tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts,
	run_state, run_version, run_last_seq`

// runEnds makes the job row's run terminal: its state, its version, and its
// terminal event (the next sequence, at @now, with @payload).
const runEnds = `run_state = @run_state, run_version = run_version + 1, run_last_seq = run_last_seq + 1,
	run_error_code = @error_code, run_result = @result, run_finished_at = @now, run_event_payload = @payload`

// attemptEnds closes the job row's latest attempt, the lease's (a leased
// job's latest attempt is its lease's and running: jobs_row_valid).
const attemptEnds = `attempt_outcome = @outcome, attempt_finished_at = @now, attempt_error_code = @error_code,
	attempt_error_class = @error_class`

// claimStatement builds the claim: ONE statement that, in one round trip,
// picks up to @limit eligible jobs in claim order, locking each with SKIP
// LOCKED (a row another transaction holds is passed over, never waited
// for), leases them (generation+1, attempts+1), starts the new attempt on
// the job row, moves a queued run to running, files the job's previous
// attempt (closed as expired if it was still running: its lease expired)
// in attempts, and returns the leases in claim order, then one row with no
// run id (its other columns empty or zero) that holds the claim's time.
//
// The time is @now, or setClaimNow's reading of the database clock, taken
// once (the CTE "clock"; see claimNow). Claim needs it even when nothing
// was claimed, to refuse a time out of range as the model does; hence the
// time row. A NULL time (neither given) claims nothing and returns NULL.
//
// Each branch takes up to @limit rows in its order with FOR NO KEY UPDATE
// SKIP LOCKED; "picked" keeps the first @limit of their union by (eligible
// since, run id), which is the first @limit eligible jobs. A branch row cut by that final LIMIT stays locked,
// unclaimed, until this transaction ends: a concurrent claim skips it
// meanwhile, which SKIP LOCKED allows anyway.
//
// Locking: FOR NO KEY UPDATE is the row lock an UPDATE that keeps the key
// takes anyway, so the pick and the update agree on the lock and FK checks
// (FOR KEY SHARE) are not blocked; it excludes every other writer of the job.
//
// The UPDATE repeats the predicate (the branches' disjunction): under READ
// COMMITTED a row that changed after the statement's snapshot is re-checked
// when it is locked, and the update must never trust the pick's view alone (a
// claim that does not re-check its state is the classic double-claim bug).
// The previous attempt is filed from the values the pick locked (p_*), not
// from the statement's snapshot, which may predate the row's last change.
// Data-modifying CTEs all see the statement's snapshot, so the final SELECT
// reads the run's payload and deadline (which never change) from runs and
// everything else from "claimed".
//
// The statement has no join of a table for a planner to order: the update
// finds each picked row by the ctid its lock returned (a TID scan; a locked
// row cannot move), and each run is a lookup by its key for its claimed row
// (a lateral subquery that OFFSET 0 keeps from being flattened into a
// join). A generic plan of it made on empty tables is therefore the plan
// for any size (claimJobs). When a picked row had been updated after the
// statement's snapshot (its lock then returns the newest version, which the
// snapshot cannot see) the update finds nothing at that ctid and the job is
// not claimed this time: it stays locked, unclaimed, until the transaction
// ends, like a row cut by the final LIMIT.
func claimStatement(branches ...claimBranch) string {
	picked := make([]string, len(latestAttempt))
	for i, c := range latestAttempt {
		picked[i] = c + " AS p_" + strings.TrimPrefix(c, "attempt_")
	}
	var b strings.Builder
	b.WriteString(`WITH clock AS MATERIALIZED (
		SELECT COALESCE(@now::bigint, current_setting('leasehold.claim_now', true)::bigint) AS now
	), ok AS MATERIALIZED (
		SELECT now, now + @lease_ms AS expires_at FROM clock WHERE now BETWEEN 0 AND @latest
	), `)
	preds := make([]string, len(branches))
	for i, br := range branches {
		preds[i] = br.pred
		fmt.Fprintf(&b, `branch%d AS (
		SELECT ctid AS picked_ctid, run_id AS picked_run_id, %s AS picked_at, %s FROM jobs
		WHERE %s
		ORDER BY %s, run_id
		LIMIT @limit
		FOR NO KEY UPDATE SKIP LOCKED
	), `, i, br.at, strings.Join(picked, ", "), br.pred, br.at)
	}
	b.WriteString(`picked AS (
		SELECT * FROM (`)
	for i := range branches {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT * FROM branch%d", i)
	}
	b.WriteString(`) AS eligible
		ORDER BY picked_at, picked_run_id
		LIMIT @limit
	), claimed AS (
		UPDATE jobs SET state = 'leased', lease_owner = @worker, lease_expires_at = ` + claimExpiresAt + `,
			lease_generation = lease_generation + 1, attempts = attempts + 1,
			run_state = 'running', run_version = run_version + CASE WHEN run_state = 'queued' THEN 1 ELSE 0 END,
			attempt_generation = lease_generation + 1, attempt_number = attempts + 1, attempt_worker = @worker,
			attempt_claimed_at = ` + claimNow + `, attempt_renewed_at = ` + claimNow + `, attempt_finished_at = NULL,
			attempt_outcome = 'running', attempt_error_code = NULL, attempt_error_class = NULL, attempt_retry_at = NULL
		FROM picked
		WHERE ctid = picked_ctid AND ((` + strings.Join(preds, ") OR (") + `))
		RETURNING picked.*, operation, lease_generation, attempts AS claimed_attempt, max_attempts
	), filed AS (
		INSERT INTO attempts (` + attemptColumns + `)
		SELECT @tenant, picked_run_id, p_generation, p_number, p_worker, p_claimed_at, p_renewed_at,
			CASE WHEN p_outcome = 'running' THEN ` + claimNow + ` ELSE p_finished_at END,
			CASE WHEN p_outcome = 'running' THEN 'expired' ELSE p_outcome END,
			p_error_code, p_error_class, p_retry_at
		FROM claimed WHERE p_generation IS NOT NULL
	)
	SELECT c.picked_at, c.picked_run_id, c.operation, c.lease_generation, c.claimed_attempt, c.max_attempts,
		r.payload, r.deadline_at, NULL::bigint AS now
	FROM claimed AS c, LATERAL (SELECT payload, deadline_at FROM runs
		WHERE tenant = @tenant AND run_id = c.picked_run_id OFFSET 0) AS r
	UNION ALL SELECT NULL, NULL, '', 0, 0, 0, '', 0, now FROM clock
	ORDER BY picked_at, picked_run_id`)
	return b.String()
}

// indexPlans are the planner settings of the store's connections. Every
// statement of this store reads and writes rows through an index (or a
// ctid), so scans of whole tables, bitmap scans and hash or merge joins are
// turned off: PostgreSQL then takes them only where nothing else would do.
// Without this, a plan made while a table was small (cached after five
// executions, kept until the next ANALYZE) or from statistics that describe
// the job states of the last ANALYZE read whole tables once they grew: a
// cached claim plan sorted the due jobs found by a bitmap scan and joined
// the picked rows to a scan of jobs by hash (TestBatchPlansAfterGrowth).
// JIT is off too: a plan that must scan a table (Snapshot) carries the
// penalty of a disabled scan in its cost, which then passes jit_above_cost,
// and JIT compiled every such statement (figures in bench/findings.md §10).
var indexPlans = map[string]string{
	"enable_seqscan": "off", "enable_bitmapscan": "off", "enable_hashjoin": "off", "enable_mergejoin": "off",
	"jit": "off",
}

// claimJobs is the claim statement, its limit a parameter. It runs its
// generic plan (genericPlans, set by Claim's transaction), made once per
// connection for every limit and every table size: planned for its
// arguments, each claim cost the server more than its rows did
// (bench/findings.md §20). That plan is safe only because the statement
// leaves the planner nothing to order (claimStatement): a generic plan of
// the claim's earlier joins, made on empty tables, read the tenant's jobs
// and runs whole at every claim as they grew (TestBatchPlansAfterGrowth).
var claimJobs = claimStatement(claimDue, claimExpired)

// genericPlans makes the statements after it in the transaction run their
// generic (cached) plans, never planning them for their arguments, and
// customPlans plans them for their arguments at every call. SET LOCAL: the
// setting ends with the transaction.
const (
	genericPlans = `SET LOCAL plan_cache_mode = force_generic_plan`
	customPlans  = `SET LOCAL plan_cache_mode = force_custom_plan`
)

const (
	// lockJob takes the job row's lock before an operation on one run reads
	// its clock: every writer of a run (guarded writes, cancel, claim,
	// reap, replay of it) holds this lock, so they are serialized.
	lockJob = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = @tenant AND run_id = @run_id FOR NO KEY UPDATE`

	// lockAdmission serializes admissions of one idempotency scope (the key
	// is a hash of schema, tenant, operation and key; a collision only
	// serializes two unrelated admissions). Transaction-scoped: released at
	// commit or rollback.
	lockAdmission = `SELECT pg_advisory_xact_lock(hashtextextended(@scope, 0))`

	selectIdempotency = `SELECT fingerprint, run_id, idempotency_expires_at FROM runs
		WHERE tenant = @tenant AND operation = @operation AND idempotency_key = @key`
	// deleteIdempotency deletes the expired record of a scope that an
	// admission admits again (the guard: idempotency_expires_at <= @now).
	deleteIdempotency = `UPDATE runs ` + clearRecord + `
		WHERE tenant = @tenant AND operation = @operation AND idempotency_key = @key AND idempotency_expires_at <= @now`
	// insertRun admits a run: its runs row (with @queued_payload, its
	// run_queued payload if it is a replay) and its job row (queued, at
	// generation @generation), and returns the run. It does nothing when the
	// run id is taken (or, for a replay, the original was already replayed):
	// zero rows is already_exists. If the conflicting row is not committed
	// yet, PostgreSQL waits for its transaction and decides on the outcome,
	// so there is no race window. The job's foreign key is checked at the
	// end of the statement, when the runs row is there.
	insertRun = `WITH r AS (
		INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at,
			replay_of, replay_depth, queued_payload)
		VALUES (@tenant, @run_id, @operation, @payload, @fingerprint, @max_attempts, @now, @deadline_at,
			@replay_of, @replay_depth, @queued_payload)
		ON CONFLICT DO NOTHING
		RETURNING *
	), j AS (
		INSERT INTO jobs (` + queuedJobColumns + `)
		SELECT tenant, run_id, operation, 'queued', @available_at, @generation, 0, max_attempts, 'queued', 1, 1 FROM r
		RETURNING *
	)
	SELECT ` + runRow + ` FROM r JOIN j ON j.tenant = r.tenant AND j.run_id = r.run_id`

	// renewLease extends the lease, never past the run's deadline.
	renewLease = `UPDATE jobs SET lease_expires_at = @expires_at, attempt_renewed_at = @now
		WHERE ` + leaseGuard + ` AND @expires_at <= (SELECT deadline_at FROM runs
			WHERE runs.tenant = jobs.tenant AND runs.run_id = jobs.run_id)`

	// finishJob ends a leased job under the lease guard with its run and
	// its attempt (Complete, Fail, Retry at the budget).
	finishJob = `UPDATE jobs SET state = @state, lease_owner = NULL, lease_expires_at = NULL,
		last_error_code = coalesce(@error_code, last_error_code), ` + runEnds + `, ` + attemptEnds + `
		WHERE ` + leaseGuard
	// requeueJob and releaseJob put a leased job back in the queue under the
	// lease guard and close its attempt.
	requeueJob = `UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
		available_at = @available_at, last_error_code = @error_code, ` + attemptEnds + `, attempt_retry_at = @available_at
		WHERE ` + leaseGuard
	releaseJob = `UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
		available_at = @now, attempts = attempts - 1, ` + attemptEnds + `
		WHERE ` + leaseGuard
	selectGuarded = `SELECT attempts, max_attempts FROM jobs WHERE ` + leaseGuard

	// cancelJob ends any non-terminal job and its run; a leased job's
	// attempt ends cancelled.
	cancelJob = `UPDATE jobs SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL, ` + runEnds + `,
		attempt_outcome = CASE WHEN state = 'leased' THEN 'cancelled' ELSE attempt_outcome END,
		attempt_finished_at = CASE WHEN state = 'leased' THEN @now ELSE attempt_finished_at END
		WHERE tenant = @tenant AND run_id = @run_id AND state IN ('queued', 'leased')`

	// selectReapable picks and locks the reap victims; like the claim it
	// skips rows other transactions hold (jobs_reap serves the order).
	selectReapable = `SELECT run_id, lease_generation, lease_expires_at FROM jobs
		WHERE tenant = @tenant AND state = 'leased' AND lease_expires_at <= @now AND attempts >= max_attempts
		ORDER BY lease_expires_at, run_id LIMIT @limit
		FOR NO KEY UPDATE SKIP LOCKED`
	// reapJob re-checks the reap predicate for the generation it selected.
	reapJob = `UPDATE jobs SET state = 'dead', lease_owner = NULL, lease_expires_at = NULL, last_error_code = @error_code,
		` + runEnds + `, ` + attemptEnds + `
		WHERE tenant = @tenant AND run_id = @run_id AND state = 'leased' AND lease_generation = @generation
		AND lease_expires_at <= @now AND attempts >= max_attempts`

	// purgeIdempotency deletes the oldest expired records. A record another
	// transaction holds (an admission replacing it) is waited for, not
	// skipped: if that admission rolls back the record is still expired and
	// is deleted here, and if it commits the old row is gone and the LIMIT
	// moves on to the next one, so the result is exactly the model's purge
	// before or after the admission. SKIP LOCKED made it neither: a
	// linearizability history with an admission rolled back beside a purge
	// showed one record too few deleted. The wait is short (an admission
	// holds one record); two of these purges lock in one order and cannot
	// deadlock each other, but a purge of runs locks the same rows in run id
	// order, and a deadlock between the two ends one of them unavailable,
	// nothing written (both are janitors' calls, run again on their next
	// round). The rows are addressed by
	// ctid, which cannot change while this transaction holds their lock:
	// "ctid = ANY(ARRAY(…))" is a TID scan
	// whatever the planner estimates. The plain "key IN (subquery)" form
	// has a generic (cached) plan that seq-scans the table, because a
	// generic plan cannot see how small the LIMIT is (found by
	// TestPlansAtDepth).
	// FOR NO KEY UPDATE, the lock an admission's deletion of the record
	// takes too: a run row's foreign-key checks (an outbox insert) take FOR
	// KEY SHARE, which this does not block.
	purgeIdempotency = `UPDATE runs ` + clearRecord + ` WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM runs WHERE idempotency_key IS NOT NULL AND idempotency_expires_at <= @now
		ORDER BY idempotency_expires_at, tenant, operation, idempotency_key LIMIT @limit
		FOR NO KEY UPDATE))`

	// runRetired is the retention predicate for one run of the tenant, j
	// its job row (which holds its terminal event's time) and r its runs
	// row: it finished by @retired_by, it holds no live idempotency record
	// (a retried request must still get it back) and none of its outbox
	// messages is pending (it would be lost).
	runRetired = `j.tenant = @tenant AND j.run_finished_at IS NOT NULL AND j.run_finished_at <= @retired_by
		AND (r.idempotency_expires_at IS NULL OR r.idempotency_expires_at <= @now)
		AND NOT EXISTS (SELECT 1 FROM outbox AS o
			WHERE o.tenant = j.tenant AND o.run_id = j.run_id AND o.state = 'pending')`
	// selectRetiredLeaves lists the tenant's retired runs that nobody
	// replayed (the leaves of their lineages) in (finished, run id) order,
	// after the cursor (@after_at, @after_id), from jobs_finished. It locks
	// nothing: PurgeRuns locks what it picked, then picks again.
	selectRetiredLeaves = `SELECT j.run_id, coalesce(r.replay_of, ''), j.run_finished_at FROM jobs AS j
		JOIN runs AS r ON r.tenant = j.tenant AND r.run_id = j.run_id
		WHERE ` + runRetired + ` AND (j.run_finished_at, j.run_id) > (@after_at::bigint, @after_id::text)
			AND NOT EXISTS (SELECT 1 FROM runs AS x WHERE x.tenant = j.tenant AND x.replay_of = j.run_id)
		ORDER BY j.run_finished_at, j.run_id LIMIT @limit`
	// selectRetiredRun returns the original of run @run_id if the run is
	// retired, and no row if it is not.
	selectRetiredRun = `SELECT coalesce(r.replay_of, '') FROM jobs AS j
		JOIN runs AS r ON r.tenant = j.tenant AND r.run_id = j.run_id
		WHERE ` + runRetired + ` AND j.run_id = @run_id`
	// lockPurged locks the job and run rows of the runs a purge picked, in
	// run id order (each run's job row, then its run row), waiting for any
	// other holder (never SKIP LOCKED: a skipped row whose holder then rolls
	// back would leave the purge short of any serial order). Every writer of
	// a run locks its job row but an admission, which locks run rows
	// (those whose expired records it clears; a bulk one also those it
	// decided members from, lockDecidedRuns, and the job rows of those it
	// replays, each before its run row); once these are held, nothing
	// can replay, purge or write them, and a bulk admission that writes
	// finds them gone. A purge's later rounds lock what they picked anew,
	// which can sort before what it holds: a deadlock with an admission is
	// then possible, and PostgreSQL ends it (the admission runs again, the
	// purge is unavailable). The run rows are locked here,
	// before anything is deleted, so that an admission never waits for the
	// purge (a unique check on a run id the purge deleted) while holding a
	// run row the purge still needs: with the job rows alone, an admission
	// that cleared one purged run's record and proposed another's run id
	// deadlocked with it.
	lockPurged = `SELECT j.run_id FROM jobs AS j JOIN runs AS r ON r.tenant = j.tenant AND r.run_id = j.run_id
		WHERE j.tenant = @tenant AND j.run_id = ANY (@run_ids)
		ORDER BY j.run_id FOR UPDATE`
	// The rows of the purged runs, children first; the runs in one
	// statement, so each replay_of link among them is checked at its end.
	// A run's idempotency record goes with its runs row, never a live one
	// (the guard; PurgeRuns checks that every picked run went).
	deletePurgedOutbox   = `DELETE FROM outbox WHERE tenant = @tenant AND run_id = ANY (@run_ids) AND state = 'delivered'`
	deletePurgedEffects  = `DELETE FROM effects WHERE tenant = @tenant AND run_id = ANY (@run_ids)`
	deletePurgedAttempts = `DELETE FROM attempts WHERE tenant = @tenant AND run_id = ANY (@run_ids)`
	deletePurgedJobs     = `DELETE FROM jobs WHERE tenant = @tenant AND run_id = ANY (@run_ids)`
	deletePurgedRuns     = `DELETE FROM runs WHERE tenant = @tenant AND run_id = ANY (@run_ids)
		AND (idempotency_expires_at IS NULL OR idempotency_expires_at <= @now)`

	selectReplayOf = `SELECT run_id FROM runs WHERE tenant = @tenant AND replay_of = @run_id`

	// insertOutbox writes outbox messages, each of its run (its tenant, run
	// id and creation time) and generation: the next seqs of each run, in
	// the order given, and the message id of spec.OutboxID
	// (tenant/run_id/created_at/seq). A run's messages are written only by
	// the holder of its job's lock (or with the new run), so the seqs read
	// cannot be taken meanwhile.
	insertOutbox = `WITH m AS (
		SELECT * FROM unnest(@tenants::text[], @run_ids::text[], @created::bigint[], @generations::bigint[],
			@subjects::text[], @payloads::text[]) WITH ORDINALITY AS m(tenant, run_id, run_created_at, generation, subject, payload, ord)
	), n AS (
		SELECT m.*, row_number() OVER (PARTITION BY tenant, run_id ORDER BY ord) AS k FROM m
	)
	INSERT INTO outbox (tenant, run_id, seq, message_id, subject, payload, generation, created_at, state, claims)
	SELECT n.tenant, n.run_id, b.base + n.k, n.tenant || '/' || n.run_id || '/' || n.run_created_at || '/' || (b.base + n.k),
		n.subject, n.payload, n.generation, @now, 'pending', 0
	FROM n CROSS JOIN LATERAL (SELECT coalesce(max(o.seq), 0) AS base FROM outbox AS o
		WHERE o.tenant = n.tenant AND o.run_id = n.run_id) AS b`

	// lockDelivered locks the pending messages a mark names, in key order
	// (two marks cannot deadlock), before the mark reads its clock.
	lockDelivered = `SELECT seq FROM outbox
		WHERE (tenant, run_id, seq) IN (SELECT * FROM unnest(@tenants::text[], @run_ids::text[], @seqs::bigint[]))
			AND state = 'pending'
		ORDER BY tenant, run_id, seq FOR NO KEY UPDATE`
	// markDelivered marks the named pending messages delivered, whoever
	// claimed them.
	markDelivered = `UPDATE outbox SET state = 'delivered', delivered_at = @now, relay = NULL, claim_expires_at = NULL
		WHERE (tenant, run_id, seq) IN (SELECT * FROM unnest(@tenants::text[], @run_ids::text[], @seqs::bigint[]))
			AND state = 'pending'`

	selectEffect = `SELECT state FROM effects WHERE tenant = @tenant AND run_id = @run_id AND step = @step AND effect_key = @key`
	insertEffect = `INSERT INTO effects (tenant, run_id, step, effect_key, state, generation, updated_at)
		VALUES (@tenant, @run_id, @step, @key, 'reserved', @generation, @now)`
	reReserveEffect = `UPDATE effects SET state = 'reserved', provider_ref = '', generation = @generation, updated_at = @now
		WHERE tenant = @tenant AND run_id = @run_id AND step = @step AND effect_key = @key AND state = 'failed'`
	// recordEffect: only the generation that reserved the row records its outcome.
	recordEffect = `UPDATE effects SET state = @state, provider_ref = @provider_ref, updated_at = @now
		WHERE tenant = @tenant AND run_id = @run_id AND step = @step AND effect_key = @key
		AND state = 'reserved' AND generation = @generation`
	// reconcileEffect: only an unknown or reserved row (whoever reserved it:
	// the call may have happened) is resolved by the current generation.
	reconcileEffect = `UPDATE effects SET state = @state, provider_ref = @provider_ref, generation = @generation, updated_at = @now
		WHERE tenant = @tenant AND run_id = @run_id AND step = @step AND effect_key = @key
		AND state IN ('unknown', 'reserved')`

	selectRun     = `SELECT ` + runRow + ` FROM ` + runsJoined + ` WHERE r.tenant = @tenant AND r.run_id = @run_id`
	selectJob     = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = @tenant AND run_id = @run_id`
	selectOneEff  = `SELECT ` + effectColumns + ` FROM effects WHERE tenant = @tenant AND run_id = @run_id AND step = @step AND effect_key = @key`
	listEvents    = `SELECT * FROM (` + eventRows + `) AS e WHERE tenant = @tenant AND run_id = @run_id ORDER BY seq`
	listEffects   = `SELECT ` + effectColumns + ` FROM effects WHERE tenant = @tenant AND run_id = @run_id ORDER BY step, effect_key`
	snapRuns      = `SELECT ` + runRow + ` FROM ` + runsJoined + ` ORDER BY r.tenant, r.run_id`
	snapEvents    = `SELECT * FROM (` + eventRows + `) AS e ORDER BY tenant, run_id, seq`
	snapJobs      = `SELECT ` + jobColumns + ` FROM jobs ORDER BY tenant, run_id`
	snapIdempKeys = `SELECT * FROM (` + idempotencyRows + `) AS k ORDER BY tenant, operation, idempotency_key`
	snapEffects   = `SELECT ` + effectColumns + ` FROM effects ORDER BY tenant, run_id, step, effect_key`
	snapOutbox    = `SELECT ` + outboxColumns + ` FROM outbox ORDER BY tenant, run_id, seq`
)

var (
	listAttempts = `SELECT * FROM (` + attemptRows + `) AS a WHERE tenant = @tenant AND run_id = @run_id ORDER BY generation`
	snapAttempts = `SELECT * FROM (` + attemptRows + `) AS a ORDER BY tenant, run_id, generation`
)

// Admission (CreateRun, CreateRuns) in few round trips: the statements
// before the clock reading go out in one pipelined batch (the lock first:
// the server runs a batch's statements in order), the writes in a second.
const (
	// lockAdmissions is lockAdmission for every scope of a bulk admission,
	// in the order given (a function scan returns an array's elements in
	// order, and the aggregate takes each lock as its row arrives). The
	// caller sorts the scopes: every bulk admission takes admission locks in
	// one global order, so none waits for another's while holding one it
	// needs.
	lockAdmissions = `SELECT count(pg_advisory_xact_lock(hashtextextended(scope, 0)))
		FROM unnest(@scopes::text[]) AS scope`

	// The bulk reads and the deletion below look rows up one member at a
	// time: unnest drives a LATERAL subquery that OFFSET 0 keeps from being
	// pulled up into a join, so each member is one primary-key lookup
	// whatever the statistics say. A join of the members to the tables
	// (or of a record to its run and job) was ordered from the statistics:
	// its cached generic plan read every job of the tenant to find one
	// (found profiling CreateRun with EXPLAIN on a generic plan).

	// selectAdmissionRecords reads the records of a bulk admission's
	// scopes.
	selectAdmissionRecords = `SELECT k.tenant, k.operation, k.idempotency_key, k.fingerprint, k.run_id, k.idempotency_expires_at
		FROM unnest(@tenants::text[], @operations::text[], @keys::text[]) AS m(tenant, operation, idempotency_key)
		CROSS JOIN LATERAL (SELECT * FROM runs AS x
			WHERE x.tenant = m.tenant AND x.operation = m.operation AND x.idempotency_key = m.idempotency_key
			OFFSET 0) AS k`
	// selectTakenRuns lists which of a bulk admission's proposed run ids are
	// taken.
	selectTakenRuns = `SELECT r.tenant, r.run_id
		FROM unnest(@tenants::text[], @run_ids::text[]) AS m(tenant, run_id)
		CROSS JOIN LATERAL (SELECT tenant, run_id FROM runs AS x
			WHERE x.tenant = m.tenant AND x.run_id = m.run_id OFFSET 0) AS r`
	// selectAdmissionLookups is a bulk admission's lookups in ONE statement,
	// so from one snapshot: its scopes' records (record true) and which of
	// its proposed run ids are taken (record false, only tenant and run id
	// set). From two statements a purge committed in between could show a
	// record live in the first and its run gone in the second, and the
	// members decided from both would fit no serial order.
	selectAdmissionLookups = `SELECT true AS record, * FROM (` + selectAdmissionRecords + `) AS records
		UNION ALL
		SELECT false, t.tenant, '', '', '', t.run_id, 0 FROM (` + selectTakenRuns + `) AS t`
	// selectDecidedRuns reads the stored runs an admission decided members
	// from (readDecided), each only while it still is what the admission
	// read: a run id taken (m.mode 0, lockTaken) still there, a record
	// replayed or conflicted with (1, lockRecord; 3, lockReplayed) still
	// held (heldRecord).
	selectDecidedRuns = `SELECT x.* FROM unnest(@tenants::text[], @run_ids::text[], @operations::text[], @keys::text[],
			@expires::bigint[], @modes::int[]) AS m(tenant, run_id, operation, idempotency_key, expires_at, mode)
		CROSS JOIN LATERAL (SELECT ` + runRow + ` FROM ` + runsJoined + `
			WHERE r.tenant = m.tenant AND r.run_id = m.run_id AND j.tenant = m.tenant AND j.run_id = m.run_id
			AND (m.mode = 0 OR ` + heldRecord + `) OFFSET 0) AS x`
	// heldRecord is the predicate that run row r still holds the record m
	// an admission read: a run id can be purged and admitted again under
	// another key, or the same, in between.
	heldRecord = `r.operation = m.operation AND r.idempotency_key = m.idempotency_key AND r.idempotency_expires_at = m.expires_at`

	// insertAdmission is CreateRun's write, one statement: insertRun's run,
	// with its idempotency record (migration 0008) and its run_queued event,
	// and its job (none when the run id is taken: zero rows is
	// already_exists, as for insertRun). It returns the run. Under the
	// admission lock the record can conflict only with one an unlocked bulk
	// admission wrote (admitAll): the scope's unique index refuses the
	// statement (raced: ON CONFLICT names the run's key only), and CreateRun
	// runs again.
	insertAdmission = `WITH r AS (
		INSERT INTO runs (` + admittedRunColumns + `)
		VALUES (@tenant, @run_id, @operation, @payload, @fingerprint, @max_attempts, @now, @deadline_at, NULL, 0,
			@key, @expires_at)
		ON CONFLICT (tenant, run_id) DO NOTHING
		RETURNING *
	), j AS (
		INSERT INTO jobs (` + queuedJobColumns + `)
		SELECT tenant, run_id, operation, 'queued', @available_at, 0, 0, max_attempts, 'queued', 1, 1 FROM r
		RETURNING *
	)
	SELECT ` + runRow + ` FROM r JOIN j ON j.tenant = r.tenant AND j.run_id = r.run_id`

	// insertFresh is CreateRun's fresh admission (createFresh), one
	// statement: it takes the scope's admission lock (as lockAdmission),
	// then writes the run with its record, and its job, at the time read
	// after the lock (@now, or the database clock), within [0, @latest],
	// unless a unique key of the run is taken: ON CONFLICT DO NOTHING on
	// every one, which sees the latest committed rows and waits for a
	// concurrent writer of one, so a record of the scope (live or expired)
	// or a run of the run id writes nothing. A record or run deleted after
	// the statement's snapshot was taken does not stop it: the run is then
	// admitted after the deletion, as CreateRun admits it once the scope has
	// no record and the run id is free. Its times are that time plus the
	// request's offsets (NormalizeCreate at time 0). It returns the time
	// and the commit marker (markCommitQuery's columns) when the run was
	// written (its job always is: j inserts a job for each run r returns),
	// no row when nothing was.
	//
	// The lock comes before the clock because the clock is computed from
	// the lock's row: subquery l's aggregate takes the lock, t reads the
	// clock in its projection over l's one row, and PostgreSQL never
	// flattens a subquery whose output is volatile (the clock), so t is one
	// reading that the insert uses three times
	// (TestFreshAdmissionReadsTheClockAfterTheLock).
	insertFresh = `WITH r AS (
		INSERT INTO runs (` + admittedRunColumns + `)
		SELECT @tenant, @run_id, @operation, @payload, @fingerprint, @max_attempts, t.now, t.now + @deadline_in, NULL, 0,
			@key, t.now + @expires_in
		FROM (SELECT COALESCE(@now::bigint, ` + clockMs + `) AS now
			FROM (SELECT count(pg_advisory_xact_lock(hashtextextended(@scope, 0))) AS held) AS l WHERE l.held = 1) AS t
		WHERE t.now BETWEEN 0 AND @latest
		ON CONFLICT DO NOTHING
		RETURNING tenant, run_id, operation, max_attempts, created_at, pg_current_xact_id() AS x
	), j AS (
		INSERT INTO jobs (` + queuedJobColumns + `)
		SELECT tenant, run_id, operation, 'queued', created_at + @available_in, 0, 0, max_attempts, 'queued', 1, 1 FROM r
	)
	SELECT created_at, x::text, pg_try_advisory_xact_lock(` + markLockClass + `, ` + markLockKey + `) FROM r`

	// insertAdmissions is a bulk admission's write: every created member's
	// run (with its idempotency record) and job, each table in one
	// multi-row insert from the same arrays. A record or run id that a
	// concurrent admission wrote after the batch read it free is a unique
	// violation (raced): the whole batch rolls back, nothing written, and
	// runs again under the admission locks (admitAll), which find it. It
	// returns how many rows it wrote to each table.
	insertAdmissions = `WITH m AS (
		SELECT * FROM unnest(@tenants::text[], @run_ids::text[], @operations::text[], @payloads::text[],
			@fingerprints::text[], @max_attempts::int[], @deadlines::bigint[], @available::bigint[], @keys::text[],
			@expires::bigint[])
			AS m(tenant, run_id, operation, payload, fingerprint, max_attempts, deadline_at, available_at,
				idempotency_key, expires_at)
	), r AS (
		INSERT INTO runs (` + admittedRunColumns + `)
		SELECT tenant, run_id, operation, payload, fingerprint, max_attempts, @now, deadline_at, NULL, 0,
			idempotency_key, expires_at FROM m
		RETURNING 1
	), j AS (
		INSERT INTO jobs (` + queuedJobColumns + `)
		SELECT tenant, run_id, operation, 'queued', available_at, 0, 0, max_attempts, 'queued', 1, 1 FROM m
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM j)`

	// lockDecidedRuns locks the stored runs a bulk admission that writes
	// decided members from, one run at a time in the order given (the
	// caller sorts them by (tenant, run id), see admissionWrite.decided),
	// each in its mode m.mode (lockMode), and counts those it locked; fewer
	// is a race: a purge deleted one since it was read, a record replayed
	// or conflicted with is gone, an expired one was deleted first.
	//   - 0 (lockTaken), a run id taken: FOR KEY SHARE, which only a
	//     purge's FOR UPDATE (lockPurged) waits for.
	//   - 1 (lockRecord), a live record replayed or conflicted with, still
	//     held (heldRecord): FOR SHARE, which also keeps the record from
	//     being deleted (an admission past its expiry, PurgeIdempotency).
	//   - 2 (lockExpired), an expired record the batch replaces (the guard:
	//     idempotency_expires_at <= @now): FOR NO KEY UPDATE, the lock of
	//     its deletion (deleteExpiredRecords), taken here in order.
	//   - 3 (lockReplayed), a live record replayed: as 1, and FOR NO KEY
	//     UPDATE on the run's job row, locked before its run row (its
	//     locking clause comes first, which orders them: the order of
	//     lockPurged, TestBulkReplayLocksJobBeforeRun), so that the run the
	//     batch returns stays as it is read after this until the commit. A
	//     claim skips such a job (SKIP LOCKED); a worker's write to it waits
	//     for the batch, queued fairly with other batches replaying it
	//     (under a shared lock, overlapping batches could keep it waiting).
	// Only 3 touches a job row, and so a worker: workers write job rows.
	lockDecidedRuns = `SELECT count(*) FROM unnest(@tenants::text[], @run_ids::text[], @operations::text[], @keys::text[],
			@expires::bigint[], @modes::int[]) AS m(tenant, run_id, operation, idempotency_key, expires_at, mode)
		CROSS JOIN LATERAL (
			SELECT FROM (SELECT FROM runs AS r WHERE m.mode = 0 AND r.tenant = m.tenant AND r.run_id = m.run_id
				OFFSET 0 FOR KEY SHARE) AS taken
			UNION ALL
			SELECT FROM (SELECT FROM runs AS r WHERE m.mode = 1 AND r.tenant = m.tenant AND r.run_id = m.run_id
				AND ` + heldRecord + ` OFFSET 0 FOR SHARE) AS record
			UNION ALL
			SELECT FROM (SELECT FROM runs AS r WHERE m.mode = 2 AND r.tenant = m.tenant AND r.run_id = m.run_id
				AND r.operation = m.operation AND r.idempotency_key = m.idempotency_key AND r.idempotency_expires_at <= @now
				OFFSET 0 FOR NO KEY UPDATE) AS expired
			UNION ALL
			SELECT FROM (SELECT FROM jobs AS j JOIN runs AS r ON r.tenant = j.tenant AND r.run_id = j.run_id
				WHERE m.mode = 3 AND j.tenant = m.tenant AND j.run_id = m.run_id AND r.tenant = m.tenant AND r.run_id = m.run_id
				AND ` + heldRecord + ` OFFSET 0 FOR NO KEY UPDATE OF j FOR SHARE OF r) AS replayed) AS k`

	// holdScopes inserts a placeholder run per scope (@tenants, @operations,
	// @keys, its id @run_ids: holdArgs) whose record holds the scope in
	// runs_idempotency until releaseScopes deletes it, before the commit; it
	// is never visible to another transaction. The guard is the insert
	// itself: ON CONFLICT DO NOTHING inserts no placeholder for a scope that
	// has a record or another holder (after waiting for the transaction of
	// one being written), and an admission writing the scope's record
	// meanwhile waits for this transaction. It returns the ctids inserted.
	holdScopes = `INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at,
			idempotency_key, idempotency_expires_at)
		SELECT tenant, run_id, operation, '{}', '', 1, 0, 1, idempotency_key, 1
		FROM unnest(@tenants::text[], @run_ids::text[], @operations::text[], @keys::text[]) AS m(tenant, run_id, operation, idempotency_key)
		ON CONFLICT DO NOTHING
		RETURNING ctid`
	// releaseScopes deletes holdScopes' placeholders, by the ctids it
	// returned (this transaction's own rows: nothing else can move them).
	releaseScopes = `DELETE FROM runs WHERE ctid = ANY (@ctids::tid[])`

	// deleteExpiredRecords deletes the expired records of the scopes a bulk
	// admission admits again (the guard: idempotency_expires_at <= @now), by
	// ctid (a TID scan, as purgeIdempotency). The rows are locked first, one
	// member at a time in the order given: the caller sorts the members by
	// their records' (tenant, run id), the order in which a purge locks run
	// rows (lockPurged), so the two cannot deadlock on them.
	deleteExpiredRecords = `UPDATE runs ` + clearRecord + ` WHERE ctid = ANY (ARRAY(
		SELECT k.ctid FROM unnest(@tenants::text[], @operations::text[], @keys::text[]) AS m(tenant, operation, idempotency_key)
		CROSS JOIN LATERAL (SELECT ctid FROM runs AS x
			WHERE x.tenant = m.tenant AND x.operation = m.operation AND x.idempotency_key = m.idempotency_key
			AND x.idempotency_expires_at <= @now OFFSET 0 FOR NO KEY UPDATE) AS k))`
)

// listRuns is ListRuns (spec.RunListing): the tenant's runs listed after
// the bound (below_at, below_id) and created at or after @from, newest
// first, matching the optional filters ("" for any), the first @limit of
// them. The row comparison reads runs_created backwards from the bound
// ((t, ”) bounds the runs created before t: ” is the least id); each run
// read meets its job by the job's key, in a lateral subquery that OFFSET 0
// keeps from being flattened into a join, so that no plan can read the
// tenant's jobs instead, and the order of the index is the order of the
// result (no sort).
const listRuns = `SELECT ` + runRow + ` FROM (
		SELECT * FROM runs
		WHERE tenant = @tenant AND (created_at, run_id) < (@below_at, @below_id) AND created_at >= @from
			AND (@operation::text = '' OR operation = @operation)
		ORDER BY created_at DESC, run_id DESC) AS r,
	LATERAL (SELECT * FROM jobs WHERE tenant = r.tenant AND run_id = r.run_id OFFSET 0) AS j
	WHERE (@state::text = '' OR j.run_state = @state)
	ORDER BY r.created_at DESC, r.run_id DESC
	LIMIT @limit`

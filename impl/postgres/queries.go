package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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
// flight: the plan test measured 10,000 filtered rows and 10,089 buffers for
// a one-job claim with 10,000 leases in flight, against a handful now.
type claimBranch struct {
	pred string // the branch's predicate
	at   string // the column that says since when its jobs are claimable
}

var (
	claimDue = claimBranch{
		pred: `tenant = @tenant AND state = 'queued' AND available_at <= @now AND attempts < max_attempts`,
		at:   "available_at"}
	claimExpired = claimBranch{
		pred: `tenant = @tenant AND state = 'leased' AND lease_expires_at <= @now
		AND available_at <= @now AND attempts < max_attempts`,
		at: "lease_expires_at"}
)

const jobColumns = `tenant, run_id, operation, state, available_at, lease_owner, lease_expires_at,
	lease_generation, attempts, max_attempts, last_error_code`

const runColumns = `tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
	max_attempts, error_code, result, created_at, deadline_at, replay_of, replay_depth`

const attemptColumns = `tenant, run_id, generation, number, worker, claimed_at, renewed_at, finished_at,
	outcome, error_code, error_class, retry_at`

const effectColumns = `tenant, run_id, step, effect_key, state, provider_ref, generation, updated_at`

const eventColumns = `tenant, run_id, seq, kind, at, payload`

const idempotencyColumns = `tenant, operation, idempotency_key, fingerprint, run_id, created_at, expires_at`

// claimStatement builds the claim: ONE statement that, in one round trip,
// picks up to @limit eligible jobs in claim order, locking each with SKIP
// LOCKED (a row another transaction holds is passed over, never waited
// for), leases them (generation+1, attempts+1), closes each superseded
// running attempt as expired, opens one attempt row per claimed job, moves
// queued runs to running, and returns the leases in claim order.
//
// Each branch takes up to @limit rows in its order with FOR NO KEY UPDATE
// SKIP LOCKED; "picked" keeps the first @limit of their union by (eligible
// since, run id), which is the first @limit eligible jobs. A branch row cut
// by that final LIMIT stays locked, unclaimed, until this transaction ends: a
// concurrent claim skips it meanwhile, which SKIP LOCKED allows anyway.
//
// Locking: FOR NO KEY UPDATE is the row lock an UPDATE that keeps the key
// takes anyway, so the pick and the update agree on the lock and FK checks
// (FOR KEY SHARE) are not blocked; it excludes every other writer of the job.
// The picked rows are locked before "claimed" can produce them, and
// "started" updates a run only for a claimed row, so the job lock is always
// taken before the run lock.
//
// The UPDATE repeats the predicate (the branches' disjunction): under READ
// COMMITTED a row that changed after the statement's snapshot is re-checked
// when it is locked, and the update must never trust the pick's view alone (a
// claim that does not re-check its state is the classic double-claim bug).
// Data-modifying CTEs all see the statement's snapshot, so the final SELECT
// reads the run's payload and deadline (which never change) from runs and
// everything else from "claimed".
func claimStatement(branches ...claimBranch) string {
	var b strings.Builder
	b.WriteString("WITH ")
	preds := make([]string, len(branches))
	for i, br := range branches {
		preds[i] = br.pred
		fmt.Fprintf(&b, `branch%d AS (
		SELECT run_id AS picked_run_id, %s AS picked_at FROM jobs
		WHERE %s
		ORDER BY %s, run_id
		LIMIT @limit
		FOR NO KEY UPDATE SKIP LOCKED
	), `, i, br.at, br.pred, br.at)
	}
	b.WriteString(`picked AS (
		SELECT picked_run_id, picked_at FROM (`)
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
		UPDATE jobs SET state = 'leased', lease_owner = @worker, lease_expires_at = @expires_at,
			lease_generation = lease_generation + 1, attempts = attempts + 1
		FROM picked
		WHERE run_id = picked_run_id AND ((` + strings.Join(preds, ") OR (") + `))
		RETURNING run_id AS claimed_run_id, picked_at, operation, lease_generation, attempts AS attempt_number, max_attempts
	), superseded AS (
		UPDATE attempts AS a SET outcome = 'expired', finished_at = @now
		FROM claimed AS c
		WHERE a.tenant = @tenant AND a.run_id = c.claimed_run_id
			AND a.generation = c.lease_generation - 1 AND a.outcome = 'running'
	), opened AS (
		INSERT INTO attempts (tenant, run_id, generation, number, worker, claimed_at, renewed_at, outcome)
		SELECT @tenant, claimed_run_id, lease_generation, attempt_number, @worker, @now, @now, 'running' FROM claimed
	), started AS (
		UPDATE runs AS r SET state = 'running', version = r.version + 1
		FROM claimed AS c
		WHERE r.tenant = @tenant AND r.run_id = c.claimed_run_id AND r.state = 'queued'
	)
	SELECT c.claimed_run_id, c.operation, c.lease_generation, c.attempt_number, c.max_attempts, r.payload, r.deadline_at
	FROM claimed AS c JOIN runs AS r ON r.tenant = @tenant AND r.run_id = c.claimed_run_id
	ORDER BY c.picked_at, c.claimed_run_id`)
	return b.String()
}

// planEachTime runs a statement with a plan made for its arguments and the
// tables' current sizes (pgx's unnamed statement), never with a cached
// generic plan. It is for the statements that take a batch of jobs (the
// claim, and CompleteBatch's lock and write). pgx prepares statements, and a
// connection switches a prepared statement to a generic plan after five
// executions, made with the table sizes of that moment and kept until the
// next ANALYZE. Made while the tables were small, those plans scanned them:
// a claim of 20 read 2,338 attempts pages once attempts had 80,000 rows
// (TestBatchPlansAfterGrowth), and the benchmark saw 12 ms claims. Planning
// each time costs about 0.3 ms of server CPU per claim (+8-11 % per job for
// single claims), a few µs per job of a batch. Single-row statements stay
// prepared, where planning would cost as much as running them; their plans
// rely on the statistics autovacuum keeps (README, PostgreSQL).
const planEachTime = pgx.QueryExecModeCacheDescribe

// claimJobs is the claim statement (see claimStatement).
var claimJobs = claimStatement(claimDue, claimExpired)

const (
	// lockJob takes the job row's lock before an operation on one run reads
	// its clock: every writer of a run (guarded writes, cancel, claim,
	// reap, replay of it) holds this lock, so they are serialized, and the
	// job is always locked before its run.
	lockJob = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = @tenant AND run_id = @run_id FOR NO KEY UPDATE`

	// lockAdmission serializes admissions of one idempotency scope (the key
	// is a hash of schema, tenant, operation and key; a collision only
	// serializes two unrelated admissions). Transaction-scoped: released at
	// commit or rollback.
	lockAdmission = `SELECT pg_advisory_xact_lock(hashtextextended(@scope, 0))`

	selectIdempotency = `SELECT fingerprint, run_id, expires_at FROM idempotency_keys
		WHERE tenant = @tenant AND operation = @operation AND idempotency_key = @key`
	deleteIdempotency = `DELETE FROM idempotency_keys
		WHERE tenant = @tenant AND operation = @operation AND idempotency_key = @key`
	// insertRun does nothing when the run id is taken (or, for a replay, the
	// original was already replayed): zero rows is already_exists. If the
	// conflicting row is not committed yet, PostgreSQL waits for its
	// transaction and decides on the outcome, so there is no race window.
	insertRun = `INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
		max_attempts, created_at, deadline_at, replay_of, replay_depth)
		VALUES (@tenant, @run_id, @operation, 'queued', 1, 1, @payload, @fingerprint,
		@max_attempts, @now, @deadline_at, @replay_of, @replay_depth)
		ON CONFLICT DO NOTHING
		RETURNING ` + runColumns
	insertEvent = `INSERT INTO run_events (tenant, run_id, seq, kind, at, payload)
		VALUES (@tenant, @run_id, @seq, @kind, @now, @payload)`
	insertJob = `INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts)
		VALUES (@tenant, @run_id, @operation, 'queued', @now, @generation, 0, @max_attempts)`
	// insertIdempotency cannot conflict while the admission lock is held;
	// DO NOTHING turns a violation of that reasoning into a typed error
	// instead of a raw unique violation.
	insertIdempotency = `INSERT INTO idempotency_keys (tenant, operation, idempotency_key, fingerprint, run_id, created_at, expires_at)
		VALUES (@tenant, @operation, @key, @fingerprint, @run_id, @now, @expires_at)
		ON CONFLICT DO NOTHING`

	// renewLease extends the lease, never past the run's deadline.
	renewLease = `UPDATE jobs SET lease_expires_at = @expires_at
		WHERE ` + leaseGuard + ` AND @expires_at <= (SELECT deadline_at FROM runs
			WHERE runs.tenant = jobs.tenant AND runs.run_id = jobs.run_id)`
	touchAttempt = `UPDATE attempts SET renewed_at = @now
		WHERE tenant = @tenant AND run_id = @run_id AND generation = @generation`

	// finishJob moves a leased job to a terminal state under the lease guard.
	finishJob = `UPDATE jobs SET state = @state, lease_owner = NULL, lease_expires_at = NULL,
		last_error_code = coalesce(@error_code, last_error_code)
		WHERE ` + leaseGuard
	requeueJob = `UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
		available_at = @available_at, last_error_code = @error_code
		WHERE ` + leaseGuard
	releaseJob = `UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
		available_at = @now, attempts = attempts - 1
		WHERE ` + leaseGuard
	selectGuarded = `SELECT attempts, max_attempts FROM jobs WHERE ` + leaseGuard

	// finishRun terminalizes a run and reserves the next event sequence. The
	// state predicate makes a second terminal transition impossible.
	finishRun = `UPDATE runs SET state = @state, version = version + 1, last_event_seq = last_event_seq + 1,
		error_code = @error_code, result = @result
		WHERE tenant = @tenant AND run_id = @run_id AND state NOT IN ('completed', 'failed', 'cancelled')
		RETURNING ` + runColumns
	finishAttempt = `UPDATE attempts SET outcome = @outcome, finished_at = @now, error_code = @error_code,
		error_class = @error_class, retry_at = @retry_at
		WHERE tenant = @tenant AND run_id = @run_id AND generation = @generation AND outcome = 'running'`

	// cancelJob ends any non-terminal job.
	cancelJob = `UPDATE jobs SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL
		WHERE tenant = @tenant AND run_id = @run_id AND state IN ('queued', 'leased')`

	// selectReapable picks and locks the reap victims; like the claim it
	// skips rows other transactions hold (jobs_reap serves the order).
	selectReapable = `SELECT run_id, lease_generation, lease_expires_at FROM jobs
		WHERE tenant = @tenant AND state = 'leased' AND lease_expires_at <= @now AND attempts >= max_attempts
		ORDER BY lease_expires_at, run_id LIMIT @limit
		FOR NO KEY UPDATE SKIP LOCKED`
	// reapJob re-checks the reap predicate for the generation it selected.
	reapJob = `UPDATE jobs SET state = 'dead', lease_owner = NULL, lease_expires_at = NULL, last_error_code = @error_code
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
	// holds one record) and cannot deadlock: an admission locks only its own
	// record, and purges lock theirs in one order. The rows are addressed by
	// ctid, which cannot change while this transaction holds their lock:
	// "ctid = ANY(ARRAY(…))" is a TID scan
	// whatever the planner estimates. The plain "key IN (subquery)" form
	// has a generic (cached) plan that seq-scans the table, because a
	// generic plan cannot see how small the LIMIT is (found by
	// TestPlansAtDepth).
	purgeIdempotency = `DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM idempotency_keys WHERE expires_at <= @now
		ORDER BY expires_at, tenant, operation, idempotency_key LIMIT @limit
		FOR UPDATE))`

	selectReplayOf = `SELECT run_id FROM runs WHERE tenant = @tenant AND replay_of = @run_id`

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

	selectRun     = `SELECT ` + runColumns + ` FROM runs WHERE tenant = @tenant AND run_id = @run_id`
	selectJob     = `SELECT ` + jobColumns + ` FROM jobs WHERE tenant = @tenant AND run_id = @run_id`
	selectOneEff  = `SELECT ` + effectColumns + ` FROM effects WHERE tenant = @tenant AND run_id = @run_id AND step = @step AND effect_key = @key`
	listEvents    = `SELECT ` + eventColumns + ` FROM run_events WHERE tenant = @tenant AND run_id = @run_id ORDER BY seq`
	listAttempts  = `SELECT ` + attemptColumns + ` FROM attempts WHERE tenant = @tenant AND run_id = @run_id ORDER BY generation`
	listEffects   = `SELECT ` + effectColumns + ` FROM effects WHERE tenant = @tenant AND run_id = @run_id ORDER BY step, effect_key`
	snapRuns      = `SELECT ` + runColumns + ` FROM runs ORDER BY tenant, run_id`
	snapEvents    = `SELECT ` + eventColumns + ` FROM run_events ORDER BY tenant, run_id, seq`
	snapJobs      = `SELECT ` + jobColumns + ` FROM jobs ORDER BY tenant, run_id`
	snapAttempts  = `SELECT ` + attemptColumns + ` FROM attempts ORDER BY tenant, run_id, generation`
	snapIdempKeys = `SELECT ` + idempotencyColumns + ` FROM idempotency_keys ORDER BY tenant, operation, idempotency_key`
	snapEffects   = `SELECT ` + effectColumns + ` FROM effects ORDER BY tenant, run_id, step, effect_key`
)

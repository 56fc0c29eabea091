package sqlite

// SQL for the SQLite store. Parameters are named (:name). Each guarded
// statement shows its predicate inline; the lease guard is written once, here.

// leaseGuard is the predicate of every write made under a lease (renew,
// complete, retry, fail, release, effect writes): the row is this tenant's
// run, leased, by this owner, at this generation, and not expired at :now.
// Zero matching rows means the caller's lease is not current; spec.LeaseError
// then names the precise reason from the row as it is.
const leaseGuard = `tenant = :tenant AND run_id = :run_id AND state = 'leased'
	AND lease_owner = :owner AND lease_generation = :generation AND lease_expires_at > :now`

// claimEligible is the claim predicate: available, within budget, and queued
// or leased with an expired lease.
const claimEligible = `tenant = :tenant AND available_at <= :now AND attempts < max_attempts
	AND (state = 'queued' OR (state = 'leased' AND lease_expires_at <= :now))`

const jobColumns = `tenant, run_id, operation, state, available_at, lease_owner, lease_expires_at,
	lease_generation, attempts, max_attempts, last_error_code`

const runColumns = `tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
	max_attempts, error_code, result, created_at, deadline_at, replay_of, replay_depth`

const attemptColumns = `tenant, run_id, generation, number, worker, claimed_at, renewed_at, finished_at,
	outcome, error_code, error_class, retry_at`

// queuedEventColumns are the columns of a run's run_queued event, derived
// from its run row (migration 0005): seq 1 at its creation, with a replay's
// audit payload or an admitted run's {}. They line up with eventColumns.
const queuedEventColumns = `tenant, run_id, 1, 'run_queued', created_at, coalesce(queued_payload, '{}')`

const eventColumns = `tenant, run_id, seq, kind, at, payload`

// idempotencyRecords are the idempotency records, derived from their run
// rows (migration 0006): an admission writes its record onto its run, whose
// tenant, operation, fingerprint and created_at are the record's, and a run
// whose idempotency_key is NULL holds none (a replay, or a record deleted).
// Read it as a table: SQLite flattens it into the reading statement, whose
// own conditions then choose the index.
const idempotencyRecords = `(SELECT tenant, operation, idempotency_key, fingerprint, run_id, created_at,
	idempotency_expires_at AS expires_at FROM runs WHERE idempotency_key IS NOT NULL)`

// recordExpired is the predicate of a run row whose record has expired at
// :now: a purge or a new admission of its scope may delete it (clearRecord).
// recordLive is that of a record that has not: a retried request must still
// get its run back, so neither the record nor its run may go.
const (
	recordExpired = `idempotency_key IS NOT NULL AND idempotency_expires_at <= :now`
	recordLive    = `idempotency_key IS NOT NULL AND idempotency_expires_at > :now`
)

// clearRecord deletes the record a run row holds.
const clearRecord = `idempotency_key = NULL, idempotency_expires_at = NULL`

const effectColumns = `tenant, run_id, step, effect_key, state, provider_ref, generation, updated_at`

const outboxColumns = `tenant, run_id, seq, message_id, subject, payload, generation, created_at, state, relay,
	claim_expires_at, claims, delivered_at`

// outboxClaimable is the claim predicate of an outbox message: pending, and
// never claimed or its claim expired at :now.
const outboxClaimable = `state = 'pending' AND (relay IS NULL OR claim_expires_at <= :now)`

const (
	// deleteIdempotency deletes the expired record of one scope, which a
	// new admission of the scope replaces.
	deleteIdempotency = `UPDATE runs SET ` + clearRecord + `
		WHERE tenant = :tenant AND operation = :operation AND idempotency_key = :key AND ` + recordExpired
	// insertRun inserts a queued run, whose row is also its run_queued
	// event (seq 1 at :now, migration 0005) and its idempotency record
	// (migration 0006): :queued_payload is a replay's audit payload, and
	// NULL for an admitted run, whose payload is {}; :key and :expires_at
	// are an admitted run's record, and NULL for a replay, which has none.
	insertRun = `INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
		max_attempts, created_at, deadline_at, replay_of, replay_depth, queued_payload, idempotency_key, idempotency_expires_at)
		VALUES (:tenant, :run_id, :operation, 'queued', 1, 1, :payload, :fingerprint,
		:max_attempts, :now, :deadline_at, :replay_of, :replay_depth, :queued_payload, :key, :expires_at)`
	// selectAdmissionRecords, with scopeRow per member, then
	// selectAdmissionTakenHead, with runIDRow per member, is an admission's
	// lookup of a piece of members (admit, multiRow): the records of their
	// scopes (runs_idempotency; INDEXED BY, since with no statistics SQLite
	// would rather read the tenant's primary key range), then which of their
	// proposed run ids are taken (the primary key). Rows: is-a-record,
	// tenant, operation, key, fingerprint, run id, expiry.
	selectAdmissionRecords = `SELECT 1, tenant, operation, idempotency_key, fingerprint, run_id, idempotency_expires_at
		FROM runs INDEXED BY runs_idempotency
		WHERE idempotency_key IS NOT NULL AND (tenant, operation, idempotency_key) IN (VALUES `
	scopeRow                 = `(?, ?, ?)`
	selectAdmissionTakenHead = `)
		UNION ALL
		SELECT 0, tenant, '', '', '', run_id, 0 FROM runs WHERE (tenant, run_id) IN (VALUES `
	runIDRow = `(?, ?)`
	// insertAdmittedRunsHead with admittedRunRow per member inserts the
	// runs of a piece of created members: insertRun's row for an
	// admission (no replay link, no audit payload), positional: tenant,
	// run id, operation, payload, fingerprint, max attempts, now,
	// deadline, key, record expiry. Every run id was checked free under
	// the writer lock, so a conflict is an error, never a refusal.
	insertAdmittedRunsHead = `INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
		max_attempts, created_at, deadline_at, replay_of, replay_depth, queued_payload, idempotency_key, idempotency_expires_at) VALUES `
	admittedRunRow = `(?, ?, ?, 'queued', 1, 1, ?, ?, ?, ?, ?, NULL, 0, NULL, ?, ?)`
	// insertAdmittedJobsHead with admittedJobRow per member inserts their
	// jobs, as insertJob at generation 0: tenant, run id, operation,
	// available at, max attempts.
	insertAdmittedJobsHead = `INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts) VALUES `
	admittedJobRow         = `(?, ?, ?, 'queued', ?, 0, 0, ?)`
	// insertEvent inserts a terminal event; run_events holds no other kind.
	insertEvent = `INSERT INTO run_events (tenant, run_id, seq, kind, at, payload)
		VALUES (:tenant, :run_id, :seq, :kind, :now, :payload)`
	insertJob = `INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts)
		VALUES (:tenant, :run_id, :operation, 'queued', :available_at, :generation, 0, :max_attempts)`

	// claimCandidates lists up to :limit eligible jobs in claim order
	// (SPEC.md: eligible since, then run id) from two branches, each read
	// from its partial index in that order and cut at :limit: queued jobs
	// by available_at (jobs_due), expired leases by their expiry (jobs_reap,
	// whose order is the branch's). Only the at most 2×:limit rows of the
	// branches are sorted, so a claim costs the same at any depth and
	// however many leases expired at once. Each branch names its index's
	// condition (state = ...): SQLite uses a partial index only then.
	// TestClaimPlanUsesIndex holds both branches to their indexes.
	claimCandidates = `SELECT run_id FROM (
			SELECT run_id, eligible_at FROM (SELECT run_id, available_at AS eligible_at FROM jobs
				WHERE tenant = :tenant AND state = 'queued' AND available_at <= :now AND attempts < max_attempts
				ORDER BY available_at, run_id LIMIT :limit)
			UNION ALL
			SELECT run_id, eligible_at FROM (SELECT run_id, lease_expires_at AS eligible_at FROM jobs
				WHERE tenant = :tenant AND state = 'leased' AND lease_expires_at <= :now
					AND available_at <= :now AND attempts < max_attempts
				ORDER BY lease_expires_at, run_id LIMIT :limit))
		ORDER BY eligible_at, run_id LIMIT :limit`
	// claimJob leases one candidate. It repeats the eligibility predicate
	// so that the update never trusts the candidate list alone.
	claimJob = `UPDATE jobs SET state = 'leased', lease_owner = :worker, lease_expires_at = :expires_at,
		lease_generation = lease_generation + 1, attempts = attempts + 1
		WHERE run_id = :run_id AND ` + claimEligible + `
		RETURNING lease_generation, attempts`
	closeSupersededAttempt = `UPDATE attempts SET outcome = 'expired', finished_at = :now
		WHERE tenant = :tenant AND run_id = :run_id AND generation = :generation AND outcome = 'running'`
	insertAttempt = `INSERT INTO attempts (tenant, run_id, generation, number, worker, claimed_at, renewed_at, outcome)
		VALUES (:tenant, :run_id, :generation, :number, :worker, :now, :now, 'running')`
	markRunRunning = `UPDATE runs SET state = 'running', version = version + 1
		WHERE tenant = :tenant AND run_id = :run_id AND state = 'queued'`

	// renewLease extends the lease, never past the run's deadline.
	renewLease = `UPDATE jobs SET lease_expires_at = :expires_at
		WHERE ` + leaseGuard + ` AND :expires_at <= (SELECT deadline_at FROM runs
			WHERE runs.tenant = jobs.tenant AND runs.run_id = jobs.run_id)`
	touchAttempt = `UPDATE attempts SET renewed_at = :now
		WHERE tenant = :tenant AND run_id = :run_id AND generation = :generation`

	// finishJob moves a leased job to a terminal state under the lease guard.
	finishJob = `UPDATE jobs SET state = :state, lease_owner = NULL, lease_expires_at = NULL,
		last_error_code = coalesce(:error_code, last_error_code)
		WHERE ` + leaseGuard
	requeueJob = `UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
		available_at = :available_at, last_error_code = :error_code
		WHERE ` + leaseGuard
	releaseJob = `UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
		available_at = :now, attempts = attempts - 1
		WHERE ` + leaseGuard
	selectGuarded = `SELECT attempts, max_attempts FROM jobs WHERE ` + leaseGuard

	// finishRun terminalizes a run and reserves the next event sequence. The
	// state predicate makes a second terminal transition impossible.
	finishRun = `UPDATE runs SET state = :state, version = version + 1, last_event_seq = last_event_seq + 1,
		error_code = :error_code, result = :result
		WHERE tenant = :tenant AND run_id = :run_id AND state NOT IN ('completed', 'failed', 'cancelled')
		RETURNING last_event_seq`
	finishAttempt = `UPDATE attempts SET outcome = :outcome, finished_at = :now, error_code = :error_code,
		error_class = :error_class, retry_at = :retry_at
		WHERE tenant = :tenant AND run_id = :run_id AND generation = :generation AND outcome = 'running'`

	// cancelJob ends any non-terminal job.
	cancelJob = `UPDATE jobs SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL
		WHERE tenant = :tenant AND run_id = :run_id AND state IN ('queued', 'leased')`

	selectReapable = `SELECT run_id, lease_generation FROM jobs
		WHERE tenant = :tenant AND state = 'leased' AND lease_expires_at <= :now AND attempts >= max_attempts
		ORDER BY lease_expires_at, run_id LIMIT :limit`
	// reapJob re-checks the reap predicate for the generation it selected.
	reapJob = `UPDATE jobs SET state = 'dead', lease_owner = NULL, lease_expires_at = NULL, last_error_code = :error_code
		WHERE tenant = :tenant AND run_id = :run_id AND state = 'leased' AND lease_generation = :generation
		AND lease_expires_at <= :now AND attempts >= max_attempts`

	// purgeIdempotency deletes up to :limit expired records, oldest expiry
	// first, then by scope, as read from runs_idempotency_expiry.
	purgeIdempotency = `UPDATE runs SET ` + clearRecord + ` WHERE (tenant, run_id) IN (
		SELECT tenant, run_id FROM runs WHERE ` + recordExpired + `
		ORDER BY idempotency_expires_at, tenant, operation, idempotency_key LIMIT :limit)`

	// runRetired is the retention predicate for one run of the tenant, e
	// its terminal event and r its run: it finished by :retired_by, it
	// holds no live idempotency record (recordLive, of r: run_events has no
	// such columns) and none of its outbox messages is pending (it would be
	// lost).
	runRetired = `e.tenant = :tenant AND e.kind IN ('run_completed', 'run_failed', 'run_cancelled') AND e.at <= :retired_by
		AND NOT (` + recordLive + `)
		AND NOT EXISTS (SELECT 1 FROM outbox AS o
			WHERE o.tenant = e.tenant AND o.run_id = e.run_id AND o.state = 'pending')`
	// selectRetiredLeaves lists the tenant's retired runs that nobody
	// replayed (the leaves of their lineages) in (finished, run id) order,
	// after the cursor (:after_at, :after_id), from run_events_finished.
	selectRetiredLeaves = `SELECT e.run_id, coalesce(r.replay_of, ''), e.at FROM run_events AS e
		JOIN runs AS r ON r.tenant = e.tenant AND r.run_id = e.run_id
		WHERE ` + runRetired + ` AND (e.at, e.run_id) > (:after_at, :after_id)
			AND NOT EXISTS (SELECT 1 FROM runs AS x WHERE x.tenant = e.tenant AND x.replay_of = e.run_id)
		ORDER BY e.at, e.run_id LIMIT :limit`
	// selectRetiredRun returns the original of run :run_id if the run is
	// retired, and no row if it is not.
	selectRetiredRun = `SELECT coalesce(r.replay_of, '') FROM run_events AS e
		JOIN runs AS r ON r.tenant = e.tenant AND r.run_id = e.run_id
		WHERE ` + runRetired + ` AND e.run_id = :run_id`
	// The rows of one purged run, children first. A pending outbox message
	// is never deleted: the run delete would then fail on its foreign key.
	// The run's record, if any, goes with its row, and only an expired one:
	// deleteRun deletes no run that holds a live record, which PurgeRuns
	// reports as the invariant broken (runRetired said it was retired).
	deleteRunOutbox   = `DELETE FROM outbox WHERE tenant = :tenant AND run_id = :run_id AND state = 'delivered'`
	deleteRunEffects  = `DELETE FROM effects WHERE tenant = :tenant AND run_id = :run_id`
	deleteRunAttempts = `DELETE FROM attempts WHERE tenant = :tenant AND run_id = :run_id`
	deleteRunJob      = `DELETE FROM jobs WHERE tenant = :tenant AND run_id = :run_id`
	deleteRunEvents   = `DELETE FROM run_events WHERE tenant = :tenant AND run_id = :run_id`
	deleteRun         = `DELETE FROM runs WHERE tenant = :tenant AND run_id = :run_id AND NOT (` + recordLive + `)`

	// selectRunEvents lists a run's events in seq order (?1 the tenant, ?2
	// the run id): its run_queued event from its run row, then its
	// terminal event, if any, from run_events.
	selectRunEvents = `SELECT ` + queuedEventColumns + ` FROM runs WHERE tenant = ?1 AND run_id = ?2
		UNION ALL
		SELECT ` + eventColumns + ` FROM run_events WHERE tenant = ?1 AND run_id = ?2
		ORDER BY 3`
	// selectAllEvents lists every event in (tenant, run id, seq) order, as
	// selectRunEvents does for one run.
	selectAllEvents = `SELECT ` + queuedEventColumns + ` FROM runs
		UNION ALL
		SELECT ` + eventColumns + ` FROM run_events
		ORDER BY 1, 2, 3`

	// selectAllIdempotency lists every record in scope order
	// (runs_idempotency's).
	selectAllIdempotency = `SELECT tenant, operation, idempotency_key, fingerprint, run_id, created_at, expires_at
		FROM ` + idempotencyRecords + ` ORDER BY tenant, operation, idempotency_key`

	selectReplayOf = `SELECT run_id FROM runs WHERE tenant = :tenant AND replay_of = :run_id`

	// nextOutboxSeq is the seq of a run's next outbox message.
	nextOutboxSeq = `SELECT coalesce(max(seq), 0) + 1 FROM outbox WHERE tenant = :tenant AND run_id = :run_id`
	insertOutbox  = `INSERT INTO outbox (tenant, run_id, seq, message_id, subject, payload, generation, created_at, state, claims)
		VALUES (:tenant, :run_id, :seq, :message_id, :subject, :payload, :generation, :now, 'pending', 0)`
	// selectClaimableOutbox and selectClaimableOutboxOfTenant list up to
	// :limit claimable messages in claim order (created_at, tenant, run_id,
	// seq), each from its index (outbox_pending, outbox_pending_tenant).
	selectClaimableOutbox = `SELECT tenant, run_id, seq FROM outbox WHERE ` + outboxClaimable + `
		ORDER BY created_at, tenant, run_id, seq LIMIT :limit`
	selectClaimableOutboxOfTenant = `SELECT tenant, run_id, seq FROM outbox WHERE tenant = :tenant AND ` + outboxClaimable + `
		ORDER BY created_at, run_id, seq LIMIT :limit`
	// claimOutbox claims one candidate, repeating the claim predicate.
	claimOutbox = `UPDATE outbox SET relay = :relay, claim_expires_at = :expires_at, claims = claims + 1
		WHERE tenant = :tenant AND run_id = :run_id AND seq = :seq AND ` + outboxClaimable + `
		RETURNING ` + outboxColumns
	// markDelivered marks one pending message delivered, whoever claimed it.
	markDelivered = `UPDATE outbox SET state = 'delivered', delivered_at = :now, relay = NULL, claim_expires_at = NULL
		WHERE tenant = :tenant AND run_id = :run_id AND seq = :seq AND state = 'pending'`

	selectEffect = `SELECT state FROM effects WHERE tenant = :tenant AND run_id = :run_id AND step = :step AND effect_key = :key`
	insertEffect = `INSERT INTO effects (tenant, run_id, step, effect_key, state, generation, updated_at)
		VALUES (:tenant, :run_id, :step, :key, 'reserved', :generation, :now)`
	reReserveEffect = `UPDATE effects SET state = 'reserved', provider_ref = '', generation = :generation, updated_at = :now
		WHERE tenant = :tenant AND run_id = :run_id AND step = :step AND effect_key = :key AND state = 'failed'`
	// recordEffect: only the generation that reserved the row records its outcome.
	recordEffect = `UPDATE effects SET state = :state, provider_ref = :provider_ref, updated_at = :now
		WHERE tenant = :tenant AND run_id = :run_id AND step = :step AND effect_key = :key
		AND state = 'reserved' AND generation = :generation`
	// reconcileEffect: only an unknown or reserved row (whoever reserved it:
	// the call may have happened) is resolved by the current generation.
	reconcileEffect = `UPDATE effects SET state = :state, provider_ref = :provider_ref, generation = :generation, updated_at = :now
		WHERE tenant = :tenant AND run_id = :run_id AND step = :step AND effect_key = :key
		AND state IN ('unknown', 'reserved')`
)

// listRuns is ListRuns (spec.RunListing): the tenant's runs listed after
// the bound (below_at, below_id) and created at or after :from, newest
// first, matching the optional filters ("" for any), the first :limit of
// them. The row comparison reads runs_created backwards from the bound;
// (t, ”) bounds the runs created before t (” is the least id).
const listRuns = `SELECT ` + runColumns + ` FROM runs
	WHERE tenant = :tenant AND (created_at, run_id) < (:below_at, :below_id) AND created_at >= :from
		AND (:state = '' OR state = :state) AND (:operation = '' OR operation = :operation)
	ORDER BY created_at DESC, run_id DESC
	LIMIT :limit`

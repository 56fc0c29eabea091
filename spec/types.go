package spec

// RunState is the user-visible state of a run.
type RunState string

const (
	RunQueued    RunState = "queued"    // admitted, never claimed
	RunRunning   RunState = "running"   // claimed at least once, not terminal
	RunCompleted RunState = "completed" // terminal: a current lease completed it
	RunFailed    RunState = "failed"    // terminal: its job is dead
	RunCancelled RunState = "cancelled" // terminal: cancelled before completion
)

// Terminal reports whether no further transition is allowed.
func (s RunState) Terminal() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// JobState is the operational state of a run's job.
type JobState string

const (
	JobQueued    JobState = "queued"    // claimable once available_at <= now
	JobLeased    JobState = "leased"    // owned until lease_expires_at
	JobCompleted JobState = "completed" // terminal, run completed
	JobDead      JobState = "dead"      // terminal, run failed
	JobCancelled JobState = "cancelled" // terminal, run cancelled
)

// Terminal reports whether the job can never be claimed again.
func (s JobState) Terminal() bool {
	return s == JobCompleted || s == JobDead || s == JobCancelled
}

// RunStateFor returns the run state a terminal job state implies, or "" for
// a non-terminal job state.
func RunStateFor(s JobState) RunState {
	switch s {
	case JobCompleted:
		return RunCompleted
	case JobDead:
		return RunFailed
	case JobCancelled:
		return RunCancelled
	}
	return ""
}

// EventKind names a run event.
type EventKind string

const (
	EventRunQueued    EventKind = "run_queued"    // always sequence 1, exactly once
	EventRunCompleted EventKind = "run_completed" // terminal
	EventRunFailed    EventKind = "run_failed"    // terminal
	EventRunCancelled EventKind = "run_cancelled" // terminal
)

// Terminal reports whether the event ends the run.
func (k EventKind) Terminal() bool {
	return k == EventRunCompleted || k == EventRunFailed || k == EventRunCancelled
}

// Run is the run projection.
type Run struct {
	Tenant    string   `json:"tenant"`
	ID        string   `json:"run_id"`
	Operation string   `json:"operation"`
	State     RunState `json:"state"`
	// Version rises by one on every change to the run row; cancel and complete
	// are compare-and-set on it.
	Version int64 `json:"version"`
	// LastSeq is the sequence of the run's last event.
	LastSeq int64 `json:"last_seq"`
	// Payload is the request payload in RFC 8785 canonical form.
	Payload string `json:"payload"`
	// Fingerprint is the versioned request fingerprint (see Fingerprint).
	Fingerprint string `json:"fingerprint"`
	MaxAttempts int    `json:"max_attempts"`
	// ErrorCode is the failure code (failed) or the cancel reason (cancelled).
	ErrorCode string `json:"error_code"`
	// Result is the canonical JSON result of a completed run, else "".
	Result     string `json:"result"`
	CreatedAt  int64  `json:"created_at"`
	DeadlineAt int64  `json:"deadline_at"` // no lease is renewed past this time
	// ReplayOf is the id of the dead run this run replays, else "".
	ReplayOf    string `json:"replay_of"`
	ReplayDepth int    `json:"replay_depth"` // 0 for an original run; ReplayOf's depth + 1 for a replay
}

// Event is one entry in a run's append-only event log.
type Event struct {
	Tenant  string    `json:"tenant"`
	RunID   string    `json:"run_id"`
	Seq     int64     `json:"seq"` // contiguous from 1
	Kind    EventKind `json:"kind"`
	At      int64     `json:"at"`
	Payload string    `json:"payload"` // small canonical JSON object
}

// Job is the claimable unit of work for a run.
type Job struct {
	Tenant      string   `json:"tenant"`
	RunID       string   `json:"run_id"`
	Operation   string   `json:"operation"`
	State       JobState `json:"state"`
	AvailableAt int64    `json:"available_at"`
	// LeaseOwner and LeaseExpiresAt are set exactly when State is JobLeased
	// ("" and 0 otherwise).
	LeaseOwner     string `json:"lease_owner"`
	LeaseExpiresAt int64  `json:"lease_expires_at"`
	// Generation is the fencing token: +1 on every claim, never lowered.
	Generation    int64  `json:"generation"`
	Attempts      int    `json:"attempts"`
	MaxAttempts   int    `json:"max_attempts"`
	LastErrorCode string `json:"last_error_code"`
}

// AttemptOutcome says how an attempt ended.
type AttemptOutcome string

const (
	AttemptRunning   AttemptOutcome = "running"   // still the current lease
	AttemptCompleted AttemptOutcome = "completed" // completed the run
	AttemptRetried   AttemptOutcome = "retried"   // retryable failure, job requeued at RetryAt
	AttemptDead      AttemptOutcome = "dead"      // terminal failure or budget exhausted
	AttemptReleased  AttemptOutcome = "released"  // owner released it (shutdown); attempt refunded
	AttemptExpired   AttemptOutcome = "expired"   // lease expired and another claim took over
	AttemptCancelled AttemptOutcome = "cancelled" // run cancelled while leased
)

// ErrorClass classifies an attempt's failure.
type ErrorClass string

const (
	ClassNone      ErrorClass = ""
	ClassRetryable ErrorClass = "retryable" // Retry: may run again after a delay
	ClassTerminal  ErrorClass = "terminal"  // Fail: never retried
	ClassExpired   ErrorClass = "expired"   // lease expired with no budget left (Reap)
)

// Attempt is the history row of one claim, keyed by (run, generation).
type Attempt struct {
	Tenant     string         `json:"tenant"`
	RunID      string         `json:"run_id"`
	Generation int64          `json:"generation"`
	Number     int            `json:"number"` // the job's attempts count right after this claim
	Worker     string         `json:"worker"`
	ClaimedAt  int64          `json:"claimed_at"`
	RenewedAt  int64          `json:"renewed_at"`  // last successful renewal, or ClaimedAt
	FinishedAt int64          `json:"finished_at"` // 0 while running
	Outcome    AttemptOutcome `json:"outcome"`
	ErrorCode  string         `json:"error_code"`
	ErrorClass ErrorClass     `json:"error_class"`
	RetryAt    int64          `json:"retry_at"` // for AttemptRetried: when the job becomes available again
}

// IdempotencyRecord binds (tenant, operation, key) to one run and the
// fingerprint of the request that created it. It is live while now < ExpiresAt.
type IdempotencyRecord struct {
	Tenant      string `json:"tenant"`
	Operation   string `json:"operation"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"`
	RunID       string `json:"run_id"`
	CreatedAt   int64  `json:"created_at"`
	ExpiresAt   int64  `json:"expires_at"`
}

// EffectState is the state of an effect ledger row.
type EffectState string

const (
	EffectReserved  EffectState = "reserved"  // a generation is about to call out
	EffectSucceeded EffectState = "succeeded" // applied; never changes again
	EffectFailed    EffectState = "failed"    // definitely not applied; may be reserved again
	EffectUnknown   EffectState = "unknown"   // may have been applied; reconcile before repeating
)

// Effect is one row of the effect ledger, keyed by (run, step, key): the key
// is the idempotency key the caller passes to the external system.
type Effect struct {
	Tenant      string      `json:"tenant"`
	RunID       string      `json:"run_id"`
	Step        string      `json:"step"`
	Key         string      `json:"key"`
	State       EffectState `json:"state"`
	ProviderRef string      `json:"provider_ref"`
	Generation  int64       `json:"generation"` // the generation that last reserved or resolved the row
	UpdatedAt   int64       `json:"updated_at"`
}

// EffectDecision tells the caller of ReserveEffect what to do next.
type EffectDecision string

const (
	// DecisionProceed: the caller's generation now holds a fresh reservation;
	// call out once, then RecordEffect.
	DecisionProceed EffectDecision = "proceed"
	// DecisionDone: the effect already succeeded; do not call out again; use
	// Effect.ProviderRef.
	DecisionDone EffectDecision = "done"
	// DecisionReconcile: an earlier call may have been applied (state unknown,
	// or reserved — by an older generation, or by the caller itself, which may
	// have called out before its record was lost). Ask the external system,
	// then ReconcileEffect. Never repeat blindly.
	DecisionReconcile EffectDecision = "reconcile"
)

// Lease is what a claim hands to a worker.
type Lease struct {
	Tenant      string `json:"tenant"`
	RunID       string `json:"run_id"`
	Operation   string `json:"operation"`
	Owner       string `json:"owner"`
	Generation  int64  `json:"generation"`
	ExpiresAt   int64  `json:"expires_at"`
	Attempt     int    `json:"attempt"` // the job's attempts count after this claim
	MaxAttempts int    `json:"max_attempts"`
	Payload     string `json:"payload"`
	DeadlineAt  int64  `json:"deadline_at"`
}

// Ref returns the identity that every guarded write presents.
func (l Lease) Ref() LeaseRef {
	return LeaseRef{Tenant: l.Tenant, RunID: l.RunID, Owner: l.Owner, Generation: l.Generation}
}

// LeaseRef identifies one attempt: only the current, unexpired (owner,
// generation) of the run's job may write through it.
type LeaseRef struct {
	Tenant     string `json:"tenant"`
	RunID      string `json:"run_id"`
	Owner      string `json:"owner"`
	Generation int64  `json:"generation"`
}

// Snapshot is every row of a store, in canonical order, for verification
// (conformance, the harness's table scans, audits). Order: runs, jobs by
// (tenant, run id); events by (tenant, run id, seq); attempts by (tenant, run
// id, generation); idempotency by (tenant, operation, key); effects by (tenant,
// run id, step, key); outbox messages by (tenant, run id, seq).
type Snapshot struct {
	Runs        []Run               `json:"runs"`
	Events      []Event             `json:"events"`
	Jobs        []Job               `json:"jobs"`
	Attempts    []Attempt           `json:"attempts"`
	Idempotency []IdempotencyRecord `json:"idempotency"`
	Effects     []Effect            `json:"effects"`
	Outbox      []OutboxMessage     `json:"outbox"`
}

package spec

import "context"

// Store is the durable job contract. Every method is one transaction: it
// either applies all of its writes or none. Every writing method reads the
// store's clock exactly once, after it has taken whatever lock orders it
// against other writers, and uses that single "now" for every comparison and
// timestamp; reads never read the clock.
//
// Errors are *Error values with a stable Code; SPEC.md gives, per method, the
// order in which the checks are made and so which code wins when several apply.
type Store interface {
	// CreateRun admits a run idempotently. With no live record for (tenant,
	// operation, key) it commits the run (queued), its run_queued event
	// (seq 1), its job (queued, available now or at the request's schedule,
	// generation 0) and the record, together. With a live record of the
	// same fingerprint it returns the original run with Replayed set and
	// writes nothing. With a live record of another fingerprint it returns
	// CodeIdempotencyConflict. If the proposed run id is taken for the
	// tenant: CodeAlreadyExists, nothing written.
	CreateRun(ctx context.Context, req CreateRunRequest) (CreateRunResult, error)

	// Claim leases up to req.Limit eligible jobs of req.Tenant, in (available_at,
	// run id) order: available_at <= now, attempts < max_attempts, and queued
	// or leased with lease_expires_at <= now. Each claimed job gets generation+1,
	// attempts+1, owner, expiry now+LeaseMs and a new attempt row; a superseded
	// attempt is closed as expired. An empty result is not an error. Under
	// concurrency a store may skip rows locked by others (SKIP LOCKED), so an
	// empty or partial result does not prove that no job was eligible.
	Claim(ctx context.Context, req ClaimRequest) ([]Lease, error)

	// Renew extends the caller's current lease to now+LeaseMs. Lease errors as
	// for every guarded write; CodeDeadlineExceeded if the new expiry would pass
	// the run's deadline.
	Renew(ctx context.Context, req RenewRequest) (Lease, error)

	// Complete finishes the run under the caller's current lease: job
	// completed, run completed with the result, run_completed event.
	Complete(ctx context.Context, req CompleteRequest) (Run, error)

	// Retry records a retryable failure. Below the budget (attempts <
	// max_attempts) the job is requeued with available_at = now + backoff
	// delay and the run stays running. At the budget the job becomes dead, the
	// run failed and run_failed is appended, in the same transaction.
	Retry(ctx context.Context, req RetryRequest) (Job, error)

	// Fail records a terminal failure: job dead, run failed, run_failed event.
	Fail(ctx context.Context, req FailRequest) (Run, error)

	// Cancel terminalizes a non-terminal run: job cancelled (its lease, if any,
	// ends), run cancelled, run_cancelled event. A terminal run yields
	// CodeAlreadyTerminal carrying the winner's state.
	Cancel(ctx context.Context, req CancelRequest) (Run, error)

	// Release gives a still-owned lease back (graceful shutdown): the job is
	// queued and available now, the attempt is refunded (attempts-1), and the
	// generation is kept.
	Release(ctx context.Context, req ReleaseRequest) (Job, error)

	// Reap terminalizes up to req.Limit jobs of req.Tenant whose lease expired
	// with no attempts left (they can never be claimed again): job dead, run
	// failed with code lease_expired, run_failed event. Returns their run ids in
	// (lease_expires_at, run id) order. Like Claim it may skip locked rows.
	// A run failed so may have called an external system before its worker
	// died: its effect-ledger rows (Effects) say reserved or unknown; resolve
	// them (ReconcileEffect) before acting on the failure, for example before
	// running the work again under a new run.
	Reap(ctx context.Context, req ReapRequest) ([]string, error)

	// GetRun, GetJob, Events, Attempts and Effects read one run's rows.
	// Another tenant's run is CodeNotFound.
	GetRun(ctx context.Context, tenant, runID string) (Run, error)
	GetJob(ctx context.Context, tenant, runID string) (Job, error)
	Events(ctx context.Context, tenant, runID string) ([]Event, error)
	Attempts(ctx context.Context, tenant, runID string) ([]Attempt, error)
	Effects(ctx context.Context, tenant, runID string) ([]Effect, error)

	// PurgeIdempotency deletes up to req.Limit records with expires_at <= now,
	// oldest first, and returns how many it deleted.
	PurgeIdempotency(ctx context.Context, req PurgeRequest) (int, error)

	// PurgeRuns applies the run retention policy to req.Tenant: it deletes
	// up to req.Limit replay lineages (a run that was never replayed is a
	// lineage of one) every run of which has been terminal for at least
	// Config.RunRetentionMs and is named by no live idempotency record,
	// oldest first, each run with its events, job, attempts, effects and
	// expired idempotency records. It returns the deleted run ids, each
	// lineage newest run first. With RunRetentionMs = 0 (retention off) it
	// deletes nothing. Exact under concurrency: it waits for rows others
	// hold rather than skipping them.
	PurgeRuns(ctx context.Context, req PurgeRunsRequest) ([]string, error)

	// Replay starts a new run from a failed (dead) run: same tenant,
	// operation, payload and budget, a fresh attempt budget, the job's
	// generation carried over (never lowered), ReplayOf linking to the original
	// and an audited run_queued event naming the actor. Each run may be replayed
	// once (CodeAlreadyExists) and a lineage at most Config.MaxReplays times
	// (CodeReplayLimit); a run that is not failed is CodeFailedPrecondition.
	Replay(ctx context.Context, req ReplayRequest) (Run, error)

	// ReserveEffect reserves (run, step, key) for the caller's current lease
	// before it calls an external system, and says whether to proceed, skip
	// (already succeeded) or reconcile first.
	ReserveEffect(ctx context.Context, req ReserveEffectRequest) (EffectReservation, error)

	// RecordEffect stores the outcome (succeeded, failed, unknown) of a call
	// the caller's generation reserved; anything else is CodeEffectConflict.
	RecordEffect(ctx context.Context, req RecordEffectRequest) (Effect, error)

	// ReconcileEffect resolves a row that is unknown or reserved (by any
	// generation) to succeeded or failed after the caller asked the external
	// system; a succeeded or failed row is CodeEffectConflict.
	ReconcileEffect(ctx context.Context, req ReconcileEffectRequest) (Effect, error)

	// ClaimOutbox claims up to req.Limit pending outbox messages (of
	// req.Tenant, or of every tenant) that no live claim holds, in
	// (created_at, tenant, run id, seq) order, for req.Relay until
	// now+LeaseMs, and returns them. Like Claim it may skip rows locked by
	// others. A message whose claim expired is claimable again: a relay that
	// died with it claimed is replaced by the next.
	ClaimOutbox(ctx context.Context, req ClaimOutboxRequest) ([]OutboxMessage, error)

	// MarkDelivered marks the named pending messages delivered (whoever
	// claimed them) and returns how many it marked; a message already
	// delivered, or not there, is left alone. Call it only after the
	// broker acknowledged the publish.
	MarkDelivered(ctx context.Context, req MarkDeliveredRequest) (int, error)

	// Snapshot returns every row in canonical order. It is for verification
	// and audits, not for hot paths.
	Snapshot(ctx context.Context) (Snapshot, error)

	// Close releases the store's connections.
	Close() error
}

package model

// bug selects a deliberately broken variant of the model. Only tests set it
// (through export_test.go): it exists to prove that Check, CheckStep and the
// explorer catch the classic mistakes of job queues. Check and CheckStep never
// read it: the judge must not share the defect it is judging.
type bug int

const (
	bugNone bug = iota
	// bugClaimKeepsGeneration: a claim does not raise the generation, so two
	// attempts share one fencing token (the ABA of ADR-013).
	bugClaimKeepsGeneration
	// bugRetrySkipsTerminalEvent: a retry at the budget kills the job and
	// fails the run but appends no run_failed event.
	bugRetrySkipsTerminalEvent
	// bugCompleteIgnoresGeneration: completion is guarded by owner, state and
	// expiry but not by generation (River's guard), so a stale attempt of the
	// same worker completes the newer one.
	bugCompleteIgnoresGeneration
	// bugCancelLeavesJobClaimable: cancel terminalizes the run but leaves its
	// job queued or leased.
	bugCancelLeavesJobClaimable
	// bugClaimStealsLiveLease: a claim takes leased jobs whose lease has not
	// expired.
	bugClaimStealsLiveLease
	// bugRetryResetsGeneration: a retry below the budget resets the
	// generation to 0 along with the lease.
	bugRetryResetsGeneration
	// bugReserveReopensSucceeded: ReserveEffect re-reserves a succeeded
	// effect (as it does a failed one), so the effect may be applied twice.
	bugReserveReopensSucceeded
	// bugReplayResetsGeneration: a replayed run's job starts again at
	// generation 0 instead of the original's.
	bugReplayResetsGeneration
	// bugPurgeRunsSplitsLineage: a run purge deletes a lineage's leaf and
	// keeps its original, which can then be replayed a second time.
	bugPurgeRunsSplitsLineage
	// bugPurgeRunsIgnoresRecords: a run purge deletes runs a live
	// idempotency record names (and the record with them), so a retried
	// request creates a second run.
	bugPurgeRunsIgnoresRecords
	// bugClaimOutboxTakesClaimed: a claim of outbox messages also takes
	// messages another relay's live claim holds.
	bugClaimOutboxTakesClaimed
	// bugPurgeRunsDropsPendingOutbox: a run purge deletes runs whose outbox
	// messages were never delivered (they are lost).
	bugPurgeRunsDropsPendingOutbox
	// bugReplayedCreateWritesOutbox: an idempotent replay of a create writes
	// the request's outbox messages again.
	bugReplayedCreateWritesOutbox
)

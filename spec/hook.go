package spec

import "context"

// Op names an operation of the contract: a Store method (or an optional
// capability's). Stores pass it to Hooks; the operation table, the model,
// the harness, scenario files and reports use the same names.
type Op string

const (
	OpCreateRun       Op = "create_run"
	OpClaim           Op = "claim"
	OpRenew           Op = "renew"
	OpComplete        Op = "complete"
	OpRetry           Op = "retry"
	OpFail            Op = "fail"
	OpCancel          Op = "cancel"
	OpRelease         Op = "release"
	OpReap            Op = "reap"
	OpPurge           Op = "purge_idempotency"
	OpReplay          Op = "replay"
	OpReserveEffect   Op = "reserve_effect"
	OpRecordEffect    Op = "record_effect"
	OpReconcileEffect Op = "reconcile_effect"

	// The reads: they read no clock, write nothing and call no hook.
	OpGetRun   Op = "get_run"
	OpGetJob   Op = "get_job"
	OpEvents   Op = "events"
	OpAttempts Op = "attempts"
	OpEffects  Op = "effects"
	OpSnapshot Op = "snapshot"
)

// HookPoint names a place inside a writing Store operation.
type HookPoint string

const (
	// BeforeCommit: every write of the operation is done inside its open
	// transaction; the commit has not been sent. An error from the hook rolls
	// the transaction back and is returned to the caller: nothing is written.
	BeforeCommit HookPoint = "before_commit"
	// AfterCommit: the transaction committed; the result has not been returned.
	// An error from the hook makes the store report CodeUnknownOutcome, which is
	// how a test reproduces "the connection died after COMMIT was sent".
	AfterCommit HookPoint = "after_commit"
)

// Hook is called by a store at each HookPoint of every writing operation. It
// may block (a barrier) until its context is done. Production stores run with
// no hook.
type Hook func(ctx context.Context, op Op, point HookPoint) error

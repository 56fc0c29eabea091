package spec

import "context"

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

// Hook is called by a store at each HookPoint of every writing operation,
// with the operation's name. It
// may block (a barrier) until its context is done. Production stores run with
// no hook.
type Hook func(ctx context.Context, op Op, point HookPoint) error

package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/spec"
)

// Causes. The worker cancels a handler's context with one of these as the
// cause (read it with context.Cause), and reports them in Result.Err.
var (
	// ErrLeaseLost: the store refused the lease (lost_lease): another
	// generation owns the run, or the lease expired. The worker publishes
	// nothing more for this generation.
	ErrLeaseLost = errors.New("worker: lease lost; another generation owns the run, publish nothing")
	// ErrLeaseExpiring: by the worker's own monotonic clock less than
	// Config.SafetyMargin of the lease was left (measured from when the last
	// claim or renewal that succeeded was sent), so the worker refused to
	// start an external call: the store may have expired the lease and
	// another generation may hold the run. It always comes with
	// ErrLeaseLost (errors.Is matches both); nothing more is published for
	// the generation and the lease recovers by expiry.
	ErrLeaseExpiring = errors.New("worker: too little of the lease is left by the worker's own clock")
	// ErrRunCancelled: the run was cancelled while this attempt ran (the
	// renewal said cancelled, or a NOTIFY announced the cancel of this
	// generation). The worker publishes nothing more.
	ErrRunCancelled = errors.New("worker: the run was cancelled")
	// ErrRunTerminal: the run was already terminal (already_terminal).
	ErrRunTerminal = errors.New("worker: the run is already terminal")
	// ErrRunDeadline: the lease cannot be renewed past the run's deadline
	// (deadline_exceeded). The handler should stop; the lease stays valid
	// until it expires, so a result returned in time is still published, and
	// an error fails the run with code deadline_exceeded.
	ErrRunDeadline = errors.New("worker: the run's deadline allows no more renewals")
	// ErrShutdown: the worker is shutting down. As a context cause it means
	// the grace period ended: the lease is being released and whatever the
	// handler returns is discarded. A handler that notices Job.Stopping may
	// return an error wrapping ErrShutdown to have its lease released (the
	// job requeued, its attempt refunded) instead of retried.
	ErrShutdown = errors.New("worker: shutting down")
	// ErrCompletedInTx is returned by a handler that completed its run
	// itself, inside its own transaction (postgres.Store.CompleteTx with
	// Job.CompleteRequest), and committed: the worker then writes nothing and
	// reports the run completed. Return it only after a successful commit.
	ErrCompletedInTx = errors.New("worker: the handler completed the run in its own transaction")
)

// Error codes the worker records when the handler gave none.
const (
	// CodeRetryable is the error code of Retryable errors without WithCode.
	CodeRetryable = "retryable"
	// CodeHandlerError is recorded for an unclassified handler error, which
	// is retried.
	CodeHandlerError = "handler_error"
	// CodeHandlerPanic is recorded for a handler that panicked; it is retried.
	CodeHandlerPanic = "handler_panic"
	// CodeEffectUnknown is recorded when an attempt ends with an effect in
	// the ledger whose outcome is unknown; the next attempt reconciles it
	// before anything is called again.
	CodeEffectUnknown = "effect_unknown"
	// CodeAmbiguous fails a run whose handler reported an ambiguous outcome
	// that the effect ledger does not hold: it cannot be reconciled, so it
	// is never retried blindly.
	CodeAmbiguous = "ambiguous_outcome"
	// CodeDeadlineExceeded fails a run whose handler failed after its lease
	// could no longer be renewed (the run's deadline).
	CodeDeadlineExceeded = "deadline_exceeded"
	// CodeTerminal replaces a Terminal code that is not a valid error code.
	CodeTerminal = "terminal_error"
	// CodeInvalidResult fails a run whose handler returned a result that is
	// not JSON (or is over spec.MaxPayloadBytes): no attempt could complete it.
	CodeInvalidResult = "invalid_result"
)

// RetryableError marks a failure that may succeed if tried again later: the
// worker calls Store.Retry, which requeues the job after the store's backoff
// (raised to RetryAfter, capped by the store) until the attempt budget is
// spent, when the run fails in the same transaction.
type RetryableError struct {
	Code       string        // the error code recorded; CodeRetryable when empty
	Err        error         // the cause (logged, never stored)
	RetryAfter time.Duration // a delay the dependency asked for (HTTP Retry-After); 0: none
}

// Retryable wraps err as a retryable failure; retryAfter is a delay the
// failing dependency asked for (0 for none).
func Retryable(err error, retryAfter time.Duration) *RetryableError {
	return &RetryableError{Code: CodeRetryable, Err: err, RetryAfter: retryAfter}
}

// WithCode sets the error code recorded for the attempt (a safe, short
// [a-z0-9_] name such as "rate_limited") and returns e.
func (e *RetryableError) WithCode(code string) *RetryableError {
	e.Code = code
	return e
}

func (e *RetryableError) Error() string {
	return fmt.Sprintf("retryable (%s): %v", e.Code, e.Err)
}

func (e *RetryableError) Unwrap() error { return e.Err }

// TerminalError marks a failure that retrying cannot fix (invalid input,
// a forbidden operation): the worker calls Store.Fail with Code at once.
type TerminalError struct {
	Code string // the safe error code stored on the run (CodeTerminal if invalid)
	Err  error  // the cause (logged, never stored)
}

// Terminal wraps err as a terminal failure recorded with code, which must be
// a safe error code ([a-z0-9_], at most 64 bytes, starting with a letter or
// digit); an invalid code is recorded as CodeTerminal.
func Terminal(code string, err error) *TerminalError { return &TerminalError{Code: code, Err: err} }

func (e *TerminalError) Error() string { return fmt.Sprintf("terminal (%s): %v", e.Code, e.Err) }

func (e *TerminalError) Unwrap() error { return e.Err }

// AmbiguousError marks an outcome that is unknown: an external effect may or
// may not have happened (a timeout after the request was sent).
//
// Returned by Effect.Call it makes Job.Effect record the ledger row as
// unknown, and Job.Effect then returns an AmbiguousError naming that row
// (Step and Key set). A handler returning such an error gets its job retried
// (code CodeEffectUnknown): the next attempt's Job.Effect reconciles the row
// through Effect.Status before anything is called again. An AmbiguousError
// without Step and Key (the ledger knows nothing) cannot be reconciled, so
// the worker never retries it: the run fails with CodeAmbiguous.
type AmbiguousError struct {
	Err       error
	Step, Key string // the effect-ledger row left unknown or reserved, when known
}

// Ambiguous wraps err as an ambiguous outcome.
func Ambiguous(err error) *AmbiguousError { return &AmbiguousError{Err: err} }

func (e *AmbiguousError) Error() string {
	if e.Step != "" {
		return fmt.Sprintf("ambiguous (effect %s/#%s unresolved): %v", e.Step, spec.ShortHash(e.Key), e.Err)
	}
	return fmt.Sprintf("ambiguous: %v", e.Err)
}

func (e *AmbiguousError) Unwrap() error { return e.Err }

// fenceError is a handler-context cause: one of the sentinels above, with
// the store error that decided it.
type fenceError struct {
	reason error // ErrLeaseLost, ErrRunCancelled, ErrRunTerminal, ErrShutdown
	cause  error // the store's *spec.Error, or nil
}

func (e *fenceError) Error() string {
	if e.cause == nil {
		return e.reason.Error()
	}
	return e.reason.Error() + ": " + e.cause.Error()
}

func (e *fenceError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.reason}
	}
	return []error{e.reason, e.cause}
}

// fenceFor maps a store refusal of the attempt's lease to its fence reason,
// or returns nil when err is no such refusal.
func fenceFor(err error) error {
	switch spec.CodeOf(err) {
	case spec.CodeLostLease:
		return &fenceError{reason: ErrLeaseLost, cause: err}
	case spec.CodeCancelled:
		return &fenceError{reason: ErrRunCancelled, cause: err}
	case spec.CodeAlreadyTerminal:
		return &fenceError{reason: ErrRunTerminal, cause: err}
	}
	return nil
}

// decisionKind is what the worker does with a handler's return.
type decisionKind int

const (
	decideComplete decisionKind = iota
	decideRetry
	decideFail
	decideRelease   // the handler stopped for shutdown
	decideNothing   // the store already refused this lease: publish nothing
	decideCompleted // the handler completed the run itself (CompleteTx)
)

func (k decisionKind) String() string {
	return [...]string{"complete", "retry", "fail", "release", "nothing", "completed"}[k]
}

// decision is the classification of a handler's return.
type decision struct {
	kind       decisionKind
	code       string        // retry and fail
	retryAfter time.Duration // retry
	fence      error         // nothing: the fence reason
	why        string        // a few words for the log
}

// classify decides what a handler's error means. handlerCause is the
// cause of the handler's context (nil while it is live).
//
//   - nil: complete.
//   - ErrCompletedInTx: the handler completed the run: nothing to write.
//   - ErrShutdown: release the lease.
//   - a context error after the renewal hit the run's deadline: fail
//     (CodeDeadlineExceeded).
//   - a store refusal of the lease anywhere in the chain (lost_lease,
//     cancelled, already_terminal, from an effect write or CompleteTx inside
//     the handler): publish nothing.
//   - *TerminalError: fail with its code; *RetryableError: retry;
//     *AmbiguousError: retry when the ledger holds the effect, else fail
//     (CodeAmbiguous). The outermost of these in the chain wins.
//   - another *spec.Error from the store inside the handler: unavailable and
//     unknown_outcome are retried with their code; any other (invalid
//     argument, effect conflict, not found) is a bug retrying cannot fix:
//     fail with its code.
//   - anything else: retry with CodeHandlerError.
func classify(err error, handlerCause error) decision {
	if err == nil {
		return decision{kind: decideComplete, why: "handler succeeded"}
	}
	if errors.Is(err, ErrCompletedInTx) {
		return decision{kind: decideCompleted, why: "handler completed the run in its transaction"}
	}
	if errors.Is(err, ErrShutdown) {
		return decision{kind: decideRelease, why: "handler stopped for shutdown"}
	}
	if errors.Is(handlerCause, ErrRunDeadline) && (errors.Is(err, context.Canceled) || errors.Is(err, ErrRunDeadline)) {
		return decision{kind: decideFail, code: CodeDeadlineExceeded, why: "handler stopped at the run's deadline"}
	}
	// A refused lease anywhere in the chain ends publishing, whatever the
	// handler made of it.
	if f := fenceFor(err); f != nil {
		return decision{kind: decideNothing, fence: f, why: "the store refused this lease"}
	}
	// The outermost classification wins: a handler may wrap a store error
	// (or an inner classification) in its own verdict.
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch x := e.(type) {
		case *TerminalError:
			code := x.Code
			if spec.CheckErrorCode("error code", code) != nil {
				code = CodeTerminal
			}
			return decision{kind: decideFail, code: code, why: "terminal error"}
		case *RetryableError:
			code := x.Code
			if spec.CheckErrorCode("error code", code) != nil {
				code = CodeRetryable
			}
			return decision{kind: decideRetry, code: code, retryAfter: max(x.RetryAfter, 0), why: "retryable error"}
		case *AmbiguousError:
			if x.Step != "" {
				return decision{kind: decideRetry, code: CodeEffectUnknown, why: "effect outcome unknown; the next attempt reconciles it"}
			}
			return decision{kind: decideFail, code: CodeAmbiguous, why: "ambiguous outcome the effect ledger does not hold; never retried blindly"}
		}
	}
	var se *spec.Error
	if errors.As(err, &se) {
		if se.Code == spec.CodeUnavailable || se.Code == spec.CodeUnknownOutcome {
			return decision{kind: decideRetry, code: string(se.Code), why: "store call inside the handler failed"}
		}
		return decision{kind: decideFail, code: string(se.Code), why: "store refused a call inside the handler"}
	}
	return decision{kind: decideRetry, code: CodeHandlerError, why: "unclassified handler error"}
}

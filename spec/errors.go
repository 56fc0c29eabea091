package spec

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code. Codes never change meaning;
// new ones may be added. SPEC.md lists when each is returned.
type Code string

const (
	// CodeInvalidArgument: the request (or the clock's time) failed validation.
	// Nothing was written.
	CodeInvalidArgument Code = "invalid_argument"
	// CodeNotFound: no such run (or job, or effect) for this tenant. Another
	// tenant's rows are reported as not found, never as forbidden.
	CodeNotFound Code = "not_found"
	// CodeAlreadyExists: a run with the proposed id already exists for the
	// tenant, or the dead run was already replayed.
	CodeAlreadyExists Code = "already_exists"
	// CodeIdempotencyConflict: the idempotency key is live and bound to a
	// different request fingerprint (HTTP 422 at an HTTP edge, as the IETF
	// Idempotency-Key draft says; 409 is for a request still in flight).
	CodeIdempotencyConflict Code = "idempotency_conflict"
	// CodeLostLease: the caller's lease (owner, generation) is not the current,
	// unexpired lease of the job. The caller must stop publishing.
	CodeLostLease Code = "lost_lease"
	// CodeCancelled: the caller still held the current generation, but the run
	// was cancelled. Error.State is "cancelled".
	CodeCancelled Code = "cancelled"
	// CodeAlreadyTerminal: the run is already terminal; Error.State carries the
	// winner's terminal state.
	CodeAlreadyTerminal Code = "already_terminal"
	// CodeDeadlineExceeded: a renewal would extend the lease past the run's
	// deadline. The lease keeps its old expiry.
	CodeDeadlineExceeded Code = "deadline_exceeded"
	// CodeFailedPrecondition: the run is not in a state that allows the
	// operation (for example, replay of a run that is not failed).
	CodeFailedPrecondition Code = "failed_precondition"
	// CodeReplayLimit: the run's lineage has reached Config.MaxReplays.
	CodeReplayLimit Code = "replay_limit"
	// CodeEffectConflict: the effect ledger row is not in a state that allows
	// this write (for example, recording an outcome for a row this generation
	// did not reserve).
	CodeEffectConflict Code = "effect_conflict"
	// CodeUnavailable: the store could not run the operation (busy database,
	// serialization failure, lost connection before commit). Nothing was
	// written; the call may be retried.
	CodeUnavailable Code = "unavailable"
	// CodeUnknownOutcome: the connection failed after the commit was sent. The
	// operation may or may not have been applied; the caller must read back or
	// reconcile before acting on either assumption.
	CodeUnknownOutcome Code = "unknown_outcome"
)

// Codes lists every code, in the order SPEC.md documents them.
var Codes = []Code{
	CodeInvalidArgument, CodeNotFound, CodeAlreadyExists, CodeIdempotencyConflict,
	CodeLostLease, CodeCancelled, CodeAlreadyTerminal, CodeDeadlineExceeded,
	CodeFailedPrecondition, CodeReplayLimit, CodeEffectConflict,
	CodeUnavailable, CodeUnknownOutcome,
}

// Retryable reports whether a caller may retry the same call unchanged.
// CodeUnknownOutcome is not retryable blindly: read back first.
func (c Code) Retryable() bool { return c == CodeUnavailable }

// Error is the one error type every store and the model return for contract
// outcomes. Compare with errors.As or CodeOf; Message is for people and may change.
type Error struct {
	Code Code `json:"code"`
	// State is the run's state when it decides the outcome: the winner's
	// terminal state for CodeAlreadyTerminal and CodeCancelled, else empty.
	State RunState `json:"state,omitempty"`
	// Message says what happened and, where it helps, what to do.
	Message string `json:"message"`
	// Err is an underlying cause (a driver error), if any. It is not part of
	// the contract (and not serialized).
	Err error `json:"-"`
}

func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Message
	if e.State != "" {
		s += " (run state " + string(e.State) + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// TerminalError returns the error for a write that lost to a terminal state:
// CodeCancelled when the state is cancelled, else CodeAlreadyTerminal.
func TerminalError(state RunState, runID string) *Error {
	if state == RunCancelled {
		return &Error{Code: CodeCancelled, State: state, Message: fmt.Sprintf("run %s was cancelled", runID)}
	}
	return &Error{Code: CodeAlreadyTerminal, State: state, Message: fmt.Sprintf("run %s is already %s", runID, state)}
}

// IdempotencyConflict returns the error for an admission whose key's live
// record is bound to another request: CodeIdempotencyConflict, naming the
// key (hashed), the operation and the record's fingerprint (hashed).
func IdempotencyConflict(key, operation, boundFingerprint string) *Error {
	return Errorf(CodeIdempotencyConflict,
		"idempotency key #%s of operation %q is bound to a different request (fingerprint %s); use a new key for a new request",
		ShortHash(key), operation, ShortHash(boundFingerprint))
}

// RunExists returns the error for a write that proposes a run id the tenant
// already has: CodeAlreadyExists.
func RunExists(tenant, runID string) *Error {
	return Errorf(CodeAlreadyExists, "run %s already exists for tenant %s; propose a new run id", runID, tenant)
}

// CodeOf returns the code of err: "" for nil, the *Error's code when err
// wraps one, and CodeUnavailable for any other error (a store must not leak
// untyped errors; this keeps callers safe if one does).
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnavailable
}

// StateOf returns Error.State of err, or "" when err carries none.
func StateOf(err error) RunState {
	var e *Error
	if errors.As(err, &e) {
		return e.State
	}
	return ""
}

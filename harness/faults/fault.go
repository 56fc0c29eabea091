package faults

import (
	"errors"

	"github.com/leasehold/leasehold/spec"
)

// At is a fault armed at a hook point: the hook returns Err there.
type At struct {
	Point spec.HookPoint
	Err   error
}

// ErrInjectedAbort is the error a hook returns at BeforeCommit to roll the
// operation's transaction back.
var ErrInjectedAbort = errors.New("harness: injected fault before commit")

// ErrInjectedLostReply is the error a hook returns at AfterCommit: the
// transaction committed and its reply is lost (unknown_outcome).
var ErrInjectedLostReply = errors.New("harness: injected fault after commit (the reply was lost)")

// Nondeterministic reports an operation whose result the model accepts
// in many forms (Claim, Reap, ClaimOutbox: any eligible subset): it gets no
// injected faults, since its unknown outcome would stay pending with one
// state per subset.
func Nondeterministic(req spec.Request) bool {
	switch req.(type) {
	case spec.ClaimRequest, spec.ReapRequest, spec.ClaimOutboxRequest:
		return true
	}
	return false
}

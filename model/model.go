package model

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/leasehold/leasehold/spec"
)

// Model is the leasehold contract under one configuration. Give it the same
// Config as the store it judges. The zero value of the unexported fields is
// the correct model; tests set them to get deliberately broken variants.
type Model struct {
	Config spec.Config
	bug    bug
	memo   *memo // set by Explore only
}

// Init returns the empty store.
func (m Model) Init() State { return State{} }

// Op is one call of a writing Store method, with the clock reading the store
// used for it.
type Op struct {
	Kind spec.Op // spec.OpCreateRun, spec.OpClaim, ...
	// Now is the time the store read (once) for this operation.
	Now int64
	// Jitter is, for OpRetry below the budget, the value the store's
	// Random.Int64N(Backoff.JitterBound()) returned. Ignored otherwise.
	Jitter int64
	// Req is the request value of the method named by Kind:
	// spec.CreateRunRequest, spec.ClaimRequest, spec.RenewRequest,
	// spec.CompleteRequest, spec.RetryRequest, spec.FailRequest,
	// spec.CancelRequest, spec.ReleaseRequest, spec.ReapRequest,
	// spec.PurgeRequest, spec.ReplayRequest, spec.ReserveEffectRequest, and
	// spec.RecordEffectRequest for both OpRecordEffect and OpReconcileEffect.
	Req any
}

// Result is what a Store method returned.
type Result struct {
	// Value is exactly what the method returns on success:
	// spec.CreateRunResult (CreateRun), []spec.Lease (Claim), spec.Lease
	// (Renew), spec.Run (Complete, Fail, Cancel, Replay), spec.Job (Retry,
	// Release), []string (Reap), int (PurgeIdempotency),
	// spec.EffectReservation (ReserveEffect), spec.Effect (RecordEffect,
	// ReconcileEffect). Nil when Err is set.
	Value any
	// Err is the contract error, or nil on success.
	Err *spec.Error
}

// Equal reports whether two results are the same outcome: both errors with
// the same Code and State (messages are free text), or both successes with
// deeply equal values, where a nil and an empty slice are equal.
func (r Result) Equal(o Result) bool {
	if r.Err != nil || o.Err != nil {
		return r.Err != nil && o.Err != nil && r.Err.Code == o.Err.Code && r.Err.State == o.Err.State
	}
	if isEmpty(r.Value) && isEmpty(o.Value) {
		return true
	}
	return reflect.DeepEqual(r.Value, o.Value)
}

// isEmpty reports a nil value or an empty slice of any type.
func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Slice && rv.Len() == 0
}

// Step applies op to s and returns the state after it and the result the
// store must have returned, as if the operation ran alone (sequentially: a
// claim takes exactly the first Limit eligible jobs). On an error the
// returned state is s. s itself is never changed. Step panics if op.Req is
// not the request type op.Kind needs: that is a bug in the caller, not an
// outcome of the contract.
func (m Model) Step(s State, op Op) (State, Result) {
	switch op.Kind {
	case spec.OpCreateRun:
		return m.createRun(s, op.Now, request[spec.CreateRunRequest](op))
	case spec.OpClaim:
		return m.claim(s, op.Now, request[spec.ClaimRequest](op))
	case spec.OpRenew:
		return m.renew(s, op.Now, request[spec.RenewRequest](op))
	case spec.OpComplete:
		return m.complete(s, op.Now, request[spec.CompleteRequest](op))
	case spec.OpRetry:
		return m.retry(s, op.Now, op.Jitter, request[spec.RetryRequest](op))
	case spec.OpFail:
		return m.fail(s, op.Now, request[spec.FailRequest](op))
	case spec.OpCancel:
		return m.cancel(s, op.Now, request[spec.CancelRequest](op))
	case spec.OpRelease:
		return m.release(s, op.Now, request[spec.ReleaseRequest](op))
	case spec.OpReap:
		return m.reap(s, op.Now, request[spec.ReapRequest](op))
	case spec.OpPurge:
		return m.purge(s, op.Now, request[spec.PurgeRequest](op))
	case spec.OpReplay:
		return m.replay(s, op.Now, request[spec.ReplayRequest](op))
	case spec.OpReserveEffect:
		return m.reserveEffect(s, op.Now, request[spec.ReserveEffectRequest](op))
	case spec.OpRecordEffect:
		return m.recordEffect(s, op.Now, request[spec.RecordEffectRequest](op))
	case spec.OpReconcileEffect:
		return m.reconcileEffect(s, op.Now, request[spec.RecordEffectRequest](op))
	}
	panic(fmt.Sprintf("model: unknown operation kind %q", op.Kind))
}

// request returns op.Req as T, or panics naming the mismatch.
func request[T any](op Op) T {
	req, ok := op.Req.(T)
	if !ok {
		var want T
		panic(fmt.Sprintf("model: %s needs a %T request, got %T", op.Kind, want, op.Req))
	}
	return req
}

// ok and failed build results.
func ok(v any) Result { return Result{Value: v} }

func failed(err error) Result { return Result{Err: asError(err)} }

// asError returns err as the contract's *spec.Error. The spec's validation
// functions return only *spec.Error; anything else would be a bug in spec, and
// is reported as invalid_argument rather than hidden.
func asError(err error) *spec.Error {
	var e *spec.Error
	if errors.As(err, &e) {
		return e
	}
	return &spec.Error{Code: spec.CodeInvalidArgument, Message: "model: untyped validation error", Err: err}
}

func notFound(what, tenant, id string) *spec.Error {
	return spec.Errorf(spec.CodeNotFound, "%s %s/%s not found", what, tenant, id)
}

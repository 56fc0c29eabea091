package model

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

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

// Op is one call of an operation of the contract (spec.Operations), with
// the clock reading the store used for it.
type Op struct {
	// Now is the time the store read (once) for a writing operation; reads
	// read no clock and ignore it.
	Now int64
	// Jitter is, for a Retry below the budget, the value the store's
	// Random.Int64N(Backoff.JitterBound()) returned. Ignored otherwise.
	Jitter int64
	// Req is the operation's request; its type names the operation.
	Req spec.Request
}

// Kind names the operation.
func (o Op) Kind() spec.Op { return o.Req.Op() }

// Result is what a Store method returned.
type Result struct {
	// Value is exactly what the method returns on success:
	// spec.CreateRunResult (CreateRun, AdmitInTx), []spec.CreateOutcome (CreateRuns),
	// []spec.BatchOutcome (CompleteBatch), []spec.Lease (Claim), spec.Lease
	// (Renew), spec.Run (Complete, Fail, Cancel, Replay), spec.Job (Retry,
	// Release), []string (Reap, PurgeRuns), int (PurgeIdempotency,
	// MarkDelivered), []spec.OutboxMessage (ClaimOutbox),
	// spec.EffectReservation (ReserveEffect), spec.Effect (RecordEffect,
	// ReconcileEffect), spec.RunPage (ListRuns). Nil when Err is set.
	Value any
	// Err is the contract error, or nil on success.
	Err *spec.Error
}

// Equal reports whether two results are the same outcome: both errors with
// the same Code and State (messages are free text), or both successes with
// deeply equal values, where a nil and an empty slice are equal (and a batch
// completion's or a bulk admission's members are compared the same way).
func (r Result) Equal(o Result) bool {
	if r.Err != nil || o.Err != nil {
		return r.Err != nil && o.Err != nil && r.Err.Code == o.Err.Code && r.Err.State == o.Err.State
	}
	if isEmpty(r.Value) && isEmpty(o.Value) {
		return true
	}
	if a, isBatch := r.Value.([]spec.BatchOutcome); isBatch {
		b, _ := o.Value.([]spec.BatchOutcome)
		return slices.EqualFunc(a, b, func(x, y spec.BatchOutcome) bool {
			return Result{Value: x.Run, Err: errorOf(x.Err)}.Equal(Result{Value: y.Run, Err: errorOf(y.Err)})
		})
	}
	if a, isBulk := r.Value.([]spec.CreateOutcome); isBulk {
		b, _ := o.Value.([]spec.CreateOutcome)
		return slices.EqualFunc(a, b, func(x, y spec.CreateOutcome) bool {
			return Result{Value: x.Result, Err: errorOf(x.Err)}.Equal(Result{Value: y.Result, Err: errorOf(y.Err)})
		})
	}
	return reflect.DeepEqual(r.Value, o.Value)
}

// errorOf is asError for an error that may be nil.
func errorOf(err error) *spec.Error {
	if err == nil {
		return nil
	}
	return asError(err)
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
// returned state is s. s itself is never changed. Step panics on an
// operation the model has no step for: every row of spec.Operations has one
// (TestStepsCoverTheTable).
func (m Model) Step(s State, op Op) (State, Result) {
	step, found := steps[op.Kind()]
	if !found {
		panic(fmt.Sprintf("model: no step for operation %q", op.Kind()))
	}
	return step(m, s, op)
}

// stepFunc is the model of one operation.
type stepFunc func(m Model, s State, op Op) (State, Result)

// steps maps every operation of spec.Operations to its model.
var steps = map[spec.Op]stepFunc{
	spec.OpCreateRun: typed(Model.createRun),
	spec.OpClaim:     typed(Model.claim),
	spec.OpRenew:     typed(Model.renew),
	spec.OpComplete:  typed(Model.complete),
	spec.OpRetry: func(m Model, s State, op Op) (State, Result) {
		return m.retry(s, op.Now, op.Jitter, op.Req.(spec.RetryRequest))
	},
	spec.OpFail:            typed(Model.fail),
	spec.OpCancel:          typed(Model.cancel),
	spec.OpRelease:         typed(Model.release),
	spec.OpReap:            typed(Model.reap),
	spec.OpPurge:           typed(Model.purge),
	spec.OpPurgeRuns:       typed(Model.purgeRuns),
	spec.OpReplay:          typed(Model.replay),
	spec.OpReserveEffect:   typed(Model.reserveEffect),
	spec.OpRecordEffect:    typed(Model.recordEffect),
	spec.OpReconcileEffect: typed(Model.reconcileEffect),
	spec.OpClaimOutbox:     typed(Model.claimOutbox),
	spec.OpMarkDelivered:   typed(Model.markDelivered),
	spec.OpCompleteBatch:   typed(Model.completeBatch),
	spec.OpCreateRuns:      typed(Model.createRuns),
	spec.OpCreateRunTx:     typed(Model.createRunTx),
	spec.OpGetRun:          read(Model.getRun),
	spec.OpGetJob:          read(Model.getJob),
	spec.OpEvents:          read(Model.events),
	spec.OpAttempts:        read(Model.attempts),
	spec.OpEffects:         read(Model.effects),
	spec.OpSnapshot:        read(Model.snapshot),
	spec.OpListRuns:        read(Model.listRuns),
}

// typed adapts the model of a writing operation with request type R.
func typed[R spec.Request](f func(Model, State, int64, R) (State, Result)) stepFunc {
	return func(m Model, s State, op Op) (State, Result) { return f(m, s, op.Now, op.Req.(R)) }
}

// read adapts the model of a read: it changes nothing and reads no clock.
func read[R spec.Request](f func(Model, State, R) Result) stepFunc {
	return func(m Model, s State, op Op) (State, Result) { return s, f(m, s, op.Req.(R)) }
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

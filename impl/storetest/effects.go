package storetest

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// The effect ledger: an effect key is applied at most once, across
// generations, and an ambiguous outcome is reconciled before any repeat.

func init() {
	register("EffectAppliedAtMostOnce", testEffectAppliedAtMostOnce)
	register("EffectUnknownAndFailedOutcomes", testEffectUnknownAndFailedOutcomes)
	register("EffectStaleGeneration", testEffectStaleGeneration)
}

func reserve(e *env, l spec.Lease, step, key string) (spec.EffectReservation, error) {
	return e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: step, Key: key})
}

func mustReserve(e *env, what string, l spec.Lease, step, key string, want spec.EffectReservation) {
	e.t.Helper()
	got, err := reserve(e, l, step, key)
	mustOK(e.t, what, err)
	mustEqual(e.t, what, got, want)
}

func record(e *env, l spec.Lease, key string, state spec.EffectState, ref string) (spec.Effect, error) {
	return e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "charge", Key: key, State: state, ProviderRef: ref})
}

func reconcile(e *env, l spec.Lease, key string, state spec.EffectState, ref string) (spec.Effect, error) {
	return e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: l.Ref(), Step: "charge", Key: key, State: state, ProviderRef: ref})
}

func effect(key string, state spec.EffectState, ref string, gen, at int64) spec.Effect {
	return spec.Effect{Tenant: "acme", RunID: "r1", Step: "charge", Key: key, State: state, ProviderRef: ref, Generation: gen, UpdatedAt: at}
}

func testEffectAppliedAtMostOnce(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	a := e.claimOne("acme", "r1", "wa", 10_000)

	mustReserve(e, "first reserve", a, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0), Decision: spec.DecisionProceed})
	// The same generation asking again may have called out already (its
	// record was lost): it must ask the provider first. Nothing changes.
	e.set(t0 + 1)
	mustReserve(e, "reserve again by the same generation", a, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0), Decision: spec.DecisionReconcile})
	e.set(t0 + 2)
	got, err := record(e, a, "c-1", spec.EffectSucceeded, "ch_123")
	mustOK(t, "record succeeded", err)
	succeeded := effect("c-1", spec.EffectSucceeded, "ch_123", 1, t0+2)
	mustEqual(t, "recorded effect", got, succeeded)

	// From now on the key is done: never proceed again, and never changed.
	e.set(t0 + 3)
	before := e.snap()
	mustReserve(e, "reserve after success", a, "charge", "c-1", spec.EffectReservation{Effect: succeeded, Decision: spec.DecisionDone})
	for _, s := range []spec.EffectState{spec.EffectSucceeded, spec.EffectFailed, spec.EffectUnknown} {
		_, err = record(e, a, "c-1", s, "other")
		checkCode(t, "record "+string(s)+" over a succeeded effect", err, spec.CodeEffectConflict)
	}
	for _, s := range []spec.EffectState{spec.EffectSucceeded, spec.EffectFailed} {
		_, err = reconcile(e, a, "c-1", s, "other")
		checkCode(t, "reconcile "+string(s)+" over a succeeded effect", err, spec.CodeEffectConflict)
	}
	e.unchanged("writes over a succeeded effect", before)

	// Later generations see it done too.
	e.set(t0 + 10_000)
	b := e.claimOne("acme", "r1", "wb", 10_000)
	mustReserve(e, "reserve by generation 2", b, "charge", "c-1", spec.EffectReservation{Effect: succeeded, Decision: spec.DecisionDone})
	// Keys are independent: another key (and the same key under another
	// step) is a fresh reservation by generation 2.
	mustReserve(e, "another key", b, "charge", "c-2",
		spec.EffectReservation{Effect: effect("c-2", spec.EffectReserved, "", 2, t0+10_000), Decision: spec.DecisionProceed})
	other := effect("c-1", spec.EffectReserved, "", 2, t0+10_000)
	other.Step = "refund"
	mustReserve(e, "same key, other step", b, "refund", "c-1", spec.EffectReservation{Effect: other, Decision: spec.DecisionProceed})
	e.complete(b, "")
	// After the run is terminal no generation can touch the ledger.
	_, err = reserve(e, b, "charge", "c-3")
	mustCodeState(t, "reserve after completion", err, spec.CodeAlreadyTerminal, spec.RunCompleted)
	mustEqual(t, "ledger", e.effects("acme", "r1"), []spec.Effect{succeeded, effect("c-2", spec.EffectReserved, "", 2, t0+10_000), other})
}

func testEffectUnknownAndFailedOutcomes(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	a := e.claimOne("acme", "r1", "wa", 60_000)
	mustReserve(e, "reserve", a, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0), Decision: spec.DecisionProceed})
	// The caller's own reservation may be reconciled too: it lost track of
	// whether it called out, asked the provider, and learned it had not.
	got, err := reconcile(e, a, "c-1", spec.EffectFailed, "none0")
	mustOK(t, "reconcile of the caller's own reservation", err)
	mustEqual(t, "reconciled own reservation", got, effect("c-1", spec.EffectFailed, "none0", 1, t0))
	mustReserve(e, "reserve after reconciling to failed", a, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0), Decision: spec.DecisionProceed})
	// The call timed out: unknown. The key must be reconciled, not repeated.
	e.set(t0 + 1)
	got, err = record(e, a, "c-1", spec.EffectUnknown, "req_77")
	mustOK(t, "record unknown", err)
	unknown := effect("c-1", spec.EffectUnknown, "req_77", 1, t0+1)
	mustEqual(t, "unknown effect", got, unknown)
	e.set(t0 + 2)
	mustReserve(e, "reserve an unknown effect", a, "charge", "c-1", spec.EffectReservation{Effect: unknown, Decision: spec.DecisionReconcile})
	_, err = record(e, a, "c-1", spec.EffectSucceeded, "x")
	mustCode(t, "record over unknown", err, spec.CodeEffectConflict)
	_, err = reconcile(e, a, "c-1", spec.EffectUnknown, "x")
	mustCode(t, "reconcile to unknown", err, spec.CodeInvalidArgument)

	// The provider says it did not happen: failed; the key may be reserved again.
	e.set(t0 + 3)
	got, err = reconcile(e, a, "c-1", spec.EffectFailed, "none")
	mustOK(t, "reconcile failed", err)
	mustEqual(t, "reconciled effect", got, effect("c-1", spec.EffectFailed, "none", 1, t0+3))
	e.set(t0 + 4)
	mustReserve(e, "reserve after failure", a, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0+4), Decision: spec.DecisionProceed})
	// A failed outcome recorded directly also frees the key.
	e.set(t0 + 5)
	_, err = record(e, a, "c-1", spec.EffectFailed, "declined")
	mustOK(t, "record failed", err)
	mustReserve(e, "reserve after a recorded failure", a, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0+5), Decision: spec.DecisionProceed})
	// Unknown reconciled to succeeded is final.
	_, err = record(e, a, "c-1", spec.EffectUnknown, "")
	mustOK(t, "record unknown", err)
	e.set(t0 + 6)
	got, err = reconcile(e, a, "c-1", spec.EffectSucceeded, "ch_9")
	mustOK(t, "reconcile succeeded", err)
	mustEqual(t, "effect", got, effect("c-1", spec.EffectSucceeded, "ch_9", 1, t0+6))
	mustReserve(e, "reserve after reconciled success", a, "charge", "c-1",
		spec.EffectReservation{Effect: got, Decision: spec.DecisionDone})
}

func testEffectStaleGeneration(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	a := e.claimOne("acme", "r1", "wa", 10_000)
	mustReserve(e, "A reserves", a, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0), Decision: spec.DecisionProceed})
	// A pauses past its expiry; B takes over.
	e.set(t0 + 10_000)
	b := e.claimOne("acme", "r1", "wb", 10_000)
	e.set(t0 + 10_001)
	before := e.snap()
	// A's outcome arrives too late: it cannot be recorded.
	_, err := record(e, a, "c-1", spec.EffectSucceeded, "ch_a")
	mustCode(t, "stale record", err, spec.CodeLostLease)
	_, err = reserve(e, a, "charge", "c-9")
	mustCode(t, "stale reserve", err, spec.CodeLostLease)
	// B finds A's reservation: maybe applied, so reconcile, not proceed.
	mustReserve(e, "B reserves A's key", b, "charge", "c-1",
		spec.EffectReservation{Effect: effect("c-1", spec.EffectReserved, "", 1, t0), Decision: spec.DecisionReconcile})
	// B may not record an outcome for a reservation it does not hold.
	_, err = record(e, b, "c-1", spec.EffectSucceeded, "ch_b")
	mustCode(t, "B records A's reservation", err, spec.CodeEffectConflict)
	e.unchanged("stale and conflicting effect writes", before)
	// B asks the provider and reconciles: the row becomes B's.
	got, err := reconcile(e, b, "c-1", spec.EffectSucceeded, "ch_a")
	mustOK(t, "B reconciles", err)
	mustEqual(t, "reconciled by B", got, effect("c-1", spec.EffectSucceeded, "ch_a", 2, t0+10_001))
	// A's generation, even with a still-valid-looking ref, cannot undo it.
	_, err = reconcile(e, a, "c-1", spec.EffectFailed, "")
	mustCode(t, "stale reconcile", err, spec.CodeLostLease)
	mustEqual(t, "ledger", e.effects("acme", "r1"), []spec.Effect{got})
}

package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

func reserve(l spec.LeaseRef) spec.ReserveEffectRequest {
	return spec.ReserveEffectRequest{Lease: l, Step: "charge", Key: "order-1"}
}

func record(l spec.LeaseRef, state spec.EffectState, provider string) spec.RecordEffectRequest {
	return spec.RecordEffectRequest{Lease: l, Step: "charge", Key: "order-1", State: state, ProviderRef: provider}
}

// TestEffectLedger walks the ledger row through every transition of SPEC.md:
// each step is an operation, the expected decision or error, and the row after.
func TestEffectLedger(t *testing.T) {
	type step struct {
		name     string
		gen      int64 // the lease (1 or 2) the step writes through
		req      func(spec.LeaseRef) spec.Request
		code     spec.Code
		decision spec.EffectDecision
		state    spec.EffectState // the row after the step ("" for absent)
		rowGen   int64
		provider string
	}
	reserveOp := func(l spec.LeaseRef) spec.Request { return reserve(l) }
	recordOp := func(s spec.EffectState, p string) func(spec.LeaseRef) spec.Request {
		return func(l spec.LeaseRef) spec.Request { return record(l, s, p) }
	}
	reconcileOp := func(s spec.EffectState, p string) func(spec.LeaseRef) spec.Request {
		return func(l spec.LeaseRef) spec.Request { return spec.ReconcileEffectRequest(record(l, s, p)) }
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"reserve, record success, then done", []step{
			{"record before reserve", 1, recordOp(spec.EffectSucceeded, "p"), spec.CodeNotFound, "", "", 0, ""},
			{"reconcile before reserve", 1, reconcileOp(spec.EffectSucceeded, "p"), spec.CodeNotFound, "", "", 0, ""},
			{"reserve", 1, reserveOp, "", spec.DecisionProceed, spec.EffectReserved, 1, ""},
			{"reserve again by the holder: never handed out twice", 1, reserveOp, "", spec.DecisionReconcile, spec.EffectReserved, 1, ""},
			{"reconcile to unknown is invalid", 1, reconcileOp(spec.EffectUnknown, ""), spec.CodeInvalidArgument, "", spec.EffectReserved, 1, ""},
			{"record an invalid state", 1, recordOp(spec.EffectReserved, ""), spec.CodeInvalidArgument, "", spec.EffectReserved, 1, ""},
			{"record success", 1, recordOp(spec.EffectSucceeded, "pay-7"), "", "", spec.EffectSucceeded, 1, "pay-7"},
			{"record again", 1, recordOp(spec.EffectFailed, ""), spec.CodeEffectConflict, "", spec.EffectSucceeded, 1, "pay-7"},
			{"reserve after success", 1, reserveOp, "", spec.DecisionDone, spec.EffectSucceeded, 1, "pay-7"},
			{"next generation: done", 2, reserveOp, "", spec.DecisionDone, spec.EffectSucceeded, 1, "pay-7"},
			{"next generation cannot reconcile a success", 2, reconcileOp(spec.EffectFailed, ""), spec.CodeEffectConflict, "", spec.EffectSucceeded, 1, "pay-7"},
		}},
		{"the holder reconciles its own reservation", []step{
			{"reserve", 1, reserveOp, "", spec.DecisionProceed, spec.EffectReserved, 1, ""},
			{"reserve again", 1, reserveOp, "", spec.DecisionReconcile, spec.EffectReserved, 1, ""},
			{"reconcile to success", 1, reconcileOp(spec.EffectSucceeded, "pay-3"), "", "", spec.EffectSucceeded, 1, "pay-3"},
			{"reconcile again", 1, reconcileOp(spec.EffectFailed, ""), spec.CodeEffectConflict, "", spec.EffectSucceeded, 1, "pay-3"},
		}},
		{"failed: reserved again", []step{
			{"reserve", 1, reserveOp, "", spec.DecisionProceed, spec.EffectReserved, 1, ""},
			{"record failure", 1, recordOp(spec.EffectFailed, "no-funds"), "", "", spec.EffectFailed, 1, "no-funds"},
			{"next generation reserves again", 2, reserveOp, "", spec.DecisionProceed, spec.EffectReserved, 2, ""},
		}},
		{"unknown: reconcile before repeating", []step{
			{"reserve", 1, reserveOp, "", spec.DecisionProceed, spec.EffectReserved, 1, ""},
			{"record unknown", 1, recordOp(spec.EffectUnknown, ""), "", "", spec.EffectUnknown, 1, ""},
			{"next generation is told to reconcile", 2, reserveOp, "", spec.DecisionReconcile, spec.EffectUnknown, 1, ""},
			{"next generation cannot record it", 2, recordOp(spec.EffectSucceeded, "p"), spec.CodeEffectConflict, "", spec.EffectUnknown, 1, ""},
			{"reconcile to success takes it over", 2, reconcileOp(spec.EffectSucceeded, "pay-9"), "", "", spec.EffectSucceeded, 2, "pay-9"},
		}},
		{"reserved by a generation that vanished", []step{
			{"reserve", 1, reserveOp, "", spec.DecisionProceed, spec.EffectReserved, 1, ""},
			{"next generation is told to reconcile", 2, reserveOp, "", spec.DecisionReconcile, spec.EffectReserved, 1, ""},
			{"the old generation cannot record any more", 1, recordOp(spec.EffectSucceeded, "p"), spec.CodeLostLease, "", spec.EffectReserved, 1, ""},
			{"reconcile to failure", 2, reconcileOp(spec.EffectFailed, ""), "", "", spec.EffectFailed, 2, ""},
			{"reconcile a failed row", 2, reconcileOp(spec.EffectSucceeded, "p"), spec.CodeEffectConflict, "", spec.EffectFailed, 2, ""},
			{"then reserve", 2, reserveOp, "", spec.DecisionProceed, spec.EffectReserved, 2, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.create("t1", "k1", "r1", `{}`)
			leases := map[int64]spec.LeaseRef{1: w.claimOne("t1", "w1")}
			for i, st := range tc.steps {
				if _, found := leases[st.gen]; !found { // the first lease expired; w2 reclaims
					w.at(10 * int64(i+1))
					leases[st.gen] = w.claimOne("t1", "w2")
				}
				l := leases[st.gen]
				if st.code != "" {
					w.fails(st.req(l), st.code, "")
				} else {
					res := w.must(st.req(l))
					if r, isReservation := res.(spec.EffectReservation); isReservation {
						equal(t, st.name+": decision", r.Decision, st.decision)
					}
				}
				effects := w.snapshot().Effects
				if st.state == "" {
					equal(t, st.name+": rows", len(effects), 0)
					continue
				}
				if len(effects) != 1 {
					t.Fatalf("%s: want one effect row, got %+v", st.name, effects)
				}
				e := effects[0]
				equal(t, st.name+": state", e.State, st.state)
				equal(t, st.name+": generation", e.Generation, st.rowGen)
				equal(t, st.name+": provider", e.ProviderRef, st.provider)
			}
		})
	}
}

func TestReserveEffectReturnsTheRowAfter(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	l := w.at(3).claimOne("t1", "w1")
	r := w.at(4).must(reserve(l)).(spec.EffectReservation)
	equal(t, "reservation", r, spec.EffectReservation{Decision: spec.DecisionProceed, Effect: spec.Effect{
		Tenant: "t1", RunID: "r1", Step: "charge", Key: "order-1", State: spec.EffectReserved, Generation: 1, UpdatedAt: 4}})
	e := w.at(5).must(record(l, spec.EffectSucceeded, "pay-1")).(spec.Effect)
	equal(t, "recorded", e, spec.Effect{Tenant: "t1", RunID: "r1", Step: "charge", Key: "order-1", State: spec.EffectSucceeded,
		ProviderRef: "pay-1", Generation: 1, UpdatedAt: 5})
	equal(t, "the job is not changed by effects", w.job("t1", "r1").LeaseExpiresAt, int64(13))
}

package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// twoQueued returns a world with t1/r1 and t1/r2 queued (r1 first in order)
// and t2/r1 queued.
func twoQueued(t *testing.T) *world {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	w.create("t1", "k2", "r2", `{}`)
	w.create("t2", "k1", "r1", `{}`)
	return w
}

func claimOp(now int64, tenant, worker string, limit int) model.Op {
	return model.Op{Now: now, Req: spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: 10, Limit: limit}}
}

// leaseFor is the lease claiming run id gives at time now with a 10 ms lease
// (first claim of a fresh run).
func leaseFor(w *world, tenant, id, worker string, now int64) spec.Lease {
	r := w.run(tenant, id)
	return spec.Lease{Tenant: tenant, RunID: id, Operation: "work", Owner: worker, Generation: 1, ExpiresAt: now + 10,
		Attempt: 1, MaxAttempts: 2, Payload: r.Payload, DeadlineAt: r.DeadlineAt}
}

func TestObserveClaim(t *testing.T) {
	w := twoQueued(t)
	for _, tc := range []struct {
		name     string
		op       model.Op
		observed model.Result
		accept   bool
		claimed  []string // t1 runs leased in the accepted state
	}{
		{"the first eligible job", claimOp(1, "t1", "w1", 1), model.Result{Value: []spec.Lease{leaseFor(w, "t1", "r1", "w1", 1)}}, true, []string{"r1"}},
		{"a non-first eligible job (SKIP LOCKED)", claimOp(1, "t1", "w1", 1), model.Result{Value: []spec.Lease{leaseFor(w, "t1", "r2", "w1", 1)}}, true, []string{"r2"}},
		{"a batch in another order", claimOp(1, "t1", "w1", 2), model.Result{Value: []spec.Lease{leaseFor(w, "t1", "r2", "w1", 1), leaseFor(w, "t1", "r1", "w1", 1)}}, true, []string{"r1", "r2"}},
		{"an empty claim (nil)", claimOp(1, "t1", "w1", 2), model.Result{}, true, nil},
		{"an empty claim (empty slice)", claimOp(1, "t1", "w1", 2), model.Result{Value: []spec.Lease{}}, true, nil},
		{"unavailable: nothing written", claimOp(1, "t1", "w1", 2), model.Result{Err: &spec.Error{Code: spec.CodeUnavailable}}, true, nil},
		{"more than the limit", claimOp(1, "t1", "w1", 1), model.Result{Value: []spec.Lease{leaseFor(w, "t1", "r1", "w1", 1), leaseFor(w, "t1", "r2", "w1", 1)}}, false, nil},
		{"the same job twice", claimOp(1, "t1", "w1", 2), model.Result{Value: []spec.Lease{leaseFor(w, "t1", "r1", "w1", 1), leaseFor(w, "t1", "r1", "w1", 1)}}, false, nil},
		{"another tenant's job", claimOp(1, "t1", "w1", 1), model.Result{Value: []spec.Lease{leaseFor(w, "t2", "r1", "w1", 1)}}, false, nil},
		{"a job that does not exist", claimOp(1, "t1", "w1", 1), model.Result{Value: []spec.Lease{{Tenant: "t1", RunID: "r7"}}}, false, nil},
		{"a wrong lease value (expiry)", claimOp(1, "t1", "w1", 1), model.Result{Value: []spec.Lease{leaseFor(w, "t1", "r1", "w1", 2)}}, false, nil},
		{"a wrong owner", claimOp(1, "t1", "w1", 1), model.Result{Value: []spec.Lease{leaseFor(w, "t1", "r1", "w2", 1)}}, false, nil},
		{"success where validation fails", claimOp(1, "t1", "", 1), model.Result{Value: []spec.Lease{}}, false, nil},
		{"the validation error", claimOp(1, "t1", "", 1), model.Result{Err: &spec.Error{Code: spec.CodeInvalidArgument, Message: "any words"}}, true, nil},
		{"another error code", claimOp(1, "t1", "w1", 1), model.Result{Err: &spec.Error{Code: spec.CodeNotFound}}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, accepted := w.m.Observe(w.s, tc.op, tc.observed)
			if accepted != tc.accept {
				t.Fatalf("Observe(%s -> %s) accepted %v, want %v", tc.op, tc.observed, accepted, tc.accept)
			}
			if !accepted {
				equal(t, "a refused observation returns the state unchanged", next.Key(), w.s.Key())
				return
			}
			if err := w.m.Check(next); err != nil {
				t.Fatalf("accepted state violates invariants: %v", err)
			}
			if err := w.m.CheckStep(w.s, tc.op, next); err != nil {
				t.Fatalf("accepted transition violates invariants: %v", err)
			}
			for _, id := range []string{"r1", "r2"} {
				j, _ := next.Job("t1", id)
				want := spec.JobQueued
				for _, c := range tc.claimed {
					if c == id {
						want = spec.JobLeased
					}
				}
				equal(t, "t1/"+id+" state", j.State, want)
			}
		})
	}
}

func TestObserveClaimRefusesALiveLease(t *testing.T) {
	w := twoQueued(t)
	w.at(0).claimOne("t1", "w1") // r1 leased until 10
	leased := w.attempt("t1", "r1", 1)
	steal := spec.Lease{Tenant: "t1", RunID: "r1", Operation: "work", Owner: "w2", Generation: 2, ExpiresAt: 15,
		Attempt: 2, MaxAttempts: 2, Payload: w.run("t1", "r1").Payload, DeadlineAt: w.run("t1", "r1").DeadlineAt}
	if _, accepted := w.m.Observe(w.s, claimOp(5, "t1", "w2", 1), model.Result{Value: []spec.Lease{steal}}); accepted {
		t.Fatalf("a claim of r1 at 5, leased by %s until 10, was accepted", leased.Worker)
	}
	if _, accepted := w.m.Observe(w.s, claimOp(10, "t1", "w2", 1), model.Result{Value: []spec.Lease{{
		Tenant: "t1", RunID: "r1", Operation: "work", Owner: "w2", Generation: 2, ExpiresAt: 20,
		Attempt: 2, MaxAttempts: 2, Payload: steal.Payload, DeadlineAt: steal.DeadlineAt}}}); !accepted {
		t.Fatalf("a claim of r1 at its expiry (10) was refused")
	}
}

func TestObserveReap(t *testing.T) {
	w := twoQueued(t)
	w.claim("t1", "w1", 2)
	w.at(10).claim("t1", "w1", 2) // both at budget, expire at 20
	op := model.Op{Now: 20, Req: spec.ReapRequest{Tenant: "t1", Limit: 2}}
	for _, tc := range []struct {
		name   string
		ids    []string
		accept bool
	}{
		{"the second victim only", []string{"r2"}, true},
		{"both, in another order", []string{"r2", "r1"}, true},
		{"none", nil, true},
		{"a victim twice", []string{"r1", "r1"}, false},
		{"another tenant's run", []string{"r1", "r9"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, accepted := w.m.Observe(w.s, op, model.Result{Value: tc.ids})
			equal(t, "accepted", accepted, tc.accept)
			if accepted {
				for _, id := range tc.ids {
					j, _ := next.Job("t1", id)
					equal(t, id+" state", j.State, spec.JobDead)
				}
			}
		})
	}
	notYet := model.Op{Now: 19, Req: spec.ReapRequest{Tenant: "t1", Limit: 2}}
	if _, accepted := w.m.Observe(w.s, notYet, model.Result{Value: []string{"r1"}}); accepted {
		t.Fatalf("a reap of a live lease was accepted")
	}
}

func TestObserveOtherOpsMustEqualStep(t *testing.T) {
	w := newWorld(t)
	create := model.Op{Now: 0, Req: createReq("t1", "k1", "r1", `{}`)}
	want, res := w.m.Step(w.s, create)
	next, accepted := w.m.Observe(w.s, create, res)
	if !accepted || next.Key() != want.Key() {
		t.Fatalf("Step's own result was not accepted with Step's state")
	}
	other := res.Value.(spec.CreateRunResult)
	other.Replayed = true
	if _, accepted := w.m.Observe(w.s, create, model.Result{Value: other}); accepted {
		t.Fatalf("a create reported as replayed on an empty store was accepted")
	}
	if _, accepted := w.m.Observe(w.s, create, model.Result{Err: &spec.Error{Code: spec.CodeAlreadyExists}}); accepted {
		t.Fatalf("already_exists on an empty store was accepted")
	}
	if next, accepted := w.m.Observe(w.s, create, model.Result{Err: &spec.Error{Code: spec.CodeUnavailable}}); !accepted || next.Key() != w.s.Key() {
		t.Fatalf("unavailable must be accepted with nothing written")
	}
	if _, accepted := w.m.Observe(w.s, create, model.Result{Err: &spec.Error{Code: spec.CodeUnknownOutcome}}); accepted {
		t.Fatalf("unknown_outcome must go through Unknown, not Observe")
	}
}

func TestUnknown(t *testing.T) {
	w := twoQueued(t)
	for _, tc := range []struct {
		name string
		op   model.Op
		want int // distinct states, the unchanged one included
	}{
		{"claim limit 1: unchanged, r1, r2", claimOp(1, "t1", "w1", 1), 3},
		{"claim limit 2: unchanged, r1, r2, both", claimOp(1, "t1", "w1", 2), 4},
		{"claim with nothing eligible", claimOp(1, "t3", "w1", 1), 1},
		{"create: unchanged or created", model.Op{Now: 1, Req: createReq("t1", "k3", "r3", `{}`)}, 2},
		{"a refused op leaves only the state", model.Op{Now: 1, Req: spec.CancelRequest{Tenant: "t1", RunID: "r9"}}, 1},
		{"purge: unchanged or the three records gone", model.Op{Now: 1 << 40, Req: spec.PurgeRequest{Limit: 5}}, 2},
		{"purge with nothing expired", model.Op{Now: 1, Req: spec.PurgeRequest{Limit: 5}}, 1},
		{"a replayed create writes nothing", model.Op{Now: 1, Req: createReq("t1", "k1", "r3", `{}`)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := w.m.Unknown(w.s, tc.op)
			equal(t, "states", len(states), tc.want)
			equal(t, "the first is the unchanged state", states[0].Key(), w.s.Key())
			seen := map[string]bool{}
			for _, s := range states {
				if seen[s.Key()] {
					t.Fatalf("Unknown returned a state twice")
				}
				seen[s.Key()] = true
				if err := w.m.Check(s); err != nil {
					t.Fatalf("a possible state violates invariants: %v", err)
				}
			}
		})
	}
}

func TestResultEqual(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b model.Result
		want bool
	}{
		{"nil and empty leases", model.Result{}, model.Result{Value: []spec.Lease{}}, true},
		{"empty leases and empty ids", model.Result{Value: []spec.Lease{}}, model.Result{Value: []string{}}, true},
		{"errors by code, messages ignored", model.Result{Err: &spec.Error{Code: spec.CodeLostLease, Message: "a"}}, model.Result{Err: &spec.Error{Code: spec.CodeLostLease, Message: "b"}}, true},
		{"errors differ by state", model.Result{Err: &spec.Error{Code: spec.CodeAlreadyTerminal, State: spec.RunFailed}}, model.Result{Err: &spec.Error{Code: spec.CodeAlreadyTerminal, State: spec.RunCompleted}}, false},
		{"error and success", model.Result{Err: &spec.Error{Code: spec.CodeNotFound}}, model.Result{}, false},
		{"values", model.Result{Value: 3}, model.Result{Value: 3}, true},
		{"values differ", model.Result{Value: []string{"a"}}, model.Result{Value: []string{"b"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			equal(t, "a.Equal(b)", tc.a.Equal(tc.b), tc.want)
			equal(t, "b.Equal(a)", tc.b.Equal(tc.a), tc.want)
		})
	}
}

package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// leasedState returns a valid state with t1/r1 leased by w1 (generation 1)
// with a reserved effect, and t1/r2 queued.
func leasedState(t *testing.T) (Model, State) {
	t.Helper()
	m := Model{Config: spec.DefaultConfig()}
	s := m.Init()
	for _, op := range []Op{
		{Req: spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: "k1", RunID: "r1", Payload: []byte(`{}`)}},
		{Req: spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: "k2", RunID: "r2", Payload: []byte(`{}`)}},
		{Req: spec.ClaimRequest{Tenant: "t1", Worker: "w1", LeaseMs: 10, Limit: 1}},
		{Req: spec.ReserveEffectRequest{Lease: spec.LeaseRef{Tenant: "t1", RunID: "r1", Owner: "w1", Generation: 1}, Step: "s", Key: "e"}},
	} {
		var res Result
		if s, res = m.Step(s, op); res.Err != nil {
			t.Fatalf("setup %s: %v", op, res.Err)
		}
	}
	if err := m.Check(s); err != nil {
		t.Fatalf("setup state is invalid: %v", err)
	}
	return m, s
}

// corrupt returns s with run (t1, id) replaced by a corrupted copy.
func corrupt(s State, id string, f func(r *runRow)) State {
	r := s.row("t1", id).clone()
	f(r)
	return s.put(r)
}

// TestCheckDetectsEachInvariant corrupts one row of a valid state per case
// and requires Check to name the invariant it breaks.
func TestCheckDetectsEachInvariant(t *testing.T) {
	for _, tc := range []struct {
		inv  string
		run  string
		bend func(r *runRow)
	}{
		{"1", "r1", func(r *runRow) { r.run.LastSeq = 2 }},
		{"1", "r1", func(r *runRow) {
			r.events = []spec.Event{{Tenant: "t1", RunID: "r1", Seq: 2, Kind: spec.EventRunQueued}}
		}},
		{"2", "r1", func(r *runRow) { r.appendEvent(spec.EventRunQueued, 0, "{}") }},
		{"2", "r1", func(r *runRow) { r.events = nil; r.run.LastSeq = 0 }},
		{"3", "r1", func(r *runRow) { r.run.State = spec.RunCompleted }},
		{"3", "r1", func(r *runRow) {
			r.appendEvent(spec.EventRunCancelled, 0, "{}")
			r.appendEvent(spec.EventRunCompleted, 0, "{}")
		}},
		{"3", "r2", func(r *runRow) {
			r.appendEvent(spec.EventRunCompleted, 0, "{}")
			r.run.State = spec.RunCancelled
			r.job.State = spec.JobCancelled
		}},
		{"4", "r2", func(r *runRow) {
			r.appendEvent(spec.EventRunCancelled, 0, "{}")
			r.run.State = spec.RunCancelled
		}},
		{"4", "r1", func(r *runRow) { r.run.State = spec.RunQueued }},
		{"4", "r2", func(r *runRow) { r.run.State = spec.RunRunning }},
		{"6", "r1", func(r *runRow) { r.job.Attempts = r.job.MaxAttempts + 1 }},
		{"13", "r1", func(r *runRow) { r.job.Tenant = "t2" }},
		{"8", "r1", func(r *runRow) { r.job.LeaseOwner = "" }},
		{"8", "r2", func(r *runRow) { r.job.LeaseExpiresAt = 5 }},
		{"11", "r1", func(r *runRow) { r.job.Generation = 2 }},
		{"11", "r1", func(r *runRow) {
			a, _ := r.attempt(1)
			a.Outcome = spec.AttemptExpired
			r.putAttempt(a)
		}},
		{"12", "r1", func(r *runRow) {
			e, _ := r.effect("s", "e")
			e.Generation = 5
			r.putEffect(e)
		}},
		{"13", "r1", func(r *runRow) {
			e, _ := r.effect("s", "e")
			e.Tenant = "t2"
			r.putEffect(e)
		}},
		{"13", "r1", func(r *runRow) {
			r.events = append([]spec.Event(nil), spec.Event{Tenant: "t1", RunID: "r2", Seq: 1, Kind: spec.EventRunQueued})
		}},
		{"R", "r2", func(r *runRow) { r.run.ReplayOf = "r1"; r.run.ReplayDepth = 1 }},
	} {
		m, s := leasedState(t)
		bad := corrupt(s, tc.run, tc.bend)
		err := m.Check(bad)
		if err == nil || !strings.Contains(err.Error(), "invariant "+tc.inv+":") {
			t.Errorf("corrupting %s for invariant %s: Check returned %v", tc.run, tc.inv, err)
		}
	}
}

func TestCheckDetectsIdempotencyInvariants(t *testing.T) {
	m, s := leasedState(t)
	rec := s.idem[0]
	for _, tc := range []struct {
		inv  string
		bend func(State) State
	}{
		{"7", func(s State) State { r := rec; r.Key = "k9"; r.RunID = "gone"; return s.putIdempotency(r) }},
		{"9", func(s State) State { r := rec; r.Key = "k9"; return s.putIdempotency(r) }}, // a run bound to two keys
		{"9", func(s State) State { r := rec; r.Fingerprint = "fp1:other"; return s.putIdempotency(r) }},
	} {
		err := m.Check(tc.bend(s))
		if err == nil || !strings.Contains(err.Error(), "invariant "+tc.inv+":") {
			t.Errorf("idempotency corruption for invariant %s: Check returned %v", tc.inv, err)
		}
	}
}

// TestCheckStepDetectsEachTransitionInvariant moves a valid state to a
// corrupted one through an op and requires CheckStep to name the broken rule.
func TestCheckStepDetectsEachTransitionInvariant(t *testing.T) {
	m, s := leasedState(t)
	ref := spec.LeaseRef{Tenant: "t1", RunID: "r1", Owner: "w1", Generation: 1}
	stale := ref
	stale.Generation = 7
	for _, tc := range []struct {
		name string
		inv  string
		op   Op
		next func() State
	}{
		{"generation decreases", "5", Op{Req: spec.RenewRequest{Lease: ref, LeaseMs: 1}},
			func() State { return corrupt(s, "r1", func(r *runRow) { r.job.Generation = 0 }) }},
		{"a non-claim moves the generation", "5", Op{Req: spec.CancelRequest{Tenant: "t1", RunID: "r2"}},
			func() State { return corrupt(s, "r2", func(r *runRow) { r.job.Generation = 1 }) }},
		{"a claim raises it by two", "5", Op{Req: spec.ClaimRequest{Tenant: "t1", Worker: "w2", LeaseMs: 1, Limit: 1}},
			func() State { return corrupt(s, "r2", func(r *runRow) { r.job.Generation = 2 }) }},
		{"a stale lease writes", "10", Op{Req: spec.RenewRequest{Lease: stale, LeaseMs: 1}},
			func() State { return corrupt(s, "r1", func(r *runRow) { r.job.LeaseExpiresAt = 99 }) }},
		{"a write changes another run", "10", Op{Req: spec.RenewRequest{Lease: ref, LeaseMs: 1}},
			func() State { return corrupt(s, "r2", func(r *runRow) { r.job.AvailableAt = 9 }) }},
		{"another tenant's run changes", "13", Op{Req: spec.CancelRequest{Tenant: "t2", RunID: "r2"}},
			func() State { return corrupt(s, "r2", func(r *runRow) { r.job.AvailableAt = 9 }) }},
		{"a succeeded effect changes", "12", Op{Req: spec.RecordEffectRequest{Lease: ref}},
			func() State {
				done := corrupt(s, "r1", func(r *runRow) { e, _ := r.effect("s", "e"); e.State = spec.EffectSucceeded; r.putEffect(e) })
				s = done
				return corrupt(done, "r1", func(r *runRow) { e, _ := r.effect("s", "e"); e.State = spec.EffectFailed; r.putEffect(e) })
			}},
		{"a run row changes without its version", "H", Op{Req: spec.RenewRequest{Lease: ref, LeaseMs: 1}},
			func() State { return corrupt(s, "r1", func(r *runRow) { r.run.ErrorCode = "x" }) }},
		{"a live idempotency record is deleted", "9", Op{Req: spec.PurgeRequest{Limit: 1}},
			func() State { return s.withoutIdempotency(func(spec.IdempotencyRecord) bool { return true }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, base := leasedState(t)
			s = base
			next := tc.next()
			err := m.CheckStep(s, tc.op, next)
			if err == nil || !strings.Contains(err.Error(), "invariant "+tc.inv+":") {
				t.Fatalf("CheckStep returned %v, want a violation of invariant %s", err, tc.inv)
			}
		})
	}
}

// TestCheckStepJudgesRunDeletion: CheckStep allows exactly the deletions
// PurgeRuns may make and names the rule each other one breaks.
func TestCheckStepJudgesRunDeletion(t *testing.T) {
	cfg := spec.DefaultConfig()
	cfg.Tenants = []string{"t1", "t2"}
	cfg.IdempotencyRetentionMs, cfg.RunRetentionMs = 50, 100
	m := Model{Config: cfg}
	s := m.Init()
	step := func(now int64, req spec.Request) {
		t.Helper()
		var res Result
		if s, res = m.Step(s, Op{Now: now, Req: req}); res.Err != nil {
			t.Fatalf("setup %s: %v", req.Op(), res.Err)
		}
	}
	create := func(tenant, id string) spec.Request {
		return spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: "k-" + id, RunID: id, Payload: []byte(`{}`)}
	}
	step(0, create("t1", "r1"))
	step(0, create("t1", "r2"))
	step(0, create("t1", "r3"))
	step(0, create("t2", "x"))
	step(1, spec.CancelRequest{Tenant: "t1", RunID: "r1"})
	step(1, spec.CancelRequest{Tenant: "t2", RunID: "x"})
	step(1, spec.ClaimRequest{Tenant: "t1", Worker: "w", LeaseMs: 10, Limit: 1}) // r2
	step(1, spec.FailRequest{Lease: spec.LeaseRef{Tenant: "t1", RunID: "r2", Owner: "w", Generation: 1}, ErrorCode: "fatal"})
	step(2, spec.ReplayRequest{Tenant: "t1", RunID: "r2", NewRunID: "r2.r", Actor: "ops"})
	step(2, spec.CancelRequest{Tenant: "t1", RunID: "r2.r"})
	if err := m.Check(s); err != nil {
		t.Fatal(err)
	}
	without := func(ids ...string) State {
		n := s
		n.runs = slices.DeleteFunc(slices.Clone(s.runs), func(r *runRow) bool { return slices.Contains(ids, r.run.Tenant+"/"+r.run.ID) })
		return n.withoutIdempotency(func(rec spec.IdempotencyRecord) bool { return slices.Contains(ids, rec.Tenant+"/"+rec.RunID) })
	}
	purge := func(now int64) Op { return Op{Now: now, Req: spec.PurgeRunsRequest{Tenant: "t1", Limit: 10}} }
	off := m
	off.Config.RunRetentionMs = 0
	held := m
	held.Config.IdempotencyRetentionMs = 500 // the records written at 0 would live until 500
	heldState := s
	heldState.idem = slices.Clone(s.idem)
	for i := range heldState.idem {
		heldState.idem[i].ExpiresAt = 500
	}
	for _, tc := range []struct {
		name string
		m    Model
		prev State
		op   Op
		next State
		inv  string // "" for a legal deletion
	}{
		{"a retired run", m, s, purge(101), without("t1/r1"), ""},
		{"a whole retired lineage", m, s, purge(102), without("t1/r2", "t1/r2.r"), ""},
		{"a run not terminal", m, s, purge(1000), without("t1/r3"), "7"},
		{"a run finished less than the retention ago", m, s, purge(100), without("t1/r1"), "7"},
		{"with retention off", off, s, purge(1000), without("t1/r1"), "7"},
		{"a run a live record names", held, heldState, purge(101), without("t1/r1"), "9"},
		{"another tenant's run", m, s, purge(1000), without("t2/x"), "13"},
		{"an original without its replay", m, s, purge(1000), without("t1/r2"), "R"},
		{"a replay without its original", m, s, purge(1000), without("t1/r2.r"), "R"},
		{"by another operation", m, s, Op{Now: 1000, Req: spec.CancelRequest{Tenant: "t1", RunID: "r1"}}, without("t1/r1"), "7"},
		{"the expired record of a run it kept", m, s, purge(1000),
			s.withoutIdempotency(func(rec spec.IdempotencyRecord) bool { return rec.RunID == "r3" }), "9"},
		{"a change to a run it kept", m, s, purge(1000), corrupt(without("t1/r1"), "r3", func(r *runRow) { r.job.AvailableAt = 9 }), "7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.CheckStep(tc.prev, tc.op, tc.next)
			switch {
			case tc.inv == "" && err != nil:
				t.Fatalf("a deletion PurgeRuns may make was refused: %v", err)
			case tc.inv != "" && (err == nil || !strings.Contains(err.Error(), "invariant "+tc.inv+":")):
				t.Fatalf("CheckStep returned %v, want a violation of invariant %s", err, tc.inv)
			}
		})
	}
}

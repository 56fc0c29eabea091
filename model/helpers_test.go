package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// testConfig is the policy of the unit tests: round numbers, so expected
// times are easy to read.
func testConfig() spec.Config {
	return spec.Config{
		Operations: map[string]spec.OperationPolicy{
			"work": {SchemaVersion: 1, DefaultMaxAttempts: 2, MaxMaxAttempts: 5, DefaultTimeoutMs: 100, MaxTimeoutMs: 1000},
		},
		Tenants:                []string{"t1", "t2"},
		IdempotencyRetentionMs: 50,
		RunRetentionMs:         100,
		MaxLeaseMs:             100,
		MaxReplays:             1,
		Backoff:                spec.Backoff{BaseMs: 10, CapMs: 40, JitterMs: 5, RetryAfterCapMs: 30},
	}
}

// world is a model state under test with a clock. Every step it takes is
// checked: Check on the new state, CheckStep on the transition, an unchanged
// state on an error, and an input state that Step did not change.
type world struct {
	t   *testing.T
	m   model.Model
	s   model.State
	now int64
}

func newWorld(t *testing.T, mods ...func(*spec.Config)) *world {
	cfg := testConfig()
	for _, mod := range mods {
		mod(&cfg)
	}
	m := model.Model{Config: cfg}
	return &world{t: t, m: m, s: m.Init()}
}

// at moves the clock (tests set it, so it may go anywhere).
func (w *world) at(now int64) *world { w.now = now; return w }

// do applies one operation at the world's clock and returns its result.
func (w *world) do(req spec.Request) model.Result {
	return w.doJitter(req, 0)
}

func (w *world) doJitter(req spec.Request, jitter int64) model.Result {
	w.t.Helper()
	op := model.Op{Now: w.now, Jitter: jitter, Req: req}
	before := w.s.Key()
	next, res := w.m.Step(w.s, op)
	if w.s.Key() != before {
		w.t.Fatalf("%s: Step changed its input state", op)
	}
	if res.Err != nil && next.Key() != before {
		w.t.Fatalf("%s: failed with %s but changed the state", op, res.Err.Code)
	}
	if err := w.m.Check(next); err != nil {
		w.t.Fatalf("%s: state after it violates invariants: %v", op, err)
	}
	if err := w.m.CheckStep(w.s, op, next); err != nil {
		w.t.Fatalf("%s: transition violates invariants: %v", op, err)
	}
	w.s = next
	return res
}

// must applies an operation that must succeed and returns its value.
func (w *world) must(req spec.Request) any {
	w.t.Helper()
	res := w.do(req)
	if res.Err != nil {
		w.t.Fatalf("%s at %d: want success, got %v", req.Op(), w.now, res.Err)
	}
	return res.Value
}

// fails applies an operation that must fail with code (and, when state is
// not empty, carry that run state), and must leave the state unchanged.
func (w *world) fails(req spec.Request, code spec.Code, state spec.RunState) {
	w.t.Helper()
	res := w.do(req)
	if res.Err == nil {
		w.t.Fatalf("%s at %d: want error %s, got success %s", req.Op(), w.now, code, res)
	}
	if res.Err.Code != code || res.Err.State != state {
		w.t.Fatalf("%s at %d: want error %s (state %q), got %s (state %q): %s", req.Op(), w.now, code, state, res.Err.Code, res.Err.State, res.Err.Message)
	}
}

func (w *world) create(tenant, key, run, payload string) spec.Run {
	w.t.Helper()
	return w.must(createReq(tenant, key, run, payload)).(spec.CreateRunResult).Run
}

func createReq(tenant, key, run, payload string) spec.CreateRunRequest {
	return spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: key, RunID: run, Payload: []byte(payload)}
}

// claim claims with a 10 ms lease and returns the leases.
func (w *world) claim(tenant, worker string, limit int) []spec.Lease {
	w.t.Helper()
	return w.must(spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: 10, Limit: limit}).([]spec.Lease)
}

// claimOne claims exactly one job and returns its lease ref.
func (w *world) claimOne(tenant, worker string) spec.LeaseRef {
	w.t.Helper()
	leases := w.claim(tenant, worker, 1)
	if len(leases) != 1 {
		w.t.Fatalf("claim %s by %s at %d: want one lease, got %d", tenant, worker, w.now, len(leases))
	}
	return leases[0].Ref()
}

func (w *world) run(tenant, id string) spec.Run {
	w.t.Helper()
	r, found := w.s.Run(tenant, id)
	if !found {
		w.t.Fatalf("run %s/%s does not exist", tenant, id)
	}
	return r
}

func (w *world) job(tenant, id string) spec.Job {
	w.t.Helper()
	j, found := w.s.Job(tenant, id)
	if !found {
		w.t.Fatalf("job %s/%s does not exist", tenant, id)
	}
	return j
}

// snapshot returns the world's snapshot.
func (w *world) snapshot() spec.Snapshot { return w.m.Snapshot(w.s) }

// attempt returns the attempt row of (tenant, run, generation).
func (w *world) attempt(tenant, run string, gen int64) spec.Attempt {
	w.t.Helper()
	for _, a := range w.snapshot().Attempts {
		if a.Tenant == tenant && a.RunID == run && a.Generation == gen {
			return a
		}
	}
	w.t.Fatalf("no attempt %s/%s@%d", tenant, run, gen)
	return spec.Attempt{}
}

// events returns the run's events.
func (w *world) events(tenant, run string) []spec.Event {
	var evs []spec.Event
	for _, e := range w.snapshot().Events {
		if e.Tenant == tenant && e.RunID == run {
			evs = append(evs, e)
		}
	}
	return evs
}

// lastEvent returns the run's last event.
func (w *world) lastEvent(tenant, run string) spec.Event {
	w.t.Helper()
	evs := w.events(tenant, run)
	if len(evs) == 0 {
		w.t.Fatalf("run %s/%s has no events", tenant, run)
	}
	return evs[len(evs)-1]
}

// equal fails the test when got != want, naming what was compared.
func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

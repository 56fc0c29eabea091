package harness

import (
	"context"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestConfig is the small policy the property tests run under: short leases,
// short deadlines and a two-attempt budget, so that a few dozen random steps
// cross every boundary (expiry, budget, deadline, retention, replay cap).
func TestConfig() spec.Config {
	return spec.Config{
		Operations: map[string]spec.OperationPolicy{
			"work": {SchemaVersion: 1, DefaultMaxAttempts: 2, MaxMaxAttempts: 3, DefaultTimeoutMs: 120, MaxTimeoutMs: 400},
		},
		IdempotencyRetentionMs: 150,
		MaxLeaseMs:             60,
		MaxReplays:             2,
		Backoff:                spec.Backoff{BaseMs: 4, CapMs: 16, JitterMs: 3, RetryAfterCapMs: 25},
	}
}

// Counters are what one property run did, for reports and vacuity guards.
type Counters struct {
	Checks     int // rapid checks (random sequences) run
	Operations int // store operations executed and compared
	Refused    int // operations that returned an error (all compared too)
	StaleWrite int // guarded writes presented with a superseded generation
}

// Property compares a real store with the model, step by step, over random
// operation sequences. It is generic over the store: any storetest.Factory.
type Property struct {
	Factory storetest.Factory
	Config  spec.Config
	// Counters accumulates over every check of the run.
	Counters Counters
}

// Check returns the rapid property. outer provides temporary directories and
// failure reporting to the factory; each check opens a fresh store.
func (p *Property) Check(outer testing.TB) func(*rapid.T) {
	return func(t *rapid.T) {
		scope := &scopedTB{TB: outer}
		defer scope.close()
		clk := clock.NewManual(1_000)
		rnd := &ScriptedRandom{}
		h := p.Factory(scope, storetest.Options{Config: p.Config, Clock: clk, Random: rnd})
		m := &machine{
			t: t, store: h.Store, model: model.Model{Config: p.Config}, clk: clk, rnd: rnd,
			cfg: p.Config, counters: &p.Counters,
		}
		m.state = m.model.Init()
		p.Counters.Checks++
		t.Repeat(m.actions())
	}
}

// machine is one random sequence: the store under test, the model's state
// after the same operations, and the leases handed out so far (stale ones
// included: presenting them again is how stale writes are generated).
type machine struct {
	t        *rapid.T
	store    spec.Store
	model    model.Model
	state    model.State
	clk      *clock.Manual
	rnd      *ScriptedRandom
	cfg      spec.Config
	leases   []spec.Lease
	runs     []runRef
	steps    int
	counters *Counters
}

type runRef struct{ tenant, id string }

var (
	tenants  = []string{"t1", "t2"}
	keys     = []string{"k1", "k2", "k3"}
	workers  = []string{"w1", "w2", "w3"}
	payloads = []string{`{"a":1,"b":[1,2]}`, `{ "b" : [1, 2], "a" : 1.0 }`, `{"a":2,"b":[1,2]}`, `null`}
	codes    = []string{"boom", "timeout", "rate_limited"}
	steps    = []string{"charge", "email"}
	effKeys  = []string{"e1", "e2"}
)

// invalid returns a bad value some of the time so that validation is
// compared too; otherwise it draws from good.
func invalid(t *rapid.T, label string, good []string, bad ...string) string {
	if rapid.IntRange(0, 24).Draw(t, label+"_bad?") == 0 {
		return rapid.SampledFrom(bad).Draw(t, label)
	}
	return rapid.SampledFrom(good).Draw(t, label)
}

func (m *machine) tenant(t *rapid.T) string {
	return invalid(t, "tenant", tenants, "", "T1", "t 1")
}

// runID draws an existing run (usually) or a new or foreign id.
func (m *machine) runID(t *rapid.T, tenant string) string {
	if len(m.runs) > 0 && rapid.IntRange(0, 3).Draw(t, "existing_run?") > 0 {
		r := rapid.SampledFrom(m.runs).Draw(t, "run")
		return r.id
	}
	return invalid(t, "run_id", []string{"r1", "r2", "r3", "r4", "r5", "r6"}, "", "r/1")
}

// lease draws a lease ever handed out (current or stale), or a forged one.
func (m *machine) lease(t *rapid.T) spec.LeaseRef {
	if len(m.leases) == 0 || rapid.IntRange(0, 9).Draw(t, "forged_lease?") == 0 {
		return spec.LeaseRef{Tenant: m.tenant(t), RunID: m.runID(t, ""), Owner: rapid.SampledFrom(workers).Draw(t, "owner"),
			Generation: rapid.Int64Range(0, 4).Draw(t, "generation")}
	}
	l := rapid.SampledFrom(m.leases).Draw(t, "lease")
	return l.Ref()
}

func (m *machine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"create": func(t *rapid.T) {
			tenant := m.tenant(t)
			req := spec.CreateRunRequest{
				Tenant: tenant, Operation: invalid(t, "operation", []string{"work"}, "nope"),
				IdempotencyKey: invalid(t, "key", keys, "", "k\n"),
				RunID:          m.runID(t, tenant),
				Payload:        []byte(invalid(t, "payload", payloads, `{"a":1,"a":2}`, "\"\xff\"", ``)),
				MaxAttempts:    rapid.IntRange(0, 4).Draw(t, "max_attempts"),
				TimeoutMs:      rapid.SampledFrom([]int64{0, 0, 30, 400, 401}).Draw(t, "timeout_ms"),
			}
			m.do(t, model.Op{Kind: spec.OpCreateRun, Req: req})
		},
		"claim": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpClaim, Req: spec.ClaimRequest{
				Tenant: m.tenant(t), Worker: invalid(t, "worker", workers, ""),
				LeaseMs: rapid.Int64Range(0, 61).Draw(t, "lease_ms"), Limit: rapid.IntRange(0, 3).Draw(t, "limit"),
			}})
		},
		"renew": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpRenew, Req: spec.RenewRequest{Lease: m.lease(t), LeaseMs: rapid.Int64Range(1, 60).Draw(t, "lease_ms")}})
		},
		"complete": func(t *rapid.T) {
			result := rapid.SampledFrom([]string{"", `{"ok":true}`, `{"x":1,"x":2}`}).Draw(t, "result")
			m.do(t, model.Op{Kind: spec.OpComplete, Req: spec.CompleteRequest{Lease: m.lease(t), Result: []byte(result)}})
		},
		"retry": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpRetry, Jitter: rapid.Int64Range(0, m.cfg.Backoff.JitterMs).Draw(t, "jitter"),
				Req: spec.RetryRequest{Lease: m.lease(t), ErrorCode: invalid(t, "code", codes, "Bad"),
					RetryAfterMs: rapid.SampledFrom([]int64{0, 0, 10, 40}).Draw(t, "retry_after_ms")}})
		},
		"fail": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpFail, Req: spec.FailRequest{Lease: m.lease(t), ErrorCode: invalid(t, "code", codes, "")}})
		},
		"cancel": func(t *rapid.T) {
			tenant := m.tenant(t)
			m.do(t, model.Op{Kind: spec.OpCancel, Req: spec.CancelRequest{Tenant: tenant, RunID: m.runID(t, tenant),
				Reason: invalid(t, "reason", []string{"", "user_request"}, "Nope")}})
		},
		"release": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpRelease, Req: spec.ReleaseRequest{Lease: m.lease(t)}})
		},
		"reap": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpReap, Req: spec.ReapRequest{Tenant: m.tenant(t), Limit: rapid.IntRange(0, 3).Draw(t, "limit")}})
		},
		"purge": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpPurge, Req: spec.PurgeRequest{Limit: rapid.IntRange(0, 3).Draw(t, "limit")}})
		},
		"replay": func(t *rapid.T) {
			tenant := m.tenant(t)
			m.do(t, model.Op{Kind: spec.OpReplay, Req: spec.ReplayRequest{Tenant: tenant, RunID: m.runID(t, tenant),
				NewRunID: m.runID(t, tenant), Actor: invalid(t, "actor", []string{"ops@example.com"}, "")}})
		},
		"reserve_effect": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpReserveEffect, Req: spec.ReserveEffectRequest{Lease: m.lease(t),
				Step: rapid.SampledFrom(steps).Draw(t, "step"), Key: rapid.SampledFrom(effKeys).Draw(t, "effect_key")}})
		},
		"record_effect": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpRecordEffect, Req: m.recordRequest(t, []spec.EffectState{spec.EffectSucceeded, spec.EffectFailed, spec.EffectUnknown})})
		},
		"reconcile_effect": func(t *rapid.T) {
			m.do(t, model.Op{Kind: spec.OpReconcileEffect, Req: m.recordRequest(t, []spec.EffectState{spec.EffectSucceeded, spec.EffectFailed, spec.EffectUnknown})})
		},
		"advance_clock": func(t *rapid.T) {
			if _, err := m.clk.Advance(rapid.Int64Range(1, 45).Draw(t, "advance_ms")); err != nil {
				t.Fatalf("advance clock: %v", err)
			}
		},
		"": m.check,
	}
}

func (m *machine) recordRequest(t *rapid.T, states []spec.EffectState) spec.RecordEffectRequest {
	return spec.RecordEffectRequest{Lease: m.lease(t), Step: rapid.SampledFrom(steps).Draw(t, "step"),
		Key: rapid.SampledFrom(effKeys).Draw(t, "effect_key"), State: rapid.SampledFrom(states).Draw(t, "effect_state"),
		ProviderRef: rapid.SampledFrom([]string{"", "ch_1"}).Draw(t, "provider_ref")}
}

// do runs op on the store and on the model and fails on any difference in
// the result (value, or error code and state).
func (m *machine) do(t *rapid.T, op model.Op) {
	op.Now = m.clk.Now()
	m.rnd.Set(op.Jitter)
	m.steps++
	m.counters.Operations++
	if m.staleGeneration(op) {
		m.counters.StaleWrite++
	}
	got, unexpected := Execute(context.Background(), m.store, op)
	if unexpected != nil {
		t.Fatalf("step %d: %s at %d: %v", m.steps, op.Kind, op.Now, unexpected)
	}
	next, want := m.model.Step(m.state, op)
	if !want.Equal(got) {
		t.Fatalf("step %d: %s at %d with %+v\n store returned %s\n model expects %s", m.steps, op.Kind, op.Now, op.Req, describe(got), describe(want))
	}
	if err := m.model.CheckStep(m.state, op, next); err != nil {
		t.Fatalf("step %d: %s at %d broke a transition invariant: %v", m.steps, op.Kind, op.Now, err)
	}
	t.Logf("step %d: %s at %d -> %s", m.steps, op.Kind, op.Now, describe(got))
	m.state = next
	if got.Err != nil {
		m.counters.Refused++
		return
	}
	switch v := got.Value.(type) {
	case []spec.Lease:
		m.leases = append(m.leases, v...)
	case spec.Lease:
		m.leases = append(m.leases, v)
	case spec.CreateRunResult:
		m.remember(v.Run)
	case spec.Run:
		m.remember(v)
	}
}

func (m *machine) remember(r spec.Run) {
	ref := runRef{r.Tenant, r.ID}
	for _, have := range m.runs {
		if have == ref {
			return
		}
	}
	m.runs = append(m.runs, ref)
}

// staleGeneration reports a guarded write presented with a generation older
// than the job's current one (for the vacuity counters).
func (m *machine) staleGeneration(op model.Op) bool {
	var ref spec.LeaseRef
	switch req := op.Req.(type) {
	case spec.RenewRequest:
		ref = req.Lease
	case spec.CompleteRequest:
		ref = req.Lease
	case spec.RetryRequest:
		ref = req.Lease
	case spec.FailRequest:
		ref = req.Lease
	case spec.ReleaseRequest:
		ref = req.Lease
	case spec.ReserveEffectRequest:
		ref = req.Lease
	case spec.RecordEffectRequest:
		ref = req.Lease
	default:
		return false
	}
	newest := int64(0)
	for _, l := range m.leases {
		if l.Tenant == ref.Tenant && l.RunID == ref.RunID && l.Generation > newest {
			newest = l.Generation
		}
	}
	return ref.Generation > 0 && ref.Generation < newest
}

// check compares every row of the store with the model's state, and checks
// the model's invariants. It runs after every step.
func (m *machine) check(t *rapid.T) {
	snap, err := m.store.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("after step %d: snapshot: %v", m.steps, err)
	}
	if diff := DiffSnapshots(m.model.Snapshot(m.state), snap); diff != "" {
		t.Fatalf("after step %d the store's rows differ from the model's (model first, store second):\n%s", m.steps, diff)
	}
	if err := m.model.Check(m.state); err != nil {
		t.Fatalf("after step %d the model's state breaks an invariant: %v", m.steps, err)
	}
}

func describe(r model.Result) string {
	if r.Err != nil {
		if r.Err.State != "" {
			return fmt.Sprintf("error %s (state %s): %s", r.Err.Code, r.Err.State, r.Err.Message)
		}
		return fmt.Sprintf("error %s: %s", r.Err.Code, r.Err.Message)
	}
	return fmt.Sprintf("%+v", r.Value)
}

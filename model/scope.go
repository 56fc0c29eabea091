package model

import (
	"github.com/leasehold/leasehold/spec"
)

// Scope bounds an exhaustive exploration: the configuration, the requests
// clients may send, and how far the clock may go. At every state the explorer
// tries every action the scope allows; the state space is finite because time
// is bounded by MaxTime and runs by MaxRuns.
type Scope struct {
	Name   string
	Config spec.Config
	// Creates are the CreateRun requests clients may send, at any time. Reuse
	// keys, run ids and payloads so that every admission outcome happens
	// (new run, idempotent replay, conflict, already exists, expired key).
	Creates []spec.CreateRunRequest
	// Claims are the Claim requests workers may send.
	Claims []spec.ClaimRequest
	// MaxRuns bounds the runs CreateRun admits (replays are bounded by
	// Config.MaxReplays): the explorer drops an admission past it. Creates
	// are still tried, so replays, conflicts and already_exists still happen.
	MaxRuns int
	// Ticks are the clock moves the explorer may make; the clock never passes
	// MaxTime. The clock starts at 0.
	Ticks   []int64
	MaxTime int64
	// RenewMs is the lease duration of renewals (0: no renewals).
	RenewMs int64
	// Jitters are the draws the store's Random may return for a retry below
	// the budget (each must be in [0, Backoff.JitterMs]). Empty: no retries.
	Jitters []int64
	// RetryAfterMs is the Retry-After every retry carries.
	RetryAfterMs int64
	// Effect is the (step, key) workers reserve and record; "" for none.
	EffectStep, EffectKey string
	// Cancel, Release, Reap, Purge, PurgeRuns and Replay switch those
	// operations on. Guarded writes are tried through every lease ever
	// handed out (every attempt row), so stale workers are always in the
	// scope.
	Cancel, Release, Reap, Purge, PurgeRuns, Replay bool
	// MaxGeneration bounds every job's generation: the explorer drops a
	// claim that would pass it. Without it, claim and release (which refunds
	// the attempt) would cycle forever without the clock moving.
	MaxGeneration int64
	// MaxDepth bounds the number of steps (operations and clock moves) from
	// the empty store (0: no bound). With it the exploration is complete up to
	// that depth: every behaviour of at most MaxDepth steps is checked.
	MaxDepth int
	// MaxStates stops the exploration early (0: no limit); the report then
	// says it is incomplete.
	MaxStates int
	// Outbox, when set, is the message every completion writes (beside the
	// plain completion), and ClaimOutbox (by two relays) and MarkDelivered
	// (of every message) are tried at every state. Creates carry their own.
	Outbox *spec.Message
}

// smallConfig is the configuration of the built-in scopes: one operation
// with two attempts, leases of at most 1 ms, run deadlines 2 ms after
// admission, idempotency keys kept 2 ms, finished runs kept 1 ms, one
// replay per lineage, and a backoff of 1 ms plus a jitter of at most 1 ms. With a clock that moves 1 ms
// at a time every deadline of the contract is crossed within a few steps.
func smallConfig() spec.Config {
	return spec.Config{
		Operations: map[string]spec.OperationPolicy{
			"work": {SchemaVersion: 1, DefaultMaxAttempts: 2, MaxMaxAttempts: 2, DefaultTimeoutMs: 2, MaxTimeoutMs: 2},
		},
		Tenants:                []string{"t1", "t2"},
		IdempotencyRetentionMs: 2,
		RunRetentionMs:         1,
		MaxLeaseMs:             1,
		MaxReplays:             1,
		Backoff:                spec.Backoff{BaseMs: 1, CapMs: 2, JitterMs: 1, RetryAfterCapMs: 0},
	}
}

// DefaultScope is the main scope `go test ./model/` explores, complete to
// depth 7: two tenants, at most two admitted runs (and their replays), two
// workers (one of them stale whenever the other reclaimed), two attempts per
// run, one effect key, and a clock moving 1 ms at a time up to 4 ms. Within
// seven steps it reaches every operation and every outcome the contract
// names: a new run, an idempotent replay, an idempotency conflict (of the
// payload, and of the schedule), a taken run id, the same key and run id in
// another tenant, a scheduled run, key expiry and purge, batch and
// out-of-order claims, lease expiry and reclaim, every stale write, renewal
// past the deadline, retries below and at the budget, reap, cancel in every
// job state, replay, the retention purge of runs and lineages, and every
// effect ledger transition.
func DefaultScope() Scope {
	p1, p2 := []byte(`{"n":1}`), []byte(`{ "n" : 2 }`)
	create := func(tenant, key, run string, payload []byte) spec.CreateRunRequest {
		return spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: key, RunID: run, Payload: payload}
	}
	delayed := create("t1", "k1", "r2", p1)
	delayed.DelayMs = 1
	return Scope{
		Name:   "default",
		Config: smallConfig(),
		Creates: []spec.CreateRunRequest{
			create("t1", "k1", "r1", p1), // a new run
			create("t1", "k1", "r2", p1), // same key and request: the original run (a new one once k1 expired)
			create("t1", "k1", "r3", p2), // same key, another request: idempotency_conflict
			create("t1", "k2", "r1", p1), // another key, a taken run id: already_exists
			create("t2", "k1", "r1", p1), // the same key and run id in another tenant: a distinct run
			delayed,                      // k1's request, scheduled: a conflict while k1 lives, then a run claimable 1 ms later
		},
		Claims: []spec.ClaimRequest{
			{Tenant: "t1", Worker: "w1", LeaseMs: 1, Limit: 1},
			{Tenant: "t1", Worker: "w2", LeaseMs: 1, Limit: 2},
			{Tenant: "t2", Worker: "w1", LeaseMs: 1, Limit: 1},
		},
		MaxRuns:       2,
		MaxGeneration: 3,
		Ticks:         []int64{1},
		MaxTime:       4,
		RenewMs:       1,
		Jitters:       []int64{1},
		EffectStep:    "charge", EffectKey: "e1",
		Cancel: true, Release: true, Reap: true, Purge: true, PurgeRuns: true, Replay: true,
		MaxDepth: 7,
	}
}

// LifecycleScope is the second scope `go test ./model/` explores, and this
// one completely (no depth bound): every reachable state of one admitted run
// and its replay, under two workers, with every operation but the effect
// ledger (which multiplies the states by ten), up to 3 ms and generation 2.
func LifecycleScope() Scope {
	sc := DefaultScope()
	sc.Name = "lifecycle"
	sc.MaxRuns = 1
	sc.MaxGeneration = 2
	sc.MaxTime = 3
	sc.EffectStep, sc.EffectKey = "", ""
	sc.MaxDepth = 0
	return sc
}

// OutboxScope is the third scope `go test ./model/` explores, complete to
// depth 11: one run (and its replay) whose admission may write a message and
// whose completion may write another, two relays (one of them for every
// tenant) claiming with leases of 1 and 2 ms, deliveries of every message,
// stale completions, and the purge of runs: a completion refused writes no
// message, a claim takes only what no live claim holds, an expired claim is
// taken again, and a run with a message not yet delivered is never purged.
func OutboxScope() Scope {
	sc := LifecycleScope()
	sc.Name = "outbox"
	withMessage := sc.Creates[0]
	withMessage.Outbox = []spec.Message{{Subject: "orders.created", Payload: []byte(`{"n":1}`)}}
	sc.Creates = []spec.CreateRunRequest{withMessage, sc.Creates[0], sc.Creates[2]} // with a message, the same key without (a conflict), another request
	sc.Outbox = &spec.Message{Subject: "orders.done", Payload: []byte(`{"ok":true}`)}
	sc.Claims = sc.Claims[:2]
	sc.Jitters = nil
	sc.Release, sc.Purge = false, false
	sc.MaxDepth = 11
	return sc
}

// LargeScopes are the scopes LEASEHOLD_EXPLORE_SCOPE=large selects (about
// three minutes and 3 GB on two cores): the default scope to depth 9 with
// both jitter draws; the lifecycle scope with the effect ledger; and the
// lifecycle scope up to generation 3 (a release or a replay, then two more
// claims).
func LargeScopes() []Scope {
	deep := DefaultScope()
	deep.Name = "large-default"
	deep.MaxDepth = 9
	deep.Jitters = []int64{0, 1}
	effects := LifecycleScope()
	effects.Name = "large-lifecycle-effects"
	effects.EffectStep, effects.EffectKey = "charge", "e1"
	effects.Jitters = []int64{0, 1}
	gen3 := LifecycleScope()
	gen3.Name = "large-lifecycle-gen3"
	gen3.MaxGeneration = 3
	return []Scope{deep, effects, gen3}
}

// action is one thing the explorer may do at a state: move the clock, or
// call the store.
type action struct {
	advance int64 // > 0: a clock move
	op      Op
}

// actions lists, in a fixed order, every action the scope allows at (now, s).
// The order is part of the explorer's determinism: a trace is replayed by
// indices into it.
func (sc *Scope) actions(now int64, s State) []action {
	var acts []action
	for _, d := range sc.Ticks {
		if d > 0 && now <= sc.MaxTime-d {
			acts = append(acts, action{advance: d})
		}
	}
	do := func(req spec.Request) { acts = append(acts, action{op: Op{Now: now, Req: req}}) }
	for _, c := range sc.Creates {
		do(c)
	}
	for _, c := range sc.Claims {
		do(c)
	}
	tenants := map[string]bool{}
	for _, r := range s.runs {
		run := r.run
		if sc.Cancel {
			do(spec.CancelRequest{Tenant: run.Tenant, RunID: run.ID})
		}
		if sc.Replay && run.State == spec.RunFailed {
			do(spec.ReplayRequest{Tenant: run.Tenant, RunID: run.ID, NewRunID: run.ID + ".r", Actor: "ops"})
		}
		if !tenants[run.Tenant] {
			tenants[run.Tenant] = true
			if sc.Reap {
				do(spec.ReapRequest{Tenant: run.Tenant, Limit: 2})
			}
			if sc.PurgeRuns {
				do(spec.PurgeRunsRequest{Tenant: run.Tenant, Limit: 1})
			}
		}
		for _, a := range r.attempts {
			sc.guardedActions(do, spec.LeaseRef{Tenant: a.Tenant, RunID: a.RunID, Owner: a.Worker, Generation: a.Generation}, now, &acts)
		}
	}
	if sc.Purge && len(s.idem) > 0 {
		do(spec.PurgeRequest{Limit: 1})
	}
	if sc.Outbox != nil {
		do(spec.ClaimOutboxRequest{Tenant: "t1", Relay: "relay1", LeaseMs: 1, Limit: 1})
		do(spec.ClaimOutboxRequest{Relay: "relay2", LeaseMs: 2, Limit: 2})
		for _, r := range s.runs {
			for _, m := range r.outbox {
				do(spec.MarkDeliveredRequest{Messages: []spec.OutboxKey{m.Key()}})
			}
		}
	}
	return acts
}

// guardedActions adds every guarded write through ref.
func (sc *Scope) guardedActions(do func(spec.Request), ref spec.LeaseRef, now int64, acts *[]action) {
	if sc.RenewMs > 0 {
		do(spec.RenewRequest{Lease: ref, LeaseMs: sc.RenewMs})
	}
	do(spec.CompleteRequest{Lease: ref, Result: []byte(`{"ok":true}`)})
	if sc.Outbox != nil {
		do(spec.CompleteRequest{Lease: ref, Outbox: []spec.Message{*sc.Outbox}})
	}
	for _, j := range sc.Jitters {
		*acts = append(*acts, action{op: Op{Now: now, Jitter: j,
			Req: spec.RetryRequest{Lease: ref, ErrorCode: "busy", RetryAfterMs: sc.RetryAfterMs}}})
	}
	do(spec.FailRequest{Lease: ref, ErrorCode: "fatal"})
	if sc.Release {
		do(spec.ReleaseRequest{Lease: ref})
	}
	if sc.EffectStep == "" {
		return
	}
	do(spec.ReserveEffectRequest{Lease: ref, Step: sc.EffectStep, Key: sc.EffectKey})
	record := func(state spec.EffectState, provider string) spec.RecordEffectRequest {
		return spec.RecordEffectRequest{Lease: ref, Step: sc.EffectStep, Key: sc.EffectKey, State: state, ProviderRef: provider}
	}
	do(record(spec.EffectSucceeded, "pay-1"))
	do(record(spec.EffectFailed, ""))
	do(record(spec.EffectUnknown, ""))
	do(spec.ReconcileEffectRequest(record(spec.EffectSucceeded, "pay-1")))
	do(spec.ReconcileEffectRequest(record(spec.EffectFailed, "")))
}

// allows reports whether a state is within the scope's bounds on admitted
// runs and generations.
func (sc *Scope) allows(s State) bool {
	admitted := 0
	for _, r := range s.runs {
		if r.run.ReplayOf == "" {
			admitted++
		}
		if sc.MaxGeneration > 0 && r.job.Generation > sc.MaxGeneration {
			return false
		}
	}
	return sc.MaxRuns <= 0 || admitted <= sc.MaxRuns
}

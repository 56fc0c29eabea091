package harness

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestConfig is the small policy the property tests run under: short leases,
// short deadlines and a two-attempt budget, so that a few dozen random steps
// cross every boundary (expiry, budget, deadline, retention, replay cap). Runs
// are kept a shorter time than idempotency records, so that a record still
// holds a run past its retention now and then.
func TestConfig() spec.Config {
	return spec.Config{
		Operations: map[string]spec.OperationPolicy{
			"work": {SchemaVersion: 1, DefaultMaxAttempts: 2, MaxMaxAttempts: 3, DefaultTimeoutMs: 120, MaxTimeoutMs: 400},
		},
		IdempotencyRetentionMs: 150,
		RunRetentionMs:         100,
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
	// Outcomes counts results by operation and code ("ok" for success).
	Outcomes map[string]int
}

func (c *Counters) count(op spec.Op, r model.Result) {
	if c.Outcomes == nil {
		c.Outcomes = map[string]int{}
	}
	code := "ok"
	if r.Err != nil {
		code = string(r.Err.Code)
	} else if v, isList := r.Value.([]spec.Lease); isList && len(v) == 0 {
		code = "empty"
	} else if v, isList := r.Value.([]string); isList && len(v) == 0 && op == spec.OpPurgeRuns {
		code = "empty"
	} else if v, isList := r.Value.([]spec.OutboxMessage); isList && len(v) == 0 {
		code = "empty"
	} else if v, isInt := r.Value.(int); isInt && v == 0 && op == spec.OpMarkDelivered {
		code = "empty"
	}
	c.Outcomes[string(op)+" "+code]++
	if outs, isBatch := r.Value.([]spec.BatchOutcome); isBatch {
		for _, o := range outs {
			member := "ok"
			if o.Err != nil {
				member = string(spec.CodeOf(o.Err))
			}
			c.Outcomes[string(op)+" member "+member]++
		}
	}
	if outs, isBulk := r.Value.([]spec.CreateOutcome); isBulk {
		for _, o := range outs {
			member := "created"
			switch {
			case o.Err != nil:
				member = string(spec.CodeOf(o.Err))
			case o.Result.Replayed:
				member = "replayed"
			}
			c.Outcomes[string(op)+" member "+member]++
		}
	}
}

// Property compares a real store with the model, step by step, over random
// operation sequences. It is generic over the store: any storetest.Factory.
type Property struct {
	Factory storetest.Factory
	Config  spec.Config
	// Counters accumulates over every check of the run.
	Counters Counters
	// FirstFailure is set when a check first finds a difference, before
	// rapid shrinks it: how much work it took to find.
	FirstFailure *Failure
	started      time.Time
}

// Failure records when a property run first failed.
type Failure struct {
	Operations int           // operations executed over all checks until then
	Elapsed    time.Duration // since the first check started
	Message    string
}

// Check returns the rapid property. outer provides temporary directories and
// failure reporting to the factory; each check opens a fresh store.
func (p *Property) Check(outer testing.TB) func(*rapid.T) {
	refuseStaleFailfile(outer)
	return func(t *rapid.T) {
		if p.started.IsZero() {
			p.started = time.Now()
		}
		scope := &scopedTB{TB: outer}
		defer scope.close()
		clk := clock.NewManual(1_000)
		rnd := &history.ScriptedRandom{}
		h := p.Factory(scope, storetest.Options{Config: p.Config, Clock: clk, Random: rnd})
		m := &machine{
			t: t, store: h.Store, model: model.Model{Config: p.Config}, clk: clk, rnd: rnd,
			cfg: p.Config, property: p,
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
	rnd      *history.ScriptedRandom
	cfg      spec.Config
	leases   []spec.Lease
	runs     []runRef
	steps    int
	property *Property
	// lastOutboxCreate is the last create create_outbox sent, for its
	// retries.
	lastOutboxCreate *spec.CreateRunRequest
	// cursors are the Next of every page listed so far.
	cursors []string
}

// fail records the property's first failure and fails the check.
func (m *machine) fail(t *rapid.T, format string, args ...any) {
	p := m.property
	msg := fmt.Sprintf(format, args...)
	if p.FirstFailure == nil {
		p.FirstFailure = &Failure{Operations: p.Counters.Operations, Elapsed: time.Since(p.started), Message: msg}
	}
	t.Fatal(msg)
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

// sometimesBad returns one of bad about one time in forty, else a draw from
// good, so that validation is compared too without drowning the sequence in
// refusals (rapid's integer generators lean towards their bounds, so bad
// values are never left to a range's edges).
func sometimesBad[V any](t *rapid.T, label string, good *rapid.Generator[V], bad ...V) V {
	if rapid.IntRange(0, 39).Draw(t, label+"_bad?") == 20 { // rapid favours the bounds; 20 is drawn ~1.5% of the time
		return rapid.SampledFrom(bad).Draw(t, label)
	}
	return good.Draw(t, label)
}

// invalid is sometimesBad over a list of good strings.
func invalid(t *rapid.T, label string, good []string, bad ...string) string {
	return sometimesBad(t, label, rapid.SampledFrom(good), bad...)
}

func (m *machine) tenant(t *rapid.T) string {
	return invalid(t, "tenant", tenants, "", "T1", "t 1")
}

// runID draws, usually, a run of the tenant that exists; otherwise any id
// (a new one, another tenant's, or an invalid one).
func (m *machine) runID(t *rapid.T, tenant string) string {
	var own []string
	for _, r := range m.runs {
		if r.tenant == tenant {
			own = append(own, r.id)
		}
	}
	if len(own) > 0 && rapid.IntRange(0, 3).Draw(t, "existing_run?") > 0 {
		return rapid.SampledFrom(own).Draw(t, "run")
	}
	return invalid(t, "run_id", []string{"r1", "r2", "r3", "r4", "r5", "r6"}, "", "r/1")
}

// newRunID draws, usually, an id the tenant has not used; otherwise any id.
func (m *machine) newRunID(t *rapid.T, tenant string) string {
	if rapid.IntRange(0, 4).Draw(t, "fresh_run_id?") == 0 {
		return m.runID(t, tenant)
	}
	used := 0
	for _, r := range m.runs {
		if r.tenant == tenant {
			used++
		}
	}
	return fmt.Sprintf("r%d", used+1+rapid.IntRange(0, 1).Draw(t, "skip"))
}

// lease draws, half the time, a lease that is current in the model;
// otherwise the newest lease handed out for some run, any lease ever handed
// out (often stale), or a forged one.
func (m *machine) lease(t *rapid.T) spec.LeaseRef {
	current := m.currentLeases()
	switch choice := rapid.IntRange(0, 9).Draw(t, "lease_kind"); {
	case choice >= 5 && len(current) > 0:
		return rapid.SampledFrom(current).Draw(t, "current_lease")
	case len(m.leases) == 0 || choice == 0:
		tenant := m.tenant(t)
		return spec.LeaseRef{Tenant: tenant, RunID: m.runID(t, tenant), Owner: rapid.SampledFrom(workers).Draw(t, "owner"),
			Generation: rapid.Int64Range(0, 4).Draw(t, "generation")}
	case choice <= 2:
		return rapid.SampledFrom(m.leases).Draw(t, "lease").Ref()
	default:
		return rapid.SampledFrom(m.newestLeases()).Draw(t, "lease").Ref()
	}
}

// currentLeases returns the leases the model holds as current (expired ones
// included: whether they still count is for the store to decide).
func (m *machine) currentLeases() []spec.LeaseRef {
	var out []spec.LeaseRef
	for _, j := range m.model.Snapshot(m.state).Jobs {
		if j.State == spec.JobLeased {
			out = append(out, spec.LeaseRef{Tenant: j.Tenant, RunID: j.RunID, Owner: j.LeaseOwner, Generation: j.Generation})
		}
	}
	return out
}

// newestLeases returns the highest-generation lease handed out per run.
func (m *machine) newestLeases() []spec.Lease {
	newest := map[runRef]int{}
	var order []runRef
	for i, l := range m.leases {
		k := runRef{l.Tenant, l.RunID}
		j, seen := newest[k]
		if !seen {
			order = append(order, k)
		}
		if !seen || l.Generation >= m.leases[j].Generation {
			newest[k] = i
		}
	}
	out := make([]spec.Lease, 0, len(order))
	for _, k := range order {
		out = append(out, m.leases[newest[k]])
	}
	return out
}

// actions is the rapid state machine. rapid picks actions uniformly, so the
// ones that move runs forward are listed more than once (weighted by name).
// The names are plain verbs: a failing sequence worth keeping becomes a
// scenario (scenarios/testdata/kept_*), and a kept failfile is stamped with
// ActionsVersion, so that one drawn against another map is refused, not
// replayed as something else.
func (m *machine) actions() map[string]func(*rapid.T) {
	a := m.baseActions()
	for name, copies := range map[string]int{"create": 2, "claim": 3, "complete": 2, "renew": 1, "retry": 2, "reserve_effect": 1, "record_effect": 1, "advance_clock": 2} {
		for i := 1; i <= copies; i++ {
			a[fmt.Sprintf("%s_%d", name, i)] = a[name]
		}
	}
	for _, more := range []map[string]func(*rapid.T){m.laterActions(), m.outboxActions(), m.bulkActions(), m.roundActions(),
		m.listActions(), m.txActions(), m.readActions()} {
		for name, action := range more {
			a[name] = action
		}
	}
	return a
}

// txActions are admission's in the application's transaction
// (spec.TxAdmitter): create_run_tx admits a request (now and then with a message,
// now and then invalid) in a transaction that commits or rolls back, and
// half the time admits its key again at once with CreateRun under another
// run id: after a rollback that one creates its run, after a commit it
// replays or conflicts.
func (m *machine) txActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"create_run_tx": func(t *rapid.T) {
			if !spec.OperationOf(spec.CreateRunTxRequest{}).Supports(m.store) {
				t.Skip("the store does not implement spec.TxAdmitter")
			}
			tenant := m.tenant(t)
			req := spec.CreateRunRequest{Tenant: tenant, Operation: "work",
				IdempotencyKey: invalid(t, "key", keys, ""),
				RunID:          m.newRunID(t, tenant),
				Payload:        []byte(invalid(t, "payload", payloads, `{"a":1,"a":2}`)),
				DelayMs:        rapid.SampledFrom([]int64{0, 0, 20}).Draw(t, "delay_ms"),
			}
			if rapid.IntRange(0, 3).Draw(t, "with_message?") == 0 {
				req.Outbox = messages(t)
			}
			m.do(t, model.Op{Req: spec.CreateRunTxRequest{Request: req, Rollback: rapid.Bool().Draw(t, "rollback")}})
			if rapid.Bool().Draw(t, "admit_again?") {
				again := req
				again.RunID = m.newRunID(t, tenant)
				again.Payload = []byte(rapid.SampledFrom(payloads).Draw(t, "payload_again"))
				m.do(t, model.Op{Req: again})
			}
		},
	}
}

// listActions are the listing's. A round of
// listing pages through a tenant's runs to the end, each page from the
// Next of the one before with the same filters, so that a page boundary
// inside runs created in one millisecond is common; now and then it starts
// from the cursor of an earlier round (of any tenant or filter: a cursor is
// a position in the order), and now and then a page size is out of bounds
// or a cursor is one no listing made.
func (m *machine) listActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"list_runs": func(t *rapid.T) {
			if !spec.OperationOf(spec.ListRunsRequest{}).Supports(m.store) {
				t.Skip("the store does not implement spec.RunLister")
			}
			req := spec.ListRunsRequest{Tenant: m.tenant(t), Limit: sometimesBad(t, "limit", rapid.IntRange(1, 3), 0, spec.MaxBatch+1)}
			now := m.clk.Now()
			switch rapid.IntRange(0, 3).Draw(t, "filter") {
			case 1:
				req.State = rapid.SampledFrom([]spec.RunState{spec.RunQueued, spec.RunRunning, spec.RunCompleted, spec.RunFailed, spec.RunCancelled}).Draw(t, "state")
			case 2:
				req.CreatedFrom = rapid.Int64Range(0, now).Draw(t, "created_from")
				req.CreatedBefore = rapid.SampledFrom([]int64{0, req.CreatedFrom + 1, now}).Draw(t, "created_before")
				if req.CreatedBefore != 0 && req.CreatedBefore <= req.CreatedFrom {
					req.CreatedBefore = 0
				}
			}
			if len(m.cursors) > 0 && rapid.IntRange(0, 3).Draw(t, "resume?") == 0 {
				req.Cursor = invalid(t, "cursor", m.cursors, "r1")
			}
			for range 20 {
				got := m.do(t, model.Op{Req: req})
				p, ok := got.Value.(spec.RunPage)
				if !ok || p.Next == "" {
					return
				}
				m.cursors = append(m.cursors, p.Next)
				req.Cursor = p.Next
			}
		},
	}
}

// roundActions are a worker's, a relay's and a retrying client's whole
// rounds: each is a few operations, the
// later on what the earlier returned, so that a batch completion that completes one
// member and refuses another, an outbox claim that takes messages, a mark
// that marks them and a bulk admission that replays members are common in
// every run, not left to the luck of a short one (etcd's 30 sequences).
func (m *machine) roundActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		// A worker claims and completes what it got in one batch, beside a
		// zombie: the generation before one of its leases, under any owner
		// (a paused worker's late completion; on a first claim, generation
		// 0, a lease never granted), which must be refused.
		"work_batch": func(t *rapid.T) {
			if !spec.OperationOf(spec.CompleteBatchRequest{}).Supports(m.store) {
				t.Skip("the store does not implement spec.BatchCompleter")
			}
			got := m.do(t, model.Op{Req: spec.ClaimRequest{Tenant: m.tenant(t), Worker: rapid.SampledFrom(workers).Draw(t, "worker"),
				LeaseMs: 60, Limit: rapid.IntRange(1, 3).Draw(t, "limit")}})
			leases, _ := got.Value.([]spec.Lease)
			if len(leases) == 0 {
				return
			}
			var reqs []spec.CompleteRequest
			for _, l := range leases {
				reqs = append(reqs, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"ok":true}`)})
			}
			zombie := rapid.SampledFrom(leases).Draw(t, "zombie_of").Ref()
			zombie.Generation--
			zombie.Owner = rapid.SampledFrom(workers).Draw(t, "zombie_owner")
			at := rapid.IntRange(0, len(reqs)).Draw(t, "zombie_at")
			reqs = slices.Insert(reqs, at, spec.CompleteRequest{Lease: zombie})
			m.do(t, model.Op{Req: spec.CompleteBatchRequest{Requests: reqs}})
		},
		// A worker restarts under its name while its lease expires: it
		// reclaims the run at the next generation, and its earlier
		// incarnation's late completion through the old lease (same owner,
		// a lease live again) must be refused on the generation alone.
		"restart": func(t *rapid.T) {
			tenant, worker := m.tenant(t), rapid.SampledFrom(workers).Draw(t, "worker")
			got := m.do(t, model.Op{Req: spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: 20, Limit: 1}})
			leases, _ := got.Value.([]spec.Lease)
			if len(leases) == 0 {
				return
			}
			if _, err := m.clk.Advance(20); err != nil {
				t.Fatalf("advance clock: %v", err)
			}
			m.do(t, model.Op{Req: spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: 60, Limit: 3}})
			m.do(t, model.Op{Req: spec.CompleteRequest{Lease: leases[0].Ref(), Result: []byte(`{"late":true}`)}})
		},
		// A client admits a run with messages; a relay claims messages of
		// every tenant and marks what it took delivered.
		"relay": func(t *rapid.T) {
			tenant := rapid.SampledFrom(tenants).Draw(t, "tenant")
			m.do(t, model.Op{Req: spec.CreateRunRequest{Tenant: tenant, Operation: "work",
				IdempotencyKey: rapid.SampledFrom(keys).Draw(t, "key"), RunID: m.newRunID(t, tenant),
				Payload: []byte(rapid.SampledFrom(payloads).Draw(t, "payload")), Outbox: messages(t)}})
			got := m.do(t, model.Op{Req: spec.ClaimOutboxRequest{Relay: "relay1", LeaseMs: 25, Limit: 3}})
			msgs, _ := got.Value.([]spec.OutboxMessage)
			if len(msgs) == 0 {
				return
			}
			var keys []spec.OutboxKey
			for _, msg := range msgs {
				keys = append(keys, msg.Key())
			}
			m.do(t, model.Op{Req: spec.MarkDeliveredRequest{Messages: keys}})
		},
		// A client that did not hear back sends its bulk admission again,
		// each member with another proposed run id: what the first created,
		// the second replays.
		"create_runs_twice": func(t *rapid.T) {
			if !spec.OperationOf(spec.CreateRunsRequest{}).Supports(m.store) {
				t.Skip("the store does not implement spec.BatchCreator")
			}
			var reqs []spec.CreateRunRequest
			for range rapid.IntRange(1, 3).Draw(t, "members") {
				tenant := rapid.SampledFrom(tenants).Draw(t, "tenant")
				reqs = append(reqs, spec.CreateRunRequest{Tenant: tenant, Operation: "work",
					IdempotencyKey: rapid.SampledFrom(keys).Draw(t, "key"), RunID: m.newRunID(t, tenant),
					Payload: []byte(rapid.SampledFrom(payloads).Draw(t, "payload"))})
			}
			m.do(t, model.Op{Req: spec.CreateRunsRequest{Requests: reqs}})
			again := slices.Clone(reqs)
			for i := range again {
				again[i].RunID = m.newRunID(t, again[i].Tenant)
			}
			m.do(t, model.Op{Req: spec.CreateRunsRequest{Requests: again}})
		},
	}
}

// bulkActions are bulk admission's actions: create_runs admits 0 to 4 members,
// each a new request or a repeat of an earlier member of the batch (the
// same request, a replay; another payload, a conflict; another key with the
// same run id, already_exists), now and then an invalid one.
func (m *machine) bulkActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"create_runs": func(t *rapid.T) {
			if !spec.OperationOf(spec.CreateRunsRequest{}).Supports(m.store) {
				t.Skip("the store does not implement spec.BatchCreator")
			}
			var reqs []spec.CreateRunRequest
			for range rapid.IntRange(0, 4).Draw(t, "members") {
				if len(reqs) > 0 && rapid.IntRange(0, 2).Draw(t, "repeat?") == 0 {
					r := rapid.SampledFrom(reqs).Draw(t, "repeated")
					switch rapid.IntRange(0, 2).Draw(t, "repeat_as") {
					case 0:
						r.RunID = m.newRunID(t, r.Tenant) // the same request: a replay
					case 1:
						r.Payload = []byte(rapid.SampledFrom(payloads).Draw(t, "payload")) // maybe another fingerprint
					default:
						r.IdempotencyKey = rapid.SampledFrom(keys).Draw(t, "key") // maybe the same run id under another key
					}
					reqs = append(reqs, r)
					continue
				}
				tenant := m.tenant(t)
				reqs = append(reqs, spec.CreateRunRequest{
					Tenant: tenant, Operation: "work",
					IdempotencyKey: invalid(t, "key", keys, ""),
					RunID:          m.newRunID(t, tenant),
					Payload:        []byte(invalid(t, "payload", payloads, `{"a":1,"a":2}`)),
					DelayMs:        sometimesBad(t, "delay_ms", rapid.SampledFrom([]int64{0, 0, 0, 20}), -1),
				})
			}
			m.do(t, model.Op{Req: spec.CreateRunsRequest{Requests: reqs}})
		},
	}
}

// messages draws one or two outbox messages, now and then an invalid one.
func messages(t *rapid.T) []spec.Message {
	var out []spec.Message
	for range rapid.IntRange(1, 2).Draw(t, "messages") {
		out = append(out, spec.Message{
			Subject: invalid(t, "subject", []string{"orders.created", "orders.done"}, "orders.*", ""),
			Payload: []byte(invalid(t, "message_payload", []string{`{"n":1}`, `{ "n" : 1.0 }`, `[1,2]`}, `{"a":1,"a":2}`)),
		})
	}
	return out
}

// outboxActions are the outbox's actions.
func (m *machine) outboxActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"create_outbox": func(t *rapid.T) {
			// Half the time a retry of the last one (another proposed run id),
			// which must replay and write nothing.
			if m.lastOutboxCreate != nil && rapid.Bool().Draw(t, "retry_create?") {
				last := *m.lastOutboxCreate
				last.RunID = m.newRunID(t, last.Tenant)
				m.do(t, model.Op{Req: last})
				return
			}
			tenant := m.tenant(t)
			req := spec.CreateRunRequest{Tenant: tenant, Operation: "work",
				IdempotencyKey: rapid.SampledFrom(keys).Draw(t, "key"), RunID: m.newRunID(t, tenant),
				Payload: []byte(rapid.SampledFrom(payloads).Draw(t, "payload")), Outbox: messages(t)}
			m.lastOutboxCreate = &req
			m.do(t, model.Op{Req: req})
		},
		"complete_outbox": func(t *rapid.T) {
			if rapid.Bool().Draw(t, "batch?") && spec.OperationOf(spec.CompleteBatchRequest{}).Supports(m.store) {
				var reqs []spec.CompleteRequest
				for range rapid.IntRange(1, 3).Draw(t, "members") {
					reqs = append(reqs, spec.CompleteRequest{Lease: m.lease(t), Outbox: messages(t)})
				}
				m.do(t, model.Op{Req: spec.CompleteBatchRequest{Requests: reqs}})
				return
			}
			m.do(t, model.Op{Req: spec.CompleteRequest{Lease: m.lease(t), Outbox: messages(t)}})
		},
		"claim_outbox": func(t *rapid.T) {
			tenant := ""
			if rapid.Bool().Draw(t, "one_tenant?") {
				tenant = m.tenant(t)
			}
			m.do(t, model.Op{Req: spec.ClaimOutboxRequest{Tenant: tenant, Relay: invalid(t, "relay", []string{"relay1", "relay2"}, ""),
				LeaseMs: sometimesBad(t, "lease_ms", rapid.SampledFrom([]int64{10, 25, 60}), 0, 61),
				Limit:   sometimesBad(t, "limit", rapid.IntRange(1, 3), 0)}})
		},
		"mark_delivered": func(t *rapid.T) {
			known := m.model.Snapshot(m.state).Outbox
			var keys []spec.OutboxKey
			for range rapid.IntRange(1, 3).Draw(t, "marks") {
				if len(known) == 0 || rapid.IntRange(0, 9).Draw(t, "unknown_key?") == 0 {
					tenant := m.tenant(t)
					keys = append(keys, spec.OutboxKey{Tenant: tenant, RunID: m.runID(t, tenant), Seq: rapid.Int64Range(0, 3).Draw(t, "seq")})
					continue
				}
				keys = append(keys, rapid.SampledFrom(known).Draw(t, "message").Key())
			}
			m.do(t, model.Op{Req: spec.MarkDeliveredRequest{Messages: keys}})
		},
	}
}

// laterActions are a scheduled admission and a sweep of retired runs.
func (m *machine) laterActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		// A create with a schedule, with the keys, payloads and ids of the
		// others, so that scheduled and unscheduled requests share keys
		// (conflicts) and repeat their schedules (replays).
		"scheduled_create": func(t *rapid.T) {
			tenant := m.tenant(t)
			req := spec.CreateRunRequest{
				Tenant: tenant, Operation: "work",
				IdempotencyKey: rapid.SampledFrom(keys).Draw(t, "key"),
				RunID:          m.newRunID(t, tenant),
				Payload:        []byte(rapid.SampledFrom(payloads).Draw(t, "payload")),
				TimeoutMs:      rapid.SampledFrom([]int64{0, 0, 30}).Draw(t, "timeout_ms"),
			}
			// Delays and times around the deadline (120 ms by default, 30
			// with timeout_ms 30), and the past.
			if rapid.Bool().Draw(t, "delayed") {
				req.DelayMs = sometimesBad(t, "delay_ms", rapid.SampledFrom([]int64{1, 10, 29, 30, 119}), -1, 120)
			} else {
				req.AvailableAt = m.clk.Now() + sometimesBad(t, "available_in", rapid.SampledFrom([]int64{-500, 0, 15, 60, 119}), -m.clk.Now()-1, 120)
			}
			if rapid.IntRange(0, 39).Draw(t, "both_bad?") == 20 { // as sometimesBad: both set is invalid
				req.AvailableAt, req.DelayMs = m.clk.Now()+10, 10
			}
			m.do(t, model.Op{Req: req})
		},
		// A purge of runs, often after a jump past the retention of runs
		// (100 ms) and of idempotency records (150 ms), which the other clock
		// moves of a short sequence seldom add up to; sometimes first a
		// lineage (a failed run replayed, the replay cancelled at once),
		// which the other actions seldom make.
		"sweep_runs": func(t *rapid.T) {
			if failed := m.replayable(); len(failed) > 0 && rapid.Bool().Draw(t, "lineage?") {
				orig := rapid.SampledFrom(failed).Draw(t, "replayed")
				id := m.newRunID(t, orig.tenant)
				m.do(t, model.Op{Req: spec.ReplayRequest{Tenant: orig.tenant, RunID: orig.id, NewRunID: id, Actor: "retention"}})
				m.do(t, model.Op{Req: spec.CancelRequest{Tenant: orig.tenant, RunID: id}})
			}
			if skip := rapid.SampledFrom([]int64{0, 0, 100, 151, 300}).Draw(t, "skip_ms"); skip > 0 {
				if _, err := m.clk.Advance(skip); err != nil {
					t.Fatalf("advance clock: %v", err)
				}
			}
			m.do(t, model.Op{Req: spec.PurgeRunsRequest{Tenant: m.tenant(t), Limit: sometimesBad(t, "limit", rapid.IntRange(1, 3), 0)}})
		},
	}
}

func (m *machine) baseActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"create": func(t *rapid.T) {
			tenant := m.tenant(t)
			req := spec.CreateRunRequest{
				Tenant: tenant, Operation: invalid(t, "operation", []string{"work"}, "nope"),
				IdempotencyKey: invalid(t, "key", keys, "", "k\n"),
				RunID:          m.newRunID(t, tenant),
				Payload:        []byte(invalid(t, "payload", payloads, `{"a":1,"a":2}`, "\"\xff\"", ``)),
				MaxAttempts:    sometimesBad(t, "max_attempts", rapid.IntRange(0, 3), -1, 4),
				TimeoutMs:      sometimesBad(t, "timeout_ms", rapid.SampledFrom([]int64{0, 0, 30, 400}), -1, 401),
			}
			m.do(t, model.Op{Req: req})
		},
		"claim": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.ClaimRequest{
				Tenant: m.tenant(t), Worker: invalid(t, "worker", workers, ""),
				LeaseMs: sometimesBad(t, "lease_ms", rapid.SampledFrom([]int64{25, 60, 10, 1}), 0, 61),
				Limit:   sometimesBad(t, "limit", rapid.IntRange(1, 3), 0, spec.MaxBatch+1),
			}})
		},
		"renew": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.RenewRequest{Lease: m.lease(t), LeaseMs: sometimesBad(t, "lease_ms", rapid.SampledFrom([]int64{25, 60, 10, 1}), 0, 61)}})
		},
		"complete": func(t *rapid.T) {
			result := invalid(t, "result", []string{"", `{"ok":true}`}, `{"x":1,"x":2}`)
			m.do(t, model.Op{Req: spec.CompleteRequest{Lease: m.lease(t), Result: []byte(result)}})
		},
		"complete_batch": func(t *rapid.T) {
			if !spec.OperationOf(spec.CompleteBatchRequest{}).Supports(m.store) {
				t.Skip("the store does not implement spec.BatchCompleter")
			}
			var reqs []spec.CompleteRequest
			for range rapid.IntRange(0, 3).Draw(t, "members") {
				result := invalid(t, "result", []string{"", `{"ok":true}`}, `{"x":1,"x":2}`)
				reqs = append(reqs, spec.CompleteRequest{Lease: m.lease(t), Result: []byte(result)})
			}
			m.do(t, model.Op{Req: spec.CompleteBatchRequest{Requests: reqs}})
		},
		"retry": func(t *rapid.T) {
			m.do(t, model.Op{Jitter: rapid.Int64Range(0, m.cfg.Backoff.JitterMs).Draw(t, "jitter"),
				Req: spec.RetryRequest{Lease: m.lease(t), ErrorCode: invalid(t, "code", codes, "Bad"),
					RetryAfterMs: sometimesBad(t, "retry_after_ms", rapid.SampledFrom([]int64{0, 0, 10, 40}), -1)}})
		},
		"fail": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.FailRequest{Lease: m.lease(t), ErrorCode: invalid(t, "code", codes, "")}})
		},
		"cancel": func(t *rapid.T) {
			tenant := m.tenant(t)
			m.do(t, model.Op{Req: spec.CancelRequest{Tenant: tenant, RunID: m.runID(t, tenant),
				Reason: invalid(t, "reason", []string{"", "user_request"}, "Nope")}})
		},
		"release": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.ReleaseRequest{Lease: m.lease(t)}})
		},
		"reap": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.ReapRequest{Tenant: m.tenant(t), Limit: sometimesBad(t, "limit", rapid.IntRange(1, 3), 0)}})
		},
		"purge": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.PurgeRequest{Limit: sometimesBad(t, "limit", rapid.IntRange(1, 3), 0)}})
		},
		"replay": func(t *rapid.T) {
			tenant := m.tenant(t)
			m.do(t, model.Op{Req: spec.ReplayRequest{Tenant: tenant, RunID: m.runID(t, tenant),
				NewRunID: m.newRunID(t, tenant), Actor: invalid(t, "actor", []string{"ops@example.com"}, "")}})
		},
		"reserve_effect": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.ReserveEffectRequest{Lease: m.lease(t),
				Step: rapid.SampledFrom(steps).Draw(t, "step"), Key: rapid.SampledFrom(effKeys).Draw(t, "effect_key")}})
		},
		"record_effect": func(t *rapid.T) {
			m.do(t, model.Op{Req: m.recordRequest(t, []spec.EffectState{spec.EffectSucceeded, spec.EffectFailed, spec.EffectUnknown})})
		},
		"reconcile_effect": func(t *rapid.T) {
			m.do(t, model.Op{Req: spec.ReconcileEffectRequest(m.recordRequest(t, []spec.EffectState{spec.EffectSucceeded, spec.EffectFailed}))})
		},
		"advance_clock": func(t *rapid.T) {
			if _, err := m.clk.Advance(rapid.SampledFrom([]int64{5, 12, 30, 61, 1}).Draw(t, "advance_ms")); err != nil {
				t.Fatalf("advance clock: %v", err)
			}
		},
		"": m.check,
	}
}

// replayable returns the model's failed runs that have no replay.
func (m *machine) replayable() []runRef {
	snap := m.model.Snapshot(m.state)
	replayed := map[runRef]bool{}
	for _, r := range snap.Runs {
		if r.ReplayOf != "" {
			replayed[runRef{r.Tenant, r.ReplayOf}] = true
		}
	}
	var out []runRef
	for _, r := range snap.Runs {
		if ref := (runRef{r.Tenant, r.ID}); r.State == spec.RunFailed && !replayed[ref] {
			out = append(out, ref)
		}
	}
	return out
}

func (m *machine) recordRequest(t *rapid.T, states []spec.EffectState) spec.RecordEffectRequest {
	return spec.RecordEffectRequest{Lease: m.lease(t), Step: rapid.SampledFrom(steps).Draw(t, "step"),
		Key: rapid.SampledFrom(effKeys).Draw(t, "effect_key"), State: sometimesBad(t, "effect_state", rapid.SampledFrom(states), "bogus"),
		ProviderRef: rapid.SampledFrom([]string{"", "ch_1"}).Draw(t, "provider_ref")}
}

// do runs op on the store and on the model, fails on any difference in
// the result (value, or error code and state), and returns the store's.
func (m *machine) do(t *rapid.T, op model.Op) model.Result {
	op.Now = m.clk.Now()
	m.rnd.Set(op.Jitter)
	m.steps++
	m.property.Counters.Operations++
	if m.staleGeneration(op) {
		m.property.Counters.StaleWrite++
	}
	withMessages := carriesMessages(op.Req)
	got, unexpected := history.Execute(context.Background(), m.store, op)
	if unexpected != nil {
		m.fail(t, "step %d: %s at %d: %v", m.steps, op.Kind(), op.Now, unexpected)
	}
	next, want := m.model.Step(m.state, op)
	if !want.Equal(got) {
		m.fail(t, "step %d: %s at %d with %+v\n store returned %s\n model expects %s", m.steps, op.Kind(), op.Now, op.Req, describe(got), describe(want))
	}
	if err := m.model.CheckStep(m.state, op, next); err != nil {
		m.fail(t, "step %d: %s at %d broke a transition invariant: %v", m.steps, op.Kind(), op.Now, err)
	}
	t.Logf("step %d: %s at %d -> %s", m.steps, op.Kind(), op.Now, describe(got))
	m.property.Counters.count(op.Kind(), got)
	if withMessages {
		outcome := "written"
		if got.Err != nil || len(m.model.Snapshot(next).Outbox) == len(m.model.Snapshot(m.state).Outbox) {
			outcome = "none written"
		}
		m.property.Counters.Outcomes["outbox "+outcome]++
	}
	if tx, inTx := op.Req.(spec.CreateRunTxRequest); inTx && got.Err == nil {
		m.property.Counters.Outcomes[fmt.Sprintf("create_run_tx rollback=%v ok", tx.Rollback)]++
	}
	m.state = next
	if got.Err != nil {
		m.property.Counters.Refused++
		return got
	}
	switch v := got.Value.(type) {
	case []spec.Lease:
		m.leases = append(m.leases, v...)
	case spec.Lease:
		m.leases = append(m.leases, v)
	case spec.CreateRunResult:
		if tx, inTx := op.Req.(spec.CreateRunTxRequest); !inTx || !tx.Rollback {
			m.remember(v.Run)
		}
	case spec.Run:
		m.remember(v)
	case []spec.CreateOutcome:
		for _, o := range v {
			if o.Err == nil {
				m.remember(o.Result.Run)
			}
		}
	}
	return got
}

// carriesMessages reports a request that asks for outbox messages.
func carriesMessages(req spec.Request) bool {
	switch r := req.(type) {
	case spec.CreateRunRequest:
		return len(r.Outbox) > 0
	case spec.CompleteRequest:
		return len(r.Outbox) > 0
	case spec.CompleteBatchRequest:
		for _, m := range r.Requests {
			if len(m.Outbox) > 0 {
				return true
			}
		}
	}
	return false
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
	leases := op.Req.Leases()
	if len(leases) != 1 {
		return false
	}
	ref := leases[0]
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
		m.fail(t, "after step %d: snapshot: %v", m.steps, err)
	}
	if diff := DiffSnapshots(m.model.Snapshot(m.state), snap); diff != "" {
		m.fail(t, "after step %d the store's rows differ from the model's (model first, store second):\n%s", m.steps, diff)
	}
	if err := m.model.Check(m.state); err != nil {
		m.fail(t, "after step %d the model's state breaks an invariant: %v", m.steps, err)
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

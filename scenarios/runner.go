package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/spec"
)

// Options configure one store the runner opens.
type Options struct {
	Config spec.Config
	// Clock is the scenario's shared manual clock.
	Clock clock.Clock
	// Random is the client's scripted jitter source (a retry step sets it).
	Random spec.Random
	// Hook is the client's barrier hook (nil for the runner's own reader).
	Hook spec.Hook
}

// Opener opens a store on the one database a scenario runs on. Every call
// must return an independent store (its own connections) on the same
// database, which is empty before the first call, configured with opts. Run
// opens one store per client and one for its own reads, and closes all of
// them before it returns.
type Opener func(ctx context.Context, opts Options) (spec.Store, error)

// DefaultTimeout bounds one scenario: the deadlock guard. A scenario that
// has not finished by then fails with the list of steps still pending.
const DefaultTimeout = 30 * time.Second

// drainTimeout bounds how long Run waits, after cancelling a deadlocked
// scenario, for its operations to return before it gives up on them.
const drainTimeout = 15 * time.Second

// Result is what Run observed.
type Result struct {
	Scenario   string
	Steps      []StepResult
	Mismatches []Mismatch
	// Races counts the races observed, whether or not the scenario names them.
	Races map[Race]int
	// Stuck is set when the deadlock guard stopped the scenario.
	Stuck bool
}

// StepResult is one step's outcome.
type StepResult struct {
	Index   int
	Label   string
	Clock   int64 // the manual clock when the step began
	Outcome string
	// Mismatch is set when the step's outcome differed from the file.
	Mismatch bool
}

// Mismatch is one difference between the file and what the store did, or a
// reason the scenario could not be played.
type Mismatch struct {
	// Step is the 1-based step index; 0 for setup, the deadlock guard and
	// the vacuity guard; FinalStep for the final state.
	Step    int
	Message string
}

// FinalStep is Mismatch.Step for a difference in the final state.
const FinalStep = -1

// String names the mismatch's place (a step, the final state, or nothing
// for the guards) and says what was expected and got.
func (m Mismatch) String() string {
	switch m.Step {
	case 0:
		return m.Message
	case FinalStep:
		return "final: " + m.Message
	}
	return fmt.Sprintf("step %d: %s", m.Step, m.Message)
}

// OK reports whether the scenario ran as its file says.
func (r *Result) OK() bool { return len(r.Mismatches) == 0 }

// Report writes every step's outcome, every mismatch and a PASS or FAIL line.
func (r *Result) Report(w io.Writer) {
	for _, s := range r.Steps {
		mark := " "
		if s.Mismatch {
			mark = "!"
		}
		fmt.Fprintf(w, " %s %3d  t=%-6d %-58s → %s\n", mark, s.Index, s.Clock, s.Label, s.Outcome)
	}
	for _, m := range r.Mismatches {
		fmt.Fprintf(w, "    MISMATCH %s\n", m)
	}
	var races []string
	for _, race := range Races {
		if n := r.Races[race]; n > 0 {
			races = append(races, fmt.Sprintf("%s×%d", race, n))
		}
	}
	verdict := "PASS"
	if !r.OK() {
		verdict = fmt.Sprintf("FAIL (%d mismatches)", len(r.Mismatches))
	}
	fmt.Fprintf(w, "%s %s; races observed: %s\n", verdict, r.Scenario, strings.Join(races, ", "))
}

// Run plays sc on the database open opens and returns what happened. Each
// client gets its own store with its own hook from one harness.Barriers;
// all share one manual clock starting at sc.Start. Nothing sleeps:
// asynchronous operations are held at barriers and awaited. If the scenario
// has not finished within DefaultTimeout (or ctx ends first), Run reports
// the steps still pending, cancels them, and returns.
func Run(ctx context.Context, sc *Scenario, open Opener) *Result {
	return RunTimeout(ctx, sc, open, DefaultTimeout)
}

// RunTimeout is Run with another deadlock guard.
func RunTimeout(ctx context.Context, sc *Scenario, open Opener, timeout time.Duration) *Result {
	// Two contexts: the operations run under ops, the runner waits under
	// guard. When the guard fires, the runner lists what is pending while
	// everything is still where it got stuck, and only then cancels ops.
	ops, cancelOps := context.WithCancel(ctx)
	defer cancelOps()
	guard, cancelGuard := context.WithTimeout(ops, timeout)
	defer cancelGuard()
	ctx = guard
	r := &runner{sc: sc, ops: ops, clock: clock.NewManual(sc.Start), barriers: harness.NewBarriers(),
		stores: map[string]spec.Store{}, randoms: map[string]*harness.ScriptedRandom{},
		leases: map[string]*boundLease{}, maxGen: map[string]int64{}, async: map[string]*inflight{},
		res: &Result{Scenario: sc.Name, Races: map[Race]int{}}}
	defer r.closeStores()
	if err := r.open(ctx, open); err != nil {
		r.mismatch(0, "cannot open the stores: %v", err)
		return r.res
	}
	for _, st := range sc.Steps {
		if !r.step(ctx, st) {
			break
		}
	}
	if r.res.Stuck {
		cancelOps() // held hooks and blocked operations return now
		if !r.drain() {
			r.mismatch(0, "operations still running %s after the scenario was cancelled: %s; their stores are left open",
				drainTimeout, strings.Join(r.pending(), "; "))
			r.leak = true
		}
		return r.res
	}
	r.checkFinal(ctx)
	for _, race := range sc.Races {
		if r.res.Races[race] == 0 {
			r.mismatch(0, "vacuity: the scenario names race %q but it never happened (%s)", race, raceMeaning[race])
		}
	}
	return r.res
}

var raceMeaning = map[Race]string{
	RaceContended:            "no operation was started while another client's operation was held at before_commit",
	RaceCommittedNotReturned: "no operation was started while another client's operation was held at after_commit",
	RaceStaleWriteRefused:    "no write through a superseded or expired lease was refused lost_lease",
	RaceLeaseReclaimed:       "no claim took a job that was leased under an expired lease",
	RaceFaultRolledBack:      "no operation failed at before_commit returned unavailable",
	RaceUnknownOutcome:       "no operation failed at after_commit returned unknown_outcome",
}

type runner struct {
	sc       *Scenario
	ops      context.Context // the operations' context
	current  *inflight       // the synchronous operation in flight, if any
	clock    *clock.Manual
	barriers *harness.Barriers
	stores   map[string]spec.Store // by client
	randoms  map[string]*harness.ScriptedRandom
	observer spec.Store // the runner's own reads; no hook
	leases   map[string]*boundLease
	maxGen   map[string]int64 // run id -> highest generation any claim returned
	async    map[string]*inflight
	wg       sync.WaitGroup
	res      *Result
	leak     bool
}

// boundLease is a lease a claim bound to a name, with the latest expiry the
// runner knows of (a renewal moves it).
type boundLease struct {
	lease spec.Lease
	step  int
}

// call is one prepared store operation.
type call struct {
	st   *Step
	kind string
	run  func(ctx context.Context, s spec.Store) (any, error)
	// stale is set when the call presents a lease that a later claim
	// superseded or whose known expiry is not after now.
	stale bool
	// leasedBefore holds, for a claim, the jobs an observer read as leased
	// just before it started (run id -> generation).
	leasedBefore map[string]int64
	lease        *boundLease
}

// inflight is an asynchronous operation.
type inflight struct {
	name    string
	c       *call
	barrier *harness.Barrier
	done    chan struct{}
	out     Outcome
	// missed is set when the operation ended without reaching its barrier.
	missed bool
	// notStarted is set when the step could not start the operation (its
	// lease was never bound).
	notStarted bool
	resumed    bool
	fault      bool
	awaited    bool
}

func (r *runner) open(ctx context.Context, open Opener) error {
	var err error
	if r.observer, err = openStore(ctx, open, Options{Config: r.sc.Config, Clock: r.clock}); err != nil {
		return fmt.Errorf("reader: %w", err)
	}
	for _, st := range r.sc.Steps {
		if st.Client == "" || r.stores[st.Client] != nil {
			continue
		}
		rnd := &harness.ScriptedRandom{}
		s, err := openStore(ctx, open, Options{Config: r.sc.Config, Clock: r.clock, Random: rnd, Hook: r.barriers.Hook(st.Client)})
		if err != nil {
			return fmt.Errorf("client %s: %w", st.Client, err)
		}
		r.stores[st.Client], r.randoms[st.Client] = s, rnd
	}
	return nil
}

func openStore(ctx context.Context, open Opener, o Options) (spec.Store, error) {
	s, err := open(ctx, o)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("the opener returned no store")
	}
	return s, nil
}

func (r *runner) closeStores() {
	if r.leak {
		return
	}
	for _, s := range r.stores {
		s.Close()
	}
	if r.observer != nil {
		r.observer.Close()
	}
}

func (r *runner) mismatch(step int, format string, args ...any) {
	r.res.Mismatches = append(r.res.Mismatches, Mismatch{Step: step, Message: fmt.Sprintf(format, args...)})
}

// record appends a step result; diffs are its mismatches.
func (r *runner) record(st *Step, now int64, label, outcome string, diffs ...string) {
	r.res.Steps = append(r.res.Steps, StepResult{Index: st.Index, Label: label, Clock: now, Outcome: outcome, Mismatch: len(diffs) > 0})
	for _, d := range diffs {
		r.mismatch(st.Index, "%s: %s", label, d)
	}
}

// step plays one step; it returns false when the deadlock guard fired.
func (r *runner) step(ctx context.Context, st *Step) bool {
	now := r.clock.Now()
	label := describe(st)
	switch st.Op {
	case "advance":
		t, err := r.clock.Advance(st.Ms)
		if err != nil {
			r.record(st, now, label, "error", err.Error())
			return true
		}
		r.record(st, now, label, fmt.Sprintf("clock %d", t))
	case "get_run", "get_job":
		var v any
		var err error
		kind := resultKinds[st.Op]
		if st.Op == "get_run" {
			v, err = r.observer.GetRun(ctx, r.sc.Tenant, st.Run)
		} else {
			v, err = r.observer.GetJob(ctx, r.sc.Tenant, st.Run)
		}
		if ctx.Err() != nil {
			return r.stuck(st, label)
		}
		o := observe(kind, v, err)
		r.record(st, now, label, o.String(st.Expect), compare(st.Expect, o)...)
	case "await_arrival", "resume", "await":
		return r.asyncStep(ctx, st, now, label)
	default: // a store operation
		return r.storeStep(ctx, st, now, label)
	}
	return true
}

// asyncStep plays await_arrival, resume or await.
func (r *runner) asyncStep(ctx context.Context, st *Step, now int64, label string) bool {
	a := r.async[st.Of]
	if a.notStarted {
		r.record(st, now, label, fmt.Sprintf("skipped: step %d did not start %s", a.c.st.Index, st.Of))
		return true
	}
	switch st.Op {
	case "await_arrival":
		select {
		case <-a.barrier.Arrived():
			r.record(st, now, label, fmt.Sprintf("held at %s", a.c.st.PauseAt))
		case <-a.done:
			a.missed = true
			r.barriers.Disarm(a.barrier)
			r.record(st, now, label, "returned without reaching "+string(a.c.st.PauseAt),
				fmt.Sprintf("expected %s to be held at %s, but it returned first (%s): the race did not happen",
					st.Of, a.c.st.PauseAt, a.out.String(nil)))
		case <-ctx.Done():
			return r.stuck(st, label)
		}
	case "resume":
		if a.missed {
			r.record(st, now, label, "nothing to resume (it never arrived)")
			return true
		}
		var fault error
		if st.Fault != "" {
			fault = fmt.Errorf("scenario fault %q at %s", st.Fault, a.c.st.PauseAt)
			a.fault = true
		}
		a.resumed = true
		a.barrier.Release(fault)
		out := "resumed"
		if fault != nil {
			out = "resumed with fault " + st.Fault
		}
		r.record(st, now, label, out)
	case "await":
		select {
		case <-a.done:
		case <-ctx.Done():
			return r.stuck(st, label)
		}
		a.awaited = true
		r.finish(a.c, a.out, a)
		r.record(st, now, label, a.out.String(st.Expect), compare(st.Expect, a.out)...)
	}
	return true
}

// storeStep plays a store operation, synchronous or asynchronous.
func (r *runner) storeStep(ctx context.Context, st *Step, now int64, label string) bool {
	c, err := r.prepare(ctx, st)
	if ctx.Err() != nil {
		return r.stuck(st, label)
	}
	if err != nil {
		r.record(st, now, label, "not run", err.Error())
		if st.Async != "" {
			// Its await_arrival, resume and await are skipped; the
			// reason is this step's mismatch.
			r.async[st.Async] = &inflight{name: st.Async, c: &call{st: st}, notStarted: true, awaited: true}
		}
		return true
	}
	r.noteOverlap(st.Client)
	a := r.launch(c)
	if st.Async == "" {
		// Even a synchronous operation runs in its own goroutine, so
		// that the deadlock guard can stop a scenario blocked in one.
		r.current = a
		select {
		case <-a.done:
		case <-ctx.Done():
			return r.stuck(st, label)
		}
		r.current = nil
		r.finish(c, a.out, nil)
		r.record(st, now, label, a.out.String(st.Expect), compare(st.Expect, a.out)...)
		return true
	}
	r.async[st.Async] = a
	out := "started"
	if st.PauseAt != "" {
		out += ", to be held at " + string(st.PauseAt)
	}
	r.record(st, now, label, out)
	return true
}

// launch starts c on its client's store under the operations' context,
// arming its barrier first.
func (r *runner) launch(c *call) *inflight {
	st := c.st
	a := &inflight{name: st.Async, c: c, done: make(chan struct{})}
	if st.PauseAt != "" {
		a.barrier = r.barriers.Arm(st.Client, storeOps[st.Op], st.PauseAt)
	}
	s := r.stores[st.Client]
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		a.out = c.exec(r.ops, s)
		close(a.done)
	}()
	return a
}

// exec runs the call on s and observes what it returned.
func (c *call) exec(ctx context.Context, s spec.Store) Outcome {
	v, err := c.run(ctx, s)
	return observe(c.kind, v, err)
}

// stuck records that the deadlock guard stopped the scenario at st, with
// every operation still pending, and returns false.
func (r *runner) stuck(st *Step, label string) bool {
	r.res.Stuck = true
	pending := r.pending()
	if len(pending) == 0 {
		pending = []string{"no asynchronous operation"}
	}
	r.record(st, r.clock.Now(), label, "stopped by the deadlock guard",
		fmt.Sprintf("deadlock guard: the scenario did not finish in time; waiting here, with still pending: %s", strings.Join(pending, "; ")))
	return false
}

// pending lists the operations not yet awaited, in step order.
func (r *runner) pending() []string {
	var out []string
	if a := r.current; a != nil && !isClosed(a.done) {
		out = append(out, fmt.Sprintf("step %d %s: running (not returned)", a.c.st.Index, describe(a.c.st)))
	}
	for _, a := range slices.SortedFunc(maps.Values(r.async), func(a, b *inflight) int { return a.c.st.Index - b.c.st.Index }) {
		if a.awaited {
			continue
		}
		st := a.c.st
		state := "running (not returned)"
		switch {
		case a.barrier != nil && !a.missed && isClosed(a.barrier.Arrived()) && !a.resumed && !isClosed(a.done):
			state = "held at " + string(st.PauseAt) + ", not resumed"
		case isClosed(a.done):
			state = "returned, not awaited"
		case a.barrier != nil && !isClosed(a.barrier.Arrived()):
			state = "not yet at its barrier " + string(st.PauseAt)
		}
		out = append(out, fmt.Sprintf("step %d %s (async %s): %s", st.Index, describe(st), a.name, state))
	}
	return out
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// drain waits for every asynchronous operation to return, up to drainTimeout.
func (r *runner) drain() bool {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(drainTimeout):
		return false
	}
}

// noteOverlap counts the races a store operation of client starting now
// takes part in: another client's operation held at a barrier.
func (r *runner) noteOverlap(client string) {
	var contended, committed bool
	for _, a := range r.async {
		if a.c.st.Client == client || a.barrier == nil || a.missed || a.resumed || !isClosed(a.barrier.Arrived()) {
			continue
		}
		switch a.c.st.PauseAt {
		case spec.BeforeCommit:
			contended = true
		case spec.AfterCommit:
			committed = true
		}
	}
	if contended {
		r.res.Races[RaceContended]++
	}
	if committed {
		r.res.Races[RaceCommittedNotReturned]++
	}
}

// finish applies an operation's outcome to the runner's bookkeeping: leases
// bound by a claim, expiries moved by a renewal, and the races observed.
// a is the asynchronous operation, or nil.
func (r *runner) finish(c *call, o Outcome, a *inflight) {
	code := o.Code()
	switch {
	case code == spec.CodeLostLease && c.stale:
		r.res.Races[RaceStaleWriteRefused]++
	case a != nil && a.fault && a.c.st.PauseAt == spec.BeforeCommit && code == spec.CodeUnavailable:
		r.res.Races[RaceFaultRolledBack]++
	case a != nil && a.fault && a.c.st.PauseAt == spec.AfterCommit && code == spec.CodeUnknownOutcome:
		r.res.Races[RaceUnknownOutcome]++
	}
	if code != "" || o.Untyped != nil {
		return
	}
	switch c.st.Op {
	case "claim":
		for i, l := range o.Fields["leases"].([]map[string]any) {
			id := l["run_id"].(string)
			gen := l["generation"].(int64)
			if prev, ok := c.leasedBefore[id]; ok && gen > prev {
				r.res.Races[RaceLeaseReclaimed]++
			}
			r.maxGen[id] = max(r.maxGen[id], gen)
			if i < len(c.st.Bind) {
				r.leases[c.st.Bind[i]] = &boundLease{step: c.st.Index, lease: spec.Lease{
					Tenant: r.sc.Tenant, RunID: id, Owner: l["owner"].(string), Generation: gen, ExpiresAt: l["expires_at"].(int64)}}
			}
		}
	case "renew":
		c.lease.lease.ExpiresAt = o.Fields["expires_at"].(int64)
	}
}

// prepare builds a store operation from its step, resolving its lease.
func (r *runner) prepare(ctx context.Context, st *Step) (*call, error) {
	c := &call{st: st, kind: resultKinds[st.Op]}
	var ref spec.LeaseRef
	if st.Lease != "" {
		bl := r.leases[st.Lease]
		if bl == nil {
			return nil, fmt.Errorf("lease %q was never bound: the claim that names it returned fewer leases", st.Lease)
		}
		c.lease = bl
		ref = bl.lease.Ref()
		c.stale = bl.lease.Generation < r.maxGen[bl.lease.RunID] || bl.lease.ExpiresAt <= r.clock.Now()
	}
	t := r.sc.Tenant
	switch st.Op {
	case "create":
		req := spec.CreateRunRequest{Tenant: t, Operation: st.Operation, IdempotencyKey: st.Key, RunID: st.RunID,
			Payload: st.Payload, MaxAttempts: st.MaxAttempts, TimeoutMs: st.TimeoutMs}
		if req.Operation == "" {
			req.Operation = "work"
		}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.CreateRun(ctx, req) }
	case "claim":
		snap, err := r.observer.Snapshot(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading the jobs before the claim: %v", err)
		}
		c.leasedBefore = map[string]int64{}
		for _, j := range snap.Jobs {
			if j.Tenant == t && j.State == spec.JobLeased {
				c.leasedBefore[j.RunID] = j.Generation
			}
		}
		req := spec.ClaimRequest{Tenant: t, Worker: st.Worker, LeaseMs: st.LeaseMs, Limit: st.Limit}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Claim(ctx, req) }
	case "renew":
		req := spec.RenewRequest{Lease: ref, LeaseMs: st.LeaseMs}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Renew(ctx, req) }
	case "complete":
		req := spec.CompleteRequest{Lease: ref, Result: st.Result}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Complete(ctx, req) }
	case "retry":
		req := spec.RetryRequest{Lease: ref, ErrorCode: st.ErrorCode, RetryAfterMs: st.RetryAfterMs}
		rnd := r.randoms[st.Client]
		c.run = func(ctx context.Context, s spec.Store) (any, error) { rnd.Set(st.Jitter); return s.Retry(ctx, req) }
	case "fail":
		req := spec.FailRequest{Lease: ref, ErrorCode: st.ErrorCode}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Fail(ctx, req) }
	case "release":
		req := spec.ReleaseRequest{Lease: ref}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Release(ctx, req) }
	case "cancel":
		req := spec.CancelRequest{Tenant: t, RunID: st.Run, Reason: st.Reason}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Cancel(ctx, req) }
	case "reserve_effect":
		req := spec.ReserveEffectRequest{Lease: ref, Step: st.Effect, Key: st.Key}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.ReserveEffect(ctx, req) }
	case "record_effect", "reconcile_effect":
		req := spec.RecordEffectRequest{Lease: ref, Step: st.Effect, Key: st.Key, State: spec.EffectState(st.State), ProviderRef: st.ProviderRef}
		if st.Op == "record_effect" {
			c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.RecordEffect(ctx, req) }
		} else {
			c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.ReconcileEffect(ctx, req) }
		}
	case "reap":
		req := spec.ReapRequest{Tenant: t, Limit: st.Limit}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Reap(ctx, req) }
	case "purge":
		req := spec.PurgeRequest{Limit: st.Limit}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.PurgeIdempotency(ctx, req) }
	case "replay":
		req := spec.ReplayRequest{Tenant: t, RunID: st.Run, NewRunID: st.NewRunID, Actor: st.Actor}
		c.run = func(ctx context.Context, s spec.Store) (any, error) { return s.Replay(ctx, req) }
	default:
		return nil, fmt.Errorf("no store call for op %q", st.Op)
	}
	return c, nil
}

// describe labels a step for reports.
func describe(st *Step) string {
	var b strings.Builder
	if st.Client != "" {
		b.WriteString(st.Client + ": ")
	}
	b.WriteString(st.Op)
	add := func(format string, args ...any) { fmt.Fprintf(&b, " "+format, args...) }
	switch st.Op {
	case "create":
		add("%s key=%s", st.RunID, st.Key)
	case "claim":
		add("lease_ms=%d", st.LeaseMs)
		if st.Limit != 1 {
			add("limit=%d", st.Limit)
		}
		if st.Worker != st.Client {
			add("worker=%s", st.Worker)
		}
		if len(st.Bind) > 0 {
			add("bind=%s", strings.Join(st.Bind, ","))
		}
	case "renew":
		add("%s lease_ms=%d", st.Lease, st.LeaseMs)
	case "complete", "release":
		add("%s", st.Lease)
	case "retry", "fail":
		add("%s %s", st.Lease, st.ErrorCode)
	case "cancel", "get_run", "get_job":
		add("%s", st.Run)
	case "reserve_effect":
		add("%s %s/%s", st.Lease, st.Effect, st.Key)
	case "record_effect", "reconcile_effect":
		add("%s %s/%s %s", st.Lease, st.Effect, st.Key, st.State)
	case "replay":
		add("%s as %s", st.Run, st.NewRunID)
	case "advance":
		add("%d ms", st.Ms)
	case "await_arrival", "await":
		add("%s", st.Of)
	case "resume":
		add("%s", st.Of)
		if st.Fault != "" {
			add("fault=%s", st.Fault)
		}
	}
	if st.Async != "" {
		add("[async %s", st.Async)
		if st.PauseAt != "" {
			add("pause_at=%s", st.PauseAt)
		}
		b.WriteString("]")
	}
	return b.String()
}

package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness/faults"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// Options configure one store the runner opens.
type Options struct {
	Config spec.Config
	// Clock is the client's view of the scenario's shared manual clock.
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

// DefaultTimeout bounds one scenario: the deadlock guard, a guard against a
// hang and never a judgement of a slow store (Run uses hang.Patience, which
// LEASEHOLD_HANG_PATIENCE sets). A scenario that has not finished by then is
// reported hung, with the list of steps still pending.
const DefaultTimeout = hang.DefaultPatience

// Result is what Run observed.
type Result struct {
	Scenario   string
	Steps      []StepResult
	Mismatches []Mismatch
	// Races counts the races the history contains, whether or not the
	// scenario names them.
	Races validate.Races
	// History is every operation the run made, its final scan included;
	// Verdict is the model's judgement of it (nil when the run did not get
	// that far).
	History *history.History
	Verdict *validate.Verdict
	// Stuck is set when the deadlock guard stopped the scenario.
	Stuck bool
	// NotApplicable, when set, says why the scenario was not played: it
	// needs a capability a client's store does not offer (await_blocked
	// needs spec.LockWaitReporter). Such a result is not OK: a scenario
	// that did not apply never counts as a pass.
	NotApplicable string
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

// Mismatch is one difference between the file (or the model) and what the
// store did, or a reason the scenario could not be played.
type Mismatch struct {
	// Step is the 1-based step index; 0 for setup, the guards and the model
	// judge; FinalStep for the final state.
	Step    int
	Message string
}

// FinalStep is Mismatch.Step for a difference in the final state.
const FinalStep = -1

// String names the mismatch's place (a step, the final state, or nothing
// for the guards and the judge) and says what was expected and got.
func (m Mismatch) String() string {
	switch m.Step {
	case 0:
		return m.Message
	case FinalStep:
		return "final: " + m.Message
	}
	return fmt.Sprintf("step %d: %s", m.Step, m.Message)
}

// OK reports whether the scenario ran as its file says and the model
// accepts what the store did: false for a scenario that did not apply.
func (r *Result) OK() bool { return len(r.Mismatches) == 0 && r.NotApplicable == "" }

// Report writes every step's outcome, every mismatch, the model's verdict
// and a PASS or FAIL line.
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
	if r.NotApplicable != "" && len(r.Mismatches) == 0 {
		fmt.Fprintf(w, "NOT APPLICABLE %s: %s\n", r.Scenario, r.NotApplicable)
		return
	}
	judged := "not judged"
	if r.Verdict != nil {
		judged = fmt.Sprintf("model: %s, %d accounting findings", r.Verdict.Linearizable, len(r.Verdict.Accounting))
	}
	verdict := "PASS"
	if !r.OK() {
		verdict = fmt.Sprintf("FAIL (%d mismatches)", len(r.Mismatches))
	}
	fmt.Fprintf(w, "%s %s; %s; races: %s\n", verdict, r.Scenario, judged, r.Races)
}

// Run plays sc on the database open opens and returns what happened. Each
// client gets its own store with its own hook from one harness.Barriers;
// all share one manual clock starting at sc.Start. Nothing sleeps:
// asynchronous operations are held at barriers and awaited. If the scenario
// has not finished within the checks' patience (hang.Patience, or ctx ends
// first), Run reports the steps still pending, cancels them, and returns.
func Run(ctx context.Context, sc *Scenario, open Opener) *Result {
	return RunTimeout(ctx, sc, open, hang.Patience())
}

// RunTimeout is Run with another deadlock guard.
func RunTimeout(ctx context.Context, sc *Scenario, open Opener, timeout time.Duration) *Result {
	return run(ctx, sc, open, func(ops context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ops, timeout)
	}, nil)
}

// run is Run with the deadlock guard made by guard from the operations'
// context, and onWait (when not nil) told the index of each step at which
// the runner starts to wait for an operation: a test of the guard fires it
// once the runner waits where the scenario can no longer go on, instead of
// after some time.
func run(ctx context.Context, sc *Scenario, open Opener, guard func(ops context.Context) (context.Context, context.CancelFunc), onWait func(step int)) *Result {
	// Two contexts: the operations run under ops, the runner waits under
	// guard. When the guard fires, the runner lists what is pending while
	// everything is still where it got stuck, and only then cancels ops.
	ops, cancelOps := context.WithCancel(ctx)
	defer cancelOps()
	guarded, cancelGuard := guard(ops)
	defer cancelGuard()
	ctx = guarded
	r := &runner{sc: sc, ops: ops, onWait: onWait, clock: clock.NewManual(sc.Start), barriers: faults.NewBarriers(),
		rec: history.NewRecorder(nil), callers: map[string]*history.Caller{}, leases: map[string]spec.LeaseRef{},
		async: map[string]*inflight{}, res: &Result{Scenario: sc.Name, Races: validate.Races{}}}
	defer r.closeStores()
	if err := r.open(ctx, open); err != nil {
		r.mismatch(0, "cannot open the stores: %v", err)
		return r.res
	}
	if why := r.inapplicable(); why != "" {
		r.res.NotApplicable = why
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
			r.mismatch(0, "hung: operations still running %s after the scenario was cancelled: %s; their stores are left open",
				hang.Patience(), strings.Join(r.pending(), "; "))
			r.leak = true
		}
		return r.res
	}
	r.finalScan(ctx)
	r.judge()
	return r.res
}

type runner struct {
	sc       *Scenario
	ops      context.Context // the operations' context
	onWait   func(step int)  // see run
	current  *inflight       // the synchronous operation in flight, if any
	clock    *clock.Manual
	barriers *faults.Barriers
	rec      *history.Recorder
	callers  map[string]*history.Caller // by client; readerClient is the runner's own
	leases   map[string]spec.LeaseRef   // bound lease names
	async    map[string]*inflight
	wg       sync.WaitGroup
	res      *Result
	leak     bool
}

// inflight is an operation started by a step.
type inflight struct {
	name    string
	st      *Step
	barrier *faults.Barrier
	heldAt  int64 // the recorder's tick when it was seen at its barrier
	done    chan struct{}
	res     model.Result
	err     error // a breach of the harness's rules (untyped error, clock reads)
	// missed is set when the operation ended without reaching its barrier.
	missed bool
	// notStarted is set when the step could not start the operation (its
	// lease was never bound).
	notStarted bool
	resumed    bool
	awaited    bool
}

func (r *runner) open(ctx context.Context, open Opener) error {
	clients := []string{readerClient}
	for _, st := range r.sc.Steps {
		if st.Store() && !slices.Contains(clients, st.Client) {
			clients = append(clients, st.Client)
		}
	}
	for _, name := range clients {
		clk, rnd := &clock.Recorder{Source: r.clock}, &history.ScriptedRandom{}
		o := Options{Config: r.sc.Config, Clock: clk, Random: rnd}
		if name != readerClient {
			o.Hook = r.barriers.Hook(name)
		}
		s, err := open(ctx, o)
		if err == nil && s == nil {
			err = errors.New("the opener returned no store")
		}
		if err != nil {
			return fmt.Errorf("client %s: %w", name, err)
		}
		r.callers[name] = history.NewCaller(r.rec, name, s, clk, rnd)
	}
	return nil
}

func (r *runner) closeStores() {
	if r.leak {
		return
	}
	for _, c := range r.callers {
		c.Store.Close()
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
		r.rec.Note(0, fmt.Sprintf("clock +%d ms -> %d", st.Ms, t))
		r.record(st, now, label, fmt.Sprintf("clock %d", t))
	case "await_arrival", opAwaitBlocked, "resume", "await":
		return r.asyncStep(ctx, st, now, label)
	default:
		return r.storeStep(ctx, st, now, label)
	}
	return true
}

// asyncStep plays await_arrival, resume or await.
func (r *runner) asyncStep(ctx context.Context, st *Step, now int64, label string) bool {
	a := r.async[st.Of]
	if a.notStarted {
		r.record(st, now, label, fmt.Sprintf("skipped: step %d did not start %s", a.st.Index, st.Of))
		return true
	}
	if r.onWait != nil && (st.Op == "await_arrival" || st.Op == opAwaitBlocked || st.Op == "await") {
		r.onWait(st.Index)
	}
	switch st.Op {
	case "await_arrival":
		select {
		case <-a.barrier.Arrived():
			a.heldAt = r.rec.Tick()
			r.record(st, now, label, fmt.Sprintf("held at %s", a.st.PauseAt))
		case <-a.done:
			a.missed = true
			r.barriers.Disarm(a.barrier)
			r.record(st, now, label, "returned without reaching "+string(a.st.PauseAt),
				fmt.Sprintf("expected %s to be held at %s, but it returned first (%s): the race did not happen",
					st.Of, a.st.PauseAt, outcome(a.res)))
		case <-ctx.Done():
			return r.stuck(st, label)
		}
	case opAwaitBlocked:
		return r.awaitBlocked(ctx, st, a, now, label)
	case "resume":
		if a.missed {
			r.record(st, now, label, "nothing to resume (it never arrived)")
			return true
		}
		var fault error
		if st.Fault != "" {
			fault = fmt.Errorf("scenario fault %q at %s", st.Fault, a.st.PauseAt)
			r.rec.Note(0, fmt.Sprintf("%s: %s resumed with fault %s at %s", a.st.Client, a.st.Op, st.Fault, a.st.PauseAt))
		}
		r.rec.Hold(history.Hold{Actor: a.st.Client, Op: a.st.row.Op, Point: a.st.PauseAt, From: a.heldAt, To: r.rec.Tick()})
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
		r.finish(a)
		r.record(st, now, label, outcome(a.res), r.check(st.Expect, a)...)
	}
	return true
}

// opAwaitBlocked is the control step that waits until an async operation is
// blocked on a lock another operation holds.
const opAwaitBlocked = "await_blocked"

// blockPoll is how often await_blocked asks the store whether the operation
// is waiting on a lock: a store has no way to announce it, so the runner
// looks until it is, the operation returns, or the deadlock guard fires.
const blockPoll = 2 * time.Millisecond

// inapplicable says why the scenario cannot be played on the stores opened
// ("" when it can): an await_blocked step whose client's store cannot report
// lock waits.
func (r *runner) inapplicable() string {
	for _, st := range r.sc.Steps {
		if st.Op != opAwaitBlocked {
			continue
		}
		for _, s := range r.sc.Steps {
			if s.Async == st.Of {
				if _, ok := r.callers[s.Client].Store.(spec.LockWaitReporter); !ok {
					return fmt.Sprintf("step %d (await_blocked %s) needs client %s's store to report lock waits (spec.LockWaitReporter), and %T does not",
						st.Index, st.Of, s.Client, r.callers[s.Client].Store)
				}
			}
		}
	}
	return ""
}

// awaitBlocked plays await_blocked: it asks a's store, until it says one of
// its calls (a, its client's one call in flight) waits on a lock, and records
// the observation in the history. An operation that returns first is the race
// not happening; a store that never says so ends at the deadlock guard.
func (r *runner) awaitBlocked(ctx context.Context, st *Step, a *inflight, now int64, label string) bool {
	w := r.callers[a.st.Client].Store.(spec.LockWaitReporter) // inapplicable checked it
	tick := time.NewTicker(blockPoll)
	defer tick.Stop()
	for {
		// Whether it had returned is read before the store is asked, so a
		// call that returns after its wait was seen still counts as seen.
		returned := isClosed(a.done)
		n, err := w.LockWaits(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return r.stuckWaiting(st, label, a)
		case err != nil:
			r.record(st, now, label, "cannot tell", fmt.Sprintf("the store could not say whether %s waits on a lock: %v", st.Of, err))
			return true
		case n > 0:
			r.rec.Block(history.Block{Actor: a.st.Client, Op: a.st.row.Op, At: r.rec.Tick()})
			r.record(st, now, label, "blocked on a lock")
			return true
		case returned:
			r.record(st, now, label, "returned without blocking",
				fmt.Sprintf("expected %s to be seen blocked on a lock, but it returned first (%s) and its store never reported it waiting: the race did not happen",
					st.Of, outcome(a.res)))
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return r.stuckWaiting(st, label, a)
		}
	}
}

// stuckWaiting is stuck at an await_blocked step, saying what it waited for.
func (r *runner) stuckWaiting(st *Step, label string, a *inflight) bool {
	r.mismatch(st.Index, "%s: the store never reported %s (%s) waiting on a lock before the deadlock guard fired", label, st.Of, describe(a.st))
	return r.stuck(st, label)
}

// storeStep plays a store operation, synchronous or asynchronous.
func (r *runner) storeStep(ctx context.Context, st *Step, now int64, label string) bool {
	req, err := st.request(r.sc.Tenant, func(name string) (spec.LeaseRef, error) {
		ref, bound := r.leases[name]
		if !bound {
			return ref, fmt.Errorf("lease %q was never bound: the claim that names it returned fewer leases", name)
		}
		return ref, nil
	})
	if err != nil {
		r.record(st, now, label, "not run", err.Error())
		if st.Async != "" {
			// Its await_arrival, resume and await are skipped; the
			// reason is this step's mismatch.
			r.async[st.Async] = &inflight{name: st.Async, st: st, notStarted: true, awaited: true}
		}
		return true
	}
	a := r.launch(st, model.Op{Jitter: st.Jitter, Req: req})
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
		r.finish(a)
		r.record(st, now, label, outcome(a.res), r.check(st.Expect, a)...)
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

// launch starts op on its client's store under the operations' context,
// arming its barrier first.
func (r *runner) launch(st *Step, op model.Op) *inflight {
	a := &inflight{name: st.Async, st: st, done: make(chan struct{})}
	if st.PauseAt != "" {
		a.barrier = r.barriers.Arm(st.Client, st.row.Op, st.PauseAt)
	}
	call := r.callers[st.Client].Begin(op)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		a.res, a.err = call.Run(r.ops)
		close(a.done)
	}()
	return a
}

// check compares an operation's outcome with its expectation.
func (r *runner) check(e *Expect, a *inflight) []string {
	if a.err != nil {
		return []string{a.err.Error()}
	}
	return compare(e, a.res)
}

// finish binds the leases a claim returned.
func (r *runner) finish(a *inflight) {
	leases, isClaim := a.res.Value.([]spec.Lease)
	if !isClaim || a.err != nil {
		return
	}
	for i, l := range leases {
		if i < len(a.st.Bind) {
			r.leases[a.st.Bind[i]] = l.Ref()
		}
	}
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
		fmt.Sprintf("hung (deadlock guard): the scenario went no further; waiting here, with still pending: %s", strings.Join(pending, "; ")))
	return false
}

// pending lists the operations not yet awaited, in step order.
func (r *runner) pending() []string {
	var out []string
	if a := r.current; a != nil && !isClosed(a.done) {
		out = append(out, fmt.Sprintf("step %d %s: running (not returned)", a.st.Index, describe(a.st)))
	}
	for _, a := range slices.SortedFunc(maps.Values(r.async), func(a, b *inflight) int { return a.st.Index - b.st.Index }) {
		if a.awaited {
			continue
		}
		st := a.st
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

// drain waits for every asynchronous operation to return, up to the
// checks' patience.
func (r *runner) drain() bool {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(hang.Patience()):
		return false
	}
}

// finalScan reads every row through the runner's own store, as an operation
// of the history, and compares them with the file's final state.
func (r *runner) finalScan(ctx context.Context) {
	res, err := r.callers[readerClient].Do(ctx, model.Op{Req: spec.SnapshotRequest{}})
	switch {
	case err != nil:
		r.mismatch(FinalStep, "snapshot: %v", err)
	case res.Err != nil:
		r.mismatch(FinalStep, "snapshot: %v", res.Err)
	default:
		r.checkFinal(res.Value.(spec.Snapshot))
	}
}

// judge hands the history to the model: the same linearizability check and
// accounting as the harness's concurrent runs (no drain, so no liveness),
// then the vacuity guard on the races the scenario names.
func (r *runner) judge() {
	h := r.rec.History()
	m := model.Model{Config: r.sc.Config}
	v := validate.Judge(m, h, validate.Judgement{Timeout: hang.PhasePatience()})
	r.res.History, r.res.Verdict, r.res.Races = h, &v, v.Races
	if v.Violations() > 0 {
		v.Explain(m, h, hang.PhasePatience())
		why := string(v.Linearizable)
		if v.Culprit != nil {
			why += "; " + v.Culprit.String()
		}
		r.mismatch(0, "model judge: the history is %s; accounting %q", why, v.Accounting)
	}
	for _, race := range r.sc.Races {
		if v.Races[race] == 0 {
			r.mismatch(0, "vacuity: the scenario names race %q but it never happened (%s)", race, race.Meaning())
		}
	}
}

// describe labels a step for reports: the client, the op and the fields it
// writes, and how it runs.
func describe(st *Step) string {
	var b strings.Builder
	if st.Client != "" {
		b.WriteString(st.Client + ": ")
	}
	b.WriteString(st.Op)
	add := func(format string, args ...any) { fmt.Fprintf(&b, " "+format, args...) }
	if st.Store() {
		for _, f := range requestFields(st.row.Request) {
			if raw, set := st.Fields[f.name]; set {
				var s string
				if json.Unmarshal(raw, &s) != nil {
					s = compact(raw)
				}
				add("%s=%s", f.name, s)
			}
		}
		if len(st.Bind) > 0 {
			add("bind=%s", strings.Join(st.Bind, ","))
		}
	}
	switch st.Op {
	case "advance":
		add("%d ms", st.Ms)
	case "await_arrival", opAwaitBlocked, "await", "resume":
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

func compact(raw json.RawMessage) string {
	v, err := decodeJSON(raw)
	if err != nil {
		return string(raw)
	}
	return show(v)
}

package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Batched completion (spec.BatchCompleter, ADR-013). Each test is not
// applicable (CapCompleteBatch) when the store does not implement the
// optional interface.

func init() {
	register("CompleteBatchMembersAreIndependent", testCompleteBatchMembers)
	register("CompleteBatchEqualsComplete", testCompleteBatchEqualsComplete)
	register("CompleteBatchAtomicity", testCompleteBatchAtomicity)
	register("CompleteBatchLimits", testCompleteBatchLimits)
	register("ConcurrentOverlappingBatches", testConcurrentOverlappingBatches)
}

// batcher returns the env's store as a spec.BatchCompleter, or stops the
// test as not applicable.
func (e *env) batcher() spec.BatchCompleter {
	e.t.Helper()
	e.need(CapCompleteBatch)
	return e.s.(spec.BatchCompleter)
}

// completeReq is the CompleteRequest of l with result (nil when "").
func completeReq(l spec.Lease, result string) spec.CompleteRequest {
	r := spec.CompleteRequest{Lease: l.Ref()}
	if result != "" {
		r.Result = []byte(result)
	}
	return r
}

func testCompleteBatchMembers(t *testing.T, f Factory) {
	e := newEnv(t, f)
	b := e.batcher()
	for _, id := range []string{"a_current", "b_stale", "c_cancelled", "d_badresult", "e_noresult"} {
		e.newRun("acme", id)
	}
	current := e.claimOne("acme", "a_current", "w1", 10_000)
	stale := e.claimOne("acme", "b_stale", "w1", 100)
	cancelled := e.claimOne("acme", "c_cancelled", "w1", 10_000)
	badResult := e.claimOne("acme", "d_badresult", "w1", 10_000)
	noResult := e.claimOne("acme", "e_noresult", "w1", 10_000)
	// "b_stale" expires and another worker takes it at generation 2; then
	// "c_cancelled" is cancelled while w1 still holds it.
	e.set(t0 + 200)
	successor := e.claimOne("acme", "b_stale", "w2", 10_000)
	e.cancel("acme", "c_cancelled", "")
	ghost := current
	ghost.RunID = "ghost"

	e.set(t0 + 300)
	_, readsBefore := e.rec.Last()
	reqs := []spec.CompleteRequest{
		completeReq(current, `{"b": 2, "a": 1}`),
		completeReq(stale, `{"late":true}`),
		completeReq(cancelled, `{"late":true}`),
		completeReq(ghost, ""),
		completeReq(badResult, `{"a":`),
		completeReq(current, `{"again":true}`), // the same lease twice
		completeReq(noResult, ""),
	}
	outs, err := b.CompleteBatch(e.ctx, reqs)
	mustOK(t, "CompleteBatch with one stale member among others", err)
	if _, reads := e.rec.Last(); reads-readsBefore != 1 {
		t.Errorf("CompleteBatch read the clock %d times, want exactly once for the whole batch", reads-readsBefore)
	}
	if len(outs) != len(reqs) {
		t.Fatalf("CompleteBatch returned %d outcomes for %d requests, want one per request", len(outs), len(reqs))
	}
	wantCompleted := func(id, result string) spec.Run {
		w := e.wantRun(req("acme", id), t0)
		w.State, w.Version, w.LastSeq, w.Result = spec.RunCompleted, 3, 2, result
		return w
	}
	checkEqual(t, "member 0 (current lease)", outs[0], spec.BatchOutcome{Run: wantCompleted("a_current", `{"a":1,"b":2}`)})
	wantRefusals := []struct {
		i     int
		what  string
		code  spec.Code
		state spec.RunState
	}{
		{1, "member 1 (lease reclaimed by generation 2)", spec.CodeLostLease, ""},
		{2, "member 2 (run cancelled under the lease)", spec.CodeCancelled, spec.RunCancelled},
		{3, "member 3 (no such run)", spec.CodeNotFound, ""},
		{4, "member 4 (result is not JSON)", spec.CodeInvalidArgument, ""},
		{5, "member 5 (the lease of member 0 again)", spec.CodeAlreadyTerminal, spec.RunCompleted},
	}
	for _, w := range wantRefusals {
		o := outs[w.i]
		if spec.CodeOf(o.Err) != w.code || spec.StateOf(o.Err) != w.state {
			t.Errorf("%s: want %s (state %q), got %v", w.what, w.code, w.state, o.Err)
		}
		var se *spec.Error
		if o.Err != nil && !errors.As(o.Err, &se) {
			t.Errorf("%s: want a *spec.Error, got %T", w.what, o.Err)
		}
		checkEqual(t, w.what+": run of a refused member", o.Run, spec.Run{})
	}
	checkEqual(t, "member 6 (no result)", outs[6], spec.BatchOutcome{Run: wantCompleted("e_noresult", "")})

	// The stale member changed nothing: generation 2 still holds the run
	// and can finish it, with the run's only terminal event.
	mustEqual(t, "job of the stale member", e.getJob("acme", "b_stale"), spec.Job{Tenant: "acme", RunID: "b_stale", Operation: "work",
		State: spec.JobLeased, AvailableAt: t0, LeaseOwner: "w2", LeaseExpiresAt: t0 + 200 + 10_000, Generation: 2, Attempts: 2, MaxAttempts: 3})
	mustEqual(t, "events of the stale member", len(e.events("acme", "b_stale")), 1)
	e.complete(successor, `{"winner":2}`)
	ev := e.events("acme", "b_stale")
	mustEqual(t, "terminal event of the stale run", ev[len(ev)-1].Payload, spec.CompletedPayload(2))
	// The refused member with a bad result keeps its lease.
	mustEqual(t, "job of the member with a bad result", e.getJob("acme", "d_badresult").State, spec.JobLeased)
	// The cancelled run keeps its cancellation (one terminal event).
	mustEqual(t, "events of the cancelled member", len(e.events("acme", "c_cancelled")), 2)
}

// testCompleteBatchEqualsComplete completes one run with Complete and an
// identical one in a batch, at the same time, and compares every row.
func testCompleteBatchEqualsComplete(t *testing.T, f Factory) {
	e := newEnv(t, f)
	b := e.batcher()
	e.newRun("acme", "a_single")
	e.newRun("acme", "b_batched")
	single := e.claimOne("acme", "a_single", "w", 10_000)
	batched := e.claimOne("acme", "b_batched", "w", 10_000)
	e.set(t0 + 50)
	want := e.complete(single, `{"ok":true}`)
	outs, err := b.CompleteBatch(e.ctx, []spec.CompleteRequest{completeReq(batched, `{"ok":true}`)})
	mustOK(t, "CompleteBatch of one member", err)
	want.ID = "b_batched"
	mustEqual(t, "batched run vs the same run completed by Complete", outs[0], spec.BatchOutcome{Run: want})
	mustEqual(t, "stored run", e.getRun("acme", "b_batched"), want)
	rename := func(id string) ([]spec.Event, []spec.Attempt, spec.Job) {
		ev, at, job := e.events("acme", id), e.attempts("acme", id), e.getJob("acme", id)
		for i := range ev {
			ev[i].RunID = "x"
		}
		for i := range at {
			at[i].RunID = "x"
		}
		job.RunID = "x"
		return ev, at, job
	}
	wantEv, wantAt, wantJob := rename("a_single")
	gotEv, gotAt, gotJob := rename("b_batched")
	mustEqual(t, "events (batch vs Complete)", gotEv, wantEv)
	mustEqual(t, "attempts (batch vs Complete)", gotAt, wantAt)
	mustEqual(t, "job (batch vs Complete)", gotJob, wantJob)
}

func testCompleteBatchAtomicity(t *testing.T, f Factory) {
	e := newEnv(t, f)
	b := e.batcher()
	e.newRun("acme", "r1")
	e.newRun("acme", "r2")
	leases := e.claim("acme", "w", 10_000, 2)
	reqs := []spec.CompleteRequest{completeReq(leases[0], `{"n":1}`), completeReq(leases[1], `{"n":2}`)}

	batchHookFaults(t, e, spec.OpCompleteBatch, "CompleteBatch", func() ([]spec.BatchOutcome, error) { return b.CompleteBatch(e.ctx, reqs) })
	for _, l := range leases {
		mustEqual(t, "run "+l.RunID+" after the lost answer", e.getRun("acme", l.RunID).State, spec.RunCompleted)
	}
}

func testCompleteBatchLimits(t *testing.T, f Factory) {
	e := newEnv(t, f)
	b := e.batcher()
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 10_000)
	before := e.snap()
	_, readsBefore := e.rec.Last()
	outs, err := b.CompleteBatch(e.ctx, nil)
	mustOK(t, "CompleteBatch of nothing", err)
	mustEqual(t, "outcomes of an empty batch", len(outs), 0)
	if _, reads := e.rec.Last(); reads != readsBefore {
		t.Errorf("an empty batch read the clock %d times, want 0 (it writes nothing)", reads-readsBefore)
	}

	tooMany := make([]spec.CompleteRequest, spec.MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = completeReq(l, "")
	}
	_, err = b.CompleteBatch(e.ctx, tooMany)
	mustCode(t, fmt.Sprintf("CompleteBatch of %d members", len(tooMany)), err, spec.CodeInvalidArgument)

	// A broken clock must not write, for any member.
	e.set(-1)
	outs, err = b.CompleteBatch(e.ctx, []spec.CompleteRequest{completeReq(l, "")})
	mustCode(t, "CompleteBatch with the clock at -1", err, spec.CodeInvalidArgument)
	if outs != nil {
		t.Errorf("CompleteBatch with a broken clock returned outcomes %+v, want nil", outs)
	}
	e.set(t0 + 1)
	e.unchanged("refused batches", before)
}

// testConcurrentOverlappingBatches completes the same runs from two pools
// at once, in opposite orders: each run must complete exactly once, the
// other batch's member getting already_terminal, and neither batch may
// fail (a deadlock between the two would be unavailable).
func testConcurrentOverlappingBatches(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.batcher()
	const runs = 16
	for i := range runs {
		e.newRun("acme", fmt.Sprintf("r%02d", i))
	}
	leases := e.claim("acme", "w", 60_000, runs)
	forward := make([]spec.CompleteRequest, runs)
	for i, l := range leases {
		forward[i] = completeReq(l, fmt.Sprintf(`{"i":%d}`, i))
	}
	backward := slices.Clone(forward)
	slices.Reverse(backward)
	stores := e.pools(2)
	var outs [2][]spec.BatchOutcome
	var errs [2]error
	race(
		func() { outs[0], errs[0] = stores[0].(spec.BatchCompleter).CompleteBatch(e.ctx, forward) },
		func() { outs[1], errs[1] = stores[1].(spec.BatchCompleter).CompleteBatch(e.ctx, backward) },
	)
	for i, err := range errs {
		mustOK(t, fmt.Sprintf("batch %d of two overlapping batches", i), err)
	}
	for i, l := range leases {
		a, bOut := outs[0][i], outs[1][runs-1-i]
		won := 0
		for _, o := range []spec.BatchOutcome{a, bOut} {
			switch {
			case o.Err == nil:
				won++
			default:
				checkLoser(t, "the other batch's member for "+l.RunID, o.Err, spec.RunCompleted)
			}
		}
		if won != 1 {
			t.Errorf("run %s: completed by %d batches, want exactly 1 (%+v / %+v)", l.RunID, won, a, bOut)
		}
		if n := len(e.events("acme", l.RunID)); n != 2 {
			t.Errorf("run %s has %d events, want 2 (queued, one completion)", l.RunID, n)
		}
	}
}

// batchHookFaults runs a batch operation (call, the capability's method)
// with a fault injected at each hook point. Before the commit, after every
// member's writes: the hook's error, no outcomes, nothing written (not even
// an expired record's deletion). After the commit: unknown_outcome and no
// outcomes; the caller then checks that every member applied.
func batchHookFaults[O any](t *testing.T, e *env, op spec.Op, method string, call func() ([]O, error)) {
	t.Helper()
	before := e.snap()
	e.hook.arm(op, spec.BeforeCommit)
	outs, err := call()
	if fired := e.hook.disarm(); fired != 1 {
		t.Fatalf("the BeforeCommit hook of %s fired %d times, want 1 (does %s call the hook with %q?)", op, fired, method, op)
	}
	if !errors.Is(err, errInjected) || outs != nil {
		t.Fatalf("%s failed before commit: want the hook's error and no outcomes, got %v, %+v", method, err, outs)
	}
	e.unchanged(method+" rolled back before commit", before)

	e.hook.arm(op, spec.AfterCommit)
	outs, err = call()
	e.hook.disarm()
	mustCode(t, method+" whose answer was lost after commit", err, spec.CodeUnknownOutcome)
	if outs != nil {
		t.Errorf("%s with a batch error returned outcomes %+v, want nil", method, outs)
	}
}

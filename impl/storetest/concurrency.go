package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Races between independent connection pools (Handle.Reopen). Goroutines are
// released together by closing a channel and joined with a WaitGroup; the
// assertions are about outcomes only (who wins is up to the database), never
// about timing.

func init() {
	register("ConcurrentTerminalWritesKeepSequences", testConcurrentTerminalWrites)
	register("ConcurrentCancelVsComplete", testConcurrentCancelVsComplete)
	register("ConcurrentDuplicateCreate", testConcurrentDuplicateCreate)
	register("ConcurrentClaimsAreExclusive", testConcurrentClaims)
}

// pools returns the env's store and n-1 more on their own connections.
func (e *env) pools(n int) []spec.Store {
	out := []spec.Store{e.s}
	for len(out) < n {
		out = append(out, e.h.Reopen(e.t))
	}
	return out
}

// race runs every fn at once, each in its own goroutine, and waits for all.
func race(fns ...func()) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn()
		}()
	}
	close(start)
	wg.Wait()
}

// checkLoser checks the error every write that lost to a terminal run must
// get: cancelled for a cancelled run, else already_terminal, carrying the
// final state.
func checkLoser(t *testing.T, what string, err error, final spec.RunState) {
	t.Helper()
	want := spec.CodeAlreadyTerminal
	if final == spec.RunCancelled {
		want = spec.CodeCancelled
	}
	if spec.CodeOf(err) != want || spec.StateOf(err) != final {
		t.Errorf("%s lost to a %s run: want %s with state %s, got %v", what, final, want, final, err)
	}
}

func testConcurrentTerminalWrites(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const runs = 24
	stores := e.pools(4)
	for i := 0; i < runs; i++ {
		r := req("acme", fmt.Sprintf("r%02d", i))
		r.MaxAttempts = 1 // so that Retry terminalizes too
		e.create(r)
	}
	leases := e.claim("acme", "w", 60_000, runs)
	if len(leases) != runs {
		t.Fatalf("claimed %d of %d runs", len(leases), runs)
	}
	e.set(t0 + 1)

	// Per run, four terminal writers on four different pools.
	type contender struct {
		name string
		// want is the run state this contender produces when it wins.
		want spec.RunState
		do   func(s spec.Store, l spec.Lease) error
	}
	contenders := []contender{
		{"Complete", spec.RunCompleted, func(s spec.Store, l spec.Lease) error {
			_, err := s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"w":1}`)})
			return err
		}},
		{"Cancel", spec.RunCancelled, func(s spec.Store, l spec.Lease) error {
			_, err := s.Cancel(e.ctx, spec.CancelRequest{Tenant: l.Tenant, RunID: l.RunID, Reason: "race"})
			return err
		}},
		{"Retry at the budget", spec.RunFailed, func(s spec.Store, l spec.Lease) error {
			_, err := s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: "flaky"})
			return err
		}},
		{"Fail", spec.RunFailed, func(s spec.Store, l spec.Lease) error {
			_, err := s.Fail(e.ctx, spec.FailRequest{Lease: l.Ref(), ErrorCode: "fatal"})
			return err
		}},
	}
	errs := make([][]error, runs)
	var fns []func()
	for i, l := range leases {
		errs[i] = make([]error, len(contenders))
		for c := range contenders {
			fns = append(fns, func() { errs[i][c] = contenders[c].do(stores[(i+c)%len(stores)], l) })
		}
	}
	race(fns...)

	snap := e.snap()
	for i, l := range leases {
		run := e.getRun("acme", l.RunID)
		winners := 0
		for c, err := range errs[i] {
			if err == nil {
				winners++
				if contenders[c].want != run.State {
					t.Errorf("%s: %s succeeded but the run is %s", l.RunID, contenders[c].name, run.State)
				}
				continue
			}
			checkLoser(t, l.RunID+": "+contenders[c].name, err, run.State)
		}
		if winners != 1 {
			t.Errorf("%s: %d terminal writes succeeded, want exactly 1 (errors %v)", l.RunID, winners, errs[i])
		}
		ev := filter(snap.Events, func(x spec.Event) bool { return x.RunID == l.RunID })
		if len(ev) != 2 || ev[0].Seq != 1 || ev[1].Seq != 2 || !ev[1].Kind.Terminal() || run.LastSeq != 2 || run.Version != 3 {
			t.Errorf("%s: want events seq 1 (queued) and 2 (terminal), last seq 2, version 3; got %+v, run %+v", l.RunID, ev, run)
		}
	}
}

func testConcurrentCancelVsComplete(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const runs = 16
	stores := e.pools(2)
	for i := 0; i < runs; i++ {
		e.newRun("acme", fmt.Sprintf("r%02d", i))
	}
	leases := e.claim("acme", "w", 60_000, runs)
	completeErr := make([]error, runs)
	cancelErr := make([]error, runs)
	var fns []func()
	for i, l := range leases {
		fns = append(fns,
			func() {
				_, completeErr[i] = stores[i%2].Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref()})
			},
			func() {
				_, cancelErr[i] = stores[(i+1)%2].Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: l.RunID})
			})
	}
	race(fns...)
	for i, l := range leases {
		run := e.getRun("acme", l.RunID)
		switch {
		case completeErr[i] == nil && cancelErr[i] == nil:
			t.Errorf("%s: both Complete and Cancel succeeded", l.RunID)
		case completeErr[i] == nil:
			mustEqual(t, l.RunID+" state after Complete won", run.State, spec.RunCompleted)
			mustCodeState(t, l.RunID+": Cancel after losing", cancelErr[i], spec.CodeAlreadyTerminal, spec.RunCompleted)
		case cancelErr[i] == nil:
			mustEqual(t, l.RunID+" state after Cancel won", run.State, spec.RunCancelled)
			mustCodeState(t, l.RunID+": Complete after losing", completeErr[i], spec.CodeCancelled, spec.RunCancelled)
		default:
			t.Errorf("%s: neither won: Complete %v, Cancel %v", l.RunID, completeErr[i], cancelErr[i])
		}
	}
}

func testConcurrentDuplicateCreate(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const callers = 8
	stores := e.pools(4)

	// Same key, same request, different proposed ids: one run.
	results := make([]spec.CreateRunResult, callers)
	errs := make([]error, callers)
	var fns []func()
	for i := 0; i < callers; i++ {
		fns = append(fns, func() {
			r := req("acme", fmt.Sprintf("same-%d", i))
			r.IdempotencyKey = "one-key"
			results[i], errs[i] = stores[i%len(stores)].CreateRun(e.ctx, r)
		})
	}
	race(fns...)
	created := -1
	for i := range results {
		mustOK(t, fmt.Sprintf("concurrent CreateRun %d with one key", i), errs[i])
		if !results[i].Replayed {
			if created >= 0 {
				t.Fatalf("two concurrent creates with one key both created a run: %s and %s", results[created].Run.ID, results[i].Run.ID)
			}
			created = i
		}
	}
	if created < 0 {
		t.Fatalf("no concurrent create reported creating the run: %+v", results)
	}
	for i := range results {
		mustEqual(t, fmt.Sprintf("result %d", i), results[i].Run, results[created].Run)
	}
	snap := e.snap()
	if len(snap.Runs) != 1 || len(snap.Events) != 1 || len(snap.Jobs) != 1 || len(snap.Idempotency) != 1 {
		t.Fatalf("after concurrent creates with one key: want 1 run, event, job and record; got %+v", snap)
	}

	// Same key, different requests: one run; every other caller sees the
	// conflict (never a second run, never an untyped error).
	var fns2 []func()
	errs2 := make([]error, callers)
	for i := 0; i < callers; i++ {
		fns2 = append(fns2, func() {
			r := req("acme", fmt.Sprintf("diff-%d", i))
			r.IdempotencyKey = "two-key"
			r.Payload = []byte(fmt.Sprintf(`{"caller":%d}`, i))
			_, errs2[i] = stores[i%len(stores)].CreateRun(e.ctx, r)
		})
	}
	race(fns2...)
	wins := 0
	for i, err := range errs2 {
		if err == nil {
			wins++
			continue
		}
		checkCode(t, fmt.Sprintf("conflicting concurrent create %d", i), err, spec.CodeIdempotencyConflict)
	}
	mustEqual(t, "conflicting concurrent creates that succeeded", wins, 1)
	mustEqual(t, "runs", len(e.snap().Runs), 2)
}

func testConcurrentClaims(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const jobs, workers = 40, 8
	stores := e.pools(4)
	for i := 0; i < jobs; i++ {
		e.newRun("acme", fmt.Sprintf("r%02d", i))
	}
	var claimed atomic.Int64
	got := make([][]spec.Lease, workers)
	errs := make([]error, workers)
	var fns []func()
	for w := 0; w < workers; w++ {
		fns = append(fns, func() {
			s := stores[w%len(stores)]
			// An empty claim proves nothing under SKIP LOCKED, so keep
			// claiming until every job is taken; the bound only stops a
			// broken store from spinning forever.
			for i := 0; i < 10_000 && claimed.Load() < jobs; i++ {
				ls, err := s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: fmt.Sprintf("w%d", w), LeaseMs: 60_000, Limit: 3})
				if err != nil {
					errs[w] = err
					return
				}
				claimed.Add(int64(len(ls)))
				got[w] = append(got[w], ls...)
			}
			// Each worker completes what it claimed, on its own pool.
			for _, l := range got[w] {
				if _, err := s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref()}); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	race(fns...)
	owner := map[string]int{}
	for w := range got {
		mustOK(t, fmt.Sprintf("worker %d", w), errs[w])
		for _, l := range got[w] {
			if prev, dup := owner[l.RunID]; dup {
				t.Errorf("%s was claimed by worker %d and worker %d", l.RunID, prev, w)
			}
			owner[l.RunID] = w
			if l.Generation != 1 || l.Attempt != 1 || l.Owner != fmt.Sprintf("w%d", w) {
				t.Errorf("lease %+v of worker %d: want generation 1, attempt 1, its own name", l, w)
			}
		}
	}
	mustEqual(t, "jobs claimed", len(owner), jobs)
	for _, r := range e.snap().Runs {
		if r.State != spec.RunCompleted || r.LastSeq != 2 {
			t.Errorf("run %s: want completed with 2 events, got %+v", r.ID, r)
		}
	}
}

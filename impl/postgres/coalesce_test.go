package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/spec"
)

// newGates returns two hook barriers, shut, and open, which opens one
// (again: a no-op).
func newGates() (gates [2]chan struct{}, open func(i int)) {
	var once [2]sync.Once
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	return gates, func(i int) { once[i].Do(func() { close(gates[i]) }) }
}

// TestConformanceCoalesced runs the conformance suite on a store that
// coalesces concurrent CreateRun calls (Options.CoalesceCreateRun): each
// call's result, hooks, clock reading and errors must be CreateRun's.
func TestConformanceCoalesced(t *testing.T) {
	pgtest.DSN(t)
	pool := pgtest.NewSchemaPool(t, "") // as TestConformance
	// After the suite's parallel subtests, which run once this returns.
	t.Cleanup(func() { t.Logf("schema pool: %+v", pool.Stats()) })
	leaseholdtest.Conformance(t, leaseholdtest.Store{Name: "postgres-coalesced",
		Factory: pool.Factory(postgres.Options{MaxConns: 4, CoalesceCreateRun: 2})})
}

// TestCoalescedRunIDRace: a coalesced bulk admission whose member's run id
// a concurrent admission under another key took after the batch read it
// free aborts on the run's key, writing nothing, and runs again under the
// admission locks, where it reads the run id taken: only that member is
// refused (already_exists) and its neighbour is created, in one retry.
//
// The schedule, with two slots: A (run r1, key ka) and C are held before
// their commits by the hook; B1 (run r1, key kb) and B2 wait for a slot;
// C commits, B1 and B2 become one batch, which reads r1 free (A has not
// committed) and waits for A's row; A commits; the batch fails on runs_pkey
// and runs again.
func TestCoalescedRunIDRace(t *testing.T) {
	var hooked atomic.Int32
	gates, open := newGates()
	held := make(chan int32, 2)
	hook := func(ctx context.Context, op spec.Op, point spec.HookPoint) error {
		if op != spec.OpCreateRun || point != spec.BeforeCommit {
			return nil
		}
		n := hooked.Add(1) - 1
		if n >= 2 {
			return nil
		}
		held <- n
		select {
		case <-gates[n]:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h := pgtest.FactoryWith(postgres.Options{MaxConns: 4, CoalesceCreateRun: 2})(t,
		storetest.Options{Config: spec.DefaultConfig(), Clock: clock.NewManual(1_000), Hook: hook})
	s := h.Store.(*postgres.Store)
	t.Cleanup(func() { open(0); open(1) }) // before the store closes: a failed test leaves no call held
	ctx, cancel := hang.Context(context.Background())
	defer cancel()

	type outcome struct {
		res spec.CreateRunResult
		err error
	}
	admit := func(key, runID string) <-chan outcome {
		ch := make(chan outcome, 1)
		go func() {
			res, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: key, RunID: runID, Payload: []byte(`{"key":"` + key + `"}`)})
			ch <- outcome{res, err}
		}()
		return ch
	}
	waitFor := func(what string, cond func() bool) { t.Helper(); hang.Until(t, what, cond) }
	calls := func() int64 { return s.AdmissionStats().Coalesced }

	a := admit("ka", "r1")
	if n := <-held; n != 0 {
		t.Fatalf("hook call %d first, want 0", n)
	}
	c := admit("kc", "rc")
	<-held
	b1, b2 := admit("kb", "r1"), admit("kb2", "rb2")
	waitFor("B1 and B2 to queue", func() bool { return calls() == 4 })
	open(1) // C commits; B1 and B2 become one batch
	if o := <-c; o.err != nil {
		t.Fatalf("C: %v", o.err)
	}
	waitFor("the batch of B1 and B2 to wait for A's run row", func() bool {
		n, err := s.LockWaits(ctx)
		return err == nil && n > 0
	})
	open(0) // A commits; the batch fails on r1

	oa := <-a
	if oa.err != nil || oa.res.Run.ID != "r1" || oa.res.Replayed {
		t.Fatalf("A: (%+v, %v), want run r1 created", oa.res, oa.err)
	}
	if o := <-b1; spec.CodeOf(o.err) != spec.CodeAlreadyExists {
		t.Fatalf("B1 (run r1 under another key): %v, want %s", o.err, spec.CodeAlreadyExists)
	}
	if o := <-b2; o.err != nil || o.res.Run.ID != "rb2" || o.res.Replayed {
		t.Fatalf("B2: (%+v, %v), want run rb2 created: the neighbour of a refused member is admitted", o.res, o.err)
	}
	if st := s.AdmissionStats(); st.Coalesced != 4 || st.SharedTransactions != 3 || st.Retried != 1 {
		t.Fatalf("AdmissionStats() = %+v, want 4 calls in 3 shared transactions (A, C, B1+B2), B1+B2 run again once under the locks", st)
	}
	run, err := s.GetRun(ctx, "acme", "r1")
	if err != nil || run.Fingerprint != oa.res.Run.Fingerprint {
		t.Fatalf("run r1: (%+v, %v), want A's (fingerprint %s)", run, err, oa.res.Run.Fingerprint)
	}
}

// TestCoalescedCallAbandoned: a coalesced call whose context ends while it
// waits for a slot returns unavailable and joins no transaction; one whose
// context ends while its shared transaction runs returns unknown_outcome
// (the transaction may commit), and the transaction goes on for the call
// still waiting on it.
func TestCoalescedCallAbandoned(t *testing.T) {
	// The first transaction holds the only slot; the second is held while
	// one of its callers gives up.
	gates, open := newGates()
	held := make(chan struct{}, 2)
	var hooked atomic.Int32
	hook := func(ctx context.Context, op spec.Op, point spec.HookPoint) error {
		if op != spec.OpCreateRun || point != spec.BeforeCommit {
			return nil
		}
		n := hooked.Add(1) - 1
		if n < 2 {
			held <- struct{}{}
			<-gates[n]
		}
		return nil
	}
	h := pgtest.FactoryWith(postgres.Options{MaxConns: 4, CoalesceCreateRun: 1})(t,
		storetest.Options{Config: spec.DefaultConfig(), Clock: clock.NewManual(1_000), Hook: hook})
	s := h.Store.(*postgres.Store)
	t.Cleanup(func() { open(0); open(1) }) // before the store closes: a failed test leaves no call held
	bg := context.Background()
	req := func(id string) spec.CreateRunRequest {
		return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: id, RunID: id, Payload: []byte(`{}`)}
	}
	errs := make(chan error, 3)
	go func() { _, err := s.CreateRun(bg, req("r0")); errs <- err }()
	<-held
	ctx, cancel := context.WithCancel(bg)
	abandoned := make(chan error, 1)
	go func() { _, err := s.CreateRun(ctx, req("r1")); abandoned <- err }()
	go func() { _, err := s.CreateRun(bg, req("r2")); errs <- err }()
	waiting, stopWaiting := context.WithCancel(bg)
	dropped := make(chan error, 1)
	go func() { _, err := s.CreateRun(waiting, req("r3")); dropped <- err }()
	hang.Until(t, "four calls to queue for the one batch slot", func() bool { return s.AdmissionStats().Coalesced >= 4 })
	stopWaiting() // r3's caller gives up while it waits for the slot
	var typedErr *spec.Error
	if err := <-dropped; !errors.As(err, &typedErr) || typedErr.Code != spec.CodeUnavailable || !errors.Is(err, context.Canceled) {
		t.Fatalf("a call whose context ended while it waited returned %v (%T), want a *spec.Error %s wrapping context.Canceled", err, err, spec.CodeUnavailable)
	}
	open(0) // r1 and r2 become one transaction, held at its hook...
	<-held
	cancel() // ...while r1's caller gives up
	if err := <-abandoned; spec.CodeOf(err) != spec.CodeUnknownOutcome || !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned call returned %v, want %s wrapping context.Canceled", err, spec.CodeUnknownOutcome)
	}
	open(1)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a call that waited: %v", err)
		}
	}
	for _, id := range []string{"r0", "r1", "r2"} {
		if _, err := s.GetRun(bg, "acme", id); err != nil {
			t.Fatalf("run %s: %v (the shared transaction must commit for the caller still waiting)", id, err)
		}
	}
	if _, err := s.GetRun(bg, "acme", "r3"); spec.CodeOf(err) != spec.CodeNotFound {
		t.Fatalf("run r3 of the call dropped before its transaction: %v, want %s", err, spec.CodeNotFound)
	}
}

// TestCreateRunRacesAnUnlockedBulkAdmission: a bulk admission runs without
// the admission locks, so a CreateRun of one of its members' scopes and run
// id can read no record, then find the run id taken when the batch
// commits. That CreateRun is the batch member's replay, not already_exists.
// The batch is held before its commit while the CreateRun waits for its
// run row. Decided under the lock, the CreateRun runs again and reads the
// record (Retried 1); as a fresh admission (createFresh), its insert waits
// for the batch's rows and writes nothing, and the CreateRun is then
// decided under the lock from the committed record (Retried 0, Fresh 0).
func TestCreateRunRacesAnUnlockedBulkAdmission(t *testing.T) {
	for _, tc := range []struct {
		name           string
		locked         bool
		retried, fresh int64
	}{{"fresh first", false, 0, 0}, {"under the lock", true, 1, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s, held, release := heldBulkStore(t)
			if tc.locked {
				postgres.LockedCreateRun(s)
			}
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			bulk := make(chan error, 1)
			go func() {
				_, err := s.CreateRuns(ctx, []spec.CreateRunRequest{acmeRequest("k", "r1"), acmeRequest("k2", "r2")})
				bulk <- err
			}()
			<-held
			single := make(chan error, 1)
			var res spec.CreateRunResult
			go func() {
				var err error
				res, err = s.CreateRun(ctx, acmeRequest("k", "r1"))
				single <- err
			}()
			waitForLockWait(t, ctx, s, func() string { return "" }) // CreateRun waits for the batch's run row
			release()
			if err := <-bulk; err != nil {
				t.Fatalf("CreateRuns: %v", err)
			}
			if err := <-single; err != nil || !res.Replayed || res.Run.ID != "r1" {
				t.Fatalf("CreateRun of the batch member's scope and run id: (%+v, %v), want the replay of run r1", res, err)
			}
			if st := s.AdmissionStats(); st.Retried != tc.retried || st.Fresh != tc.fresh {
				t.Fatalf("AdmissionStats() = %+v, want Retried %d, Fresh %d", st, tc.retried, tc.fresh)
			}
		})
	}
}

// TestBulkRefusalHoldsItsScope: a bulk admission member refused
// already_exists rests on its scope having no record, which nothing the
// batch writes protects; so a batch without the admission locks takes the
// lock of a refused member's scope before it writes, and a CreateRun of
// that scope then waits for the batch. The batch (k-m proposing the taken
// run id "taken", k-n creating n1) is held before its commit; the CreateRun
// of k-m must wait for it and then create its run, and the batch must not
// have run again (it read the clock once). Without the lock, the CreateRun
// committed k-m's record while the batch was held, and a client that then
// found n1 missing had seen the batch come after that CreateRun, whose
// record the batch's refusal had not seen.
func TestBulkRefusalHoldsItsScope(t *testing.T) {
	s, held, release := heldBulkStore(t)
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	if _, err := s.CreateRun(ctx, acmeRequest("k-t", "taken")); err != nil {
		t.Fatal(err)
	}
	type bulkResult struct {
		outs []spec.CreateOutcome
		err  error
	}
	bulk := make(chan bulkResult, 1)
	go func() {
		outs, err := s.CreateRuns(ctx, []spec.CreateRunRequest{acmeRequest("k-m", "taken"), acmeRequest("k-n", "n1")})
		bulk <- bulkResult{outs, err}
	}()
	<-held
	single := make(chan error, 1)
	var res spec.CreateRunResult
	go func() {
		var err error
		res, err = s.CreateRun(ctx, acmeRequest("k-m", "m1"))
		single <- err
	}()
	waitForLockWait(t, ctx, s, func() string {
		select {
		case err := <-single:
			return fmt.Sprintf("CreateRun of the refused member's scope returned (%+v, %v) while the batch was held; want it to wait for the batch", res, err)
		default:
			return ""
		}
	})
	release()
	b := <-bulk
	if b.err != nil || len(b.outs) != 2 || spec.CodeOf(b.outs[0].Err) != spec.CodeAlreadyExists || b.outs[1].Err != nil || b.outs[1].Result.Run.ID != "n1" {
		t.Fatalf("CreateRuns: %+v, %v; want [already_exists, n1 created]", b.outs, b.err)
	}
	if err := <-single; err != nil || res.Replayed || res.Run.ID != "m1" {
		t.Fatalf("CreateRun of k-m after the batch: (%+v, %v), want run m1 created", res, err)
	}
	if st := s.AdmissionStats(); st.Retried != 0 {
		t.Fatalf("AdmissionStats() = %+v, want no admission run again", st)
	}
}

// TestBulkRefusalHoldsItsScopeFromBatches: as TestBulkRefusalHoldsItsScope,
// but the scope is admitted by another bulk admission, whose first attempt
// takes no admission lock (admitAll), and for each way the refused member's
// scope can stand: without a record (held by a placeholder in the scope's
// unique index), and with an expired record (held by that record's row),
// in a batch that creates a run beside the refusal, and without a record
// in one that writes nothing else. The second batch must wait for the held
// one, not reach its own commit, and then create its run; the held batch's
// outcomes stand. (A batch that writes nothing is placed at its reading of
// the runs it decided from, readDecided, which finds an expired record
// still there or runs again: it need not hold that record to its commit.)
func TestBulkRefusalHoldsItsScopeFromBatches(t *testing.T) {
	for _, c := range []struct {
		name    string
		expired bool // k-m has an expired record (run old) when the batches run
		alone   bool // the held batch is the refused member alone
	}{
		{"no record", false, false},
		{"expired record", true, false},
		{"no record, nothing else written", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(1_000)
			s, held, release := heldBulkStoreOn(t, clk)
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			if c.expired {
				if _, err := s.CreateRun(ctx, acmeRequest("k-m", "old")); err != nil {
					t.Fatal(err)
				}
				if _, err := clk.Advance(spec.DefaultConfig().IdempotencyRetentionMs); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.CreateRun(ctx, acmeRequest("k-t", "taken")); err != nil {
				t.Fatal(err)
			}
			type bulkResult struct {
				outs []spec.CreateOutcome
				err  error
			}
			first, second := make(chan bulkResult, 1), make(chan bulkResult, 1)
			reqs := []spec.CreateRunRequest{acmeRequest("k-m", "taken"), acmeRequest("k-n", "n1")}
			if c.alone {
				reqs = reqs[:1]
			}
			go func() {
				outs, err := s.CreateRuns(ctx, reqs)
				first <- bulkResult{outs, err}
			}()
			<-held
			go func() {
				outs, err := s.CreateRuns(ctx, []spec.CreateRunRequest{acmeRequest("k-m", "m1"), acmeRequest("k-o", "o1")})
				second <- bulkResult{outs, err}
			}()
			waitForLockWait(t, ctx, s, func() string {
				select {
				case <-held:
					return "the second batch, admitting the refused member's scope, reached its commit while the first was held; want it to wait for the first"
				default:
					return ""
				}
			})
			release()
			if b := <-first; b.err != nil || len(b.outs) != len(reqs) || spec.CodeOf(b.outs[0].Err) != spec.CodeAlreadyExists ||
				!c.alone && (b.outs[1].Err != nil || b.outs[1].Result.Run.ID != "n1") {
				t.Fatalf("the held batch: %+v, %v; want already_exists (and n1 created)", b.outs, b.err)
			}
			if b := <-second; b.err != nil || len(b.outs) != 2 || b.outs[0].Err != nil || b.outs[0].Result.Replayed || b.outs[0].Result.Run.ID != "m1" || b.outs[1].Err != nil {
				t.Fatalf("the second batch: %+v, %v; want [m1 created, o1 created]", b.outs, b.err)
			}
			// The second batch waited and went on: it did not meet a
			// placeholder left committed (an expired record it would have
			// replaced after running again).
			if st := s.AdmissionStats(); st.Retried != 0 {
				t.Fatalf("AdmissionStats() = %+v, want no admission run again", st)
			}
			var left int
			if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE run_id LIKE '#%'`).Scan(&left); err != nil || left != 0 {
				t.Fatalf("%d placeholder runs left after the commit (%v), want none", left, err)
			}
		})
	}
}

// waitForLockWait returns once one of s's calls waits for a lock
// (Store.LockWaits), failing the test when early names a call that went
// on instead of waiting.
func waitForLockWait(t *testing.T, ctx context.Context, s *postgres.Store, early func() string) {
	t.Helper()
	hang.Until(t, "a call to wait for a lock", func() bool {
		if msg := early(); msg != "" {
			t.Fatal(msg)
		}
		n, err := s.LockWaits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// heldBulkStore opens a store at time 1,000 whose CreateRuns calls wait
// before their commit: held receives when one arrives there, and release
// lets them all go (also when t ends).
func heldBulkStore(t *testing.T) (s *postgres.Store, held chan struct{}, release func()) {
	return heldBulkStoreOn(t, clock.NewManual(1_000))
}

// heldBulkStoreOn is heldBulkStore with the clock clk.
func heldBulkStoreOn(t *testing.T, clk *clock.Manual) (s *postgres.Store, held chan struct{}, release func()) {
	gates, open := newGates()
	held = make(chan struct{}, 1)
	hook := func(ctx context.Context, op spec.Op, point spec.HookPoint) error {
		if op == spec.OpCreateRuns && point == spec.BeforeCommit {
			held <- struct{}{}
			<-gates[0]
		}
		return nil
	}
	h := pgtest.FactoryWith(postgres.Options{MaxConns: 4})(t,
		storetest.Options{Config: spec.DefaultConfig(), Clock: clk, Hook: hook})
	release = func() { open(0) }
	t.Cleanup(release)
	return h.Store.(*postgres.Store), held, release
}

// acmeRequest is an admission of tenant acme, operation work.
func acmeRequest(key, runID string) spec.CreateRunRequest {
	return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: key, RunID: runID, Payload: []byte(`{}`)}
}

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// SKIP LOCKED under real concurrency: independent connection pools on one
// schema, row locks held by plain connections or by a store's own claim
// paused at its BeforeCommit hook. Nothing here sleeps: ordering comes from
// channels, hooks and lock-wait barriers (blocked_test.go), and "never
// blocks" on a held lock is detected by lock_timeout (noWait), which turns
// that wait into an error (55P03) instead of a hang.

const t0 = int64(1_700_000_000_000)

// noWait makes every statement of a store fail rather than wait for a lock
// longer than the checks' patience: a call that waits for a lock the test
// holds until the call has returned would wait forever, so it only fires on
// a bug (SKIP LOCKED must never wait at all), and a moment's wait for an
// unrelated lock (another test's commit taking the notification queue's
// lock) never trips it, however loaded the machine.
var noWait = map[string]string{"lock_timeout": pgtest.LockPatience()}

// openOn opens a store on an existing test schema; the store is closed when
// t ends.
func openOn(t *testing.T, dsn, schema string, o postgres.Options) *postgres.Store {
	t.Helper()
	if o.Config.Operations == nil {
		o.Config = spec.DefaultConfig()
	}
	o.Schema = schema
	if o.MaxConns == 0 {
		o.MaxConns = 4
	}
	s, err := postgres.Open(context.Background(), dsn, o)
	if err != nil {
		t.Fatalf("open store on schema %s: %v", schema, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// createRuns admits one run per id (tenant acme), in order, one ms apart so
// that the claim order is the id order.
func createRuns(t *testing.T, s spec.Store, clk *clock.Manual, maxAttempts int, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := s.CreateRun(context.Background(), spec.CreateRunRequest{Tenant: "acme", Operation: "work",
			IdempotencyKey: "key-" + id, RunID: id, Payload: []byte(`{"id":"` + id + `"}`), MaxAttempts: maxAttempts})
		if err != nil {
			t.Fatalf("create run %s: %v", id, err)
		}
		if _, err := clk.Advance(1); err != nil {
			t.Fatal(err)
		}
	}
}

func runIDs(leases []spec.Lease) []string {
	out := []string{}
	for _, l := range leases {
		out = append(out, l.RunID)
	}
	return out
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r%03d", i)
	}
	return out
}

// TestLockedRowIsSkippedNotWaitedFor: one connection holds a row lock on the
// first eligible job in an open transaction; on another connection the store's
// claim (and reap) returns the next jobs at once, returns nothing when only
// the locked job is left (an empty result while a job is eligible: trap 1),
// and takes the job once the lock is gone.
func TestLockedRowIsSkippedNotWaitedFor(t *testing.T) {
	cases := []struct {
		name string
		// setup makes r1, r2, r3 eligible for op, in that order.
		setup func(t *testing.T, s spec.Store, clk *clock.Manual)
		op    func(s spec.Store, limit int) ([]string, error)
	}{
		{
			name:  "claim",
			setup: func(t *testing.T, s spec.Store, clk *clock.Manual) { createRuns(t, s, clk, 3, "r1", "r2", "r3") },
			op: func(s spec.Store, limit int) ([]string, error) {
				l, err := s.Claim(context.Background(), spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 60_000, Limit: limit})
				return runIDs(l), err
			},
		},
		{
			name: "reap",
			setup: func(t *testing.T, s spec.Store, clk *clock.Manual) {
				createRuns(t, s, clk, 1, "r1", "r2", "r3")
				for _, id := range []string{"r1", "r2", "r3"} { // expiries in id order
					if l, err := s.Claim(context.Background(), spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 1000, Limit: 1}); err != nil || len(l) != 1 || l[0].RunID != id {
						t.Fatalf("claim %s for the reap setup: got %v, %v", id, runIDs(l), err)
					}
					clk.Advance(1)
				}
				clk.Advance(2000) // every lease expired, no attempts left: reapable
			},
			op: func(s spec.Store, limit int) ([]string, error) {
				return s.Reap(context.Background(), spec.ReapRequest{Tenant: "acme", Limit: limit})
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dsn, schema := pgtest.Schema(t)
			clk := clock.NewManual(t0)
			s := openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait})
			c.setup(t, s, clk)

			holder := pgtest.Conn(t, dsn, schema)
			tx, err := holder.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE tenant = 'acme' AND run_id = 'r1' FOR UPDATE`); err != nil {
				t.Fatalf("lock r1 on the holder connection: %v", err)
			}
			steps := []struct {
				limit int
				want  []string
			}{
				{1, []string{"r2"}}, // r1 is first in order but locked: passed over
				{5, []string{"r3"}},
				{5, []string{}}, // only r1 is left, and it is locked: empty, no wait
			}
			for i, st := range steps {
				got, err := c.op(s, st.limit)
				if err != nil {
					t.Fatalf("step %d: %s while r1 is locked elsewhere: %v (a wait for the lock would show as lock_timeout)", i, c.name, err)
				}
				if !slices.Equal(got, st.want) {
					t.Fatalf("step %d: %s(limit %d) while r1 is locked elsewhere = %v, want %v", i, c.name, st.limit, got, st.want)
				}
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if got, err := c.op(s, 5); err != nil || !slices.Equal(got, []string{"r1"}) {
				t.Fatalf("%s after the lock was released = %v, %v; want [r1]", c.name, got, err)
			}
		})
	}
}

// errAbort is what the pausing hook returns to roll a claim back.
var errAbort = errors.New("test hook: abort this claim")

// TestClaimRolledBackAfterLocking: store C's claim locks r1 and is held open
// at its BeforeCommit hook; meanwhile store B (its own pool) claims r2 at
// once, then gets nothing (r1 is eligible but locked). C's transaction then
// rolls back: C gets a typed unavailable error, its generation was never
// handed out, and B's next claim takes r1 at generation 1.
func TestClaimRolledBackAfterLocking(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(t0)
	locked, release := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	pause := func(ctx context.Context, op spec.Op, p spec.HookPoint) error {
		if op != spec.OpClaim || p != spec.BeforeCommit || !armed.CompareAndSwap(true, false) {
			return nil
		}
		close(locked)
		<-release
		return errAbort
	}
	c := openOn(t, dsn, schema, postgres.Options{Clock: clk, Hook: pause})
	b := openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait})
	createRuns(t, b, clk, 3, "r1", "r2")

	type result struct {
		leases []spec.Lease
		err    error
	}
	cDone := make(chan result, 1)
	go func() {
		l, err := c.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "c", LeaseMs: 60_000, Limit: 1})
		cDone <- result{l, err}
	}()
	<-locked // C's transaction holds r1's lock and has not committed
	// A failure below must not leave C parked: its store could not close
	// and the test would hang to go test's timeout instead of reporting.
	releaseC := sync.OnceFunc(func() { close(release) })
	defer releaseC()

	claimB := func() []spec.Lease {
		t.Helper()
		l, err := b.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "b", LeaseMs: 60_000, Limit: 1})
		if err != nil {
			t.Fatalf("B's claim while C holds r1: %v (a wait for the lock would show as lock_timeout)", err)
		}
		return l
	}
	if got := claimB(); len(got) != 1 || got[0].RunID != "r2" || got[0].Generation != 1 {
		t.Fatalf("B's first claim while C holds r1 = %+v, want r2 at generation 1", got)
	}
	if got := claimB(); len(got) != 0 {
		t.Fatalf("B's second claim while C holds r1 = %v, want nothing (r1 is locked, r2 is leased)", runIDs(got))
	}
	releaseC()
	res := <-cDone
	if spec.CodeOf(res.err) != spec.CodeUnavailable || !errors.Is(res.err, errAbort) {
		t.Fatalf("C's rolled-back claim returned %v, %v; want unavailable wrapping the hook's error", runIDs(res.leases), res.err)
	}
	got := claimB()
	if len(got) != 1 || got[0].RunID != "r1" || got[0].Generation != 1 || got[0].Attempt != 1 {
		t.Fatalf("B's claim after C rolled back = %+v, want r1 at generation 1, attempt 1 (C's claim never happened)", got)
	}
	atts, err := b.Attempts(ctx, "acme", "r1")
	if err != nil || len(atts) != 1 || atts[0].Worker != "b" || atts[0].Generation != 1 {
		t.Fatalf("r1's attempts = %+v, %v; want one, generation 1 by b", atts, err)
	}
}

// TestTwoPoolsSplitTheQueue: two independent pools claim half of the queue
// each at the same moment. SKIP LOCKED makes each pass over the other's rows
// and keep scanning, so each gets its full batch and together they take every
// job exactly once.
func TestTwoPoolsSplitTheQueue(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(t0)
	a := openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait})
	b := openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait})
	const m = 40
	createRuns(t, a, clk, 3, ids(m)...)
	start := make(chan struct{})
	var wg sync.WaitGroup
	got := make([][]spec.Lease, 2)
	errs := make([]error, 2)
	for i, s := range []spec.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = s.Claim(context.Background(), spec.ClaimRequest{Tenant: "acme", Worker: fmt.Sprint("w", i), LeaseMs: 60_000, Limit: m / 2})
		}()
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for i := range got {
		if errs[i] != nil {
			t.Fatalf("pool %d: %v", i, errs[i])
		}
		if len(got[i]) != m/2 {
			t.Errorf("pool %d claimed %d jobs, want its full batch of %d", i, len(got[i]), m/2)
		}
		for _, l := range got[i] {
			seen[l.RunID]++
			if l.Generation != 1 {
				t.Errorf("pool %d got %s at generation %d, want 1", i, l.RunID, l.Generation)
			}
		}
	}
	for _, id := range ids(m) {
		if seen[id] != 1 {
			t.Errorf("job %s was claimed %d times, want exactly once", id, seen[id])
		}
	}
}

// TestManyClaimersManyJobs: N claimers on four pools work M jobs to the end.
// Each claims batches of 1..4, then completes or releases each lease (a
// release requeues the job at once, so jobs are claimed several times), and
// one pool rolls back every third claim after it locked its rows. Checked:
// no (run, generation) is handed out twice; each run's generations are
// exactly 1..k, one per committed claim; every job ends completed; no claim
// ever waited for a row lock (lock_timeout); and rollbacks did happen.
func TestManyClaimersManyJobs(t *testing.T) {
	const (
		m          = 120 // jobs
		n          = 8   // claimers
		maxRelease = 2   // per job, so the run ends
	)
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(t0)
	var claims, aborted atomic.Int64
	abortEveryThird := func(ctx context.Context, op spec.Op, p spec.HookPoint) error {
		if op == spec.OpClaim && p == spec.BeforeCommit && claims.Add(1)%3 == 0 {
			aborted.Add(1)
			return errAbort
		}
		return nil
	}
	stores := []spec.Store{
		openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait, MaxConns: 3}),
		openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait, MaxConns: 3}),
		openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait, MaxConns: 3}),
		openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait, MaxConns: 3, Hook: abortEveryThird}),
	}
	createRuns(t, stores[0], clk, 25, ids(m)...)

	// A bound on the whole run, so that a lost job fails the test instead of
	// spinning forever; it is not a timing assertion.
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	var (
		mu        sync.Mutex
		handedOut = map[string][]int64{} // run -> generations, in hand-out order
		releases  = map[string]int{}
		completed atomic.Int64
		failures  []string
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, a...))
		mu.Unlock()
		cancel()
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			worker := fmt.Sprint("w", w)
			r := rand.New(rand.NewPCG(uint64(w), 42))
			<-start
			for completed.Load() < m && ctx.Err() == nil {
				leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: worker, LeaseMs: 600_000, Limit: 1 + r.IntN(4)})
				if errors.Is(err, errAbort) {
					continue // rolled back after locking: nothing was handed out
				}
				if err != nil {
					if ctx.Err() == nil {
						fail("%s: claim: %v", worker, err)
					}
					return
				}
				for _, l := range leases {
					mu.Lock()
					dup := slices.Contains(handedOut[l.RunID], l.Generation)
					handedOut[l.RunID] = append(handedOut[l.RunID], l.Generation)
					release := !dup && releases[l.RunID] < maxRelease && r.IntN(3) == 0
					if release {
						releases[l.RunID]++
					}
					mu.Unlock()
					if dup {
						fail("%s: generation %d of %s was handed out twice", worker, l.Generation, l.RunID)
						return
					}
					if release {
						if _, err := s.Release(ctx, spec.ReleaseRequest{Lease: l.Ref()}); err != nil {
							fail("%s: release %s@%d: %v", worker, l.RunID, l.Generation, err)
							return
						}
						continue
					}
					if _, err := s.Complete(ctx, spec.CompleteRequest{Lease: l.Ref()}); err != nil {
						fail("%s: complete %s@%d: %v", worker, l.RunID, l.Generation, err)
						return
					}
					completed.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		return
	}
	if got := completed.Load(); got != m {
		t.Fatalf("%d of %d jobs completed", got, m)
	}
	if aborted.Load() == 0 {
		t.Fatalf("no claim was rolled back: the test did not exercise a rollback after locking")
	}
	snap, err := stores[0].Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	attempts := map[string][]spec.Attempt{}
	for _, a := range snap.Attempts {
		attempts[a.RunID] = append(attempts[a.RunID], a)
	}
	for _, j := range snap.Jobs {
		gens := handedOut[j.RunID]
		k := int64(len(gens))
		if j.State != spec.JobCompleted || j.Generation != k {
			t.Errorf("job %s: state %s generation %d; want completed at generation %d (claims handed out: %v)", j.RunID, j.State, j.Generation, k, gens)
		}
		sorted := slices.Sorted(slices.Values(gens))
		for i, g := range sorted {
			if g != int64(i+1) {
				t.Errorf("job %s: generations handed out %v; want exactly 1..%d", j.RunID, gens, k)
				break
			}
		}
		if len(attempts[j.RunID]) != int(k) {
			t.Errorf("job %s: %d attempt rows for %d committed claims", j.RunID, len(attempts[j.RunID]), k)
		}
	}
	t.Logf("%d jobs completed by %d claimers on %d pools; the rolling-back pool made %d claims, %d of them rolled back after locking; %d releases",
		m, n, len(stores), claims.Load(), aborted.Load(), sumValues(releases))
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestConcurrentAdmission: many admissions at the same moment on four pools.
// One idempotency key with two different requests: exactly one run is
// created; every request like the winner's gets the replay, every other one
// idempotency_conflict; nothing else (never a unique violation surfacing as
// unavailable). One run id under many keys: exactly one is admitted, the
// others get already_exists, and no idempotency record is left behind by a
// loser. With an injected clock and with the database clock (which a
// fresh admission reads inside its statement), and with every store
// admitting fresh first (createFresh: the winner, and no other, is fresh),
// none (LockedCreateRun) or two of the four.
func TestConcurrentAdmission(t *testing.T) {
	const n = 16
	cases := []struct {
		name string
		req  func(i int) spec.CreateRunRequest
	}{
		{"one key, two requests", func(i int) spec.CreateRunRequest {
			return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "the-key",
				RunID: fmt.Sprintf("r%02d", i), Payload: []byte(fmt.Sprintf(`{"variant":%d}`, i%2))}
		}},
		{"one run id, many keys", func(i int) spec.CreateRunRequest {
			return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: fmt.Sprintf("key-%02d", i),
				RunID: "r1", Payload: []byte(`{}`)}
		}},
	}
	for _, c := range cases {
		for _, dbClock := range []bool{false, true} {
			for _, lockedStores := range []int{0, 2, 4} {
				t.Run(fmt.Sprintf("%s/database_clock=%v/locked_stores=%d", c.name, dbClock, lockedStores), func(t *testing.T) {
					dsn, schema := pgtest.Schema(t)
					var clk clock.Clock = clock.NewManual(t0)
					if dbClock {
						clk = nil
					}
					var stores []*postgres.Store
					for i := range 4 {
						s := openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: noWait})
						if i < lockedStores {
							postgres.LockedCreateRun(s)
						}
						stores = append(stores, s)
					}
					results := make([]spec.CreateRunResult, n)
					errs := make([]error, n)
					start := make(chan struct{})
					var wg sync.WaitGroup
					for i := 0; i < n; i++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							results[i], errs[i] = stores[i%len(stores)].CreateRun(context.Background(), c.req(i))
						}()
					}
					close(start)
					wg.Wait()
					winner := -1
					for i := range results {
						if errs[i] == nil && !results[i].Replayed {
							if winner >= 0 {
								t.Fatalf("requests %d and %d both created a run (%s, %s)", winner, i, results[winner].Run.ID, results[i].Run.ID)
							}
							winner = i
						}
					}
					if winner < 0 {
						t.Fatalf("no request created the run: %v", errs)
					}
					won := results[winner].Run
					for i := range results {
						if i == winner {
							continue
						}
						sameKey := c.req(i).IdempotencyKey == c.req(winner).IdempotencyKey
						sameRequest := string(c.req(i).Payload) == string(c.req(winner).Payload)
						switch {
						case sameKey && sameRequest:
							if errs[i] != nil || !results[i].Replayed || results[i].Run.ID != won.ID {
								t.Errorf("request %d (same key and request as the winner): %+v, %v; want the replay of %s", i, results[i], errs[i], won.ID)
							}
						case sameKey:
							if spec.CodeOf(errs[i]) != spec.CodeIdempotencyConflict {
								t.Errorf("request %d (same key, other request): %v; want idempotency_conflict", i, errs[i])
							}
						default:
							if spec.CodeOf(errs[i]) != spec.CodeAlreadyExists {
								t.Errorf("request %d (other key, same run id): %v; want already_exists", i, errs[i])
							}
						}
					}
					snap, err := stores[0].Snapshot(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					if len(snap.Runs) != 1 || len(snap.Jobs) != 1 || len(snap.Events) != 1 || len(snap.Idempotency) != 1 ||
						snap.Idempotency[0].Key != c.req(winner).IdempotencyKey {
						t.Fatalf("after the race: %d runs, %d jobs, %d events, idempotency %+v; want one of each, the winner's key",
							len(snap.Runs), len(snap.Jobs), len(snap.Events), snap.Idempotency)
					}
					var fresh int64
					for _, s := range stores {
						fresh += s.AdmissionStats().Fresh
					}
					switch {
					case lockedStores == 0 && fresh != 1:
						t.Fatalf("%d admissions were fresh; want 1, the winner", fresh)
					case lockedStores == 4 && fresh != 0:
						t.Fatalf("%d admissions were fresh with every store deciding under the lock; want 0", fresh)
					case fresh > 1:
						t.Fatalf("%d admissions were fresh; want at most 1, the winner", fresh)
					}
				})
			}
		}
	}
}

// TestPurgeWaitsForAnAbortedAdmission: an admission that reuses an expired
// key holds that record (it deleted it to write its own) when a purge starts,
// and then rolls back. The purge must wait for it and delete both expired
// records, the count of a purge ordered before or after the aborted
// admission. A purge that skipped the locked record (SKIP LOCKED) returned 1,
// which no serial order explains: found by the linearizability check.
func TestPurgeWaitsForAnAbortedAdmission(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(t0)
	arrived, abort := make(chan struct{}), make(chan struct{})
	admitterApp := uniqueName("lh-admit", schema)
	admitter := openOn(t, dsn, schema, postgres.Options{Clock: clk, ApplicationName: admitterApp,
		Hook: onceAt(spec.OpCreateRun, spec.BeforeCommit, func(context.Context) error {
			close(arrived)
			<-abort
			return errors.New("injected rollback")
		})})
	var release sync.Once
	releaseAdmission := func() { release.Do(func() { close(abort) }) }
	t.Cleanup(releaseAdmission) // before the store closes, even when the test fails
	app := "lh-purge-" + schema[len(schema)-8:]
	janitor := openOn(t, dsn, schema, postgres.Options{Clock: clk, ApplicationName: app})
	createRuns(t, janitor, clk, 3, "r0", "r1")
	if _, err := clk.Advance(spec.DefaultConfig().IdempotencyRetentionMs); err != nil {
		t.Fatal(err)
	}

	admitErr := make(chan error, 1)
	go func() {
		_, err := admitter.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work",
			IdempotencyKey: "key-r1", RunID: "r2", Payload: []byte(`{}`)})
		admitErr <- err
	}()
	<-arrived
	type purged struct {
		n   int
		err error
	}
	purgeDone := make(chan purged, 1)
	go func() {
		n, err := janitor.PurgeIdempotency(ctx, spec.PurgeRequest{Limit: 5})
		purgeDone <- purged{n, err}
	}()
	// Barrier: the purge waits for the record the admission holds. A purge
	// that does not wait returns first, and that is the failure.
	awaitBlocked(ctx, t, pgtest.Conn(t, dsn, schema), app, admitterApp, purgeDone,
		"the purge returned while an admission held an expired record: it must wait for the admission")
	releaseAdmission()
	if err := <-admitErr; spec.CodeOf(err) != spec.CodeUnavailable {
		t.Fatalf("admission rolled back at BeforeCommit: %v; want unavailable", err)
	}
	if p := <-purgeDone; p.err != nil || p.n != 2 {
		t.Fatalf("purge after the admission rolled back: %d, %v; want 2 (both expired records)", p.n, p.err)
	}
	if _, err := janitor.GetRun(ctx, "acme", "r2"); spec.CodeOf(err) != spec.CodeNotFound {
		t.Fatalf("run of the aborted admission: %v; want not_found", err)
	}
}

// TestPurgeRunsWaitsForAReplay: a replay of a retired run holds that run's
// job row (its transaction is held at BeforeCommit) when a purge of runs
// starts. The purge must wait for it, not skip the run, and then pick
// again from what the replay left: if the replay rolls back, the purge
// deletes the same runs as a purge before it; if it commits, the replayed
// run has a replay that is not finished, so its lineage is kept, and the
// purge takes the next lineage instead, as a purge after the replay would.
// A purge that skipped the locked row returned one lineage short; one that
// deleted what it first picked broke the replay's replay_of link.
func TestPurgeRunsWaitsForAReplay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit bool
		want   []string
	}{
		{"the replay rolls back", false, []string{"r0", "r1"}},
		{"the replay commits", true, []string{"r0", "r2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			dsn, schema := pgtest.Schema(t)
			clk := clock.NewManual(t0)
			cfg := spec.DefaultConfig()
			cfg.RunRetentionMs, cfg.IdempotencyRetentionMs = 10_000, 5_000
			arrived, resume := make(chan struct{}), make(chan struct{})
			replayerApp := uniqueName("lh-replay", schema)
			replayer := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clk, ApplicationName: replayerApp,
				Hook: onceAt(spec.OpReplay, spec.BeforeCommit, func(context.Context) error {
					close(arrived)
					<-resume
					if tc.commit {
						return nil
					}
					return errors.New("injected rollback")
				})})
			var release sync.Once
			resumeReplay := func() { release.Do(func() { close(resume) }) }
			t.Cleanup(resumeReplay) // before the store closes, even when the test fails
			app := "lh-purge-runs-" + schema[len(schema)-8:]
			janitor := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clk, ApplicationName: app})
			// r0, r1 and r2 fail 1 ms apart: the purge order.
			createRuns(t, janitor, clk, 1, "r0", "r1", "r2")
			for _, id := range []string{"r0", "r1", "r2"} {
				leases, err := janitor.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 1000, Limit: 1})
				if err != nil || len(leases) != 1 || leases[0].RunID != id {
					t.Fatalf("claim %s: %+v, %v", id, leases, err)
				}
				if _, err := janitor.Fail(ctx, spec.FailRequest{Lease: leases[0].Ref(), ErrorCode: "fatal"}); err != nil {
					t.Fatalf("fail %s: %v", id, err)
				}
				if _, err := clk.Advance(1); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := clk.Advance(cfg.RunRetentionMs); err != nil {
				t.Fatal(err)
			}

			replayErr := make(chan error, 1)
			go func() {
				_, err := replayer.Replay(ctx, spec.ReplayRequest{Tenant: "acme", RunID: "r1", NewRunID: "r1-again", Actor: "ops"})
				replayErr <- err
			}()
			<-arrived
			purgeDone := purgeAsync(ctx, janitor, 2)
			// Barrier: the purge waits for the row the replay holds. A purge
			// that does not wait returns first, and that is the failure.
			awaitBlocked(ctx, t, pgtest.Conn(t, dsn, schema), app, replayerApp, purgeDone,
				"the purge returned while a replay held a run it picked: it must wait for the replay")
			resumeReplay()
			if err := <-replayErr; (err == nil) != tc.commit {
				t.Fatalf("replay: %v; want committed %v", err, tc.commit)
			}
			if p := <-purgeDone; p.err != nil || !slices.Equal(p.ids, tc.want) {
				t.Fatalf("purge after the replay ended: %v, %v; want %v", p.ids, p.err, tc.want)
			}
			run, err := janitor.GetRun(ctx, "acme", "r1")
			if tc.commit && (err != nil || run.State != spec.RunFailed) {
				t.Fatalf("the replayed run after the purge: %+v, %v; want it kept, failed", run, err)
			}
			if !tc.commit && spec.CodeOf(err) != spec.CodeNotFound {
				t.Fatalf("r1 after the purge: %v; want not_found", err)
			}
		})
	}
}

// TestPurgeRunsTakesNoAdmissionLock: a purge of runs takes no admission
// lock (one per purged record would fill PostgreSQL's lock table), so it
// never waits for an admission of a purged run's key; an admission reads
// its clock after the records it decides from, and one that raced a purge
// runs again. r1's record lives until t0+5000 and r1 is retired at
// t0+10,000; the janitor's clock is at t0+20,000. A retried request of
// r1's key (proposing r1-retry):
//
//   - held before its commit, having read r1's record live at its own time
//     and r1: the purge does not wait for it, and the request still gets r1
//     replayed (it read r1 before the purge deleted it: it comes first);
//   - held at its clock read, after it read r1's record (still there) and
//     before it reads r1: the purge deletes r1 meanwhile. With the
//     admission's clock at the janitor's time, the record it read has
//     expired and its deletion finds it gone; with the admission's clock
//     behind (t0+1000, the record live), r1 is gone when it reads it.
//     Either way the admission runs again (Retried 1) and finds no record:
//     r1-retry is created.
//
// Each case runs twice: with CreateRun decided under the admission lock,
// as above, and as it runs by default, a fresh admission first
// (createFresh). The fresh admission finds r1's record before the purge
// (it writes nothing; the lock then decides as above, and replays r1), or
// reads its clock (held) before its one statement, which then finds the
// key without a record and admits r1-retry fresh (Retried 0, Fresh 1).
func TestPurgeRunsTakesNoAdmissionLock(t *testing.T) {
	for _, tc := range []struct {
		name           string
		admitClock     int64
		atClock        bool // hold the admission at its clock read, else before its commit
		locked         bool // LockedCreateRun
		replayed       bool
		wantRun        string
		retried, fresh int64
	}{
		{"held before its commit", t0 + 1000, false, true, true, "r1", 0, 0},
		{"held at its clock read, the clock at the janitor's", t0 + 20_000, true, true, false, "r1-retry", 1, 0},
		{"held at its clock read, the clock behind", t0 + 1000, true, true, false, "r1-retry", 1, 0},
		{"fresh first, held before its commit", t0 + 1000, false, false, true, "r1", 0, 0},
		{"fresh first, held at its clock read, the clock at the janitor's", t0 + 20_000, true, false, false, "r1-retry", 0, 1},
		{"fresh first, held at its clock read, the clock behind", t0 + 1000, true, false, false, "r1-retry", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			dsn, schema, cfg := retiredRuns(ctx, t, "r1")
			arrived, resume := make(chan struct{}), make(chan struct{})
			var release sync.Once
			resumeAdmission := func() { release.Do(func() { close(resume) }) }
			hold := func() { close(arrived); <-resume }
			o := postgres.Options{Config: cfg, Clock: clock.NewManual(tc.admitClock)}
			if tc.atClock {
				o.Clock = &heldClock{Clock: o.Clock, hold: hold}
			} else {
				o.Hook = onceAt(spec.OpCreateRun, spec.BeforeCommit, func(context.Context) error { hold(); return nil })
			}
			admitter := openOn(t, dsn, schema, o)
			if tc.locked {
				postgres.LockedCreateRun(admitter)
			}
			janitor := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 20_000), RuntimeParams: noWait})
			t.Cleanup(resumeAdmission) // before the stores close, even when the test fails

			type admitted struct {
				res spec.CreateRunResult
				err error
			}
			admitDone := make(chan admitted, 1)
			retry := retiredRequest("r1")
			retry.RunID = "r1-retry"
			go func() {
				res, err := admitter.CreateRun(ctx, retry)
				admitDone <- admitted{res, err}
			}()
			<-arrived
			if ids, err := janitor.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 10}); err != nil || !slices.Equal(ids, []string{"r1"}) {
				t.Fatalf("purge while the admission is held: %v, %v; want [r1] at once", ids, err)
			}
			resumeAdmission()
			a := <-admitDone
			if a.err != nil || a.res.Replayed != tc.replayed || a.res.Run.ID != tc.wantRun {
				t.Fatalf("the retried request: %+v, %v; want run %s, replayed %v", a.res, a.err, tc.wantRun, tc.replayed)
			}
			if st := admitter.AdmissionStats(); st.Retried != tc.retried || st.Fresh != tc.fresh {
				t.Errorf("AdmissionStats() = %+v; want Retried %d, Fresh %d", st, tc.retried, tc.fresh)
			}
		})
	}
}

// TestPurgeRunsLocksRunRowsFirst: a purge locks the run rows of what it
// deletes before deleting any, so an admission holding one of them never
// waits for the purge: r0 and r1 are retired, r1 holding key order-1's
// expired record. An admission of order-1 (played by hand on a connection
// of its own: the store runs its two writes in one pipelined batch, and
// the interleaving needs a pause between them) clears r1's record, the
// purge then waits for r1's row, and the admission proposes r0 as its new
// run id. The insert must find r0 still there at once (already_exists, the
// admission rolls back) and the purge then delete both. With only the job
// rows locked first, the purge had deleted r0 before it waited for r1, the
// insert waited for the purge, and one of the two died in a deadlock.
func TestPurgeRunsLocksRunRowsFirst(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema, cfg := retiredRuns(ctx, t, "r0", "r1")
	janitorName, admissionName := uniqueName("purge-locks-first", schema), uniqueName("admission", schema)
	janitor := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 20_000), ApplicationName: janitorName,
		RuntimeParams: noWait})

	admission := pgtest.Conn(t, dsn, schema)
	nameConn(ctx, t, admission, admissionName)
	tx, err := admission.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, noWait["lock_timeout"]); err != nil {
		t.Fatal(err)
	}
	if tag, err := tx.Exec(ctx, `UPDATE runs SET idempotency_key = NULL, idempotency_expires_at = NULL
		WHERE tenant = 'acme' AND operation = 'work' AND idempotency_key = 'order-1'`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("clear r1's expired record: %v, %v; want 1 row", tag, err)
	}

	purgeDone := purgeAsync(ctx, janitor, 10)
	awaitBlocked(ctx, t, pgtest.Conn(t, dsn, schema), janitorName, admissionName, purgeDone,
		"the purge returned while the admission held r1's row: it must wait for it")

	// The admission's insert of its run, proposing r0 (as insertRun: ON
	// CONFLICT DO NOTHING, zero rows is already_exists).
	tag, err := tx.Exec(ctx, `INSERT INTO runs SELECT (jsonb_populate_record(NULL::runs, to_jsonb(r) ||
		'{"run_id": "r0", "idempotency_key": null, "idempotency_expires_at": null}')).* FROM runs AS r
		WHERE r.tenant = 'acme' AND r.run_id = 'r1' ON CONFLICT DO NOTHING`)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("the admission's insert of r0 while the purge waits: %v, %v; want 0 rows (r0 still there), at once", tag, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	p := <-purgeDone
	slices.Sort(p.ids)
	if p.err != nil || !slices.Equal(p.ids, []string{"r0", "r1"}) {
		t.Fatalf("the purge: %v, %v; want [r0 r1]", p.ids, p.err)
	}
}

// TestBulkDecisionsHoldTheirRuns: a bulk admission that writes holds the
// runs rows it decided other members from until it commits. Run r0 is
// retired and its record of key order-0 is live at the batch's time but
// expired at the others'. Each batch creates n1 beside one member decided
// from r0 (decidedFromR0) and is held before its commit, while another
// client, at the later time, purges runs (deleting r0), purges idempotency
// records (deleting r0's) or admits order-0 again (deleting r0's record,
// creating r0-new). What would change what a member was decided from must
// wait for the batch: a purge of r0 always; a deletion of r0's record when
// the member replayed or conflicted with it, and not when it only found
// r0's run id taken (FOR KEY SHARE: nothing else waits). Had it gone ahead,
// the batch's outcome (r0 replayed, say) and its created run n1, visible
// only at the commit, would fall on the two sides of it, so that a client
// that saw it done and n1 not yet there could place the batch at no single
// point.
func TestBulkDecisionsHoldTheirRuns(t *testing.T) {
	type waiter struct {
		name string
		run  func(ctx context.Context, s *postgres.Store) (string, error) // what it returned, as text
		want string
	}
	waiters := []waiter{
		{"purge of runs", func(ctx context.Context, s *postgres.Store) (string, error) {
			ids, err := s.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 10})
			return fmt.Sprint(ids), err
		}, "[r0]"},
		{"purge of records", func(ctx context.Context, s *postgres.Store) (string, error) {
			n, err := s.PurgeIdempotency(ctx, spec.PurgeRequest{Limit: 10})
			return fmt.Sprint(n), err
		}, "1"},
		{"admission of the key again", func(ctx context.Context, s *postgres.Store) (string, error) {
			again := retiredRequest("r0")
			again.RunID = "r0-new"
			res, err := s.CreateRun(ctx, again)
			return fmt.Sprintf("%s replayed %v", res.Run.ID, res.Replayed), err
		}, "r0-new replayed false"},
	}
	for _, tc := range decidedFromR0() {
		for _, w := range waiters {
			wantWait := w.name == "purge of runs" || tc.wantCode != spec.CodeAlreadyExists
			t.Run(tc.name+"/"+w.name, func(t *testing.T) {
				ctx, cancel := hang.Context(context.Background())
				defer cancel()
				dsn, schema, cfg := retiredRuns(ctx, t, "r0")
				admitter, held, releaseAll := commitHeldAdmitter(t, dsn, schema, cfg)
				otherName := uniqueName("waits-for-bulk", schema)
				other := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 20_000), ApplicationName: otherName,
					RuntimeParams: noWait})

				bulk := createRunsAsync(ctx, admitter, tc.member, acmeRequest("k-n", "n1"))
				<-held
				type result struct {
					got string
					err error
				}
				done := make(chan result, 1)
				go func() {
					got, err := w.run(ctx, other)
					done <- result{got, err}
				}()
				// The batch stays held until releaseAll: a call that waits for
				// it waits until then, so it either returns while the batch
				// is held or is seen waiting for the batch's backend.
				waited, r := waitsOrReturns(ctx, t, pgtest.Conn(t, dsn, schema), otherName, commitHeldName(schema), done)
				switch {
				case waited && !wantWait:
					t.Fatalf("the %s waited for the batch, which only found r0's run id taken; want it to go ahead", w.name)
				case !waited && wantWait:
					t.Fatalf("the %s returned (%s, %v) while the batch that decided a member from r0 was open; want it to wait for the batch", w.name, r.got, r.err)
				}
				releaseAll()
				b := <-bulk
				if b.err != nil || len(b.outs) != 2 || b.outs[1].Err != nil || b.outs[1].Result.Run.ID != "n1" {
					t.Fatalf("CreateRuns: %+v, %v; want its second member n1 created", b.outs, b.err)
				}
				if first := b.outs[0]; spec.CodeOf(first.Err) != tc.wantCode || tc.wantCode == "" && (!first.Result.Replayed || first.Result.Run.ID != "r0") {
					t.Fatalf("CreateRuns' first member: %+v; want code %q (r0 replayed if none)", first, tc.wantCode)
				}
				if waited {
					r = <-done
				}
				if r.err != nil || r.got != w.want {
					t.Fatalf("the %s: %s, %v; want %s", w.name, r.got, r.err, w.want)
				}
			})
		}
	}
}

// TestReplayFindsItsRunAdmittedAgain: an admission that read key order-0's
// live record naming r0, and was held at its clock reading before it read
// r0, while r0 was purged and its run id admitted again under another key:
// the run now named r0 is not the one the record named, and must not be
// replayed. The admission runs again (Retried 1) and finds no record and
// r0 taken: already_exists. Once as CreateRun decided under its lock, once
// as a member of a bulk admission beside n1. As it runs by default, a
// CreateRun is a fresh admission first (createFresh), held at its clock
// reading before its one statement, which then finds r0 taken, writes
// nothing, and is decided under the lock: already_exists, Retried 0.
func TestReplayFindsItsRunAdmittedAgain(t *testing.T) {
	for _, tc := range []struct {
		bulk, fresh bool
		retried     int64
	}{{false, false, 1}, {true, false, 1}, {false, true, 0}} {
		bulk := tc.bulk
		t.Run(fmt.Sprintf("bulk=%v/fresh=%v", bulk, tc.fresh), func(t *testing.T) {
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			dsn, schema, cfg := retiredRuns(ctx, t, "r0")
			admitter, arrived, resumeAdmission := clockHeldAdmitter(t, dsn, schema, cfg)
			if !tc.fresh {
				postgres.LockedCreateRun(admitter)
			}
			other := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 20_000), RuntimeParams: noWait})

			type admitted struct {
				outs []spec.CreateOutcome
				err  error
			}
			done := make(chan admitted, 1)
			go func() {
				if !bulk {
					res, err := admitter.CreateRun(ctx, retiredRequest("r0"))
					done <- admitted{[]spec.CreateOutcome{{Result: res, Err: err}}, nil}
					return
				}
				outs, err := admitter.CreateRuns(ctx, []spec.CreateRunRequest{retiredRequest("r0"), acmeRequest("k-n", "n1")})
				done <- admitted{outs, err}
			}()
			<-arrived
			if ids, err := other.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 10}); err != nil || !slices.Equal(ids, []string{"r0"}) {
				t.Fatalf("purge while the admission is held: %v, %v; want [r0]", ids, err)
			}
			newcomer := acmeRequest("k-other", "r0")
			newcomer.Payload = []byte(`{"other":true}`)
			if res, err := other.CreateRun(ctx, newcomer); err != nil || res.Replayed {
				t.Fatalf("admit r0 again under key k-other: %+v, %v; want it created", res, err)
			}
			resumeAdmission()
			a := <-done
			if a.err != nil || spec.CodeOf(a.outs[0].Err) != spec.CodeAlreadyExists {
				t.Fatalf("the admission of order-0: %+v, %v; want already_exists (r0 is another request's run now)", a.outs, a.err)
			}
			if bulk && (len(a.outs) != 2 || a.outs[1].Err != nil || a.outs[1].Result.Run.ID != "n1") {
				t.Fatalf("CreateRuns: %+v; want n1 created beside the refusal", a.outs)
			}
			if st := admitter.AdmissionStats(); st.Retried != tc.retried || st.Fresh != 0 {
				t.Errorf("AdmissionStats() = %+v; want Retried %d, Fresh 0", st, tc.retried)
			}
		})
	}
}

// TestReadOnlyBatchHasOnePoint: a bulk admission that writes nothing is
// placed at its one read of the runs it decided from (readDecided). Run r2
// is retired, its record of key order-2 live at the batch's time; run r1
// is queued, its record of order-1 live. The batch, [a conflict with
// order-2, a replay of order-1], is held at its clock reading, after its
// lookups; meanwhile r2 is purged and then r1 claimed. A conflict decided
// from r2's record (there only before the purge) beside r1 replayed
// running (only after the claim, which came after the purge) fits no
// single point: the batch must find r2 gone and run again (Retried 1), and
// then create c2 (order-2's record is gone) and replay r1 as it is then.
func TestReadOnlyBatchHasOnePoint(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema, cfg := retiredRuns(ctx, t, "r2")
	admitQueued(ctx, t, dsn, schema, cfg, "r1")
	admitter, arrived, resumeAdmission := clockHeldAdmitter(t, dsn, schema, cfg)
	other := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 20_000), RuntimeParams: noWait})

	conflicting := retiredRequest("r2")
	conflicting.RunID, conflicting.Payload = "c2", []byte(`{"other":true}`)
	bulk := createRunsAsync(ctx, admitter, conflicting, retiredRequest("r1"))
	<-arrived
	if ids, err := other.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 10}); err != nil || !slices.Equal(ids, []string{"r2"}) {
		t.Fatalf("purge while the batch is held: %v, %v; want [r2]", ids, err)
	}
	if leases, err := other.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w1", LeaseMs: 60_000, Limit: 1}); err != nil || len(leases) != 1 || leases[0].RunID != "r1" {
		t.Fatalf("claim after the purge: %+v, %v; want r1's lease", leases, err)
	}
	resumeAdmission()
	b := <-bulk
	if b.err != nil || len(b.outs) != 2 || b.outs[0].Err != nil || b.outs[0].Result.Replayed || b.outs[0].Result.Run.ID != "c2" {
		t.Fatalf("CreateRuns: %+v, %v; want c2 created first", b.outs, b.err)
	}
	if r := b.outs[1]; r.Err != nil || !r.Result.Replayed || r.Result.Run.ID != "r1" || r.Result.Run.State != spec.RunRunning {
		t.Fatalf("CreateRuns' second member: %+v; want r1 replayed, running", r)
	}
	if got := admitter.AdmissionStats().Retried; got != 1 {
		t.Errorf("the batch ran again %d times; want 1", got)
	}
}

// TestBulkReplayHoldsItsRun: a bulk admission that writes returns the runs
// it replays as they are at its commit: it holds their job rows until
// then (lockReplayed), so a claim skips them. Run r1 is queued, its record
// of key order-1 live; a batch [a replay of order-1, n1 created] is held
// before its commit while a worker claims. Had the claim taken r1, a
// client that saw that lease, and n1 not yet there, would then get r1
// replayed queued from the batch: no single point.
func TestBulkReplayHoldsItsRun(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema, cfg := retiredRuns(ctx, t)
	admitQueued(ctx, t, dsn, schema, cfg, "r1")
	admitter, held, releaseAll := commitHeldAdmitter(t, dsn, schema, cfg)
	worker := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 1_000), RuntimeParams: noWait})

	bulk := createRunsAsync(ctx, admitter, retiredRequest("r1"), acmeRequest("k-n", "n1"))
	<-held
	claim := spec.ClaimRequest{Tenant: "acme", Worker: "w1", LeaseMs: 60_000, Limit: 10}
	if leases, err := worker.Claim(ctx, claim); err != nil || len(leases) != 0 {
		t.Fatalf("claim while the batch replaying r1 is open: %+v, %v; want no lease (r1 held, n1 not committed)", leases, err)
	}
	releaseAll()
	b := <-bulk
	if b.err != nil || len(b.outs) != 2 || !b.outs[0].Result.Replayed || b.outs[0].Result.Run.ID != "r1" || b.outs[0].Result.Run.State != spec.RunQueued ||
		b.outs[1].Err != nil || b.outs[1].Result.Run.ID != "n1" {
		t.Fatalf("CreateRuns: %+v, %v; want r1 replayed queued, n1 created", b.outs, b.err)
	}
	leases, err := worker.Claim(ctx, claim)
	if err != nil || len(leases) != 2 {
		t.Fatalf("claim after the batch: %+v, %v; want r1's and n1's leases", leases, err)
	}
}

// TestBulkReplayReadsItsRunLocked: a batch that writes reads a run it
// replays only once it holds it. Run r1 is claimed and a CompleteTx of it
// is open when a batch [a replay of order-1, n1] starts: the batch waits
// for the worker's transaction and returns r1 as that commit left it,
// completed (a read before the lock saw it running).
func TestBulkReplayReadsItsRunLocked(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema, cfg := retiredRuns(ctx, t)
	worker := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0)})
	lease := admitAndClaim(ctx, t, worker, "r1")[0]
	tx, err := pgtest.Conn(t, dsn, schema).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := worker.CompleteTx(ctx, tx, spec.CompleteRequest{Lease: lease.Ref(), Result: []byte(`{"ok":1}`)}); err != nil {
		t.Fatal(err)
	}
	admitter := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 1_000)})
	bulk := createRunsAsync(ctx, admitter, retiredRequest("r1"), acmeRequest("k-n", "n1"))
	waitForLockWaits(ctx, t, admitter, 1)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-bulk
	if b.err != nil || len(b.outs) != 2 || !b.outs[0].Result.Replayed || b.outs[0].Result.Run.State != spec.RunCompleted ||
		b.outs[1].Err != nil || b.outs[1].Result.Run.ID != "n1" {
		t.Fatalf("CreateRuns: %+v, %v; want r1 replayed completed (the run at the batch's commit), n1 created", b.outs, b.err)
	}
}

// TestBulkReplayLocksJobBeforeRun: a batch locks a run it replays job row
// first, as a purge does (lockPurged). While a plain transaction holds
// r1's job row, a batch replaying r1 waits for it holding no lock on r1's
// run row: had it locked the run row first, a purge queued for the job row
// would take it and then wait for the run row the batch holds, a deadlock.
func TestBulkReplayLocksJobBeforeRun(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema, cfg := retiredRuns(ctx, t)
	admitQueued(ctx, t, dsn, schema, cfg, "r1")
	holder, err := pgtest.Conn(t, dsn, schema).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(ctx, `SELECT FROM jobs WHERE tenant = 'acme' AND run_id = 'r1' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	admitter := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 1_000)})
	bulk := createRunsAsync(ctx, admitter, retiredRequest("r1"), acmeRequest("k-n", "n1"))
	waitForLockWaits(ctx, t, admitter, 1)
	probe, err := pgtest.Conn(t, dsn, schema).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := probe.Exec(ctx, `SELECT FROM runs WHERE tenant = 'acme' AND run_id = 'r1' FOR UPDATE NOWAIT`); err != nil {
		t.Fatalf("r1's run row while the batch waits for r1's job row: %v; want it free (the job row is locked first)", err)
	}
	if err := probe.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if b := <-bulk; b.err != nil || len(b.outs) != 2 || !b.outs[0].Result.Replayed || b.outs[1].Err != nil {
		t.Fatalf("CreateRuns: %+v, %v; want r1 replayed, n1 created", b.outs, b.err)
	}
}

// TestWorkersWaitForAHeldReplay: workers' writes to jobs a held batch
// replays wait for its commit and then succeed: a CompleteBatch of r1 and
// r2, a Renew of r3.
func TestWorkersWaitForAHeldReplay(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema, cfg := retiredRuns(ctx, t)
	worker := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0), RuntimeParams: map[string]string{"lock_timeout": "10s"}})
	leases := admitAndClaim(ctx, t, worker, "r1", "r2", "r3")
	admitter, held, release := commitHeldAdmitter(t, dsn, schema, cfg)
	bulk := createRunsAsync(ctx, admitter, retiredRequest("r3"), retiredRequest("r1"), retiredRequest("r2"), acmeRequest("k-n", "n1"))
	<-held
	type completed struct {
		outs []spec.BatchOutcome
		err  error
	}
	done := make(chan completed, 1)
	go func() {
		reqs := []spec.CompleteRequest{{Lease: leases[0].Ref(), Result: []byte(`{}`)}, {Lease: leases[1].Ref(), Result: []byte(`{}`)}}
		outs, err := worker.CompleteBatch(ctx, reqs)
		done <- completed{outs, err}
	}()
	renewed := make(chan error, 1)
	go func() {
		_, err := worker.Renew(ctx, spec.RenewRequest{Lease: leases[2].Ref(), LeaseMs: 60_000})
		renewed <- err
	}()
	waitForLockWaits(ctx, t, worker, 2)
	release()
	b := <-bulk
	if b.err != nil || len(b.outs) != 4 || b.outs[3].Err != nil {
		t.Fatalf("CreateRuns: %+v, %v; want r3, r1, r2 replayed and n1 created", b.outs, b.err)
	}
	for i, id := range []string{"r3", "r1", "r2"} {
		if o := b.outs[i]; !o.Result.Replayed || o.Result.Run.ID != id || o.Result.Run.State != spec.RunRunning {
			t.Fatalf("CreateRuns member %d: %+v; want %s replayed running (the workers' writes came after)", i, o, id)
		}
	}
	c := <-done
	if c.err != nil || len(c.outs) != 2 {
		t.Fatalf("CompleteBatch after the batch: %+v, %v", c.outs, c.err)
	}
	for _, o := range c.outs {
		if o.Err != nil || o.Run.State != spec.RunCompleted {
			t.Fatalf("CompleteBatch member: %+v; want completed", o)
		}
	}
	if err := <-renewed; err != nil {
		t.Fatalf("Renew after the batch: %v", err)
	}
}

// TestBulkDuplicateDecisions: a batch deciding several members from one
// run (a replay of its record, a conflict with it, its run id proposed
// under another key, each twice) locks and checks that run once, in its
// strongest mode, and runs nothing again, whether it writes (n1) or not.
func TestBulkDuplicateDecisions(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema, cfg := retiredRuns(ctx, t)
	admitQueued(ctx, t, dsn, schema, cfg, "r1")
	admitter := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 1_000)})
	conflict := retiredRequest("r1")
	conflict.Payload = []byte(`{"other":true}`)
	taken := acmeRequest("k-t", "r1")
	members := []spec.CreateRunRequest{retiredRequest("r1"), conflict, taken, retiredRequest("r1"), conflict, taken}
	wantCodes := []spec.Code{"", spec.CodeIdempotencyConflict, spec.CodeAlreadyExists, "", spec.CodeIdempotencyConflict, spec.CodeAlreadyExists}
	for _, writes := range []bool{false, true} {
		reqs := slices.Clone(members)
		if writes {
			reqs = append(reqs, acmeRequest("k-n", "n1"))
		}
		outs, err := admitter.CreateRuns(ctx, reqs)
		if err != nil || len(outs) != len(reqs) {
			t.Fatalf("writes=%v: CreateRuns: %+v, %v", writes, outs, err)
		}
		for i, want := range wantCodes {
			if o := outs[i]; spec.CodeOf(o.Err) != want || want == "" && (!o.Result.Replayed || o.Result.Run.ID != "r1") {
				t.Fatalf("writes=%v: member %d: %+v; want code %q (r1 replayed if none)", writes, i, o, want)
			}
		}
		if writes && (outs[6].Err != nil || outs[6].Result.Run.ID != "n1") {
			t.Fatalf("writes=true: n1: %+v; want created", outs[6])
		}
	}
	if got := admitter.AdmissionStats().Retried; got != 0 {
		t.Errorf("the batches ran again %d times; want none", got)
	}
}

// admitQueued admits (at t0) the runs ids on schema, each id's admission
// being retiredRequest(id), and leaves them queued.
func admitQueued(ctx context.Context, t *testing.T, dsn, schema string, cfg spec.Config, ids ...string) {
	t.Helper()
	setup := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0)})
	for _, id := range ids {
		if _, err := setup.CreateRun(ctx, retiredRequest(id)); err != nil {
			t.Fatal(err)
		}
	}
}

// admitAndClaim admits the runs ids (retiredRequest) on s and claims them
// all for worker w1, with a minute's lease; it returns the leases in id
// order.
func admitAndClaim(ctx context.Context, t *testing.T, s *postgres.Store, ids ...string) []spec.Lease {
	t.Helper()
	for _, id := range ids {
		if _, err := s.CreateRun(ctx, retiredRequest(id)); err != nil {
			t.Fatal(err)
		}
	}
	leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w1", LeaseMs: 60_000, Limit: len(ids)})
	if err != nil || len(leases) != len(ids) {
		t.Fatalf("claim %v: %+v, %v; want a lease each", ids, leases, err)
	}
	slices.SortFunc(leases, func(a, b spec.Lease) int { return strings.Compare(a.RunID, b.RunID) })
	return leases
}

// waitForLockWaits waits until at least n of s's calls wait for a lock
// (Store.LockWaits).
func waitForLockWaits(ctx context.Context, t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	hang.Until(t, fmt.Sprintf("%d of the store's calls to wait for a lock", n), func() bool {
		got, err := s.LockWaits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got >= n
	})
}

// decidedFromR0 is the members of the bulk admissions of
// TestBulkDecisionsHoldTheirRuns and TestBulkDecisionsFindTheirRunsPurged,
// each decided from run r0 of retiredRuns (its record live): a replay of
// its key, a conflict with its record, a proposal of its run id under a
// new key. wantCode is the member's outcome with r0 there ("" is r0
// replayed), wantRun the run it creates once r0 is purged.
func decidedFromR0() []struct {
	name     string
	member   spec.CreateRunRequest
	wantCode spec.Code
	wantRun  string
} {
	conflicting := retiredRequest("r0")
	conflicting.RunID, conflicting.Payload = "c0", []byte(`{"other":true}`)
	taking := retiredRequest("r0")
	taking.IdempotencyKey = "k-new"
	return []struct {
		name     string
		member   spec.CreateRunRequest
		wantCode spec.Code
		wantRun  string
	}{
		{"replay", retiredRequest("r0"), "", "r0"},
		{"conflict", conflicting, spec.CodeIdempotencyConflict, "c0"},
		{"taken run id", taking, spec.CodeAlreadyExists, "r0"},
	}
}

// TestBulkDecisionsFindTheirRunsPurged: a bulk admission held at its clock
// read, after its lookups found r0 (decidedFromR0) and before it locks
// what it decided from, while a purge deletes r0: its lock finds r0 gone
// (the replay's read of r0, before the lock, finds it gone first), and it
// runs again (Retried 1), now without r0, creating the member's run beside
// n1.
func TestBulkDecisionsFindTheirRunsPurged(t *testing.T) {
	for _, tc := range decidedFromR0() {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			dsn, schema, cfg := retiredRuns(ctx, t, "r0")
			admitter, arrived, resumeAdmission := clockHeldAdmitter(t, dsn, schema, cfg)
			janitor := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 20_000), RuntimeParams: noWait})

			bulk := createRunsAsync(ctx, admitter, tc.member, acmeRequest("k-n", "n1"))
			<-arrived
			if ids, err := janitor.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 10}); err != nil || !slices.Equal(ids, []string{"r0"}) {
				t.Fatalf("purge while the batch is held at its clock read: %v, %v; want [r0] at once", ids, err)
			}
			resumeAdmission()
			b := <-bulk
			if b.err != nil || len(b.outs) != 2 || b.outs[0].Err != nil || b.outs[0].Result.Replayed || b.outs[0].Result.Run.ID != tc.wantRun ||
				b.outs[1].Err != nil || b.outs[1].Result.Run.ID != "n1" {
				t.Fatalf("CreateRuns: %+v, %v; want %s and n1 created", b.outs, b.err, tc.wantRun)
			}
			if got := admitter.AdmissionStats().Retried; got != 1 {
				t.Errorf("the batch ran again %d times; want 1", got)
			}
		})
	}
}

// bulkResult is what a CreateRuns call returned.
type bulkResult struct {
	outs []spec.CreateOutcome
	err  error
}

// createRunsAsync runs s.CreateRuns of reqs in a goroutine and delivers its
// result.
func createRunsAsync(ctx context.Context, s *postgres.Store, reqs ...spec.CreateRunRequest) <-chan bulkResult {
	done := make(chan bulkResult, 1)
	go func() {
		outs, err := s.CreateRuns(ctx, reqs)
		done <- bulkResult{outs, err}
	}()
	return done
}

// commitHeldAdmitter opens a store on schema with cfg at t0+1,000 whose
// CreateRuns calls wait before their commit: held receives when one gets
// there, and release lets them all go (also when t ends, before the store
// closes, which waits for them).
func commitHeldAdmitter(t *testing.T, dsn, schema string, cfg spec.Config) (s *postgres.Store, held <-chan struct{}, release func()) {
	arrivals, gate := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	s = openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0 + 1_000), ApplicationName: commitHeldName(schema),
		Hook: func(ctx context.Context, op spec.Op, point spec.HookPoint) error {
			if op == spec.OpCreateRuns && point == spec.BeforeCommit {
				arrivals <- struct{}{}
				<-gate
			}
			return nil
		}})
	t.Cleanup(release)
	return s, arrivals, release
}

// commitHeldName is the application_name of commitHeldAdmitter's store.
func commitHeldName(schema string) string { return uniqueName("lh-commit-held", schema) }

// clockHeldAdmitter opens a store on schema with cfg at t0+1,000 whose
// first clock reading waits: arrived is closed when an operation gets
// there (an admission: after its lookups), and resume lets it go (also
// when t ends, before the store closes).
func clockHeldAdmitter(t *testing.T, dsn, schema string, cfg spec.Config) (s *postgres.Store, arrived <-chan struct{}, resume func()) {
	at, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	resume = func() { once.Do(func() { close(gate) }) }
	s = openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: &heldClock{Clock: clock.NewManual(t0 + 1_000), hold: func() { close(at); <-gate }}})
	t.Cleanup(resume)
	return s, at, resume
}

// purged is what a PurgeRuns call returned.
type purged struct {
	ids []string
	err error
}

// purgeAsync runs janitor's PurgeRuns of tenant acme (up to limit lineages)
// in a goroutine and delivers its result.
func purgeAsync(ctx context.Context, janitor *postgres.Store, limit int) <-chan purged {
	done := make(chan purged, 1)
	go func() {
		ids, err := janitor.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: limit})
		done <- purged{ids, err}
	}()
	return done
}

// retiredRuns opens a schema whose runs retire 10 s after they finish and
// whose records expire 5 s after their admission, and admits (at t0) and
// cancels the runs ids, each id's admission being retiredRequest(id). It
// returns the schema and that configuration.
func retiredRuns(ctx context.Context, t *testing.T, ids ...string) (dsn, schema string, cfg spec.Config) {
	t.Helper()
	dsn, schema = pgtest.Schema(t)
	cfg = spec.DefaultConfig()
	cfg.RunRetentionMs, cfg.IdempotencyRetentionMs = 10_000, 5_000
	setup := openOn(t, dsn, schema, postgres.Options{Config: cfg, Clock: clock.NewManual(t0)})
	for _, id := range ids {
		if _, err := setup.CreateRun(ctx, retiredRequest(id)); err != nil {
			t.Fatal(err)
		}
		if _, err := setup.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: id}); err != nil {
			t.Fatal(err)
		}
	}
	return dsn, schema, cfg
}

// retiredRequest is the admission of run id rN of retiredRuns: tenant acme,
// operation work, key order-N.
func retiredRequest(id string) spec.CreateRunRequest {
	return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-" + strings.TrimPrefix(id, "r"), RunID: id, Payload: []byte(`{}`)}
}

// heldClock is a clock whose first reading waits in hold.
type heldClock struct {
	clock.Clock
	once sync.Once
	hold func()
}

func (c *heldClock) Now() int64 {
	c.once.Do(c.hold)
	return c.Clock.Now()
}

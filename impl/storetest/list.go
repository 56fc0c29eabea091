package storetest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
)

// Listing runs (spec.RunLister). Each test is not applicable to a store
// that does not list runs.

// ListingTests are the listing tests, by name, on any testing.TB: the
// mutant tests (harness) run them with a broken listing switched on and
// require each broken listing to fail one.
var ListingTests = []struct {
	Name string
	Run  func(t testing.TB, f Factory)
}{
	{"ListRuns", testListRuns},
	{"ListRunsTenantIsolation", testListRunsTenantIsolation},
	{"ListRunsUnderConcurrentAdmission", testListRunsUnderConcurrentAdmission},
}

func init() {
	for _, lt := range ListingTests {
		register(lt.Name, func(t *testing.T, f Factory) { lt.Run(t, f) })
	}
}

// lister returns the env's store as a spec.RunLister, or stops the test as
// not applicable.
func (e *env) lister() spec.RunLister {
	e.t.Helper()
	if !e.h.Has(CapListRuns) {
		NotApplicable(e.t, CapListRuns, "listing runs")
	}
	return e.s.(spec.RunLister)
}

// listIDs lists one page and returns its run ids and Next, checking that
// every listed run is the run GetRun reads.
func (e *env) listIDs(l spec.RunLister, req spec.ListRunsRequest) ([]string, string) {
	e.t.Helper()
	p, err := l.ListRuns(e.ctx, req)
	if err != nil {
		e.t.Fatalf("ListRuns(%+v): %v", req, err)
	}
	if p.Runs == nil {
		e.t.Errorf("ListRuns(%+v): Runs is nil; want an empty list", req)
	}
	ids := []string{}
	for _, r := range p.Runs {
		ids = append(ids, r.ID)
		if r.Tenant != req.Tenant {
			e.t.Errorf("ListRuns of tenant %s listed run %s of tenant %s", req.Tenant, r.ID, r.Tenant)
			continue
		}
		checkEqual(e.t, "listed run "+r.ID, r, e.getRun(r.Tenant, r.ID))
	}
	return ids, p.Next
}

// listAll pages through a listing with req's filters and page size and
// returns every id, checking that each page but the last is full.
func (e *env) listAll(l spec.RunLister, req spec.ListRunsRequest) []string {
	e.t.Helper()
	var all []string
	for pages := 0; ; pages++ {
		ids, next := e.listIDs(l, req)
		all = append(all, ids...)
		if next == "" {
			return all
		}
		if len(ids) != req.Limit {
			e.t.Errorf("ListRuns(%+v): a page of %d runs with a next page; want %d", req, len(ids), req.Limit)
		}
		if pages > 1000 {
			e.t.Fatalf("ListRuns(%+v): still paging after 1000 pages", req)
		}
		req.Cursor = next
	}
}

// testListRuns: a tenant's runs newest first, runs created in one
// millisecond by run id descending; pages of every size meet exactly where
// a tie is split; each filter and their combination; a cursor used with
// other filters; limits, bad filters and bad cursors refused; a read that
// reads no clock and writes nothing.
func testListRuns(t testing.TB, f Factory) {
	e := newEnv(t, f, func(c *spec.Config) {
		c.Operations["other"] = c.Operations["work"]
	})
	l := e.lister()
	// Created out of id order within a millisecond, and another tenant's
	// runs at the same times with some of the same ids.
	for _, c := range []struct {
		at            int64
		tenant, id, o string
	}{
		{t0, "ta", "r-05", "work"}, {t0, "ta", "r-01", "work"}, {t0, "tb", "r-01", "work"}, {t0, "ta", "r-03", "work"},
		{t0 + 1, "ta", "r-04", "work"}, {t0 + 1, "ta", "r-02", "other"}, {t0 + 1, "tb", "r-07", "work"},
		{t0 + 2, "ta", "r-06", "work"},
	} {
		e.set(c.at)
		r := req(c.tenant, c.id)
		r.Operation = c.o
		e.create(r)
	}
	e.set(t0 + 3)
	e.claimOne("ta", "r-01", "w1", 10_000)                 // running
	e.complete(e.claimOne("ta", "r-03", "w1", 10_000), "") // completed
	e.fail(e.claimOne("ta", "r-05", "w1", 10_000), "bad")  // failed
	e.cancel("ta", "r-04", "")                             // cancelled
	before := e.snap()
	_, readsBefore := e.rec.Last()

	all := spec.ListRunsRequest{Tenant: "ta", Limit: spec.MaxBatch}
	want := []string{"r-06", "r-04", "r-02", "r-05", "r-03", "r-01"}
	ids, next := e.listIDs(l, all)
	checkEqual(t, "every run of ta, newest first, ties by run id descending", ids, want)
	checkEqual(t, "the one page's next", next, "")
	// Every page size: the pages are the listing cut into pieces.
	for limit := 1; limit <= len(want)+1; limit++ {
		r := all
		r.Limit = limit
		checkEqual(t, fmt.Sprintf("pages of %d", limit), e.listAll(l, r), want)
	}
	// Pages of two: each has exactly its two runs; the second starts
	// inside the tie at t0+1 and the third inside the tie at t0.
	r := all
	r.Limit = 2
	for i, page := range [][]string{{"r-06", "r-04"}, {"r-02", "r-05"}, {"r-03", "r-01"}} {
		ids, next := e.listIDs(l, r)
		checkEqual(t, fmt.Sprintf("page %d of two", i+1), ids, page)
		if (next == "") != (i == 2) {
			t.Errorf("page %d of two: next %q; want one on every page but the last", i+1, next)
		}
		r.Cursor = next
	}
	after := func(at int64, id string) string { return spec.RunPosition{CreatedAt: at, RunID: id}.Cursor() }
	for _, c := range []struct {
		name string
		mod  func(*spec.ListRunsRequest)
		want []string
	}{
		{"queued", func(r *spec.ListRunsRequest) { r.State = spec.RunQueued }, []string{"r-06", "r-02"}},
		{"running", func(r *spec.ListRunsRequest) { r.State = spec.RunRunning }, []string{"r-01"}},
		{"completed", func(r *spec.ListRunsRequest) { r.State = spec.RunCompleted }, []string{"r-03"}},
		{"failed", func(r *spec.ListRunsRequest) { r.State = spec.RunFailed }, []string{"r-05"}},
		{"cancelled", func(r *spec.ListRunsRequest) { r.State = spec.RunCancelled }, []string{"r-04"}},
		{"operation other", func(r *spec.ListRunsRequest) { r.Operation = "other" }, []string{"r-02"}},
		{"operation work", func(r *spec.ListRunsRequest) { r.Operation = "work" }, []string{"r-06", "r-04", "r-05", "r-03", "r-01"}},
		{"an operation not configured", func(r *spec.ListRunsRequest) { r.Operation = "gone" }, []string{}},
		{"created from t0+1", func(r *spec.ListRunsRequest) { r.CreatedFrom = t0 + 1 }, []string{"r-06", "r-04", "r-02"}},
		{"created before t0+1", func(r *spec.ListRunsRequest) { r.CreatedBefore = t0 + 1 }, []string{"r-05", "r-03", "r-01"}},
		{"created in [t0+1, t0+2)", func(r *spec.ListRunsRequest) { r.CreatedFrom, r.CreatedBefore = t0+1, t0+2 }, []string{"r-04", "r-02"}},
		{"queued, created before t0+2", func(r *spec.ListRunsRequest) { r.State, r.CreatedBefore = spec.RunQueued, t0+2 }, []string{"r-02"}},
		{"after r-04", func(r *spec.ListRunsRequest) { r.Cursor = after(t0+1, "r-04") }, []string{"r-02", "r-05", "r-03", "r-01"}},
		{"after r-04, queued", func(r *spec.ListRunsRequest) { r.Cursor, r.State = after(t0+1, "r-04"), spec.RunQueued }, []string{"r-02"}},
		{"after r-05, created before t0+1", func(r *spec.ListRunsRequest) { r.Cursor, r.CreatedBefore = after(t0, "r-05"), t0+1 }, []string{"r-03", "r-01"}},
		{"after r-06, created before t0+1", func(r *spec.ListRunsRequest) { r.Cursor, r.CreatedBefore = after(t0+2, "r-06"), t0+1 }, []string{"r-05", "r-03", "r-01"}},
		{"after a run of the tie that is not there", func(r *spec.ListRunsRequest) { r.Cursor = after(t0, "r-04") }, []string{"r-03", "r-01"}},
		{"after the last run", func(r *spec.ListRunsRequest) { r.Cursor = after(t0, "r-01") }, []string{}},
	} {
		r := all
		c.mod(&r)
		ids, next := e.listIDs(l, r)
		checkEqual(t, c.name, ids, c.want)
		checkEqual(t, c.name+": next", next, "")
	}
	for _, c := range []struct {
		name string
		mod  func(*spec.ListRunsRequest)
	}{
		{"a page of 0", func(r *spec.ListRunsRequest) { r.Limit = 0 }},
		{"a page past MaxBatch", func(r *spec.ListRunsRequest) { r.Limit = spec.MaxBatch + 1 }},
		{"a state that is not one", func(r *spec.ListRunsRequest) { r.State = "dead" }},
		{"a creation range that is empty", func(r *spec.ListRunsRequest) { r.CreatedFrom, r.CreatedBefore = t0, t0 }},
		{"a cursor ListRuns did not make", func(r *spec.ListRunsRequest) { r.Cursor = "r-04" }},
		{"a bad tenant", func(r *spec.ListRunsRequest) { r.Tenant = "TA" }},
	} {
		r := all
		c.mod(&r)
		_, err := l.ListRuns(e.ctx, r)
		checkCode(t, c.name, err, spec.CodeInvalidArgument)
	}
	if _, reads := e.rec.Last(); reads != readsBefore {
		t.Errorf("listing read the clock %d times; a read reads none", reads-readsBefore)
	}
	e.unchanged("listing", before)
}

// testListRunsTenantIsolation: another tenant's runs never appear, not even
// from a cursor at one of them or when they share a position with the
// tenant's own (the same id created at the same time); a tenant
// without runs lists none; an unconfigured tenant is invalid.
func testListRunsTenantIsolation(t testing.TB, f Factory) {
	e := newEnv(t, f)
	l := e.lister()
	for i := range 6 {
		tenant := []string{"ta", "tb"}[i%2]
		e.newRun(tenant, fmt.Sprintf("r-%d", i))
		if i < 2 {
			e.newRun(tenant, "same") // both at t0: one position, two tenants
		}
		if i%2 == 1 {
			e.set(e.now() + 1)
		}
	}
	for _, c := range []struct {
		tenant string
		want   []string
	}{{"ta", []string{"r-4", "r-2", "same", "r-0"}}, {"tb", []string{"r-5", "r-3", "same", "r-1"}}} {
		for limit := 1; limit <= 5; limit++ {
			checkEqual(t, fmt.Sprintf("%s in pages of %d", c.tenant, limit),
				e.listAll(l, spec.ListRunsRequest{Tenant: c.tenant, Limit: limit}), c.want)
		}
	}
	// A cursor at a position of tb's (r-3, at t0+1) lists ta's runs after
	// that position, never tb's.
	ids, _ := e.listIDs(l, spec.ListRunsRequest{Tenant: "ta", Limit: 10, Cursor: spec.RunPosition{CreatedAt: t0 + 1, RunID: "r-3"}.Cursor()})
	checkEqual(t, "ta after a position of tb's", ids, []string{"r-2", "same", "r-0"})
	ids, next := e.listIDs(l, spec.ListRunsRequest{Tenant: "tc", Limit: 10})
	checkEqual(t, "a tenant without runs", ids, []string{})
	checkEqual(t, "a tenant without runs: next", next, "")

	ea := newEnv(t, f, func(c *spec.Config) { c.Tenants = []string{"ta"} })
	_, err := ea.lister().ListRuns(ea.ctx, spec.ListRunsRequest{Tenant: "tb", Limit: 10})
	checkCode(t, "a tenant not in Config.Tenants", err, spec.CodeInvalidArgument)
}

// testListRunsUnderConcurrentAdmission pages through a tenant's runs while
// other connections admit runs to it and to another tenant, at times before,
// among and after the runs already there. "No gap" is this: every run
// committed before the listing's first page was read (and not deleted; this
// test deletes none) is listed exactly once. A run admitted during the
// listing is listed at most once: the pages are consecutive ranges of the
// order, so whether it is listed depends on whether its position was still
// ahead of the cursor. The pages' runs are in strictly descending order
// across the whole listing and are all the tenant's.
//
// The race is made to happen, not hoped for: after every page the lister
// waits until at least one more admission has committed, so admissions
// commit between every two pages; the test reports how many did, and how
// many of them the listing met.
func testListRunsUnderConcurrentAdmission(t testing.TB, f Factory) {
	const (
		seeded  = 120 // runs of ta before the listing: 12 times of 10 runs each
		perTime = 10
		page    = 7
		writers = 3 // two admitting to ta, one to tb
	)
	e := newEnv(t, f)
	l := e.lister()
	times := func(i int) int64 { return t0 + int64(i/perTime)*2 } // t0, t0+2, …: room between for later runs
	committed := map[string]spec.RunPosition{}
	for i := range seeded {
		e.set(times(i))
		// Ids out of their order within a time, as concurrent writers give them.
		id := fmt.Sprintf("s%03d", (i*37)%seeded)
		committed[id] = spec.PositionOf(e.newRun("ta", id))
	}
	e.set(times(seeded))

	// Writers stop between two admissions, never inside one: a call cut
	// short by its context would be an outcome this test is not about.
	var stopped atomic.Bool
	stop := func() { stopped.Store(true) }
	var admitted atomic.Int64 // admissions committed, every writer
	var mu sync.Mutex
	during := map[string]spec.RunPosition{} // ta's runs admitted while the listing ran
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		tenant := "ta"
		if w == writers-1 {
			tenant = "tb"
		}
		// Each writer has its own connection and clock, set before each
		// admission to a time before, among or after the seeded runs'.
		clk := clock.NewManual(t0)
		s := e.h.OpenWith(t, Options{Config: e.cfg, Clock: clk, Random: e.rnd, Hook: e.hook.call})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stopped.Load(); n++ {
				at := t0 - 1 + int64((n*7+w*3)%(2*seeded/perTime+3))
				clk.Set(at)
				id := fmt.Sprintf("w%d-%04d", w, n)
				res, err := s.CreateRun(e.ctx, req(tenant, id))
				if err != nil {
					if spec.CodeOf(err) == spec.CodeUnavailable {
						continue // busy: nothing was written; admit another
					}
					errs <- fmt.Errorf("writer %d: CreateRun(%s/%s): %w", w, tenant, id, err)
					return
				}
				if tenant == "ta" {
					mu.Lock()
					during[id] = spec.PositionOf(res.Run)
					mu.Unlock()
				}
				admitted.Add(1)
			}
		}()
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	// The first admissions commit before the first page is read: the
	// listing starts among writers already running.
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second) // a guard against a hang, not a measure
		for !ok() {
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited 60 s for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the first admission", func() bool { return admitted.Load() > 0 })
	mu.Lock()
	before := map[string]spec.RunPosition{}
	for id, p := range committed {
		before[id] = p
	}
	for id, p := range during { // committed before the listing began, too
		before[id] = p
	}
	mu.Unlock()
	startCount := admitted.Load()

	seen := map[string]int{}
	var order []spec.RunPosition
	r := spec.ListRunsRequest{Tenant: "ta", Limit: page}
	pages, interleaved := 0, 0
	for {
		mark := admitted.Load()
		p, err := l.ListRuns(e.ctx, r)
		if err != nil {
			t.Fatalf("page %d: ListRuns: %v", pages+1, err)
		}
		pages++
		for _, run := range p.Runs {
			if run.Tenant != "ta" {
				t.Errorf("page %d lists run %s of tenant %s", pages, run.ID, run.Tenant)
			}
			seen[run.ID]++
			order = append(order, spec.PositionOf(run))
		}
		if len(p.Runs) > page {
			t.Errorf("page %d has %d runs; the limit is %d", pages, len(p.Runs), page)
		}
		if p.Next == "" {
			break
		}
		if pages > 10*(seeded+int(admitted.Load())) {
			t.Fatalf("still paging after %d pages", pages)
		}
		r.Cursor = p.Next
		// At least one admission commits between this page and the next.
		waitFor(fmt.Sprintf("an admission after page %d", pages), func() bool { return admitted.Load() > mark })
		interleaved++
	}
	stop()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	for i := 1; i < len(order); i++ {
		if !order[i-1].Before(order[i]) {
			t.Errorf("listed %+v then %+v: not in strictly descending (created_at, run id) order", order[i-1], order[i])
		}
	}
	var missing, twice []string
	for id := range before {
		if seen[id] != 1 {
			missing = append(missing, fmt.Sprintf("%s (listed %d times)", id, seen[id]))
		}
	}
	metDuring := 0
	for id, n := range seen {
		if n > 1 {
			twice = append(twice, id)
		}
		_, old := before[id]
		_, fresh := during[id]
		switch {
		case fresh && !old:
			metDuring++
		case !old:
			t.Errorf("listed run %s, which no admission of ta created", id)
		}
	}
	slices.Sort(missing)
	slices.Sort(twice)
	if len(missing) > 0 {
		t.Errorf("%d of the %d runs committed before the listing began were not listed exactly once: %v", len(missing), len(before), missing)
	}
	if len(twice) > 0 {
		t.Errorf("runs listed more than once: %v", twice)
	}
	duringCount := admitted.Load() - startCount
	if interleaved == 0 || duringCount == 0 {
		t.Fatalf("no admission committed between two pages (%d pages): the race this test is about did not happen", pages)
	}
	t.Logf("%d pages of %d; %d runs committed before the first page, each listed once; %d admissions (both tenants) committed during the listing, at least one between every two pages; %d of ta's were listed",
		pages, page, len(before), duringCount, metDuring)
}

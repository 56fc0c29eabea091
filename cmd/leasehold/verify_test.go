package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
)

// TestTestBudget: an exploring check gets its share of what is left among
// the exploring checks not yet run, divided equally among its tests (or fuzz
// targets), and never less than minTestBudget per test.
func TestTestBudget(t *testing.T) {
	one := check{Tests: []string{"TestA"}, Share: 0.14}
	two := check{Tests: []string{"TestA", "TestB"}, Share: 0.14}
	fuzz := check{Fuzz: []string{"FuzzA", "FuzzB", "FuzzC"}, Share: 0.06}
	for _, tc := range []struct {
		name string
		c    check
		left time.Duration
		rest float64
		want time.Duration
	}{
		{"the last check takes what is left", one, 100 * time.Second, 0.14, 100 * time.Second},
		{"two tests take half each", two, 100 * time.Second, 0.14, 50 * time.Second},
		{"a share of what is left", one, 100 * time.Second, 0.28, 50 * time.Second},
		{"two tests halve the share", two, 100 * time.Second, 0.28, 25 * time.Second},
		{"fuzz targets divide it", fuzz, 90 * time.Second, 0.12, 15 * time.Second},
		{"nothing left: one round", two, 0, 0.14, minTestBudget},
		{"overrun: one round", one, -30 * time.Second, 0.14, minTestBudget},
		{"less than the floor per test", two, 1500 * time.Millisecond, 0.14, minTestBudget},
	} {
		if got := testBudget(tc.c, tc.left, tc.rest); got != tc.want {
			t.Errorf("%s: testBudget(%d tests, share %g, left %s, rest %g) = %s, want %s",
				tc.name, budgetUnits(tc.c), tc.c.Share, tc.left, tc.rest, got, tc.want)
		}
	}
}

// TestBudgetDivision walks verify's check lists as verify does, with the
// fixed-work checks (and the prebuild after them) having spent a part of
// the budget and every exploring
// test spending exactly its budget: the exploring checks together spend what
// the fixed-work ones left, each in proportion to its share, and every
// fixed-work check runs before every exploring one.
func TestBudgetDivision(t *testing.T) {
	for _, tc := range []struct {
		name         string
		list         []check
		budget, used time.Duration // used: by the fixed-work checks
	}{
		{"default", checks, 5 * time.Minute, 3 * time.Minute},
		{"default, the prebuild taken first", checks, 5 * time.Minute, 3*time.Minute + 25*time.Second},
		{"deeper", checks, 30 * time.Minute, 3 * time.Minute},
		{"store command", storeCmdChecks, 2 * time.Minute, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ordered := runOrder(tc.list)
			if len(ordered) != len(tc.list) {
				t.Fatalf("runOrder returned %d checks of %d", len(ordered), len(tc.list))
			}
			rest := 0.0
			for _, c := range ordered {
				rest += c.Share
			}
			total := rest
			left := tc.budget - tc.used
			spent, exploring := time.Duration(0), false
			for _, c := range ordered {
				if c.Share == 0 {
					if exploring {
						t.Fatalf("fixed-work check %s/%s runs after an exploring one", c.Name, c.Store)
					}
					continue
				}
				exploring = true
				per := testBudget(c, left, rest)
				rest -= c.Share
				got := per * time.Duration(budgetUnits(c))
				want := time.Duration(float64(tc.budget-tc.used) * c.Share / total)
				if d := got - want; d < -10*time.Millisecond || d > 10*time.Millisecond {
					t.Errorf("%s/%s: budget %s (%s for each of %d), want its share %s", c.Name, c.Store, got, per, budgetUnits(c), want)
				}
				left -= got
				spent += got
			}
			if d := spent - (tc.budget - tc.used); d < -50*time.Millisecond || d > 50*time.Millisecond {
				t.Errorf("the exploring checks spend %s, want what the fixed-work ones left: %s", spent, tc.budget-tc.used)
			}
		})
	}
}

// TestRunCheckFailsATestThatDoesNotRun: a listed test the package does not
// have fails its check, and a check whose tests ran and passed passes.
func TestRunCheckFailsATestThatDoesNotRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	for _, tc := range []struct {
		tests  []string
		status string
		note   string
	}{
		{[]string{"TestParse"}, statusPass, ""},
		{[]string{"TestParse", "TestNoSuchTest"}, statusFail, "TestNoSuchTest did not run"},
	} {
		r := runCheck(context.Background(), check{Name: "t", Store: "any", Package: "github.com/leasehold/leasehold/metrics", Tests: tc.tests},
			0, verifyOptions{reports: t.TempDir(), out: &streams{out: io.Discard, err: io.Discard}})
		if r.Status != tc.status || !strings.Contains(r.Note, tc.note) || (tc.status == statusFail && r.Violations == 0) {
			t.Errorf("tests %v: status %s, %d violations, note %q; want %s with a note containing %q", tc.tests, r.Status, r.Violations, r.Note, tc.status, tc.note)
		}
	}
}

// TestOverrun: an exploring check that took longer than its budget by more
// than the tolerance is reported with the whole excess; within the
// tolerance, or a fixed-work check, is not an overrun.
func TestOverrun(t *testing.T) {
	for _, tc := range []struct {
		name         string
		budget, took time.Duration
		want         time.Duration
	}{
		{"within its budget", 10 * time.Second, 9 * time.Second, 0},
		{"the last round a little past", 10 * time.Second, 11500 * time.Millisecond, 0},
		{"at the tolerance", 10 * time.Second, 12 * time.Second, 0},
		{"past the tolerance", 10 * time.Second, 12100 * time.Millisecond, 2100 * time.Millisecond},
		{"a large budget's tolerance is a fifth", 100 * time.Second, 119 * time.Second, 0},
		{"past a fifth", 100 * time.Second, 121 * time.Second, 21 * time.Second},
		{"a small budget far overrun (rapid on PostgreSQL, one full round)", 7600 * time.Millisecond, 104800 * time.Millisecond, 97200 * time.Millisecond},
		{"fixed work has no budget to overrun", 0, 60 * time.Second, 0},
	} {
		if got := overrun(tc.budget, tc.took); got != tc.want {
			t.Errorf("%s: overrun(budget %s, took %s) = %s, want %s", tc.name, tc.budget, tc.took, got, tc.want)
		}
	}
}

// TestFuzzExecs: the count of go test's fuzz progress lines is read; other
// lines are not counts.
func TestFuzzExecs(t *testing.T) {
	for _, tc := range []struct {
		line string
		want int64
		ok   bool
	}{
		{"fuzz: elapsed: 3s, execs: 101215 (33735/sec), new interesting: 2 (total: 10)\n", 101215, true},
		{"fuzz: elapsed: 0s, execs: 0 (0/sec), new interesting: 0 (total: 12)", 0, true},
		{"fuzz: elapsed: 0s, gathering baseline coverage: 0/12 completed\n", 0, false},
		{"=== RUN   FuzzCanonicalize\n", 0, false},
		{"    spec_test.go:12: execs: 5 \n", 0, false},
	} {
		got, ok := fuzzExecs(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("fuzzExecs(%q) = %d, %v; want %d, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// TestEtcdSplit: the etcd store's tests are split between the fixed-work
// etcd-suite and the exploring etcd check, every one in exactly one, and
// --only etcd selects both.
func TestEtcdSplit(t *testing.T) {
	var fixed, exploring []string
	for _, c := range checks {
		if c.Package != "./impl/etcd" || c.Tags != "" {
			continue
		}
		if c.Share == 0 {
			fixed = append(fixed, c.Tests...)
		} else {
			exploring = append(exploring, c.Tests...)
		}
	}
	for _, name := range etcdTests {
		if slices.Contains(fixed, name) == slices.Contains(exploring, name) {
			t.Errorf("%s: in the fixed-work etcd check %v, in the exploring one %v; want exactly one", name, slices.Contains(fixed, name), slices.Contains(exploring, name))
		}
	}
	if got := append(slices.Clone(fixed), exploring...); len(got) != len(etcdTests) {
		t.Errorf("the etcd checks run %v; want each of %v once", got, etcdTests)
	}
	for _, tc := range []struct {
		only []string
		want []string
	}{
		{[]string{"etcd"}, []string{"etcd-suite/etcd", "etcd/etcd"}},
		{[]string{"etcd/etcd"}, []string{"etcd-suite/etcd", "etcd/etcd"}},
		{[]string{"etcd-suite"}, []string{"etcd-suite/etcd"}},
		{[]string{"mutants"}, []string{"mutants/sqlite"}},
	} {
		var got []string
		for _, c := range selectChecks(tc.only, []string{"sqlite", "postgres", "etcd"}) {
			got = append(got, c.Name+"/"+c.Store)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("--only %v selects %v, want %v", tc.only, got, tc.want)
		}
	}
}

// TestReportShowsDepthAndOverrun: verify.md shows each exploring check's
// depth (sequences and rounds, histories, fuzz execs) and marks and
// explains an overrun; verify.json carries the figures.
func TestReportShowsDepthAndOverrun(t *testing.T) {
	dir := t.TempDir()
	rep := verifyReport{Verdict: "PASS", Budget: "5m0s", CompileMs: 12_300, Checks: []checkResult{
		{Name: "conformance", Store: "sqlite", Status: statusPass, DurationMs: 7_000},
		{Name: "rapid", Store: "postgres", Status: statusPass, Operations: 13_532, Sequences: 110, Rounds: 11, BudgetMs: 7_600, DurationMs: 104_800, OverrunMs: 97_200},
		{Name: "linearizability", Store: "sqlite", Status: statusPass, Operations: 3_631, Histories: 2, BudgetMs: 4_000, DurationMs: 4_100},
		{Name: "fuzz", Store: "any", Status: statusPass, Execs: 424_242, BudgetMs: 3_800, DurationMs: 4_000},
	}}
	if err := writeVerifyReports(dir, rep); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "verify.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| rapid | postgres | pass | 0 (0) | 13532 | 0 | 0 | 110 sequences in 11 rounds | 0 | 7.6 | 104.8 (**+97.2 over budget**) |",
		"| linearizability | sqlite | pass | 0 (0) | 3631 | 2 | 0 | 2 histories | 0 | 4.0 | 4.1 |",
		"| fuzz | any | pass | 0 (0) | 0 | 0 | 0 | 424242 execs | 0 | 3.8 | 4.0 |",
		"| conformance | sqlite | pass | 0 (0) | 0 | 0 | 0 |  | 0 | fixed | 7.0 |",
		"rapid/postgres: took 104.8 s against a budget of 7.6 s: 97.2 s",
		"Compiling the checks' tests before any ran: 12.3 s",
		"Time: the fixed-work checks 7.0 s (they do the same work at any budget), the exploring checks 112.9 s against the 15.4 s of budget they shared.",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("verify.md lacks %q:\n%s", want, md)
		}
	}
	js, err := os.ReadFile(filepath.Join(dir, "verify.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"overrun_ms": 97200`, `"sequences": 110`, `"rounds": 11`, `"execs": 424242`, `"compile_ms": 12300`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("verify.json lacks %s", want)
		}
	}
}

// TestCoordinatorRace: a fuzz run whose one failure is its target's, with
// "context deadline exceeded" and no failing input written, is Go's
// coordinator race (run again); anything else is a finding.
func TestCoordinatorRace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lines    []string
		failures []string
		want     bool
	}{
		{"the race", []string{"fuzz: elapsed: 3s, execs: 40304 (0/sec)\n", "--- FAIL: FuzzA (3.20s)\n", "    context deadline exceeded\n"}, []string{"FuzzA"}, true},
		{"a finding", []string{"    Failing input written to testdata/fuzz/FuzzA/1f2e\n", "    context deadline exceeded\n"}, []string{"FuzzA"}, false},
		{"another failure", []string{"    fuzz_test.go:12: want 1, got 2\n"}, []string{"FuzzA"}, false},
		{"a deadline in a message", []string{"    fuzz_test.go:12: call: context deadline exceeded\n"}, []string{"FuzzA"}, false},
		{"another test failed too", []string{"    context deadline exceeded\n"}, []string{"FuzzA", "TestB"}, false},
		{"no failure", []string{"    context deadline exceeded\n"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r coordinatorRace
			for _, l := range tc.lines {
				r.see(l)
			}
			if got := r.only(tc.failures, "FuzzA"); got != tc.want {
				t.Errorf("coordinator race = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReplayPick: a check reports the last failing test's seed and replay,
// whatever passing test's line came after it, else the last test's.
func TestReplayPick(t *testing.T) {
	pass := func(seed string) metrics.Line { return metrics.Line{Seed: seed, Replay: "go test -run " + seed} }
	failing := func(seed string) metrics.Line { l := pass(seed); l.Violations = 1; return l }
	for _, tc := range []struct {
		name  string
		lines []metrics.Line
		want  string
	}{
		{"the last of passing tests", []metrics.Line{pass("a"), pass("b")}, "b"},
		{"a failure before a pass", []metrics.Line{failing("a"), pass("b")}, "a"},
		{"a pass before a failure", []metrics.Line{pass("a"), failing("b")}, "b"},
		{"the last of two failures", []metrics.Line{failing("a"), failing("b"), pass("c")}, "b"},
		{"a line without a replay keeps the last", []metrics.Line{pass("a"), {Operations: 3}}, "a"},
		{"none", nil, ""},
	} {
		var p replayPick
		for _, l := range tc.lines {
			p.see(l)
		}
		wantReplay := ""
		if tc.want != "" {
			wantReplay = "go test -run " + tc.want
		}
		if p.seed != tc.want || p.replay != wantReplay {
			t.Errorf("%s: seed %q, replay %q; want seed %q, replay %q", tc.name, p.seed, p.replay, tc.want, wantReplay)
		}
	}
}

// TestTimeSpent: verify.md says where the time went, and when the run took
// longer than its budget, whether the fixed work alone explains it.
func TestTimeSpent(t *testing.T) {
	fixed := checkResult{Name: "postgres-store", DurationMs: 250_000}
	exploring := checkResult{Name: "rapid", BudgetMs: 40_000, DurationMs: 45_500}
	for _, tc := range []struct {
		name string
		rep  verifyReport
		want string
	}{
		{"nothing ran", verifyReport{Budget: "5m0s"}, ""},
		{"within the budget", verifyReport{Budget: "5m0s", DurationMs: 295_500, Checks: []checkResult{fixed, exploring}},
			"Time: the fixed-work checks 250.0 s (they do the same work at any budget), the exploring checks 45.5 s against the 40.0 s of budget they shared.\n\n"},
		{"over, the exploring checks' overrun", verifyReport{Budget: "5m0s", DurationMs: 310_000, CompileMs: 4_000,
			Checks: []checkResult{fixed, {Name: "rapid", BudgetMs: 40_000, DurationMs: 56_000}}},
			"Time: the fixed-work checks 250.0 s (they do the same work at any budget), the exploring checks 56.0 s against the 40.0 s of budget they shared; the run took 10.0 s more than its budget of 5m0s.\n\n"},
		{"over, the fixed work alone", verifyReport{Budget: "5m0s", DurationMs: 381_000, CompileMs: 6_000,
			Checks: []checkResult{{Name: "postgres-store", DurationMs: 296_000}, {Name: "rapid", BudgetMs: 2_000, DurationMs: 79_000}}},
			"Time: the fixed-work checks 296.0 s (they do the same work at any budget), the exploring checks 79.0 s against the 2.0 s of budget they shared; the run took 81.0 s more than its budget of 5m0s: the fixed-work checks and the compile alone took 302.0 s, more than all of it, so each exploring check ran at its minimum.\n\n"},
		{"two at a time", verifyReport{Budget: "5m0s", DurationMs: 260_000, FixedMs: 200_000, Jobs: 2,
			Checks: []checkResult{fixed, {Name: "mutants", DurationMs: 120_000}, exploring}},
			"Time: the fixed-work checks 200.0 s, 2 at a time (they do the same work at any budget), the exploring checks 45.5 s against the 40.0 s of budget they shared.\n\n"},
	} {
		if got := timeSpent(tc.rep); got != tc.want {
			t.Errorf("%s: timeSpent =\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
}

// TestInLanes: every index runs once (one after another with one lane), never more than
// the lanes at once; one lane is one after another; nothing starts once the
// context is done.
func TestInLanes(t *testing.T) {
	for _, lanes := range []int{0, 1, 2, 3} {
		var mu sync.Mutex
		var started []int
		running, most := 0, 0
		inLanes(context.Background(), 7, lanes, func(i int) {
			mu.Lock()
			started = append(started, i)
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // long enough for the other lanes to start theirs
			mu.Lock()
			running--
			mu.Unlock()
		})
		if lanes > 1 {
			slices.Sort(started) // handed out in order, recorded as each lane gets to it
		}
		if !slices.Equal(started, []int{0, 1, 2, 3, 4, 5, 6}) {
			t.Errorf("lanes %d: started %v, want each of 0..6 once (in order with one lane)", lanes, started)
		}
		if want := max(1, lanes); most != want {
			t.Errorf("lanes %d: at most %d ran at once, want %d", lanes, most, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ran []int
	inLanes(ctx, 5, 1, func(i int) {
		ran = append(ran, i)
		if i == 1 {
			cancel()
		}
	})
	if !slices.Equal(ran, []int{0, 1}) {
		t.Errorf("cancelled after index 1: ran %v, want [0 1]", ran)
	}
}

// TestSkipKind: a test that found no PostgreSQL is left out as not selected
// only when the run did not select PostgreSQL; in a run that did, it is a
// skip (its check is incomplete). A capability the store lacks is not
// applicable either way; any other skip is a skip.
func TestSkipKind(t *testing.T) {
	noPG := "pgtest.go:299: " + storetest.NoPostgreSQLPrefix + "LEASEHOLD_PG_DSN and DATABASE_URL are unset"
	notApplicable := "suite.go:40: " + storetest.NotApplicablePrefix + "the store offers no hooks"
	for _, tc := range []struct {
		output     string
		pgSelected bool
		want       string
	}{
		{noPG, false, skipNotSelected},
		{noPG, true, statusSkipped},
		{notApplicable, false, statusNotApplicable},
		{notApplicable, true, statusNotApplicable},
		{"x_test.go:12: flaky on this platform", false, statusSkipped},
		{"", true, statusSkipped},
	} {
		if got := skipKind(tc.output, tc.pgSelected); got != tc.want {
			t.Errorf("skipKind(%q, PostgreSQL selected %v) = %q, want %q", tc.output, tc.pgSelected, got, tc.want)
		}
	}
}

// TestBuilds: the compile phase builds each package once per module and set
// of build tags, and a fuzz check's package once more, instrumented.
func TestBuilds(t *testing.T) {
	got := builds([]check{
		{Package: "./a"}, {Package: "./b"}, {Package: "./a"},
		{Package: "./a", Tags: "m"},
		{Package: "./s", Fuzz: []string{"FuzzX", "FuzzY"}}, {Package: "./s"},
		{Module: "n", Package: "./a"}, {Module: "n", Package: "./c"},
	})
	want := []build{
		{packages: []string{"./a", "./b", "./s"}},
		{tags: "m", packages: []string{"./a"}},
		{packages: []string{"./s"}, fuzz: "FuzzX"},
		{module: "n", packages: []string{"./a", "./c"}},
	}
	if len(got) != len(want) {
		t.Fatalf("builds = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].module != want[i].module || got[i].tags != want[i].tags || got[i].fuzz != want[i].fuzz || !slices.Equal(got[i].packages, want[i].packages) {
			t.Errorf("build %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

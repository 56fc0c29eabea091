package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
		{[]string{"TestDecode"}, statusPass, ""},
		{[]string{"TestDecode", "TestNoSuchTest"}, statusFail, "TestNoSuchTest did not run"},
	} {
		r := runCheck(context.Background(), check{Name: "t", Store: "any", Package: "github.com/leasehold/leasehold/metrics", Tests: tc.tests},
			0, verifyOptions{reports: t.TempDir(), out: &streams{out: io.Discard, err: io.Discard}})
		if r.Status != tc.status || !strings.Contains(r.Note, tc.note) || (tc.status == statusFail && r.Violations == 0) {
			t.Errorf("tests %v: status %s, %d violations, note %q; want %s with a note containing %q", tc.tests, r.Status, r.Violations, r.Note, tc.status, tc.note)
		}
	}
}

// TestRunCheckReadsFigures: the figures a test hands verify as a test
// attribute (metrics.Report) come back whole: operations, depth, and the
// test's seed and replay command.
func TestRunCheckReadsFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	r := runCheck(context.Background(), check{Name: "t", Store: "any", Package: "github.com/leasehold/leasehold/metrics", Tests: []string{"TestReportsFigures"}},
		0, verifyOptions{reports: t.TempDir(), out: &streams{out: io.Discard, err: io.Discard}})
	want := testRun{Test: "TestReportsFigures", Seed: "7", Rounds: 3, MinRounds: 1, Replay: "go test ./metrics -run '^TestReportsFigures$'"}
	if r.Status != statusPass || r.Operations != 42 || r.Depth != 3 || len(r.Runs) != 1 || r.Runs[0] != want || r.Seed != "7" {
		t.Errorf("status %s, operations %d, depth %g, runs %+v, seed %q; want pass, 42, 3, [%+v], 7 (note %q)", r.Status, r.Operations, r.Depth, r.Runs, r.Seed, want, r.Note)
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

// TestSelectChecks: --only selects by name, name/store and group (etcd
// selects both etcd checks); the checks that only repeat make test run
// with --full, or when --only names them.
func TestSelectChecks(t *testing.T) {
	all := []string{"sqlite", "postgres", "etcd"}
	for _, tc := range []struct {
		only []string
		full bool
		want []string
	}{
		{[]string{"etcd"}, false, []string{"etcd-suite/etcd", "etcd/etcd"}},
		{[]string{"etcd/etcd"}, false, []string{"etcd-suite/etcd", "etcd/etcd"}},
		{[]string{"etcd-suite"}, false, []string{"etcd-suite/etcd"}},
		{[]string{"mutants"}, false, []string{"mutants/sqlite"}},
		{[]string{"postgres-store", "conformance/postgres"}, false, []string{"conformance/postgres", "postgres-store/postgres"}},
	} {
		var got []string
		for _, c := range selectChecks(tc.only, all, tc.full) {
			got = append(got, c.Name+"/"+c.Store)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("--only %v (--full %v) selects %v, want %v", tc.only, tc.full, got, tc.want)
		}
	}
	def, full := selectChecks(nil, all, false), selectChecks(nil, all, true)
	if len(full) != len(checks) {
		t.Errorf("--full selects %d checks of %d", len(full), len(checks))
	}
	for _, c := range checks {
		if in := slices.ContainsFunc(def, func(d check) bool { return d.Name == c.Name && d.Store == c.Store }); in == c.Full {
			t.Errorf("%s/%s (Full %v) in a default run: %v", c.Name, c.Store, c.Full, in)
		}
		if c.Full && c.Share > 0 {
			t.Errorf("%s/%s is exploring and left to --full: a default run must explore", c.Name, c.Store)
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

// TestDepth: the run's depth is its shallowest exploring check's (a check
// that reported none counts as at its minimum); checks at their minimum
// make it shallow, checks below --min-depth make it INCOMPLETE, and the
// headline and verdict say so.
func TestDepth(t *testing.T) {
	fixed := checkResult{Name: "conformance", Store: "sqlite", Status: statusPass}
	deep := checkResult{Name: "rapid", Store: "sqlite", Status: statusPass, BudgetMs: 30_000, Depth: 12, Sequences: 120, Rounds: 12}
	mid := checkResult{Name: "runtime", Store: "postgres", Status: statusPass, BudgetMs: 30_000, Depth: 3, Histories: 3}
	minimal := checkResult{Name: "linearizability", Store: "postgres", Status: statusPass, BudgetMs: 5_000, Depth: 1, Histories: 2}
	unknown := checkResult{Name: "etcd", Store: "etcd", Status: statusPass, BudgetMs: 5_000}
	skipped := checkResult{Name: "runtime", Store: "sqlite", Status: statusSkipped, BudgetMs: 5_000}
	for _, tc := range []struct {
		name        string
		checks      []checkResult
		minDepth    float64
		wantDepth   float64
		wantShallow []string
		wantBelow   []string
		wantVerdict string
		wantLine    string
	}{
		{"deep", []checkResult{fixed, deep, mid}, 2, 3, nil, nil, "PASS",
			"Depth 3.0x: the shallowest exploring check, runtime/postgres, ran 3.0 times its minimum (3.0x; 3 histories); --min-depth required 2.0x."},
		{"shallow, nothing required", []checkResult{fixed, deep, minimal}, 0, 1, []string{"linearizability/postgres"}, nil, "PASS",
			"SHALLOW: linearizability/postgres stayed at their minimum"},
		{"shallow below the required depth", []checkResult{deep, minimal, unknown}, 2, 1, []string{"linearizability/postgres", "etcd/etcd"},
			[]string{"linearizability/postgres", "etcd/etcd"}, "INCOMPLETE", "Below the required depth, so the run is INCOMPLETE: linearizability/postgres, etcd/etcd."},
		{"between the minimum and the required depth", []checkResult{deep, mid}, 4, 3, nil, []string{"runtime/postgres"}, "INCOMPLETE", "--min-depth required 4.0x"},
		{"a skipped check has no depth", []checkResult{deep, skipped}, 2, 12, nil, nil, "INCOMPLETE", "ran 12.0 times its minimum"},
		{"no exploring check", []checkResult{fixed}, 2, 0, nil, nil, "PASS", "No exploring check ran."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := verifyReport{Checks: tc.checks, MinDepth: tc.minDepth}
			rep.Depth, rep.Shallow, rep.BelowMinDepth = depthOf(rep.Checks, tc.minDepth)
			rep.Verdict = verdictOf(rep.Checks, len(rep.Checks), rep.BelowMinDepth)
			if rep.Depth != tc.wantDepth || !slices.Equal(rep.Shallow, tc.wantShallow) || !slices.Equal(rep.BelowMinDepth, tc.wantBelow) || rep.Verdict != tc.wantVerdict {
				t.Errorf("depth %g, shallow %v, below %v, verdict %s; want %g, %v, %v, %s",
					rep.Depth, rep.Shallow, rep.BelowMinDepth, rep.Verdict, tc.wantDepth, tc.wantShallow, tc.wantBelow, tc.wantVerdict)
			}
			if line := depthLine(rep); !strings.Contains(line, tc.wantLine) {
				t.Errorf("depthLine = %q, want it to contain %q", line, tc.wantLine)
			}
			if got := verdictText(rep); len(tc.wantShallow) > 0 && tc.wantVerdict == "PASS" && !strings.Contains(got, "PASS (SHALLOW)") {
				t.Errorf("a shallow pass's headline %q does not say SHALLOW", got)
			}
		})
	}
}

// TestVerdictDiffs: an oversubscribed run must give a quiet run's verdict
// and every check's status; depth may differ (and --min-depth is not
// judged), anything else is listed.
func TestVerdictDiffs(t *testing.T) {
	quiet := verifyReport{Verdict: "PASS", Checks: []checkResult{
		{Name: "conformance", Store: "sqlite", Status: statusPass},
		{Name: "rapid", Store: "sqlite", Status: statusPass, BudgetMs: 30_000, Depth: 12},
	}}
	shallower := verifyReport{Verdict: "INCOMPLETE", BelowMinDepth: []string{"rapid/sqlite"}, Checks: []checkResult{
		{Name: "conformance", Store: "sqlite", Status: statusPass},
		{Name: "rapid", Store: "sqlite", Status: statusPass, BudgetMs: 30_000, Depth: 1},
	}}
	if d := verdictDiffs(quiet, shallower); len(d) != 0 {
		t.Errorf("a shallower run with the same statuses differs: %v", d)
	}
	failed := verifyReport{Verdict: "FAIL", Checks: []checkResult{
		{Name: "conformance", Store: "sqlite", Status: statusFail, Failures: []string{"TestConformance"}, Note: "hung: waiting for x"},
		{Name: "scenarios", Store: "sqlite", Status: statusPass},
	}}
	want := []string{"verdict FAIL, was PASS", "conformance/sqlite fail, was pass (failed: [TestConformance]): hung: waiting for x",
		"rapid/sqlite did not run, was pass", "scenarios/sqlite pass, did not run"}
	if d := verdictDiffs(quiet, failed); !slices.Equal(d, want) {
		t.Errorf("verdictDiffs =\n%q\nwant\n%q", d, want)
	}
}

// TestCoverageListsEveryPackage: every package of the library and its
// tooling (the Makefile's PKGS, across the modules of go.work), and of the
// modules verify runs checks in, says where its proof runs, once; every
// check's package is one of them; and every module of go.work is one of
// those or has a target of its own.
func TestCoverageListsEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	modules := []string{""}
	for _, c := range checks {
		if c.Module != "" && !slices.Contains(modules, c.Module) {
			modules = append(modules, c.Module)
		}
	}
	pkgs := makefilePKGS(t, root)
	var want []coverageNote
	for _, m := range modules {
		// Module "" is the workspace's root: its packages are named from
		// the repository's root, whichever module of go.work holds them.
		patterns, prefix := []string{"./..."}, ""
		if m == "" {
			patterns, prefix = pkgs, "github.com/leasehold/leasehold"
		}
		cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{.Module.Path}}"}, patterns...)...)
		cmd.Dir = filepath.Join(root, m)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %q: %v", m, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			path, mod, _ := strings.Cut(l, " ")
			if prefix != "" {
				mod = prefix
			}
			want = append(want, coverageNote{module: m, pkg: "." + strings.TrimPrefix(path, mod)})
		}
	}
	// The modules with a target of their own, not verify's (Makefile).
	ownTarget := []string{"bench/river", "peers/river", "ports/go-outside", "ui/browsertest"}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	abs, _ := filepath.Abs(root)
	for _, dir := range strings.Fields(string(out)) {
		rel, _ := filepath.Rel(abs, dir)
		rel = filepath.ToSlash(rel)
		pattern := "./" + rel + "/..."
		if rel == "." {
			pattern = "./..."
		}
		if !slices.Contains(pkgs, pattern) && !slices.Contains(modules, rel) && !slices.Contains(ownTarget, rel) {
			t.Errorf("module %s of go.work is in neither the Makefile's PKGS (make test, lint) nor a check's Module nor a target of its own: add %s to PKGS", rel, pattern)
		}
	}
	for _, w := range want {
		n := 0
		for _, c := range coverage {
			if c.module == w.module && c.pkg == w.pkg {
				n++
			}
		}
		if n != 1 {
			t.Errorf("package %s (module %q) is in coverage %d times, want once: add it to coverage in verify_coverage.go, saying where its proof runs", w.pkg, w.module, n)
		}
	}
	for _, c := range coverage {
		if !slices.ContainsFunc(want, func(w coverageNote) bool { return w.module == c.module && w.pkg == c.pkg }) {
			t.Errorf("coverage lists %s (module %q), which is no package", c.pkg, c.module)
		}
	}
	for _, c := range checks {
		if !slices.ContainsFunc(coverage, func(n coverageNote) bool { return n.module == c.Module && n.pkg == c.Package }) {
			t.Errorf("%s/%s runs tests in %s, which coverage does not list", c.Name, c.Store, c.Package)
		}
	}
}

// makefilePKGS returns the patterns of the Makefile's PKGS.
func makefilePKGS(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PKGS\s*\?=\s*(.+)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("the Makefile sets no PKGS")
	}
	return strings.Fields(m[1])
}

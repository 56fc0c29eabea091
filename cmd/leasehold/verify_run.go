package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/storeproto"
)

// runChecked runs check c (a fuzz check target by target, a target that
// met Go's coordinator race once more, noting it) and sets its budget and
// overrun.
func runChecked(ctx context.Context, c check, perTest time.Duration, o verifyOptions, note func(string)) checkResult {
	var r checkResult
	if c.Rest {
		tests, err := restTests(ctx, c.Module, c, checksFor(o.stores))
		if err != nil || len(tests) == 0 {
			if err == nil {
				err = errors.New("it has no test that another check does not list")
			}
			return checkResult{Name: c.Name, Store: c.Store, Status: statusFail, Violations: 1,
				Note: fmt.Sprintf("cannot find the tests of %s to run: %v", c.Package, err)}
		}
		c.Tests = tests
	}
	if len(c.Fuzz) == 0 {
		r = runCheck(ctx, c, perTest, o)
	} else {
		r = checkResult{Name: c.Name, Store: c.Store, Status: statusPass}
		for _, target := range c.Fuzz {
			fc := c
			fc.Tests, fc.Fuzz = nil, []string{target}
			fr := runCheck(ctx, fc, perTest, o)
			if fr.coordinatorRace {
				// Go's own flake, not a finding: run the target once more.
				note(fmt.Sprintf("%s: %s; running it again", target, coordinatorRaceNote))
				r.Retried = append(r.Retried, target+": "+coordinatorRaceNote)
				fr = runCheck(ctx, fc, perTest, o)
			}
			r.merge(fr)
		}
	}
	r.BudgetMs = (perTest * time.Duration(budgetUnits(c))).Milliseconds()
	r.OverrunMs = overrun(time.Duration(r.BudgetMs)*time.Millisecond, time.Duration(r.DurationMs)*time.Millisecond).Milliseconds()
	if len(c.Fuzz) > 0 && perTest > 0 {
		// A fuzz target's depth is the time it fuzzed: go test -fuzz has no
		// rounds, and takes no seed (its corpus is testdata/fuzz).
		r.Depth = float64(perTest.Round(time.Second)) / float64(minTestBudget)
	}
	r.TestNames = c.Tests
	return r
}

// restTests is the tests of c's package and tags (c.Rest) that no other
// check of all, of the same module, package and tags, lists; go runs in
// dir (c's module's directory).
func restTests(ctx context.Context, dir string, c check, all []check) ([]string, error) {
	have, err := listTests(ctx, dir, c.Package, c.Tags)
	if err != nil {
		return nil, err
	}
	return restOf(have, c, all), nil
}

// restOf is the tests (Test...) of have, the tests of c's package and tags,
// that no other check of all lists.
func restOf(have []string, c check, all []check) []string {
	var out []string
	for _, name := range have {
		if !strings.HasPrefix(name, "Test") || slices.ContainsFunc(all, func(o check) bool {
			return o.Module == c.Module && o.Package == c.Package && o.Tags == c.Tags && slices.Contains(o.Tests, name)
		}) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// runCheck runs one check's tests with go test -json and folds the events
// into a result. perTest is each test's LEASEHOLD_BUDGET (a fuzz target's
// -fuzztime); 0 for a fixed-work check, which gets none. A failing test
// counts as at least one violation; a listed test that never started (no
// such test) fails the check.
func runCheck(ctx context.Context, c check, perTest time.Duration, o verifyOptions) (res checkResult) {
	res = checkResult{Name: c.Name, Store: c.Store}
	start := time.Now()
	defer func() { res.DurationMs = time.Since(start).Milliseconds() }()
	fail := func(note string) checkResult {
		res.Status, res.Note = statusFail, note
		if res.Violations == 0 {
			res.Violations = 1
		}
		return res
	}
	run := "^$"
	if len(c.Tests) > 0 {
		run = "^(" + strings.Join(c.Tests, "|") + ")$"
	}
	// A test that hangs fails its check after this, not the whole run.
	timeout := goTestPatience
	if perTest > 0 {
		timeout += 2 * perTest * time.Duration(budgetUnits(c))
	}
	args := []string{"test", "-json", "-count=1", "-run", run, "-timeout", timeout.String()}
	if len(c.Fuzz) == 1 {
		args = append(args, "-fuzz", "^"+c.Fuzz[0]+"$", "-fuzztime", perTest.Round(time.Second).String())
	}
	if c.Tags != "" {
		args = append(args, "-tags", c.Tags)
	}
	args = append(args, c.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = c.Module
	cmd.Env = append(os.Environ(), "LEASEHOLD_REPORTS="+absPath(o.reports))
	if perTest > 0 {
		cmd.Env = append(cmd.Env, "LEASEHOLD_BUDGET="+perTest.String())
	} else {
		// A fixed-work check never inherits a budget from verify's caller.
		cmd.Env = append(cmd.Env, "LEASEHOLD_BUDGET=")
	}
	if o.requirePG {
		cmd.Env = append(cmd.Env, "LEASEHOLD_REQUIRE_PG=1")
	}
	if o.storeCmd != "" {
		// The command runs where verify was started, whatever package's
		// test starts it.
		cmd.Env = append(cmd.Env, storeproto.EnvCmd+"="+o.storeCmd, storeproto.EnvDir+"="+absPath("."))
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(err.Error())
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fail(err.Error())
	}
	failedOutput := map[string][]string{}
	started := map[string]bool{} // the tests that ran
	var race coordinatorRace
	var execs int64
	defer func() { res.Execs += execs }()
	var replay replayPick
	defer func() { res.Seed, res.Replay = replay.seed, replay.replay }()
	depth := math.Inf(1) // the shallowest test's, among those that reported it
	defer func() {
		if !math.IsInf(depth, 1) {
			res.Depth = depth
		}
	}()
	pkgFailed := false
	var unreadable []string // figures a test reported that verify cannot read
	shownSubtests := 0
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Action, Package, Test, Output string
			Key, Value                    string // an attr event's
			Elapsed                       float64
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Action {
		case "run":
			started[ev.Test] = true
		case "attr":
			if ev.Key != metrics.Key {
				continue
			}
			m, err := metrics.Decode(ev.Value)
			if err != nil {
				unreadable = append(unreadable, fmt.Sprintf("%s: %v", ev.Test, err))
				continue
			}
			res.Operations += m.Operations
			res.Histories += m.Histories
			res.StatesExplored += m.StatesExplored
			res.Sequences += m.Sequences
			res.Rounds += m.Rounds
			res.Violations += m.Violations
			res.addFaults(m.Faults)
			replay.see(m)
			if m.Rounds > 0 && m.MinRounds > 0 {
				depth = min(depth, float64(m.Rounds)/float64(m.MinRounds))
			}
			if m.Seed != "" || m.Rounds > 0 {
				res.Runs = append(res.Runs, testRun{Test: ev.Test, Seed: m.Seed, Rounds: m.Rounds, MinRounds: m.MinRounds, Replay: m.Replay})
			}
		case "output":
			if n, ok := fuzzExecs(ev.Output); ok {
				execs = n // go test prints a running count: the last is the total
			}
			race.see(ev.Output)
			if ev.Test != "" {
				if lines := failedOutput[ev.Test]; len(lines) < 40 {
					failedOutput[ev.Test] = append(lines, strings.TrimRight(ev.Output, "\n"))
				}
			}
		case "pass", "fail", "skip":
			if ev.Test == "" {
				pkgFailed = pkgFailed || ev.Action == "fail"
				continue
			}
			if ev.Action == "skip" {
				switch skipKind(strings.Join(failedOutput[ev.Test], "\n"), slices.Contains(o.stores, "postgres")) {
				case statusNotApplicable:
					res.NotApplicable = append(res.NotApplicable, ev.Test)
					delete(failedOutput, ev.Test)
					continue
				case skipNotSelected:
					res.NotSelected = append(res.NotSelected, ev.Test)
					delete(failedOutput, ev.Test)
					continue
				}
			}
			res.Tests++ // subtests too: the conformance suite is one test of its subtests
			switch ev.Action {
			case "pass":
				res.Passed++
			case "fail":
				res.Failures = append(res.Failures, ev.Test)
				// What a failed test said is the finding: show every
				// top-level one and the first few subtests in full.
				if !strings.Contains(ev.Test, "/") || shownSubtests < 8 {
					if strings.Contains(ev.Test, "/") {
						shownSubtests++
					}
					fmt.Fprintf(o.out.out, "    --- FAIL %s (%.1fs)\n", ev.Test, ev.Elapsed)
					for _, l := range failedOutput[ev.Test] {
						fmt.Fprintf(o.out.out, "      %s\n", l)
					}
				}
			case "skip":
				res.Skipped = append(res.Skipped, ev.Test+": "+skipReason(failedOutput[ev.Test]))
			}
			delete(failedOutput, ev.Test)
		}
	}
	waitErr := cmd.Wait()
	res.coordinatorRace = len(c.Fuzz) == 1 && race.only(res.Failures, c.Fuzz[0])
	switch {
	case len(res.Failures) > 0 || pkgFailed || waitErr != nil:
		res.Status = statusFail
		res.Violations = max(res.Violations, int64(len(res.Failures)))
		if res.Violations == 0 {
			res.Violations = 1
			res.Note = strings.TrimSpace(lastLines(stderr.String(), 10))
			if res.Note == "" && waitErr != nil {
				res.Note = waitErr.Error()
			}
		}
	case res.Tests == 0 && len(res.NotApplicable) > 0:
		res.Status, res.Note = statusNotApplicable, "not applicable: the store does not offer a capability the check needs"
	case res.Tests == 0 && len(res.NotSelected) > 0:
		res.Status, res.Note = statusSkipped, "every test needs PostgreSQL, which --store did not select"
	case res.Tests == 0 && len(c.Fuzz) == 0:
		return fail("the check ran no test")
	case len(res.Skipped) > 0:
		res.Status = statusIncomplete
	default:
		res.Status = statusPass
	}
	if len(unreadable) > 0 {
		// A check whose figures cannot be read is not a pass: its depth,
		// its seed or a violation it reported would be lost.
		res.Status = statusFail
		res.Violations = max(res.Violations, 1)
		res.Note = strings.TrimSpace(fmt.Sprintf("figures verify cannot read (metrics.Decode): %s\n%s", strings.Join(unreadable, "; "), res.Note))
	}
	var missing []string
	for _, name := range c.Tests {
		if !started[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		// The -run pattern is exact: a listed test that never started does
		// not exist, or the run stopped before it.
		res.Status = statusFail
		res.Violations = max(res.Violations, 1)
		res.Note = strings.TrimSpace(fmt.Sprintf("%s did not run in %s: no such test (renamed? update the check), or the run stopped before it\n%s",
			strings.Join(missing, ", "), c.Package, res.Note))
	}
	return res
}

// coordinatorRaceNote explains a fuzz target that failed with nothing but
// "context deadline exceeded" and wrote no failing input: a race in Go's
// fuzzing coordinator at the end of -fuzztime (golang/go#75804, fixed in
// Go 1.27), which a finding never looks like (go test writes the input
// first).
const coordinatorRaceNote = "go test -fuzz ended with \"context deadline exceeded\" and wrote no failing input: Go's fuzzing coordinator race at the end of -fuzztime (golang/go#75804), not a finding"

// replayPick keeps the seed and replay command a check reports from its
// tests' figures: the last failing test's, else the last one's.
type replayPick struct {
	seed, replay string
	failing      bool // seed and replay are a failing test's
}

// see takes m's seed and replay unless a failing test's are kept and m's
// test did not fail.
func (p *replayPick) see(m metrics.Line) {
	if m.Seed == "" && m.Replay == "" || p.failing && m.Violations == 0 {
		return
	}
	p.seed, p.replay, p.failing = m.Seed, m.Replay, m.Violations > 0
}

// coordinatorRace follows a fuzz run's output for coordinatorRaceNote's
// signature.
type coordinatorRace struct{ deadline, inputWritten bool }

func (c *coordinatorRace) see(line string) {
	c.deadline = c.deadline || strings.TrimSpace(line) == "context deadline exceeded"
	c.inputWritten = c.inputWritten || strings.Contains(line, "Failing input written to")
}

// only reports whether the run's one failure, target's, is the race.
func (c coordinatorRace) only(failures []string, target string) bool {
	return c.deadline && !c.inputWritten && slices.Equal(failures, []string{target})
}

var fuzzExecsLine = regexp.MustCompile(`^fuzz: elapsed: .*?, execs: ([0-9]+) `)

// fuzzExecs reads the count of a go test -fuzz progress line ("fuzz:
// elapsed: 3s, execs: 101215 (33735/sec), new interesting: ...").
func fuzzExecs(line string) (int64, bool) {
	m := fuzzExecsLine.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n, err == nil
}

// overrunTolerance is how much longer than its budget an exploring check
// may take before the report calls it an overrun: its last round may end a
// little past the budget, and go test starts and compiles.
func overrunTolerance(budget time.Duration) time.Duration {
	return max(2*time.Second, budget/5)
}

// overrun is how much longer than its budget a check took, when past
// overrunTolerance; 0 otherwise and for a fixed-work check (budget 0).
func overrun(budget, took time.Duration) time.Duration {
	if budget <= 0 || took-budget <= overrunTolerance(budget) {
		return 0
	}
	return took - budget
}

// skipReason is the last line of a skipped test's output (its t.Skip text).
// skipNotSelected is skipKind's answer for a test that needs PostgreSQL in
// a run that did not select it.
const skipNotSelected = "not selected"

// skipKind says what a skipped test's output means: statusNotApplicable
// (the store does not offer a capability the test needs), skipNotSelected
// (the test needs PostgreSQL, and the run did not select it: it is left out
// as a postgres-only check is), else statusSkipped, which leaves its check
// incomplete. A test that found no PostgreSQL in a run that selected it is
// a skip.
func skipKind(output string, pgSelected bool) string {
	switch {
	case storetest.IsNotApplicable(output):
		return statusNotApplicable
	case !pgSelected && storetest.IsNoPostgreSQL(output):
		return skipNotSelected
	}
	return statusSkipped
}

func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "no reason given"
}

// listTests returns the test, fuzz and example functions of a package
// (TestVerifyCoversStoreTests holds the checks to them; runCheck needs no
// list: a listed test that does not start fails its check).
// dir is the directory of pkg's module ("": the current directory's).
func listTests(ctx context.Context, dir, pkg, tags string) ([]string, error) {
	args := []string{"test", "-list", ".", "-count=1"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("%v: %s", err, lastLines(string(exit.Stderr), 5))
		}
		return nil, err
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Test") || strings.HasPrefix(l, "Fuzz") || strings.HasPrefix(l, "Example") {
			names = append(names, strings.TrimSpace(l))
		}
	}
	return names, nil
}

// merge folds the result of one of a check's fuzz runs into the check's.
func (r *checkResult) merge(o checkResult) {
	r.Tests += o.Tests
	r.Passed += o.Passed
	r.Violations += o.Violations
	r.DurationMs += o.DurationMs
	r.Execs += o.Execs
	r.Failures = append(r.Failures, o.Failures...)
	if o.Status == statusFail {
		r.Status = statusFail
		if o.Note != "" {
			r.Note = o.Note
		}
	}
}

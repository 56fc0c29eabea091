package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/storeproto"
)

// A check is one named verification on one store, run as `go test` with the
// budget in the environment. Tests report their figures on a metrics line
// (package metrics); verify sums them per check.
type check struct {
	Name    string
	Store   string // "sqlite", "postgres" or "model"
	Package string
	Run     string // -run pattern
	Tags    string
	NeedsPG bool
	Share   float64 // share of the budget
	// Fuzz lists fuzz targets of Package to fuzz, one after another, for an
	// equal part of the check's budget (go test runs one -fuzz at a time).
	Fuzz []string
}

var checks = []check{
	{Name: "conformance", Store: "sqlite", Package: "./impl/sqlite", Run: "^TestConformance$", Share: 0.03},
	{Name: "conformance", Store: "postgres", Package: "./impl/postgres", Run: "^TestConformance$", NeedsPG: true, Share: 0.05},
	{Name: "postgres-concurrency", Store: "postgres", Package: "./impl/postgres", Run: "^Test(SkipLocked|Claim|Plan|Fault)", NeedsPG: true, Share: 0.05},
	{Name: "fuzz", Store: "spec", Package: "./spec", Fuzz: []string{"FuzzCanonicalize", "FuzzNormalizeCreate", "FuzzLeaseChecks"}, Share: 0.06},
	{Name: "explore", Store: "model", Package: "./model", Run: "^TestExplore", Share: 0.12},
	{Name: "rapid", Store: "sqlite", Package: "./harness", Run: "^TestPropertySQLite$", Share: 0.15},
	{Name: "rapid", Store: "postgres", Package: "./harness", Run: "^TestPropertyPostgres$", NeedsPG: true, Share: 0.15},
	{Name: "linearizability", Store: "sqlite", Package: "./harness", Run: "^TestLinearizableSQLite$", Share: 0.1},
	{Name: "linearizability", Store: "postgres", Package: "./harness", Run: "^TestLinearizablePostgres$", NeedsPG: true, Share: 0.1},
	{Name: "scenarios", Store: "sqlite", Package: "./scenarios", Run: "^TestScenariosSQLite$", Share: 0.02},
	{Name: "scenarios", Store: "postgres", Package: "./scenarios", Run: "^TestScenariosPostgres$", NeedsPG: true, Share: 0.02},
	{Name: "mutants", Store: "sqlite", Package: "./harness", Run: "^TestMutants", Tags: "leasehold_mutants", Share: 0.1},
	{Name: "mutants-scenarios", Store: "sqlite+postgres", Package: "./scenarios", Run: "^(TestMutantsScenarios|TestModelJudgesBrokenExpectations)", Tags: "leasehold_mutants", NeedsPG: true, Share: 0.03},
}

// storeCmdChecks are the checks of `verify --store-cmd CMD`: the store
// protocol's tests (storeproto/cmdtest) on the command, which they read from
// LEASEHOLD_STORE_CMD.
var storeCmdChecks = []check{
	{Name: "conformance", Store: "store-cmd", Package: "./storeproto/cmdtest", Run: "^TestConformance$", Share: 0.1},
	{Name: "rapid", Store: "store-cmd", Package: "./storeproto/cmdtest", Run: "^TestProperty$", Share: 0.45},
	{Name: "linearizability", Store: "store-cmd", Package: "./storeproto/cmdtest", Run: "^TestLinearizable$", Share: 0.35},
	{Name: "scenarios", Store: "store-cmd", Package: "./storeproto/cmdtest", Run: "^TestScenarios$", Share: 0.1},
}

// checkResult is one row of verify.json.
type checkResult struct {
	Name           string   `json:"name"`
	Store          string   `json:"store"`
	Status         string   `json:"status"` // pass, fail, skip
	Tests          int      `json:"tests"`
	Operations     int64    `json:"operations"`
	Histories      int64    `json:"histories"`
	StatesExplored int64    `json:"states_explored"`
	Seed           string   `json:"seed,omitempty"`
	Violations     int64    `json:"violations"`
	DurationMs     int64    `json:"duration_ms"`
	Failures       []string `json:"failures,omitempty"`
	Skipped        []string `json:"skipped,omitempty"`
	// NotApplicable are the tests that need a capability the store does
	// not offer: neither passed nor failed, and not counted in Tests.
	NotApplicable []string `json:"not_applicable,omitempty"`
	Replay        string   `json:"replay,omitempty"`
	Note          string   `json:"note,omitempty"`
}

type verifyReport struct {
	Commit     string        `json:"commit"`
	Started    string        `json:"started"`
	Budget     string        `json:"budget"`
	PostgreSQL string        `json:"postgresql"`
	StoreCmd   string        `json:"store_cmd,omitempty"`
	DurationMs int64         `json:"duration_ms"`
	Violations int64         `json:"violations"`
	Checks     []checkResult `json:"checks"`
}

type verifyOptions struct {
	budget    time.Duration
	reports   string
	only      string // substring filters on "name/store", comma-separated
	requirePG bool
	// storeCmd, when set, is a store command to check through the store
	// protocol instead of leasehold's own stores.
	storeCmd string
	out      io.Writer
}

func verify(ctx context.Context, o verifyOptions) error {
	start := time.Now()
	dsn := os.Getenv("LEASEHOLD_PG_DSN")
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	pg := "configured"
	if dsn == "" {
		pg = "not configured: PostgreSQL checks skipped (set LEASEHOLD_PG_DSN)"
		if o.requirePG {
			pg = "not configured, but required: the PostgreSQL tests provision one or fail"
		}
	}
	all := checks
	if o.storeCmd != "" {
		all, pg = storeCmdChecks, "not used"
	}
	rep := verifyReport{Commit: gitCommit(), Started: start.UTC().Format(time.RFC3339), Budget: o.budget.String(), PostgreSQL: pg,
		StoreCmd: o.storeCmd}
	var selected []check
	for _, c := range all {
		if selectedBy(o.only, c) {
			selected = append(selected, c)
		}
	}
	fmt.Fprintf(o.out, "leasehold verify: %d checks, budget %s, PostgreSQL %s\n", len(selected), o.budget, pg)
	if o.storeCmd != "" {
		fmt.Fprintf(o.out, "store command: %s (through the store protocol, docs/PROTOCOL.md)\n", o.storeCmd)
	}
	for i, c := range selected {
		label := fmt.Sprintf("[%d/%d] %s/%s", i+1, len(selected), c.Name, c.Store)
		if c.NeedsPG && dsn == "" && !o.requirePG {
			fmt.Fprintf(o.out, "%s: skipped (no PostgreSQL configured)\n", label)
			rep.Checks = append(rep.Checks, checkResult{Name: c.Name, Store: c.Store, Status: "skip", Note: "no PostgreSQL configured"})
			continue
		}
		share := time.Duration(float64(o.budget) * c.Share)
		fmt.Fprintf(o.out, "%s: running (budget %s)\n", label, share.Round(time.Second))
		var r checkResult
		if len(c.Fuzz) == 0 {
			r = runCheck(ctx, c, share, o)
		} else {
			r = checkResult{Name: c.Name, Store: c.Store, Status: "pass"}
		}
		for _, target := range c.Fuzz {
			fc := c
			fc.Run, fc.Fuzz = "^$", []string{target}
			fr := runCheck(ctx, fc, share/time.Duration(len(c.Fuzz)), o)
			r.merge(fr)
		}
		rep.Checks = append(rep.Checks, r)
		rep.Violations += r.Violations
		fmt.Fprintf(o.out, "%s: %s — %d tests, %d operations, %d histories, %d states, %d violations, %.1fs\n",
			label, r.Status, r.Tests, r.Operations, r.Histories, r.StatesExplored, r.Violations, float64(r.DurationMs)/1000)
		for _, f := range r.Failures {
			fmt.Fprintf(o.out, "    FAIL %s\n", f)
		}
		if len(r.NotApplicable) > 0 {
			fmt.Fprintf(o.out, "    not applicable (a capability the store does not offer): %s\n", strings.Join(r.NotApplicable, ", "))
		}
		if r.Replay != "" {
			fmt.Fprintf(o.out, "    replay: %s\n", r.Replay)
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.DurationMs = time.Since(start).Milliseconds()
	if err := writeVerifyReports(o.reports, rep); err != nil {
		return err
	}
	fmt.Fprintf(o.out, "leasehold verify: %d violations in %.1fs; reports in %s/verify.{json,md}\n",
		rep.Violations, time.Since(start).Seconds(), o.reports)
	if rep.Violations > 0 {
		return fmt.Errorf("verify found %d violations", rep.Violations)
	}
	return nil
}

// selectedBy reports whether the --only filters (comma-separated
// substrings of "name/store"; none: every check) select c.
func selectedBy(only string, c check) bool {
	if only == "" {
		return true
	}
	for _, f := range strings.Split(only, ",") {
		if f != "" && strings.Contains(c.Name+"/"+c.Store, f) {
			return true
		}
	}
	return false
}

// runCheck runs one check's tests with go test -json and folds the events
// into a result. A failing test counts as at least one violation.
func runCheck(ctx context.Context, c check, budget time.Duration, o verifyOptions) checkResult {
	res := checkResult{Name: c.Name, Store: c.Store}
	start := time.Now()
	run := c.Run
	if run == "" {
		run = "^$"
	}
	args := []string{"test", "-json", "-count=1", "-run", run, "-timeout", (budget*3 + 5*time.Minute).String()}
	if len(c.Fuzz) == 1 && c.Run == "^$" {
		args = append(args, "-fuzz", "^"+c.Fuzz[0]+"$", "-fuzztime", budget.Round(time.Second).String())
	}
	if c.Tags != "" {
		args = append(args, "-tags", c.Tags)
	}
	args = append(args, c.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "LEASEHOLD_BUDGET="+budget.String(), "LEASEHOLD_REPORTS="+absPath(o.reports))
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
		res.Status, res.Violations, res.Note = "fail", 1, err.Error()
		return res
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		res.Status, res.Violations, res.Note = "fail", 1, err.Error()
		return res
	}
	failedOutput := map[string][]string{}
	shownSubtests := 0
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Action, Package, Test, Output string
			Elapsed                       float64
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Action {
		case "output":
			if m, ok := metrics.Parse(ev.Output); ok {
				res.Operations += m.Operations
				res.Histories += m.Histories
				res.StatesExplored += m.StatesExplored
				res.Violations += m.Violations
				if m.Seed != "" {
					res.Seed = m.Seed
				}
				if m.Replay != "" {
					res.Replay = m.Replay
				}
			}
			if ev.Test != "" {
				lines := failedOutput[ev.Test]
				if len(lines) < 40 {
					failedOutput[ev.Test] = append(lines, strings.TrimRight(ev.Output, "\n"))
				}
			}
		case "pass", "fail", "skip":
			if ev.Action == "skip" && ev.Test != "" && storetest.IsNotApplicable(strings.Join(failedOutput[ev.Test], "\n")) {
				res.NotApplicable = append(res.NotApplicable, ev.Test)
				delete(failedOutput, ev.Test)
				continue
			}
			if ev.Test == "" {
				if ev.Action == "fail" && res.Status == "" {
					res.Status = "fail"
				}
				continue
			}
			res.Tests++ // subtests too: the conformance suite is one test of 50 subtests
			if strings.Contains(ev.Test, "/") {
				if ev.Action == "fail" {
					res.Failures = append(res.Failures, ev.Test)
					// What a failed subtest said is the finding: show the
					// first few in full.
					if shownSubtests++; shownSubtests <= 8 {
						fmt.Fprintf(o.out, "    --- FAIL %s (%.1fs)\n", ev.Test, ev.Elapsed)
						for _, l := range failedOutput[ev.Test] {
							fmt.Fprintf(o.out, "      %s\n", l)
						}
					}
				}
				delete(failedOutput, ev.Test)
				continue
			}
			switch ev.Action {
			case "fail":
				res.Failures = append(res.Failures, ev.Test)
				fmt.Fprintf(o.out, "    --- FAIL %s (%.1fs)\n", ev.Test, ev.Elapsed)
				for _, l := range failedOutput[ev.Test] {
					fmt.Fprintf(o.out, "      %s\n", l)
				}
			case "skip":
				res.Skipped = append(res.Skipped, ev.Test)
				fmt.Fprintf(o.out, "    --- SKIP %s\n", ev.Test)
			default:
				fmt.Fprintf(o.out, "    ok %s (%.1fs)\n", ev.Test, ev.Elapsed)
			}
			delete(failedOutput, ev.Test)
		}
	}
	waitErr := cmd.Wait()
	res.DurationMs = time.Since(start).Milliseconds()
	switch {
	case len(res.Failures) > 0 || res.Status == "fail" || waitErr != nil:
		res.Status = "fail"
		if int64(len(res.Failures)) > res.Violations {
			res.Violations = int64(len(res.Failures))
		}
		if res.Violations == 0 {
			res.Violations = 1
			res.Note = strings.TrimSpace(lastLines(stderr.String(), 10))
			if res.Note == "" && waitErr != nil {
				res.Note = waitErr.Error()
			}
		}
	case res.Tests == 0 && len(res.NotApplicable) > 0:
		res.Status, res.Note = "n/a", "not applicable: the store does not offer a capability the check needs"
	case res.Tests == 0 && len(c.Fuzz) == 0:
		res.Status, res.Violations, res.Note = "fail", 1, "no test matched "+c.Run+" in "+c.Package+": the check ran nothing"
	case res.Tests > 0 && len(res.Skipped) == res.Tests:
		res.Status, res.Violations, res.Note = "fail", 1, "every test skipped: the check proved nothing"
	default:
		res.Status = "pass"
	}
	return res
}

// merge folds the result of one of a check's fuzz runs into the check's.
func (r *checkResult) merge(o checkResult) {
	r.Tests += o.Tests
	r.Violations += o.Violations
	r.DurationMs += o.DurationMs
	r.Failures = append(r.Failures, o.Failures...)
	if o.Status == "fail" {
		r.Status = "fail"
		if o.Note != "" {
			r.Note = o.Note
		}
	}
}

func writeVerifyReports(dir string, rep verifyReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "verify.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	verdict := "**PASS**: no violations"
	if rep.Violations > 0 {
		verdict = fmt.Sprintf("**FAIL**: %d violations", rep.Violations)
	}
	fmt.Fprintf(&b, "# leasehold verify\n\n%s. Commit `%s`, started %s, budget %s, %.1f s. PostgreSQL: %s.\n\n",
		verdict, rep.Commit, rep.Started, rep.Budget, float64(rep.DurationMs)/1000, rep.PostgreSQL)
	if rep.StoreCmd != "" {
		fmt.Fprintf(&b, "Store command: `%s`, through the store protocol (docs/PROTOCOL.md).\n\n", rep.StoreCmd)
	}
	b.WriteString("| check | store | status | tests | operations | histories | states explored | violations | seconds |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %.1f |\n", c.Name, c.Store, c.Status, c.Tests,
			c.Operations, c.Histories, c.StatesExplored, c.Violations, float64(c.DurationMs)/1000)
	}
	var notes []string
	for _, c := range rep.Checks {
		for _, f := range c.Failures {
			notes = append(notes, fmt.Sprintf("- %s/%s: test `%s` failed", c.Name, c.Store, f))
		}
		if c.Replay != "" {
			notes = append(notes, fmt.Sprintf("- %s/%s: replay with `%s`", c.Name, c.Store, c.Replay))
		}
		if c.Note != "" {
			notes = append(notes, fmt.Sprintf("- %s/%s: %s", c.Name, c.Store, c.Note))
		}
		if len(c.NotApplicable) > 0 {
			notes = append(notes, fmt.Sprintf("- %s/%s: %d tests not applicable (a capability the store does not offer): %s",
				c.Name, c.Store, len(c.NotApplicable), strings.Join(c.NotApplicable, ", ")))
		}
	}
	if len(notes) > 0 {
		sort.Strings(notes)
		b.WriteString("\n## Notes\n\n" + strings.Join(notes, "\n") + "\n")
	}
	b.WriteString("\nOperations are store calls compared with the model; histories are concurrent runs checked for linearizability; states are distinct model states explored exhaustively.\n")
	return os.WriteFile(filepath.Join(dir, "verify.md"), []byte(b.String()), 0o644)
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func absPath(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

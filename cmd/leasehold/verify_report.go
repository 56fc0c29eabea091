package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/metrics"
)

// The status of a check.
const (
	statusPass = "pass" // every listed test ran and passed
	statusFail = "fail" // a test failed, or the check could not find or run its tests
	// statusSkipped: the check did not run: its store was not selected or
	// its database is missing (when not required). Never a pass.
	statusSkipped = "skipped"
	// statusIncomplete: it ran, nothing failed, but some of its tests
	// skipped. Never a pass.
	statusIncomplete = "incomplete"
	// statusNotApplicable: every test of the check needs a capability the
	// store does not offer (a port without hooks has no linearizability
	// check). Never a pass.
	statusNotApplicable = "n/a"
)

// checkResult is one row of verify.json.
type checkResult struct {
	Name           string `json:"name"`
	Store          string `json:"store"`
	Status         string `json:"status"`
	Tests          int    `json:"tests"`
	Passed         int    `json:"passed"`
	Operations     int64  `json:"operations"`
	Histories      int64  `json:"histories"`
	StatesExplored int64  `json:"states_explored"`
	// Sequences and Rounds are the rapid checks' depth: the random
	// operation sequences checked, in how many rounds. Execs is the fuzz
	// check's: inputs its targets ran, by go test's last count.
	Sequences int64 `json:"sequences,omitempty"`
	Rounds    int64 `json:"rounds,omitempty"`
	Execs     int64 `json:"execs,omitempty"`
	// Depth is an exploring check's depth (verify_depth.go): its
	// shallowest test's rounds over the rounds it runs at any budget, 1
	// being its minimum; 0 for a fixed-work check.
	Depth float64 `json:"depth,omitempty"`
	// Seed and Replay are the last failing test's, else the last test's;
	// Runs has every exploring test's seed, depth and replay command.
	Seed       string    `json:"seed,omitempty"`
	Runs       []testRun `json:"runs,omitempty"`
	Violations int64     `json:"violations"`
	DurationMs int64     `json:"duration_ms"`
	// BudgetMs is an exploring check's budget (its tests' together); 0 for
	// a fixed-work check. OverrunMs is how much longer than its budget an
	// exploring check took, when it took longer than overrunTolerance
	// allows: the work it does whatever its budget (a first round, start-up,
	// compiling its tests), taken from the checks after it.
	BudgetMs  int64    `json:"budget_ms,omitempty"`
	OverrunMs int64    `json:"overrun_ms,omitempty"`
	Failures  []string `json:"failures,omitempty"`
	// Retried lists the fuzz targets run a second time, and why: only for
	// coordinatorRaceNote, never for a finding.
	Retried []string `json:"retried,omitempty"`
	Skipped []string `json:"skipped,omitempty"`
	// NotApplicable are the tests that need a capability the store does
	// not offer: neither passed nor failed, and not counted in Tests.
	NotApplicable []string `json:"not_applicable,omitempty"`
	// NotSelected are the tests left out because they need PostgreSQL and
	// the run did not select it (--store sqlite); neither passed nor
	// counted in Tests.
	NotSelected []string `json:"not_selected,omitempty"`
	Replay      string   `json:"replay,omitempty"`
	Note        string   `json:"note,omitempty"`
	// Faults sums the fault tests' figures; MaxRecoveryMs is the largest.
	Faults *metrics.Faults `json:"faults,omitempty"`
	// TestNames are the tests the check ran: those it lists, or those its
	// package has that no other check lists (check.Rest), read from the
	// code.
	TestNames []string `json:"test_names,omitempty"`

	coordinatorRace bool // a fuzz run that failed as coordinatorRaceNote says
}

// testRun is what one exploring test reported: where it started, how deep
// it went, and how to run it again.
type testRun struct {
	Test      string `json:"test"`
	Seed      string `json:"seed,omitempty"`
	Rounds    int64  `json:"rounds,omitempty"`
	MinRounds int64  `json:"min_rounds,omitempty"`
	Replay    string `json:"replay,omitempty"`
}

// addFaults folds a fault test's figures into the check's.
func (r *checkResult) addFaults(f *metrics.Faults) {
	if f == nil {
		return
	}
	if r.Faults == nil {
		r.Faults = &metrics.Faults{}
	}
	r.Faults.Injected += f.Injected
	r.Faults.Lost += f.Lost
	r.Faults.Duplicated += f.Duplicated
	r.Faults.DoubleEffects += f.DoubleEffects
	r.Faults.StaleAccepted += f.StaleAccepted
	r.Faults.MaxRecoveryMs = max(r.Faults.MaxRecoveryMs, f.MaxRecoveryMs)
	r.Faults.CaughtLost += f.CaughtLost
}

// verifyReport is verify.json.
type verifyReport struct {
	// Verdict is PASS (every selected check passed), FAIL (one failed or
	// could not run although required) or INCOMPLETE (nothing failed, but a
	// check was skipped or skipped tests, or an exploring check stayed
	// below --min-depth).
	Verdict    string   `json:"verdict"`
	Commit     string   `json:"commit"`
	Started    string   `json:"started"`
	Budget     string   `json:"budget"`
	Stores     []string `json:"stores"`
	PostgreSQL string   `json:"postgresql"`
	// StoreCmd is the store command checked through the store protocol
	// (verify --store-cmd), if any.
	StoreCmd   string `json:"store_cmd,omitempty"`
	DurationMs int64  `json:"duration_ms"`
	// CompileMs is the time spent compiling every check's tests before
	// any ran (compileChecks): a fixed cost, taken from --budget before
	// the exploring checks share it.
	CompileMs int64 `json:"compile_ms,omitempty"`
	// FixedMs is how long the fixed-work checks took together, from the
	// end of the compile (they run Jobs at a time, so their durations add up
	// to more); 0 when none ran, and in reports from before it.
	FixedMs int64 `json:"fixed_ms,omitempty"`
	// Jobs is how many fixed-work checks ran at once (--jobs).
	Jobs int `json:"jobs,omitempty"`
	// Depth is the shallowest exploring check's depth (1: its minimum; 0:
	// none ran), MinDepth what --min-depth required (0: nothing). Shallow
	// names the exploring checks that stayed at their minimum (the run is
	// then marked shallow), BelowMinDepth those below MinDepth (the run is
	// then INCOMPLETE).
	Depth         float64  `json:"depth"`
	MinDepth      float64  `json:"min_depth"`
	Shallow       []string `json:"shallow,omitempty"`
	BelowMinDepth []string `json:"below_min_depth,omitempty"`
	// Full says whether --full also ran the checks that only repeat make
	// test (check.Full); LeftOut names those it did not run.
	Full    bool     `json:"full"`
	LeftOut []string `json:"left_out,omitempty"`
	// Oversubscribed, when set, is the CPU-burning processes that ran
	// beside the checks (--oversubscribe).
	Oversubscribed int           `json:"oversubscribed,omitempty"`
	Violations     int64         `json:"violations"`
	Checks         []checkResult `json:"checks"`
	// Coverage says, per package, where its proof runs: this run's
	// checks, --full's, or make test alone.
	Coverage []coverageRow `json:"coverage,omitempty"`
}

// printResult prints a check's result under its label.
func printResult(out io.Writer, label string, r checkResult) {
	fmt.Fprintf(out, "%s: %s — %d tests (%d passed), %d operations, %d histories, %d states, %d violations, %.1fs\n",
		label, r.Status, r.Tests, r.Passed, r.Operations, r.Histories, r.StatesExplored, r.Violations, float64(r.DurationMs)/1000)
	for _, f := range r.Failures {
		fmt.Fprintf(out, "    FAIL %s\n", f)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(out, "    SKIPPED %s\n", s)
	}
	if len(r.NotApplicable) > 0 {
		fmt.Fprintf(out, "    not applicable (a capability the store does not offer): %s\n", strings.Join(r.NotApplicable, ", "))
	}
	if len(r.NotSelected) > 0 {
		fmt.Fprintf(out, "    not selected (they need PostgreSQL, which --store left out): %d tests\n", len(r.NotSelected))
	}
	if r.Note != "" {
		fmt.Fprintf(out, "    note: %s\n", r.Note)
	}
	if r.OverrunMs > 0 {
		fmt.Fprintf(out, "    over its budget of %.1fs by %.1fs\n", float64(r.BudgetMs)/1000, float64(r.OverrunMs)/1000)
	}
	if r.Replay != "" {
		fmt.Fprintf(out, "    replay: %s\n", r.Replay)
	}
}

// verdictOf is PASS only when every selected check passed.
func verdictOf(results []checkResult, selected int, belowMinDepth []string) string {
	verdict := "PASS"
	if len(results) < selected || len(belowMinDepth) > 0 {
		verdict = "INCOMPLETE" // interrupted, or not as deep as required
	}
	for _, r := range results {
		switch r.Status {
		case statusFail:
			return "FAIL"
		case statusSkipped, statusIncomplete, statusNotApplicable:
			verdict = "INCOMPLETE"
		}
	}
	return verdict
}

// summarize counts the checks by status: "11 passed, 0 failed, 2 skipped, 0 incomplete".
func summarize(results []checkResult) string {
	n := map[string]int{}
	for _, r := range results {
		n[r.Status]++
	}
	s := fmt.Sprintf("%d passed, %d failed, %d skipped, %d incomplete", n[statusPass], n[statusFail], n[statusSkipped], n[statusIncomplete])
	if n[statusNotApplicable] > 0 {
		s += fmt.Sprintf(", %d not applicable", n[statusNotApplicable])
	}
	return s
}

// timeSpent is verify.md's account of where the run's time went: the
// fixed-work checks run whatever the budget, the exploring checks share what
// they leave of it. When the run took longer than its budget, it says by how
// much, and whether the fixed work and the compile alone took all of it (the
// exploring checks then ran at their minimum: a machine too slow for the
// budget, not a check that overran). Empty when no check ran.
func timeSpent(rep verifyReport) string {
	var fixed, exploring, share int64
	for _, c := range rep.Checks {
		if c.BudgetMs > 0 {
			exploring += c.DurationMs
			share += c.BudgetMs
		} else {
			fixed += c.DurationMs
		}
	}
	if fixed+exploring == 0 {
		return ""
	}
	sec := func(ms int64) float64 { return float64(ms) / 1000 }
	at := ""
	if rep.FixedMs > 0 {
		// Run Jobs at a time: what they took is the phase's length.
		fixed, at = rep.FixedMs, fmt.Sprintf(", %d at a time", rep.Jobs)
	}
	line := fmt.Sprintf("Time: the fixed-work checks %.1f s%s (they do the same work at any budget), the exploring checks %.1f s against the %.1f s of budget they shared", sec(fixed), at, sec(exploring), sec(share))
	budget, err := time.ParseDuration(rep.Budget)
	if over := rep.DurationMs - budget.Milliseconds(); err == nil && over > 0 {
		line += fmt.Sprintf("; the run took %.1f s more than its budget of %s", sec(over), rep.Budget)
		if fixed+rep.CompileMs > budget.Milliseconds() {
			line += fmt.Sprintf(": the fixed-work checks and the compile alone took %.1f s, more than all of it, so each exploring check ran at its minimum", sec(fixed+rep.CompileMs))
		}
	}
	return line + ".\n\n"
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
	fmt.Fprintf(&b, "# leasehold verify\n\n%s (%s). Commit `%s`, started %s, budget %s, %.1f s. Stores: %s. PostgreSQL: %s.\n\n%s\n\n",
		verdictText(rep), summarize(rep.Checks), rep.Commit, rep.Started, rep.Budget, float64(rep.DurationMs)/1000, strings.Join(rep.Stores, ", "), rep.PostgreSQL,
		depthLine(rep))
	if rep.Oversubscribed > 0 {
		fmt.Fprintf(&b, "Oversubscribed: %d CPU-burning processes ran beside the checks.\n\n", rep.Oversubscribed)
	}
	if len(rep.LeftOut) > 0 {
		fmt.Fprintf(&b, "Left out (make test runs them; --full adds them): %s.\n\n", strings.Join(rep.LeftOut, ", "))
	}
	if rep.StoreCmd != "" {
		fmt.Fprintf(&b, "Store command: `%s`, through the store protocol (docs/PROTOCOL.md).\n\n", rep.StoreCmd)
	}
	if rep.CompileMs > 0 {
		fmt.Fprintf(&b, "Compiling the checks' tests before any ran: %.1f s.\n\n", float64(rep.CompileMs)/1000)
	}
	b.WriteString(timeSpent(rep))
	b.WriteString("| check | store | status | tests (passed) | operations | histories | states explored | depth | violations | budget (s) | seconds |\n|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, c := range rep.Checks {
		budget, took := "fixed", fmt.Sprintf("%.1f", float64(c.DurationMs)/1000)
		if c.BudgetMs > 0 {
			budget = fmt.Sprintf("%.1f", float64(c.BudgetMs)/1000)
		}
		if c.OverrunMs > 0 {
			took += fmt.Sprintf(" (**+%.1f over budget**)", float64(c.OverrunMs)/1000)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d (%d) | %d | %d | %d | %s | %d | %s | %s |\n", c.Name, c.Store, c.Status, c.Tests, c.Passed,
			c.Operations, c.Histories, c.StatesExplored, depth(c), c.Violations, budget, took)
	}
	var faults []string
	for _, c := range rep.Checks {
		if f := c.Faults; f != nil {
			caught := ""
			if f.CaughtLost > 0 {
				caught = fmt.Sprint(f.CaughtLost)
			}
			faults = append(faults, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %d | %s |", c.Name, c.Store,
				f.Injected, f.Lost, f.Duplicated, f.DoubleEffects, f.StaleAccepted, f.MaxRecoveryMs, caught))
		}
	}
	if len(faults) > 0 {
		b.WriteString("\n## Faults\n\n| check | store | injected | lost | duplicated | double effects | stale accepted | max recovery (ms) | lost by the broken variant (caught) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		b.WriteString(strings.Join(faults, "\n") + "\n")
	}
	var notes []string
	for _, c := range rep.Checks {
		for _, f := range c.Failures {
			notes = append(notes, fmt.Sprintf("- %s/%s: test `%s` failed", c.Name, c.Store, f))
		}
		for _, s := range c.Skipped {
			notes = append(notes, fmt.Sprintf("- %s/%s: test skipped: %s", c.Name, c.Store, s))
		}
		for _, s := range c.Retried {
			notes = append(notes, fmt.Sprintf("- %s/%s: run again: %s", c.Name, c.Store, s))
		}
		if c.Replay != "" {
			notes = append(notes, fmt.Sprintf("- %s/%s: replay with `%s`", c.Name, c.Store, c.Replay))
		}
		if c.Note != "" {
			notes = append(notes, fmt.Sprintf("- %s/%s: %s", c.Name, c.Store, c.Note))
		}
		if c.OverrunMs > 0 {
			notes = append(notes, fmt.Sprintf("- %s/%s: took %.1f s against a budget of %.1f s: %.1f s of work it does whatever its budget (its first round, start-up), taken from the checks after it",
				c.Name, c.Store, float64(c.DurationMs)/1000, float64(c.BudgetMs)/1000, float64(c.OverrunMs)/1000))
		}
		if len(c.NotApplicable) > 0 {
			notes = append(notes, fmt.Sprintf("- %s/%s: %d tests not applicable (a capability the store does not offer): %s",
				c.Name, c.Store, len(c.NotApplicable), strings.Join(c.NotApplicable, ", ")))
		}
		if len(c.NotSelected) > 0 {
			notes = append(notes, fmt.Sprintf("- %s/%s: %d tests not selected (they need PostgreSQL, which --store left out; not counted as passed): %s",
				c.Name, c.Store, len(c.NotSelected), strings.Join(c.NotSelected, ", ")))
		}
	}
	if len(notes) > 0 {
		sort.Strings(notes)
		b.WriteString("\n## Notes\n\n" + strings.Join(notes, "\n") + "\n")
	}
	var seeds []string
	for _, c := range rep.Checks {
		for _, r := range c.Runs {
			seeds = append(seeds, fmt.Sprintf("| %s | %s | %s | %s | %d of %d | `%s` |", c.Name, c.Store, r.Test, r.Seed, r.Rounds, r.MinRounds, r.Replay))
		}
	}
	if len(seeds) > 0 {
		b.WriteString("\n## Seeds\n\nEach exploring test's first seed, its rounds (and how many of them it runs at any budget), and the command that runs it again from that seed (a failing rapid round keeps its own failfile; see the notes).\n\n| check | store | test | seed | rounds | replay |\n|---|---|---|---|---:|---|\n")
		b.WriteString(strings.Join(seeds, "\n") + "\n")
	}
	b.WriteString(coverageSection(rep))
	b.WriteString("\nOperations are store calls compared with the model; histories are concurrent runs checked for linearizability; states are distinct model states explored exhaustively; depth is how far an exploring check went beyond its minimum (1.0x: only what a plain go test runs; see verify_depth.go), and what it explored: random sequences and rounds (rapid), histories and operations (linearizability, runtime), inputs executed (fuzz). Fixed-work checks run first, --jobs of them at a time; the exploring checks then run one at a time and share what they leave of the budget, and never less than half of it. A skipped, incomplete or not-applicable check is not a pass; nor is a run below --min-depth.\n")
	return os.WriteFile(filepath.Join(dir, "verify.md"), []byte(b.String()), 0o644)
}

// depth is what an exploring check explored, for verify.md; "" for a
// fixed-work check.
func depth(c checkResult) string {
	var parts []string
	if c.Depth > 0 {
		parts = append(parts, depthText(c.Depth))
	}
	if c.Sequences > 0 {
		parts = append(parts, fmt.Sprintf("%d sequences in %d rounds", c.Sequences, c.Rounds))
	}
	if c.BudgetMs > 0 && c.Histories > 0 {
		parts = append(parts, fmt.Sprintf("%d histories", c.Histories))
	}
	if c.Execs > 0 {
		parts = append(parts, fmt.Sprintf("%d execs", c.Execs))
	}
	return strings.Join(parts, "; ")
}

// verdictText is the headline's verdict: what it means, and whether the
// run was shallow.
func verdictText(rep verifyReport) string {
	switch rep.Verdict {
	case "PASS":
		if len(rep.Shallow) > 0 {
			return "**PASS (SHALLOW)**: every selected check ran completely and passed, but some exploring checks stayed at their minimum depth"
		}
		return "**PASS**: every selected check ran completely and passed"
	case "FAIL":
		return fmt.Sprintf("**FAIL**: %d violations", rep.Violations)
	}
	if len(rep.BelowMinDepth) > 0 {
		return "**INCOMPLETE**: nothing failed, but the run did not explore as deep as --min-depth requires (or not every check ran completely); what it did not explore proves nothing"
	}
	return "**INCOMPLETE**: nothing failed, but not every check ran completely; what did not run proves nothing"
}

package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/internal/hang"
)

type verifyOptions struct {
	budget  time.Duration
	reports string
	only    []string // exact names or name/store pairs; none: every check
	stores  []string
	// storeCmd, when set, is a store command to check through the store
	// protocol instead of leasehold's own stores.
	storeCmd  string
	requirePG bool
	// jobs is how many fixed-work checks run at once (--jobs; below 1: one).
	jobs int
	// minDepth is the depth below which the run is INCOMPLETE (--min-depth;
	// 0: none); full runs the checks that only repeat make test too.
	minDepth float64
	full     bool
	// oversubscribe starts this many CPU-burning processes per core beside
	// the checks (--oversubscribe); sameAs is a verify.json whose verdicts
	// this run's must equal (--same-verdicts-as).
	oversubscribe float64
	sameAs        string
	out           *streams
}

var verifyCommand = &command{
	name:    "verify",
	summary: "run every check (conformance, model exploration, property, linearizability, scenarios, mutants): the main job",
	usage:   "verify [--store all|sqlite|postgres|etcd | --store-cmd CMD] [--budget D] [--min-depth X] [--full] [--only CHECK,...] [--jobs N] [--reports DIR] [--keep-histories] [--oversubscribe F [--same-verdicts-as FILE]]",
	help: `Runs every check on the selected stores and writes verify.json and verify.md. The verdict is
PASS only when every selected check ran completely and passed; a check that was skipped (its
database missing) or skipped some of its tests makes the run INCOMPLETE, never PASS; any failure
makes it FAIL. Store-independent checks (the model's exploration, fuzzing) always run.
The exploring checks (rapid, linearizability, the runtime run, fuzzing, etcd's) share at least
half of --budget whatever the fixed work took. The headline says how deep they went: a check
that stayed at its minimum (depth 1.0x, what a plain go test runs) marks the run SHALLOW, and
with --min-depth X a run whose shallowest exploring check is below X is INCOMPLETE.
By default verify runs the contract's checks on every store; --full adds the fixed work that
make test runs just the same (a store's own internals, the doctor, the mutant checks), and the
report lists, per package, where its proof runs. --store-cmd checks a store written in any
language instead, through the store protocol (docs/PROTOCOL.md). A test that needs a capability
the store does not declare is listed as not applicable, never counted as passed.
Runs write to reports/latest (not committed); reports/ holds the committed evidence, which only
an explicit --reports reports (make evidence) rewrites. docs/VERIFY.md says more.
Exit status: 0 PASS (a SHALLOW one too: verify.json's "shallow" lists its checks at their
minimum; --min-depth makes it 3); 1 FAIL; 2 a usage error; 3 INCOMPLETE (a check skipped,
skipped tests or not applicable, or the run below --min-depth); 4 --same-verdicts-as differed.`,
	env: append([]string{
		"LEASEHOLD_REQUIRE_PG=1  (or CI=true) a PostgreSQL that is not configured or does not answer fails the run",
	}, pgEnv...),
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		budget := fs.Duration("budget", 5*time.Minute, "total time budget: the fixed-work checks run first, the exploring ones (fuzz, rapid, linearizability, runtime, etcd) share the rest (deeper runs: 30m)")
		reports := fs.String("reports", filepath.Join("reports", "latest"), "directory for verify.json, verify.md and failing histories")
		only := fs.String("only", "", "run only these checks, comma-separated: a name (rapid) or name/store (rapid/sqlite); see the report for the names")
		store := fs.String("store", "all", "the stores to verify: all, sqlite, postgres or etcd")
		storeCmd := fs.String("store-cmd", "", "check this store command (run with sh -c from here) through the store protocol "+
			"(docs/PROTOCOL.md) instead of leasehold's own stores")
		jobs := fs.Int("jobs", 2, "fixed-work checks run at once (the exploring checks run one at a time, each with its share of the budget)")
		keep := fs.Bool("keep-histories", false, "keep every linearizability history under REPORTS/lin/, the passing ones too")
		minDepth := fs.Float64("min-depth", 0, "the depth below which the run is INCOMPLETE: each exploring check must run at least this many times its minimum rounds (1: its minimum; 0: no requirement)")
		full := fs.Bool("full", false, "also run the fixed work make test runs just the same: the stores' own internals, the doctor, the mutant checks")
		oversubscribe := fs.Float64("oversubscribe", 0, "start this many CPU-burning processes per core beside the checks, for the run (a check of verify itself: its verdicts must not depend on the load)")
		sameAs := fs.String("same-verdicts-as", "", "a verify.json (a quiet run's) whose verdict and check statuses this run's must equal (exit status 4 when they differ)")
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			stores, err := parseStores(*store)
			if err != nil {
				return err
			}
			if *storeCmd != "" {
				if *store != "all" {
					return usagef("--store %s and --store-cmd: choose one", *store)
				}
				stores = []string{"store-cmd"}
			}
			var filters []string
			for _, f := range strings.Split(*only, ",") {
				if f = strings.TrimSpace(f); f != "" {
					filters = append(filters, f)
				}
			}
			for _, f := range filters {
				if len(selectChecks([]string{f}, stores, true)) == 0 {
					return usagef("--only %q names no check of %s (checks: %s)", f, strings.Join(stores, ", "), checkNames(stores))
				}
			}
			if *jobs < 1 {
				return usagef("--jobs %d: want 1 or more", *jobs)
			}
			if *budget <= 0 {
				return usagef("--budget %s: want a positive duration such as 5m", *budget)
			}
			if *minDepth < 0 {
				return usagef("--min-depth %g: want 0 (no requirement) or more", *minDepth)
			}
			if *oversubscribe < 0 {
				return usagef("--oversubscribe %g: want 0 or more processes per core", *oversubscribe)
			}
			if *keep {
				os.Setenv(harness.EnvKeepHistory, "1") // the go test runs inherit it
			}
			return verify(ctx, verifyOptions{budget: *budget, reports: *reports, only: filters, stores: stores, storeCmd: *storeCmd, jobs: *jobs,
				minDepth: *minDepth, full: *full, oversubscribe: *oversubscribe, sameAs: *sameAs,
				requirePG: *storeCmd == "" && (os.Getenv("LEASEHOLD_REQUIRE_PG") == "1" || os.Getenv("CI") == "true"), out: o})
		}
	},
}

func parseStores(s string) ([]string, error) {
	switch s {
	case "all":
		return []string{"sqlite", "postgres", "etcd"}, nil
	case "sqlite", "postgres", "etcd":
		return []string{s}, nil
	}
	return nil, usagef("--store %q: want all, sqlite, postgres or etcd", s)
}

func verify(ctx context.Context, o verifyOptions) error {
	start := time.Now()
	out := o.out.out
	rep := verifyReport{Commit: gitCommit(), Started: start.UTC().Format(time.RFC3339), Budget: o.budget.String(), Stores: o.stores,
		StoreCmd: o.storeCmd, MinDepth: o.minDepth, Full: o.full}
	var quiet *verifyReport
	if o.sameAs != "" {
		q, err := readVerifyReport(o.sameAs)
		if err != nil {
			return usagef("--same-verdicts-as %s: %v", o.sameAs, err)
		}
		quiet = &q
	}
	pgProblem := ""
	switch {
	case o.storeCmd != "":
		rep.PostgreSQL = "not used (--store-cmd)"
	case slices.Contains(o.stores, "postgres"):
		dsn := pgDSN()
		switch {
		case dsn == "":
			pgProblem = "not configured: set LEASEHOLD_PG_DSN (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable), or run leasehold verify --store sqlite"
		default:
			if err := probePostgres(ctx, dsn); err != nil {
				pgProblem = fmt.Sprintf("does not answer at %s: %v. Start it (for example pg_ctlcluster 15 main start) or fix LEASEHOLD_PG_DSN", redactDSN(dsn), err)
			}
		}
		rep.PostgreSQL = "reachable at " + redactDSN(dsn)
		if pgProblem != "" {
			rep.PostgreSQL = pgProblem
		}
	default:
		rep.PostgreSQL = "not selected (--store " + strings.Join(o.stores, ",") + ")"
	}
	selected := selectChecks(o.only, o.stores, o.full)
	for _, c := range selectChecks(o.only, o.stores, true) {
		if !slices.ContainsFunc(selected, func(s check) bool { return s.Name == c.Name && s.Store == c.Store }) {
			rep.LeftOut = append(rep.LeftOut, c.Name+"/"+c.Store)
		}
	}
	if o.storeCmd == "" {
		rep.Coverage = coverageRows(checks)
	}
	fmt.Fprintf(out, "leasehold verify: %d checks on %s, budget %s; PostgreSQL %s\n", len(selected), strings.Join(o.stores, "+"), o.budget, rep.PostgreSQL)
	if len(rep.LeftOut) > 0 {
		fmt.Fprintf(out, "left out (make test runs them; --full adds them): %s\n", strings.Join(rep.LeftOut, ", "))
	}
	if o.storeCmd != "" {
		fmt.Fprintf(out, "store command: %s (through the store protocol, docs/PROTOCOL.md)\n", o.storeCmd)
	}
	if o.oversubscribe > 0 {
		n, stop, err := burnCPU(o.oversubscribe)
		if err != nil {
			return err
		}
		defer stop()
		rep.Oversubscribed = n
		fmt.Fprintf(out, "oversubscribed: %d CPU-burning processes run beside the checks (%g per core)\n", n, o.oversubscribe)
	}
	selected = runOrder(selected)
	took, _ := compileChecks(ctx, selected, o)
	rep.CompileMs = took.Milliseconds()
	var mu sync.Mutex // out, between checks that run at once
	// runOne runs the i-th selected check (perTest 0: fixed work) and
	// prints what it found.
	runOne := func(i int, perTest time.Duration) checkResult {
		c := selected[i]
		label := fmt.Sprintf("[%d/%d] %s/%s", i+1, len(selected), c.Name, c.Store)
		if c.NeedsPG && pgProblem != "" {
			r := checkResult{Name: c.Name, Store: c.Store, Status: statusSkipped, Note: "PostgreSQL " + pgProblem}
			if o.requirePG {
				r.Status = statusFail
			}
			mu.Lock()
			fmt.Fprintf(out, "%s: %s: PostgreSQL %s\n", label, r.Status, pgProblem)
			mu.Unlock()
			return r
		}
		mu.Lock()
		switch n := budgetUnits(c); {
		case perTest == 0:
			fmt.Fprintf(out, "%s: running (fixed work)\n", label)
		case n == 1:
			fmt.Fprintf(out, "%s: running (budget %s)\n", label, perTest.Round(time.Second))
		default:
			fmt.Fprintf(out, "%s: running (budget %s: %s for each of %d)\n", label,
				(perTest * time.Duration(n)).Round(time.Second), perTest.Round(time.Second), n)
		}
		mu.Unlock()
		r := runChecked(ctx, c, perTest, o, func(note string) {
			mu.Lock()
			fmt.Fprintf(out, "%s: %s\n", label, note)
			mu.Unlock()
		})
		mu.Lock()
		printResult(out, label, r)
		mu.Unlock()
		return r
	}

	// The fixed-work checks first, o.jobs at a time: most of them wait on
	// their servers more than they compute (make test runs packages at
	// once the same way). Their results keep the selected order.
	fixed := slices.IndexFunc(selected, func(c check) bool { return c.Share > 0 })
	if fixed < 0 {
		fixed = len(selected)
	}
	fixedStart := time.Now()
	results := make([]*checkResult, fixed)
	inLanes(ctx, fixed, o.jobs, func(i int) {
		r := runOne(i, 0)
		results[i] = &r
	})
	for _, r := range results {
		if r != nil {
			rep.Checks = append(rep.Checks, *r)
			rep.Violations += r.Violations
		}
	}
	if fixed > 0 {
		rep.FixedMs, rep.Jobs = time.Since(fixedStart).Milliseconds(), max(1, o.jobs)
	}

	// Then the exploring checks, one at a time, each with its share of
	// what is left of the budget, and of no less than exploreFloor of it
	// however long the compile and the fixed work took.
	rest := 0.0 // the shares of the exploring checks not yet run
	for _, c := range selected[fixed:] {
		rest += c.Share
	}
	exploreStart := time.Now()
	for i := fixed; i < len(selected) && ctx.Err() == nil; i++ {
		c := selected[i]
		left := max(o.budget-time.Since(start), time.Duration(exploreFloor*float64(o.budget))-time.Since(exploreStart))
		perTest := testBudget(c, left, rest)
		rest -= c.Share
		r := runOne(i, perTest)
		rep.Checks = append(rep.Checks, r)
		rep.Violations += r.Violations
	}
	rep.Depth, rep.Shallow, rep.BelowMinDepth = depthOf(rep.Checks, o.minDepth)
	rep.Verdict = verdictOf(rep.Checks, len(selected), rep.BelowMinDepth)
	rep.DurationMs = time.Since(start).Milliseconds()
	if err := writeVerifyReports(o.reports, rep); err != nil {
		return err
	}
	verdict := rep.Verdict
	if verdict == "PASS" && len(rep.Shallow) > 0 {
		verdict = "PASS (SHALLOW)"
	}
	fmt.Fprintf(out, "leasehold verify: %s — %s; %d violations in %.1fs; reports in %s/verify.{json,md}\n%s\n",
		verdict, summarize(rep.Checks), rep.Violations, time.Since(start).Seconds(), o.reports, depthLine(rep))
	if quiet != nil {
		if diffs := verdictDiffs(*quiet, rep); len(diffs) > 0 {
			fmt.Fprintf(out, "leasehold verify: the verdicts differ from %s's:\n  %s\n", o.sameAs, strings.Join(diffs, "\n  "))
			return exitError{status: exitDiffers, msg: fmt.Sprintf("%d verdicts differ from %s's", len(diffs), o.sameAs)}
		}
		fmt.Fprintf(out, "leasehold verify: the same verdicts as %s (%s, %d checks)\n", o.sameAs, quiet.Verdict, len(quiet.Checks))
	}
	switch rep.Verdict {
	case "PASS":
		return nil
	case "INCOMPLETE":
		if len(rep.BelowMinDepth) > 0 {
			return exitError{status: exitIncomplete, msg: fmt.Sprintf("INCOMPLETE: %s explored less than --min-depth %s requires; what was not explored proves nothing",
				strings.Join(rep.BelowMinDepth, ", "), depthText(o.minDepth))}
		}
		return exitError{status: exitIncomplete, msg: "INCOMPLETE: some checks did not run completely (see above); nothing is proven for what did not run"}
	}
	cannot := 0
	for _, r := range rep.Checks {
		if r.Status == statusFail && r.Violations == 0 {
			cannot++
		}
	}
	if cannot > 0 {
		return fmt.Errorf("FAIL: %d violations, and %d required checks could not run (see above)", rep.Violations, cannot)
	}
	return fmt.Errorf("FAIL: %d violations", rep.Violations)
}

// inLanes calls run(i) for each i in [0, n) in order, at most lanes (at
// least one) at a time, and starts none once ctx is done. It returns when
// every call it started has returned.
func inLanes(ctx context.Context, n, lanes int, run func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, lanes) {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() == nil {
					run(i)
				}
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// minTestBudget is the least LEASEHOLD_BUDGET an exploring check's test gets
// when the fixed-work checks have spent (nearly) all of --budget: its rounds
// loop still runs one full round, a fuzz target fuzzes this long.
const minTestBudget = time.Second

// exploreFloor is the least part of --budget the exploring checks share,
// however long the compile and the fixed-work checks took: when those take
// more than the rest, the run takes longer than its budget rather than
// leave the model-based checks a second each.
const exploreFloor = 0.5

// Exit statuses of verify, beside 0 (PASS), 1 (FAIL) and 2 (a usage error).
const (
	exitIncomplete = 3 // INCOMPLETE
	exitDiffers    = 4 // --same-verdicts-as: the verdicts differ
)

// exitError is a verify that did not pass, with its exit status.
type exitError struct {
	status int
	msg    string
}

func (e exitError) Error() string   { return e.msg }
func (e exitError) ExitStatus() int { return e.status }

// goTestPatience is the -timeout of a check's go test, beyond twice an
// exploring check's budget: a guard against a hang that no test's own guard
// (hang.Patience) caught, never a judgement of a slow machine.
var goTestPatience = 3 * hang.PhasePatience()

// budgetUnits is how many runs of an exploring check spend LEASEHOLD_BUDGET,
// one after another: its fuzz targets, else its tests.
func budgetUnits(c check) int {
	if len(c.Fuzz) > 0 {
		return len(c.Fuzz)
	}
	return max(1, len(c.Tests))
}

// testBudget is the LEASEHOLD_BUDGET of each test (or fuzz target) of the
// exploring check c, when left is what remains of the total budget and rest
// is the sum of the shares of the exploring checks not yet run, c's
// included: c's share of left, divided equally among its tests, and at least
// minTestBudget. Dividing what remains at each check, rather than planning up
// front, lets the later checks absorb an earlier one's overrun (a first round
// longer than its budget, compiling the tests).
func testBudget(c check, left time.Duration, rest float64) time.Duration {
	if rest <= 0 || left <= 0 {
		return minTestBudget
	}
	check := time.Duration(float64(left) * min(1, c.Share/rest))
	return max(minTestBudget, (check / time.Duration(budgetUnits(c))).Round(time.Millisecond))
}

// pgDSN is the configured PostgreSQL server.
func pgDSN() string { return cmpOr(os.Getenv("LEASEHOLD_PG_DSN"), os.Getenv("DATABASE_URL")) }

// probePostgres connects once, so that a missing server is reported as
// such instead of as every PostgreSQL test failing.
func probePostgres(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

var keywordPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)

// redactDSN hides the password of a connection string, URL or keyword form.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return keywordPassword.ReplaceAllString(dsn, "${1}xxxxx")
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

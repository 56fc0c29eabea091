package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/storeproto"
)

// A check is one named verification on one store, run as `go test` of the
// test functions it lists. Tests report their figures on a metrics line
// (package metrics); verify sums them per check. A listed test that does not
// exist fails the check: a check can never silently run nothing.
//
// A check is either fixed-work (Share 0: its tests do the same work whatever
// the budget, and get no LEASEHOLD_BUDGET, so that a test's rounds loop runs
// its minimal rounds) or exploring (Share > 0: its tests, or fuzz targets,
// run rounds until LEASEHOLD_BUDGET is spent). verify runs the fixed-work
// checks first and divides what they leave of --budget among the exploring
// checks, and each exploring check's budget equally among its tests
// (testBudget). A fixed-work test in an exploring check leaves its part
// unspent, and the checks after it get what is left.
type check struct {
	Name    string
	Store   string // "sqlite", "postgres", "etcd", "sqlite+postgres", "store-cmd", or "any" for store-independent checks
	Package string
	Tests   []string
	Tags    string
	NeedsPG bool
	// Share weighs an exploring check against the other exploring checks;
	// 0 makes the check fixed-work.
	Share float64
	// Fuzz lists fuzz targets of Package to fuzz, one after another, for an
	// equal part of the check's budget (go test runs one -fuzz at a time).
	Fuzz []string
	// Group, when set, is a second name --only selects the check by: the
	// parts of one store's suite split between fixed work and exploring.
	Group string
}

// postgresTests are the PostgreSQL store's own tests beside its conformance
// run: concurrency (SKIP LOCKED, two pools, many claimers, admission),
// faults, the in-transaction completion, notifications and their
// announcer, migrations and plans. TestVerifyCoversStoreTests holds the list to the package's tests.
var postgresTests = []string{
	"TestClassifyCommit", "TestTypedBeforeCommit", "TestCommitFailedWithoutResolution", "TestArgsRefuseMissingParameter", "TestArgsRewriteAsPgx",
	"TestClaimStatementShowsThePredicate", "TestDatabaseClock", "TestClockReadAfterTheLock", "TestFreshAdmissionReadsTheClockAfterTheLock", "TestClaimStatementTimeRange", "TestLockedRowIsSkippedNotWaitedFor",
	"TestClaimRolledBackAfterLocking", "TestTwoPoolsSplitTheQueue", "TestManyClaimersManyJobs", "TestConcurrentAdmission",
	"TestPurgeWaitsForAnAbortedAdmission", "TestBackendKilledBeforeCommit", "TestCommitAnswerLost", "TestLockWaitCutShort",
	"TestDeadlockIsUnavailable", "TestCompleteTx", "TestListenDeliversCommittedChanges", "TestAnnouncementsInCommitOrder", "TestChannelNames", "TestDisableNotify",
	"TestAnnouncerOwnConnection", "TestAnnouncerReconnects", "TestAnnouncerBacksOff", "TestNotifyQueueBound", "TestCloseGivesUpInTime", "TestAnnouncementsSpaced",
	"TestMigrateConcurrentlyAndAgain", "TestMigrateRefusesAnEditedMigration", "TestSchemasAreIsolated", "TestOpenRejectsBadOptions",
	"TestMigrationMovesRunStateToJobRows", "TestMigrationDerivesQueuedEvents", "TestMigrationMovesIdempotencyRecords", "TestJobCheckMatchesMigration9", "TestPlansAtDepth", "TestBatchPlansAfterGrowth", "TestBulkAdmissionPlans", "TestSweepStaleSchemas",
	"TestServerNotReady", "TestOpenWaitsForServer", "TestPurgeRunsWaitsForAReplay", "TestPurgeRunsTakesNoAdmissionLock", "TestPurgeRunsLocksRunRowsFirst",
	"TestCoalescedRunIDRace", "TestCoalescedCallAbandoned", "TestBulkAdmissionsOutgrowTheLockTable", "TestPurgeRunsOutgrowsNoLockTable", "TestCreateRunRacesAnUnlockedBulkAdmission", "TestBulkRefusalHoldsItsScope", "TestBulkRefusalHoldsItsScopeFromBatches",
	"TestBulkDecisionsHoldTheirRuns", "TestBulkDecisionsFindTheirRunsPurged", "TestReplayFindsItsRunAdmittedAgain",
	"TestReadOnlyBatchHasOnePoint", "TestStrongestKeepsEachRunOnce", "TestBulkReplayHoldsItsRun",
	"TestBulkReplayReadsItsRunLocked", "TestBulkReplayLocksJobBeforeRun", "TestWorkersWaitForAHeldReplay", "TestBulkDuplicateDecisions",
}

// runtimeFaultTests are the worker runtime's fault tests: a worker killed,
// paused (in process and by SIGSTOP) between its reservation and its call,
// a store outage longer than a publication's first tries, a PostgreSQL
// restart mid-run with the listener reconnecting, housekeeping with no
// reaper of the test's own, shutdown under load.
var runtimeFaultTests = []string{
	"TestKilledWorkerRecovers", "TestMaintenance", "TestPublicationRidesOutOutage", "TestBatchedCompletionRidesOutOutage",
	"TestFailedClaimRetriedSoon", "TestPausedWorkerDoesNotChargeTwice", "TestStoppedWorkerDoesNotChargeTwice",
	"TestPostgresRestartMidRun", "TestListenerResyncsAfterRestart", "TestShutdownUnderLoad",
}

// etcdTests are the etcd store's tests: the porting kit's checks and the
// fault run. TestVerifyCoversStoreTests holds the list to the package's tests.
var etcdTests = []string{"TestConformance", "TestProperty", "TestLinearizable", "TestScenarios", "TestRuntime", "TestLinearizableUnderFaults", "TestClusterClock", "TestRunClockFailover", "TestCreateRunsGuards", "TestCreateRunsTxnLimit"}

// etcdExploring are the etcd tests that run rounds until their budget is
// spent: the etcd check. The others of etcdTests do fixed work, and run
// with the fixed-work checks (etcd-suite), so that their time is not taken
// from the exploring checks' shares.
var etcdExploring = []string{"TestProperty", "TestLinearizable", "TestRuntime", "TestLinearizableUnderFaults"}

// etcdFixed is etcdTests but etcdExploring.
func etcdFixed() []string {
	return slices.DeleteFunc(slices.Clone(etcdTests), func(name string) bool { return slices.Contains(etcdExploring, name) })
}

var checks = []check{
	{Name: "conformance", Store: "sqlite", Package: "./impl/sqlite", Tests: []string{"TestConformance", "TestClaimPlanUsesIndex", "TestStatementCacheOneConnection",
		"TestPiecesCoverTheBatch", "TestBulkAdmissionAcrossPieces",
		"TestMigrationDerivesQueuedEvents", "TestMigrationRefusesUnderivableQueuedEvents",
		"TestMigrationMovesIdempotencyRecords", "TestMigrationRefusesUnderivableIdempotencyRecords"}},
	{Name: "conformance", Store: "postgres", Package: "./impl/postgres", Tests: []string{"TestConformance", "TestConformanceCoalesced"}, NeedsPG: true},
	// Concurrent CreateRun calls that one store merges into shared bulk
	// admissions (postgres.Options.CoalesceCreateRun), judged by porcupine;
	// the mutant proves the check reaches the bulk path.
	{Name: "coalesced-admissions", Store: "postgres", Package: "./harness", Tests: []string{"TestCoalescedAdmissionsLinearizable"}, NeedsPG: true},
	{Name: "mutants-coalesced", Store: "postgres", Package: "./harness", Tests: []string{"TestMutantsCoalescedAdmissions"}, Tags: "leasehold_mutants", NeedsPG: true},
	{Name: "postgres-store", Store: "postgres", Package: "./impl/postgres", Tests: postgresTests, NeedsPG: true},
	{Name: "explore", Store: "any", Package: "./model", Tests: []string{"TestExplore", "TestExploreCatchesBrokenVariants"}},
	{Name: "scenarios", Store: "sqlite", Package: "./scenarios", Tests: []string{"TestScenariosSQLite"}},
	{Name: "scenarios", Store: "postgres", Package: "./scenarios", Tests: []string{"TestScenariosPostgres"}, NeedsPG: true},
	{Name: "runtime-faults", Store: "sqlite+postgres", Package: "./worker", Tests: runtimeFaultTests, NeedsPG: true},
	{Name: "invariant-checker", Store: "any", Package: "./invariant", Tests: []string{"TestHealthySnapshot", "TestEachInvariantCatchesItsBreak"}},
	{Name: "doctor", Store: "sqlite", Package: "./doctor", Tests: []string{"TestDoctorSQLite"}},
	{Name: "doctor", Store: "postgres", Package: "./doctor", Tests: []string{"TestDoctorPostgres"}, NeedsPG: true},
	{Name: "relay-faults", Store: "sqlite", Package: "./relay",
		Tests: []string{"TestRelayKilledBetweenPublishAndMark", "TestRelayRidesOutNATSRestart", "TestSeveralRelaysAtOnce", "TestFaultTestCatchesBrokenRelays"}},
	{Name: "mutants", Store: "sqlite", Package: "./harness", Tests: []string{"TestMutants", "TestMutantsLinearizability", "TestMutantsRuntime"}, Tags: "leasehold_mutants"},
	// The mutants of the parts around the stores (mutant.Parts): each
	// package's check fails on its own broken variant.
	{Name: "mutants-httpadmit", Store: "sqlite", Package: "./httpadmit", Tests: []string{"TestMutantTenantFromRequest"}, Tags: "leasehold_mutants"},
	{Name: "mutants-scenarios", Store: "sqlite+postgres", Package: "./scenarios",
		Tests: []string{"TestMutantsScenarios", "TestMutantsScenariosPostgres", "TestModelJudgesBrokenExpectations"},
		Tags:  "leasehold_mutants", NeedsPG: true},
	// The etcd store's fixed-work tests on a three-member cluster they
	// start (members as child processes): conformance, scenarios, the
	// cluster clock.
	{Name: "etcd-suite", Group: "etcd", Store: "etcd", Package: "./impl/etcd", Tests: etcdFixed()},
	// The exploring checks, in the order they run (after every fixed-work
	// check): those with the longest single round first, so that the last
	// ones, whose rounds are short (SQLite), take up what an earlier overrun
	// leaves and the run lands near --budget.
	//
	// The etcd store's exploring tests on its three-member cluster: the
	// property, linearizability (with members SIGKILLed and restarted, the
	// leader killed and connections cut in the fault run) and the runtime.
	{Name: "etcd", Group: "etcd", Store: "etcd", Package: "./impl/etcd", Tests: etcdExploring, Share: 0.04},
	{Name: "fuzz", Store: "any", Package: "./spec", Fuzz: []string{"FuzzCanonicalize", "FuzzNormalizeCreate", "FuzzLeaseChecks"}, Share: 0.06},
	{Name: "rapid", Store: "postgres", Package: "./harness", Tests: []string{"TestPropertyPostgres", "TestPropertyCompleteTxPostgres"}, NeedsPG: true, Share: 0.14},
	{Name: "linearizability", Store: "postgres", Package: "./harness", Tests: []string{"TestLinearizablePostgres", "TestLinearizableCompleteTxPostgres"}, NeedsPG: true, Share: 0.08},
	{Name: "runtime", Store: "postgres", Package: "./harness", Tests: []string{"TestRuntimePostgres"}, NeedsPG: true, Share: 0.04},
	{Name: "runtime", Store: "sqlite", Package: "./harness", Tests: []string{"TestRuntimeSQLite"}, Share: 0.04},
	{Name: "rapid", Store: "sqlite", Package: "./harness", Tests: []string{"TestPropertySQLite"}, Share: 0.14},
	{Name: "linearizability", Store: "sqlite", Package: "./harness", Tests: []string{"TestLinearizableSQLite"}, Share: 0.08},
}

// storeCmdChecks are the checks of `verify --store-cmd CMD`: the store
// protocol's tests (storeproto/cmdtest) on the command, which they read from
// LEASEHOLD_STORE_CMD.
var storeCmdChecks = []check{
	{Name: "conformance", Store: "store-cmd", Package: "./storeproto/cmdtest", Tests: []string{"TestConformance"}},
	{Name: "rapid", Store: "store-cmd", Package: "./storeproto/cmdtest", Tests: []string{"TestProperty"}, Share: 0.4},
	{Name: "linearizability", Store: "store-cmd", Package: "./storeproto/cmdtest", Tests: []string{"TestLinearizable"}, Share: 0.35},
	{Name: "scenarios", Store: "store-cmd", Package: "./storeproto/cmdtest", Tests: []string{"TestScenarios"}},
	{Name: "runtime", Store: "store-cmd", Package: "./storeproto/cmdtest", Tests: []string{"TestRuntime"}, Share: 0.1},
}

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
	Sequences  int64  `json:"sequences,omitempty"`
	Rounds     int64  `json:"rounds,omitempty"`
	Execs      int64  `json:"execs,omitempty"`
	Seed       string `json:"seed,omitempty"`
	Violations int64  `json:"violations"`
	DurationMs int64  `json:"duration_ms"`
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

	coordinatorRace bool // a fuzz run that failed as coordinatorRaceNote says
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
}

// verifyReport is verify.json.
type verifyReport struct {
	// Verdict is PASS (every selected check passed), FAIL (one failed or
	// could not run although required) or INCOMPLETE (nothing failed, but a
	// check was skipped or skipped tests).
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
	// PrebuildMs is the time spent compiling the exploring checks' tests
	// before their budgets were divided (prebuild): a fixed cost, taken
	// from --budget before the exploring checks share it.
	PrebuildMs int64 `json:"prebuild_ms,omitempty"`
	// FixedMs is how long the fixed-work checks took together, from the
	// start of the run (they run Jobs at a time, so their durations add up
	// to more); 0 when none ran, and in reports from before it.
	FixedMs int64 `json:"fixed_ms,omitempty"`
	// Jobs is how many fixed-work checks ran at once (--jobs).
	Jobs       int           `json:"jobs,omitempty"`
	Violations int64         `json:"violations"`
	Checks     []checkResult `json:"checks"`
}

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
	out  *streams
}

var verifyCommand = &command{
	name:    "verify",
	summary: "run every check (conformance, model exploration, property, linearizability, scenarios, mutants): the main job",
	usage:   "verify [--store all|sqlite|postgres|etcd | --store-cmd CMD] [--budget D] [--only CHECK,...] [--jobs N] [--reports DIR] [--keep-histories]",
	help: `Runs every check on the selected stores and writes verify.json and verify.md. The verdict is
PASS only when every selected check ran completely and passed; a check that was skipped (its
database missing) or skipped some of its tests makes the run INCOMPLETE, never PASS; any failure
makes it FAIL. Store-independent checks (the model's exploration, fuzzing) always run.
--store-cmd checks a store written in any language instead, through the store protocol
(docs/PROTOCOL.md): conformance, rapid, linearizability and scenarios. A test that needs a
capability the store does not declare is listed as not applicable, never counted as passed.
Runs write to reports/latest (not committed); reports/ holds the committed evidence, which only
an explicit --reports reports (make evidence) rewrites. The exit status is 0 for PASS only.`,
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
				if len(selectChecks([]string{f}, stores)) == 0 {
					return usagef("--only %q names no check of %s (checks: %s)", f, strings.Join(stores, ", "), checkNames(stores))
				}
			}
			if *jobs < 1 {
				return usagef("--jobs %d: want 1 or more", *jobs)
			}
			if *budget <= 0 {
				return usagef("--budget %s: want a positive duration such as 5m", *budget)
			}
			if *keep {
				os.Setenv(harness.EnvKeepHistory, "1") // the go test runs inherit it
			}
			return verify(ctx, verifyOptions{budget: *budget, reports: *reports, only: filters, stores: stores, storeCmd: *storeCmd, jobs: *jobs,
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

// checksFor is the check list of the stores: a store command's own, or
// leasehold's.
func checksFor(stores []string) []check {
	if slices.Equal(stores, []string{"store-cmd"}) {
		return storeCmdChecks
	}
	return checks
}

// selectChecks returns the checks of the stores (store-independent ones
// always), those only names when it names any.
func selectChecks(only []string, stores []string) []check {
	var out []check
	for _, c := range checksFor(stores) {
		if len(only) > 0 && !slices.Contains(only, c.Name) && !slices.Contains(only, c.Name+"/"+c.Store) &&
			(c.Group == "" || !slices.Contains(only, c.Group) && !slices.Contains(only, c.Group+"/"+c.Store)) {
			continue
		}
		if c.Store == "any" || slices.ContainsFunc(stores, func(s string) bool { return strings.Contains(c.Store, s) }) {
			out = append(out, c)
		}
	}
	return out
}

func checkNames(stores []string) string {
	var n []string
	for _, c := range checksFor(stores) {
		n = append(n, c.Name+"/"+c.Store)
	}
	return strings.Join(n, ", ")
}

func verify(ctx context.Context, o verifyOptions) error {
	start := time.Now()
	out := o.out.out
	rep := verifyReport{Commit: gitCommit(), Started: start.UTC().Format(time.RFC3339), Budget: o.budget.String(), Stores: o.stores,
		StoreCmd: o.storeCmd}
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
	selected := selectChecks(o.only, o.stores)
	fmt.Fprintf(out, "leasehold verify: %d checks on %s, budget %s; PostgreSQL %s\n", len(selected), strings.Join(o.stores, "+"), o.budget, rep.PostgreSQL)
	if o.storeCmd != "" {
		fmt.Fprintf(out, "store command: %s (through the store protocol, docs/PROTOCOL.md)\n", o.storeCmd)
	}
	selected = runOrder(selected)
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
		rep.FixedMs, rep.Jobs = time.Since(start).Milliseconds(), max(1, o.jobs)
	}

	// Then the exploring checks, one at a time, each with its share of
	// what is left of the budget.
	rest := 0.0 // the shares of the exploring checks not yet run
	for _, c := range selected[fixed:] {
		rest += c.Share
	}
	for i := fixed; i < len(selected) && ctx.Err() == nil; i++ {
		c := selected[i]
		if i == fixed {
			took, n := prebuild(ctx, selected[i:], o)
			rep.PrebuildMs = took.Milliseconds()
			fmt.Fprintf(out, "compiled the exploring checks' tests (%d builds) in %.1fs, before dividing what is left of the budget\n", n, took.Seconds())
		}
		perTest := testBudget(c, o.budget-time.Since(start), rest)
		rest -= c.Share
		r := runOne(i, perTest)
		rep.Checks = append(rep.Checks, r)
		rep.Violations += r.Violations
	}
	rep.Verdict = verdictOf(rep.Checks, len(selected))
	rep.DurationMs = time.Since(start).Milliseconds()
	if err := writeVerifyReports(o.reports, rep); err != nil {
		return err
	}
	fmt.Fprintf(out, "leasehold verify: %s — %s; %d violations in %.1fs; reports in %s/verify.{json,md}\n",
		rep.Verdict, summarize(rep.Checks), rep.Violations, time.Since(start).Seconds(), o.reports)
	switch rep.Verdict {
	case "PASS":
		return nil
	case "INCOMPLETE":
		return errors.New("INCOMPLETE: some checks did not run completely (see above); nothing is proven for what did not run")
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

// runChecked runs check c (a fuzz check target by target, a target that
// met Go's coordinator race once more, noting it) and sets its budget and
// overrun.
func runChecked(ctx context.Context, c check, perTest time.Duration, o verifyOptions, note func(string)) checkResult {
	var r checkResult
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
	return r
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

// minTestBudget is the least LEASEHOLD_BUDGET an exploring check's test gets
// when the fixed-work checks have spent (nearly) all of --budget: its rounds
// loop still runs one full round, a fuzz target fuzzes this long.
const minTestBudget = time.Second

// fixedTimeout is the -timeout of a fixed-work check's go test (go test's
// default): a hang guard, since its work does not scale with the budget.
const fixedTimeout = 10 * time.Minute

// runOrder returns the checks fixed-work first, then the exploring ones, each
// group in list order: the exploring checks share what the fixed-work ones
// leave of the budget, which is known only once those have run.
func runOrder(cs []check) []check {
	out := make([]check, 0, len(cs))
	for _, fixed := range []bool{true, false} {
		for _, c := range cs {
			if (c.Share == 0) == fixed {
				out = append(out, c)
			}
		}
	}
	return out
}

// prebuild compiles the tests of the exploring checks in cs, each package
// and build tags once, by running go test with no test (a fuzz target's
// build with one input, instrumented as -fuzz builds it), and returns how
// long that took and how many builds it ran. Compiling does not depend on
// the budget: spent here, before the budget is divided, it is not taken
// from the share of the first exploring check of each package. A build
// that fails is left for its check to report.
func prebuild(ctx context.Context, cs []check, o verifyOptions) (time.Duration, int) {
	start := time.Now()
	done := map[string]bool{}
	for _, c := range cs {
		if c.Share == 0 {
			continue
		}
		args := []string{"test", "-count=1", "-run", "^$"}
		key := c.Package + " " + c.Tags
		if len(c.Fuzz) > 0 {
			args = append(args, "-fuzz", "^"+c.Fuzz[0]+"$", "-fuzztime", "1x")
			key += " fuzz"
		}
		if done[key] {
			continue
		}
		done[key] = true
		if c.Tags != "" {
			args = append(args, "-tags", c.Tags)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, c.Package)...)
		cmd.Env = append(os.Environ(), "LEASEHOLD_BUDGET=", "LEASEHOLD_REPORTS="+absPath(o.reports))
		cmd.Run()
	}
	return time.Since(start), len(done)
}

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

// verdictOf is PASS only when every selected check passed.
func verdictOf(results []checkResult, selected int) string {
	verdict := "PASS"
	if len(results) < selected {
		verdict = "INCOMPLETE" // interrupted
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
	timeout := fixedTimeout
	if perTest > 0 {
		timeout = 2*perTest*time.Duration(budgetUnits(c)) + 3*time.Minute
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
	pkgFailed := false
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
		case "run":
			started[ev.Test] = true
		case "output":
			if m, ok := metrics.Parse(ev.Output); ok {
				res.Operations += m.Operations
				res.Histories += m.Histories
				res.StatesExplored += m.StatesExplored
				res.Sequences += m.Sequences
				res.Rounds += m.Rounds
				res.Violations += m.Violations
				res.addFaults(m.Faults)
				replay.see(m)
			}
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
// tests' metrics lines: the last failing test's, else the last one's.
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
func listTests(ctx context.Context, pkg, tags string) ([]string, error) {
	args := []string{"test", "-list", ".", "-count=1"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).Output()
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
		if fixed+rep.PrebuildMs > budget.Milliseconds() {
			line += fmt.Sprintf(": the fixed-work checks and the compile alone took %.1f s, more than all of it, so each exploring check ran at its minimum", sec(fixed+rep.PrebuildMs))
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
	verdict := map[string]string{
		"PASS":       "**PASS**: every selected check ran completely and passed",
		"FAIL":       fmt.Sprintf("**FAIL**: %d violations", rep.Violations),
		"INCOMPLETE": "**INCOMPLETE**: nothing failed, but not every check ran completely; what did not run proves nothing",
	}[rep.Verdict]
	fmt.Fprintf(&b, "# leasehold verify\n\n%s (%s). Commit `%s`, started %s, budget %s, %.1f s. Stores: %s. PostgreSQL: %s.\n\n",
		verdict, summarize(rep.Checks), rep.Commit, rep.Started, rep.Budget, float64(rep.DurationMs)/1000, strings.Join(rep.Stores, ", "), rep.PostgreSQL)
	if rep.StoreCmd != "" {
		fmt.Fprintf(&b, "Store command: `%s`, through the store protocol (docs/PROTOCOL.md).\n\n", rep.StoreCmd)
	}
	if rep.PrebuildMs > 0 {
		fmt.Fprintf(&b, "Compiling the exploring checks' tests before dividing the budget among them: %.1f s.\n\n", float64(rep.PrebuildMs)/1000)
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
			faults = append(faults, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %d |", c.Name, c.Store,
				f.Injected, f.Lost, f.Duplicated, f.DoubleEffects, f.StaleAccepted, f.MaxRecoveryMs))
		}
	}
	if len(faults) > 0 {
		b.WriteString("\n## Faults\n\n| check | store | injected | lost | duplicated | double effects | stale accepted | max recovery (ms) |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
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
	b.WriteString("\nOperations are store calls compared with the model; histories are concurrent runs checked for linearizability; states are distinct model states explored exhaustively; depth is what an exploring check explored: random sequences and rounds (rapid), histories and operations (linearizability, runtime), inputs executed (fuzz). Fixed-work checks run first, --jobs of them at a time; the exploring checks then run one at a time and share what they leave of the budget. A skipped, incomplete or not-applicable check is not a pass.\n")
	return os.WriteFile(filepath.Join(dir, "verify.md"), []byte(b.String()), 0o644)
}

// depth is what an exploring check explored, for verify.md; "" for a
// fixed-work check.
func depth(c checkResult) string {
	var parts []string
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

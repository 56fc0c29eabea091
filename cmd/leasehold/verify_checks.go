package main

import (
	"slices"
	"strings"
)

// A check is one named verification on one store, run as `go test` of the
// test functions it lists, or of every test of its package that no other
// check of that package lists (Rest: the set is read from the code, so a
// test added to such a package runs under verify without a list to keep).
// Tests hand their figures to verify as test attributes (package metrics); verify
// sums them per check. A listed test that does not exist fails the check,
// and so does a check that finds no test: a check can never silently run
// nothing.
//
// A check runs by default, or only with --full (Full): the fixed work that
// make test runs just the same and that proves something other than the
// stores' contract (a store's own internals, the tools, the checks' power
// against broken variants). coverage says, per package, which.
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
	Name  string
	Store string // "sqlite", "postgres", "etcd", "sqlite+postgres", "store-cmd", or "any" for store-independent checks
	// Module is the directory of the module of its own that Package is in
	// (its go test runs there), "" for this module.
	Module  string
	Package string
	Tests   []string
	// Rest makes the check run every test (Test...) of its package and
	// tags that no other check of that package and tags lists.
	Rest    bool
	Tags    string
	NeedsPG bool
	// Full: the check runs only with --full (see above).
	Full bool
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

// runtimeFaultTests are the worker runtime's fault tests: a worker killed,
// paused (in process and by SIGSTOP) between its reservation and its call,
// a store outage longer than a publication's first tries, a PostgreSQL
// restart mid-run with the listener reconnecting, housekeeping with no
// reaper of the test's own (and across workers restarted faster than its
// interval), shutdown under load.
var runtimeFaultTests = []string{
	"TestKilledWorkerRecovers", "TestMaintenance", "TestHousekeepingAcrossRestarts", "TestPublicationRidesOutOutage", "TestBatchedCompletionRidesOutOutage",
	"TestFailedClaimRetriedSoon", "TestPausedWorkerDoesNotChargeTwice", "TestStoppedWorkerDoesNotChargeTwice",
	"TestPostgresRestartMidRun", "TestListenerResyncsAfterRestart", "TestShutdownUnderLoad",
}

// etcdExploring are the etcd tests that run rounds until their budget is
// spent: the etcd check. The rest of the package's tests do fixed work, and
// run with the fixed-work checks (etcd-suite), so that their time is not
// taken from the exploring checks' shares.
var etcdExploring = []string{"TestProperty", "TestLinearizable", "TestRuntime", "TestLinearizableUnderFaults"}

var checks = []check{
	// The SQLite store: the conformance suite and every other test of its
	// package (plans, migrations, admission in the caller's transaction).
	{Name: "conformance", Store: "sqlite", Package: "./impl/sqlite", Rest: true},
	{Name: "conformance", Store: "postgres", Package: "./impl/postgres", Tests: []string{"TestConformance"}, NeedsPG: true},
	// Concurrent CreateRun calls that one store merges into shared bulk
	// admissions (postgres.Options.CoalesceCreateRun), judged by porcupine;
	// the mutant proves the check reaches the bulk path.
	{Name: "coalesced-admissions", Store: "postgres", Package: "./harness", Tests: []string{"TestCoalescedAdmissionsLinearizable"}, NeedsPG: true, Full: true},
	{Name: "mutants-coalesced", Store: "postgres", Package: "./harness", Tests: []string{"TestMutantsCoalescedAdmissions"}, Tags: "leasehold_mutants", NeedsPG: true, Full: true},
	// The PostgreSQL store's own tests beside its conformance run:
	// concurrency (SKIP LOCKED, two pools, many claimers, admission),
	// faults, in-transaction completion and admission, notifications and
	// their announcer, migrations and plans, the coalesced conformance run.
	{Name: "postgres-store", Store: "postgres", Package: "./impl/postgres", Rest: true, NeedsPG: true, Full: true},
	{Name: "explore", Store: "any", Package: "./model", Tests: []string{"TestExplore", "TestExploreCatchesBrokenVariants"}},
	{Name: "scenarios", Store: "sqlite", Package: "./scenarios", Tests: []string{"TestScenariosSQLite"}},
	{Name: "scenarios", Store: "postgres", Package: "./scenarios", Tests: []string{"TestScenariosPostgres"}, NeedsPG: true},
	{Name: "runtime-faults", Store: "sqlite+postgres", Package: "./worker", Tests: runtimeFaultTests, NeedsPG: true},
	{Name: "invariant-checker", Store: "any", Package: "./invariant", Rest: true},
	{Name: "doctor", Store: "sqlite", Package: "./doctor", Tests: []string{"TestDoctorSQLite"}, Full: true},
	{Name: "doctor", Store: "postgres", Package: "./doctor", Tests: []string{"TestDoctorPostgres"}, NeedsPG: true, Full: true},
	// Power losses (powerloss/, a module of its own): the fault
	// filesystem's own tests, then each store on it, its durable setting
	// losing no acknowledged write and its faster one caught losing some.
	{Name: "faultfs", Store: "any", Module: "powerloss", Package: "./faultfs", Rest: true},
	{Name: "power-loss", Store: "sqlite", Module: "powerloss", Package: "./sqlite", Tests: []string{"TestPowerLossSQLite"}},
	{Name: "power-loss", Store: "postgres", Module: "powerloss", Package: "./postgres", Tests: []string{"TestPowerLossPostgres"}},
	// The relay (on SQLite) publishing to an embedded nats-server whose
	// JetStream store loses power: sync_interval: always loses no delivered
	// message, the default lazy fsync is caught losing some.
	{Name: "relay-power-loss", Store: "sqlite", Module: "powerloss", Package: "./jetstream", Tests: []string{"TestPowerLossJetStream", "TestReadServerSync"}},
	// The outbox relay's failure paths: killed between publish and mark,
	// NATS restarted, several relays at once, a publish failing for good.
	{Name: "relay-faults", Store: "sqlite", Package: "./relay", Rest: true},
	// The checks' power: each deliberately broken store (impl/mutant)
	// caught by rapid, linearizability and the runtime run.
	{Name: "mutants", Store: "sqlite", Package: "./harness", Tests: []string{"TestMutants", "TestMutantsLinearizability", "TestMutantsRuntime"}, Tags: "leasehold_mutants", Full: true},
	// The mutants of the parts around the stores (mutant.Parts): each
	// package's check fails on its own broken variant.
	{Name: "mutants-httpadmit", Store: "sqlite", Package: "./httpadmit", Tests: []string{"TestMutantTenantFromRequest"}, Tags: "leasehold_mutants", Full: true},
	{Name: "mutants-doctor", Store: "sqlite", Package: "./doctor", Tests: []string{"TestMutantScopedRepair"}, Tags: "leasehold_mutants", Full: true},
	{Name: "mutants-storeproto", Store: "any", Package: "./storeproto", Tests: []string{"TestMutantAfterCommitAcceptsUnavailable"}, Tags: "leasehold_mutants", Full: true},
	{Name: "mutants-worker", Store: "sqlite", Package: "./worker", Tests: []string{"TestMutantFirstHousekeepingAfterInterval"}, Tags: "leasehold_mutants", Full: true},
	// The broken listings: the listing's conformance tests and the rapid
	// property catch each.
	{Name: "mutants-listing", Store: "sqlite+postgres", Package: "./harness", Tests: []string{"TestListingMutants"}, Tags: "leasehold_mutants", NeedsPG: true, Full: true},
	{Name: "mutants-scenarios", Store: "sqlite+postgres", Package: "./scenarios",
		Tests: []string{"TestMutantsScenarios", "TestMutantsScenariosPostgres", "TestModelJudgesBrokenExpectations"},
		Tags:  "leasehold_mutants", NeedsPG: true, Full: true},
	// The etcd store's fixed-work tests on a three-member cluster they
	// start (members as child processes): conformance, scenarios, the
	// cluster clock.
	{Name: "etcd-suite", Group: "etcd", Store: "etcd", Package: "./impl/etcd", Rest: true},
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
	{Name: "linearizability", Store: "postgres", Package: "./harness", Tests: []string{"TestLinearizablePostgres", "TestLinearizableCompleteTxPostgres", "TestLinearizableCreateRunTxPostgres"}, NeedsPG: true, Share: 0.08},
	{Name: "runtime", Store: "postgres", Package: "./harness", Tests: []string{"TestRuntimePostgres"}, NeedsPG: true, Share: 0.04},
	{Name: "runtime", Store: "sqlite", Package: "./harness", Tests: []string{"TestRuntimeSQLite"}, Share: 0.04},
	{Name: "rapid", Store: "sqlite", Package: "./harness", Tests: []string{"TestPropertySQLite"}, Share: 0.14},
	{Name: "linearizability", Store: "sqlite", Package: "./harness", Tests: []string{"TestLinearizableSQLite", "TestLinearizableCreateRunTxSQLite"}, Share: 0.08},
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

// checksFor is the check list of the stores: a store command's own, or
// leasehold's.
func checksFor(stores []string) []check {
	if slices.Equal(stores, []string{"store-cmd"}) {
		return storeCmdChecks
	}
	return checks
}

// selectChecks returns the checks of the stores (store-independent ones
// always), those only names when it names any; a Full check only with full
// or when only names it.
func selectChecks(only []string, stores []string, full bool) []check {
	var out []check
	for _, c := range checksFor(stores) {
		named := slices.Contains(only, c.Name) || slices.Contains(only, c.Name+"/"+c.Store) ||
			c.Group != "" && (slices.Contains(only, c.Group) || slices.Contains(only, c.Group+"/"+c.Store))
		if len(only) > 0 && !named || c.Full && !full && !named {
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

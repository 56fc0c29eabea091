// Package leaseholdtest is the porting kit's Go API: the whole proof that
// leasehold runs on its own stores, run on yours. Implement spec.Store, write
// a Factory that opens a fresh store per call, and call All (or one check at
// a time) from a test:
//
//	func TestMyStore(t *testing.T) {
//		leaseholdtest.All(t, leaseholdtest.Store{Name: "mystore", Factory: myFactory})
//	}
//
// The checks are the ones `leasehold verify` runs on the SQLite and
// PostgreSQL stores, through this same API:
//
//   - Conformance: the contract tests of impl/storetest, with exact states,
//     sequences and error codes.
//   - Property: rapid's random operation sequences, the store and the model
//     compared after every step (failfiles, seed and replay command).
//   - Linearizability: concurrent clients, each on its own store of one
//     database, their histories checked against the model with porcupine,
//     then Jepsen-style accounting (reports under reports/lin/).
//   - Scenarios: the named races of the scenario corpus, played with
//     barriers on the store's hooks.
//   - Runtime: what users run — leasehold's worker runtime (renewals,
//     batched completion, housekeeping, self-fencing effects) on the store,
//     with rolled-back transactions, lost replies and paused workers,
//     every store call judged against the model, then a liveness bound.
//
// Budget, seed, failfiles and replay work as for leasehold's own stores:
// LEASEHOLD_BUDGET (set by `leasehold verify`) bounds the property and
// linearizability runs, LEASEHOLD_SEED pins a linearizability seed,
// -rapid.failfile replays a kept failfile, and every failure prints the
// one-line command that replays it (with Store.Env in front).
//
// What a store offers beyond spec.Store is declared by its Factory
// (Handle.Caps: hooks, SQL for the schema tests, a database clock) or found
// by type assertion (spec.BatchCompleter, spec.Notifier). A check that needs
// a capability the store does not offer is not applicable: it is logged as
// "NOT APPLICABLE: …" and skipped, never counted as a pass.
package leaseholdtest

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/spec"
)

// The conformance suite's types, so that a porter needs no other package of
// leasehold's test machinery.
type (
	// Factory opens a fresh, empty store for one test (storetest.Factory).
	Factory = storetest.Factory
	// Options is what a check asks of a new store (storetest.Options).
	Options = storetest.Options
	// Handle is an opened store and what else the checks may use
	// (storetest.Handle).
	Handle = storetest.Handle
	// Caps declares a store's optional capabilities (storetest.Caps).
	Caps = storetest.Caps
	// Capability names an optional capability (storetest.Capability).
	Capability = storetest.Capability
	// Layout is how a store's tables hold the records, for the schema tests
	// (storetest.Layout).
	Layout = storetest.Layout
	// Contract is the interface every store implements (spec.Store): what
	// Handle.Reopen and Handle.OpenWith return.
	Contract = spec.Store
)

// The capabilities and layouts.
const (
	CapHooks             = storetest.CapHooks
	CapSQL               = storetest.CapSQL
	CapDatabaseClock     = storetest.CapDatabaseClock
	CapCompleteBatch     = storetest.CapCompleteBatch
	CapNotifications     = storetest.CapNotifications
	CapCreateRuns        = storetest.CapCreateRuns
	CapLockWaits         = storetest.CapLockWaits
	CapListRuns          = storetest.CapListRuns
	CapCreateRunTx       = storetest.CapCreateRunTx
	LayoutTablePerRecord = storetest.LayoutTablePerRecord
	LayoutJobRow         = storetest.LayoutJobRow
)

// Store is a store under check.
type Store struct {
	// Name names the store in reports and in its figures: letters, digits,
	// '-' and '_' ("sqlite", "python-sqlite").
	Name string
	// Factory opens a fresh store per call. It must honour every field of
	// Options (see impl/storetest's package doc: the clock is read once per
	// write, the random source draws every jitter, the hook is called when
	// Caps.Hooks is declared) and offer Reopen and OpenWith.
	Factory Factory
	// Env is the environment the calling test needs to run again, put in
	// front of every replay command (a store given as a command:
	// LEASEHOLD_STORE_CMD=…).
	Env map[string]string
	// Tags are the build tags the calling test needs, for replay commands.
	Tags string
	// Transient marks a store from outside this repository (see
	// harness.Target.Transient): failfiles are kept under reports/ only.
	Transient bool
}

func (s Store) target(t *testing.T) harness.Target {
	t.Helper()
	if s.Name == "" || strings.ContainsAny(s.Name, " /\t\n") {
		t.Fatalf("leaseholdtest: Store.Name %q: give a short name without spaces or slashes; reports use it", s.Name)
	}
	if s.Factory == nil {
		t.Fatalf("leaseholdtest: Store %s has no Factory", s.Name)
	}
	return harness.Target{Name: s.Name, Factory: s.Factory, Env: s.Env, Tags: s.Tags, Transient: s.Transient}
}

// Conformance runs the conformance suite (impl/storetest), each contract
// test as a subtest, in parallel (storetest.RunAll): Factory must give each
// call a database of its own. Tests that need a capability the store does
// not offer are not applicable. It logs what the store offers and, once
// every subtest has ended, reports its figures (package metrics) with the
// tests failed and a replay command when one failed.
func Conformance(t *testing.T, s Store) {
	target := s.target(t)
	offered := storetest.Declared(t, s.Factory)
	t.Logf("store %s offers: %s", s.Name, storetest.Describe(offered))
	storetest.RunAll(t, s.Factory, func(sum storetest.Summary) {
		if len(sum.NotApplicable) > 0 {
			t.Logf("%d conformance tests are not applicable to %s (a capability it does not offer): %s",
				len(sum.NotApplicable), s.Name, strings.Join(sum.NotApplicable, ", "))
		}
		if len(sum.Skipped) > 0 {
			t.Errorf("%d conformance tests skipped for a reason other than a missing capability (a skip is not a pass): %s",
				len(sum.Skipped), strings.Join(sum.Skipped, ", "))
		}
		line := metrics.Line{Check: "conformance", Store: s.Name, Violations: int64(len(sum.Failed))}
		if len(sum.Failed) > 0 {
			line.Replay = report.TestCommand(target.Env, target.Tags, t.Name()+"/("+strings.Join(sum.Failed, "|")+")")
			t.Logf("failed: %s\nreplay: %s", strings.Join(sum.Failed, ", "), line.Replay)
		}
		metrics.Report(t, line)
	})
}

// Property runs the rapid model-vs-store property (harness.RunPropertyOn):
// one round of random sequences in a plain go test, rounds until
// LEASEHOLD_BUDGET is spent under leasehold verify. A failure keeps its
// failfile (under reports/failfiles; a Transient store's in the run's
// reports directory) and prints the seed and replay command.
func Property(t *testing.T, s Store) { harness.RunPropertyOn(t, s.target(t)) }

// Linearizability records concurrent histories and checks them against the
// model (harness.RunLinearizableOn). It needs hooks: without them it is not
// applicable.
func Linearizability(t *testing.T, s Store) { harness.RunLinearizableOn(t, s.target(t)) }

// Scenarios plays the scenario corpus (scenarios.RunCorpusOn); a scenario
// that holds an operation at a hook point is not applicable to a store
// without hooks.
func Scenarios(t *testing.T, s Store) { scenarios.RunCorpusOn(t, s.target(t)) }

// Runtime runs the worker runtime on the store and judges every call it
// makes (harness.RunRuntimeOn). It needs hooks (its faults are injected
// there); a store without batch completion is driven one completion at a
// time.
func Runtime(t *testing.T, s Store) { harness.RunRuntimeOn(t, s.target(t)) }

// All runs every check, each as a subtest: Conformance, Property,
// Linearizability, Scenarios, Runtime.
func All(t *testing.T, s Store) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, Store)
	}{{"Conformance", Conformance}, {"Property", Property}, {"Linearizability", Linearizability}, {"Scenarios", Scenarios},
		{"Runtime", Runtime}} {
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
}

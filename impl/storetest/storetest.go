// Package storetest is the conformance suite every leasehold store must pass,
// in the spirit of River's shared driver tests: a store's own test file calls
// Run with a Factory, and gets every contract test, with exact expected
// states, sequences and error codes.
//
// What a Factory must honour, because every expectation is computed from it:
//
//   - Options.Clock is the only source of "now" for every writing operation
//     (tests use a manual clock, set it to -1, near math.MaxInt64, and count
//     its reads: once per write, never for a read).
//   - Options.Random draws every retry jitter (tests script its values and
//     check the bound it is asked for).
//   - Options.Hook is called at spec.BeforeCommit and spec.AfterCommit of every
//     writing operation; an error from it must surface as the hook's error
//     (errors.Is) before commit, and as unknown_outcome after it.
//   - Handle.Exec runs one plain SQL statement, outside any transaction;
//     the suite's statements run unchanged on SQLite and PostgreSQL, written
//     for the store's Handle.Layout.
//   - Handle.Reopen returns a store with its own connections, for races.
//   - Handle.Caps declares what the store offers beyond spec.Store (hooks,
//     SQL, a database clock); spec.BatchCompleter and spec.Notifier are
//     found by type assertion. A test that needs a capability the store
//     does not offer is reported as not applicable (NotApplicable), never
//     run and never counted as a pass.
//
// Each test opens its own stores and, when it ends, checks the invariants of
// spec/SPEC.md on a Snapshot and that Snapshot agrees with the per-run reads.
// Tests are registered by the files of this package, one theme per file.
package storetest

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
)

// Options is what a test asks of a new store.
type Options struct {
	Config spec.Config
	Clock  clock.Clock
	Random spec.Random
	Hook   spec.Hook
}

// Handle is a freshly opened, empty, migrated store, plus raw SQL access to
// its database for the tests that check constraints in the database itself.
type Handle struct {
	Store spec.Store
	// Exec runs one SQL statement outside the contract. Statements the suite
	// passes are written for Layout and run unchanged on SQLite and
	// PostgreSQL.
	Exec func(ctx context.Context, query string) error
	// Reopen opens a second, independent Store (its own connections) on the
	// same database with the same options, for multi-connection tests.
	Reopen func(t testing.TB) spec.Store
	// OpenWith is Reopen with other options: each client of a concurrent
	// test gets its own clock recorder, random source and hook.
	OpenWith func(t testing.TB, opts Options) spec.Store
	// Layout says how the store's tables hold the contract's records, for
	// the schema tests, which write rows past the contract.
	Layout Layout
	// Caps declares the store's optional capabilities (see Capability).
	Caps Caps
}

// Layout is how a store's tables hold the contract's records. Both layouts
// share the tables' names and keys; what differs is where a run's state,
// its terminal event and its latest attempt are kept.
type Layout int

const (
	// LayoutTablePerRecord keeps every record of spec.Snapshot in its own
	// table: runs (with their state), run_events, jobs, attempts (SQLite),
	// except a run's run_queued event, which is its run row (migration
	// 0005): run_events holds the terminal events.
	LayoutTablePerRecord Layout = iota
	// LayoutJobRow keeps a run's state, its terminal event and its latest
	// attempt in its job row, so that claiming and completing a job write
	// one row (PostgreSQL, migration 0004): runs holds what admission
	// fixed and its run_queued event (migration 0007: there is no
	// run_events table), attempts the earlier attempts, and effects
	// reference their job.
	LayoutJobRow
)

// Factory opens a fresh store for one test, on a database of its own (the
// suite's tests run in parallel, see RunAll), and registers its cleanup
// with t.
type Factory func(t testing.TB, opts Options) Handle

// Run runs the whole conformance suite against the store f opens.
func Run(t *testing.T, f Factory) { RunAll(t, f, func(Summary) {}) }

// Summary is what one run of the suite found: the tests, by name, that
// passed, failed, and did not apply (they need a capability the store does
// not offer).
type Summary struct {
	Passed, Failed, NotApplicable []string
	// Skipped are tests that stopped for another reason (a factory that
	// found no database, say): neither passed nor not applicable.
	Skipped []string
}

// RunAll runs the whole conformance suite against the store f opens, each
// test as a subtest of t, and calls done with how each test ended once all
// have (from a cleanup of t).
//
// The subtests run in parallel (t.Parallel), as River's driver suite does,
// at most maxParallel at once: each opens its own stores from f, each on a
// database of its own (see Factory), with its own clock, so none can see
// another's rows or time. Parallel subtests start only when t's function
// returns: what they need from the caller must last until t's cleanups,
// not end with a defer. Every test of the suite allows it (none reads
// beyond its own stores or moves a clock it shares).
func RunAll(t *testing.T, f Factory, done func(Summary)) {
	ends := make([]ending, len(tests))
	t.Cleanup(func() { done(summarize(ends)) })
	slots := make(chan struct{}, maxParallel)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// First registered, so the last cleanup: it sees the
			// failures of the others (the invariant checks).
			t.Cleanup(func() { ends[i] = ended(t) })
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			tc.run(t, f)
		})
	}
}

// maxParallel bounds the suite's subtests running at once (besides go
// test's -parallel): each holds a few stores of a few connections, and a
// PostgreSQL server serves 100 by default, to every package under test.
const maxParallel = 4

// ending is how one test of the suite ended.
type ending int

const (
	endPassed ending = iota
	endFailed
	endNotApplicable
	endSkipped
)

// ended is how t ended, read from its last cleanup.
func ended(t *testing.T) ending {
	switch {
	case t.Failed():
		return endFailed
	case wasNotApplicable(t):
		return endNotApplicable
	case t.Skipped():
		return endSkipped
	}
	return endPassed
}

// summarize is the Summary of ends, each the ending of tests[i], in the
// order Run runs them.
func summarize(ends []ending) Summary {
	var s Summary
	for i, e := range ends {
		name := tests[i].name
		switch e {
		case endFailed:
			s.Failed = append(s.Failed, name)
		case endNotApplicable:
			s.NotApplicable = append(s.NotApplicable, name)
		case endSkipped:
			s.Skipped = append(s.Skipped, name)
		default:
			s.Passed = append(s.Passed, name)
		}
	}
	return s
}

// Names lists the suite's tests, in the order Run runs them.
func Names() []string {
	out := make([]string, len(tests))
	for i, tc := range tests {
		out[i] = tc.name
	}
	return out
}

type test struct {
	name string
	run  func(t *testing.T, f Factory)
}

var tests []test

// register adds a test to the suite; each test file registers its own in
// init. It runs in parallel with the others (RunAll), so it must touch
// nothing but the stores it opens from its Factory and what it makes
// itself (no process-wide setting, no shared clock).
func register(name string, run func(t *testing.T, f Factory)) {
	tests = append(tests, test{name: name, run: run})
}

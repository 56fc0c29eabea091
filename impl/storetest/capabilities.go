package storetest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Capability names something a store may offer beyond spec.Store. A check
// that needs one the store does not offer is not applicable: it is reported
// as such (NotApplicable), never run and never counted as a pass.
type Capability string

const (
	// CapHooks: the store calls Options.Hook at spec.BeforeCommit and
	// spec.AfterCommit of every writing operation (barriers and injected
	// faults). Declared in Handle.Caps.
	CapHooks Capability = "hooks"
	// CapSQL: Handle.Exec runs plain SQL on the store's database, whose
	// tables follow Handle.Layout (the schema tests). Declared in
	// Handle.Caps.
	CapSQL Capability = "sql"
	// CapDatabaseClock: the store can read "now" from its database instead
	// of Options.Clock (production). Declared in Handle.Caps; no portable
	// check needs it, since every check owns the clock.
	CapDatabaseClock Capability = "database_clock"
	// CapCompleteBatch: the store implements spec.BatchCompleter (the
	// operation table's complete_batch). Found by a type assertion.
	CapCompleteBatch Capability = "complete_batch"
	// CapNotifications: the store implements spec.Notifier. Found by a
	// type assertion.
	CapNotifications Capability = "notifications"
	// CapCreateRuns: the store implements spec.BatchCreator (the operation
	// table's create_runs, bulk admission). Found by a type assertion.
	CapCreateRuns Capability = "create_runs"
	// CapLockWaits: the store implements spec.LockWaitReporter (it can
	// say when one of its calls is blocked on a lock). Found by a type
	// assertion.
	CapLockWaits Capability = "lock_waits"
	// CapListRuns: the store implements spec.RunLister (the operation
	// table's list_runs). Found by a type assertion.
	CapListRuns Capability = "list_runs"
	// CapCreateRunTx: the store implements spec.TxAdmitter (the operation
	// table's create_run_tx, admission inside the application's
	// transaction). Found by a type assertion.
	CapCreateRunTx Capability = "create_run_tx"
)

// Capabilities lists every capability, in report order.
func Capabilities() []Capability {
	return []Capability{CapHooks, CapSQL, CapDatabaseClock, CapCompleteBatch, CapNotifications, CapCreateRuns, CapLockWaits, CapListRuns, CapCreateRunTx}
}

// Caps is what a store declares it offers, for the capabilities that a type
// assertion cannot find. The zero value declares nothing: a factory that
// does not say its store calls hooks gets none of the hook tests, reported
// as not applicable.
type Caps struct {
	// Hooks: Options.Hook is called at both hook points of every writing
	// operation; an error at BeforeCommit rolls the transaction back and is
	// returned wrapped (errors.Is finds it), one at AfterCommit is reported
	// as spec.CodeUnknownOutcome.
	Hooks bool
	// SQL: Exec is set and runs SQL written for Layout.
	SQL bool
	// DatabaseClock: the store can use its database's clock.
	DatabaseClock bool
}

// Has reports whether the handle's store offers c: declared in Caps, or
// implemented by Store.
func (h Handle) Has(c Capability) bool {
	switch c {
	case CapHooks:
		return h.Caps.Hooks
	case CapSQL:
		return h.Caps.SQL && h.Exec != nil
	case CapDatabaseClock:
		return h.Caps.DatabaseClock
	case CapCompleteBatch:
		_, ok := h.Store.(spec.BatchCompleter)
		return ok
	case CapNotifications:
		_, ok := h.Store.(spec.Notifier)
		return ok
	case CapCreateRuns:
		_, ok := h.Store.(spec.BatchCreator)
		return ok
	case CapLockWaits:
		_, ok := h.Store.(spec.LockWaitReporter)
		return ok
	case CapListRuns:
		_, ok := h.Store.(spec.RunLister)
		return ok
	case CapCreateRunTx:
		_, ok := h.Store.(spec.TxAdmitter)
		return ok
	}
	return false
}

// Offered lists the capabilities the handle's store offers, in report order.
func (h Handle) Offered() []Capability {
	var out []Capability
	for _, c := range Capabilities() {
		if h.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// NotApplicablePrefix starts the line a check logs when it does not apply
// to a store; `leasehold verify` lists such checks as not applicable rather
// than passed.
const NotApplicablePrefix = "NOT APPLICABLE: "

// NotApplicable reports that the running test (what it checks: what) needs
// capability c, which the store does not offer, and stops the test
// (t.Skip). The log line is NotApplicablePrefix, the test's full name, a
// colon and the reason, so that a log reader can tell a test that did not
// apply from one skipped for another reason.
func NotApplicable(t testing.TB, c Capability, what string) {
	t.Helper()
	notApplicable.Store(t.Name(), true)
	t.Skipf("%s%s: %s needs the %q capability, which the store does not offer", NotApplicablePrefix, t.Name(), what, c)
}

// notApplicable holds the names of the tests NotApplicable stopped.
var notApplicable sync.Map

// wasNotApplicable reports whether NotApplicable stopped t.
func wasNotApplicable(t testing.TB) bool {
	_, ok := notApplicable.Load(t.Name())
	return ok
}

// IsNotApplicable reports whether a test's output says it did not apply.
func IsNotApplicable(output string) bool { return strings.Contains(output, NotApplicablePrefix) }

// NoPostgreSQLPrefix starts the message of a test skipped because no
// PostgreSQL server was there (pgtest.DSN): `leasehold verify` lists such a
// test as not selected when the run did not select PostgreSQL (--store
// sqlite), and as skipped otherwise.
const NoPostgreSQLPrefix = "NO POSTGRESQL FOR THIS TEST: "

// IsNoPostgreSQL reports whether a test's output says it had no PostgreSQL.
func IsNoPostgreSQL(output string) bool { return strings.Contains(output, NoPostgreSQLPrefix) }

// Declared opens one store of f (under spec.DefaultConfig, with a hook, so
// that a store that offers hooks is asked for them), reads what it offers
// and closes it again. Checks that open many stores call it once, first, to
// decide whether they apply.
func Declared(t testing.TB, f Factory) []Capability {
	t.Helper()
	scope := &cleanupScope{TB: t}
	defer scope.close()
	h := f(scope, Options{Config: spec.DefaultConfig(), Clock: fixedClock(1), Random: zeroRandom{},
		Hook: func(context.Context, spec.Op, spec.HookPoint) error { return nil }})
	return h.Offered()
}

// Describe renders capabilities for logs: "hooks, complete_batch" or "none".
func Describe(cs []Capability) string {
	if len(cs) == 0 {
		return "none"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c)
	}
	return strings.Join(parts, ", ")
}

// Missing returns the capabilities of need that have does not list.
func Missing(have []Capability, need ...Capability) []Capability {
	var out []Capability
	for _, n := range need {
		found := false
		for _, h := range have {
			found = found || h == n
		}
		if !found {
			out = append(out, n)
		}
	}
	return out
}

// need stops the test as not applicable unless the env's store offers c.
func (e *env) need(c Capability) {
	e.t.Helper()
	if !e.h.Has(c) {
		NotApplicable(e.t, c, "this conformance test")
	}
}

// cleanupScope hands a factory a testing.TB whose cleanups run when close
// is called rather than when the test ends.
type cleanupScope struct {
	testing.TB
	cleanups []func()
}

func (s *cleanupScope) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *cleanupScope) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

type fixedClock int64

func (c fixedClock) Now() int64 { return int64(c) }

type zeroRandom struct{}

func (zeroRandom) Int64N(int64) int64 { return 0 }

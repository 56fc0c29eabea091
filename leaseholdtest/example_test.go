package leaseholdtest_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// myFactory opens a fresh store per call: here leasehold's SQLite store on
// a file of the test's own, with every option the checks pass; yours opens
// your store. Reopen and OpenWith open more clients of the same database
// (the linearizability run gives each client its own). Caps declares what
// the store offers beyond spec.Store.
func myFactory(t testing.TB, opts leaseholdtest.Options) leaseholdtest.Handle {
	path := filepath.Join(t.TempDir(), "jobs.db")
	open := func(t testing.TB, o leaseholdtest.Options) *sqlite.Store {
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: o.Hook})
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return leaseholdtest.Handle{
		Store:    open(t, opts),
		Reopen:   func(t testing.TB) leaseholdtest.Contract { return open(t, opts) },
		OpenWith: func(t testing.TB, o leaseholdtest.Options) leaseholdtest.Contract { return open(t, o) },
		Caps:     leaseholdtest.Caps{Hooks: true},
	}
}

// The whole proof on a store of yours, from a test of yours: conformance,
// the rapid property, linearizability, the scenarios and the worker runtime,
// each a subtest. `go test` runs a short round; LEASEHOLD_BUDGET=10m runs
// longer. A failure prints the command that replays it.
func ExampleAll() {
	testMyStore := func(t *testing.T) {
		leaseholdtest.All(t, leaseholdtest.Store{Name: "mystore", Factory: myFactory})
	}
	_ = testMyStore // in your code: func TestMyStore(t *testing.T) { … }
}

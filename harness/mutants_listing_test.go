//go:build leasehold_mutants

package harness

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
)

// TestListingMutants proves the listing's conformance tests bite: with each
// broken listing of package mutant (Listing) switched on, on SQLite and on
// PostgreSQL, the listing tests must fail, and the one each is written for
// must be among those that do. A listing that pages by OFFSET is exact
// while nothing is admitted between its pages: the test that admits while
// it pages must catch it (the sequential tests catch it too, through the
// cursors they make themselves, which such a listing reads as offset 0).
// The rapid property, whose list_runs action compares every page with the
// model's, must catch each on SQLite too.
func TestListingMutants(t *testing.T) {
	mustCatch := map[string]string{
		mutant.ListIgnoresTenant:   "ListRunsTenantIsolation",
		mutant.ListCursorSkipsTies: "ListRuns",
		mutant.ListByOffset:        "ListRunsUnderConcurrentAdmission",
	}
	for _, store := range []struct {
		name    string
		factory func(t *testing.T) storetest.Factory
	}{
		{"sqlite", func(*testing.T) storetest.Factory { return sqlitetest.Factory }},
		{"postgres", func(t *testing.T) storetest.Factory { pgtest.DSN(t); return pgtest.Factory }},
	} {
		t.Run(store.name, func(t *testing.T) {
			f := store.factory(t)
			if store.name == "sqlite" {
				t.Run("rapid", func(t *testing.T) { listingMutantsRapid(t) })
			}
			for _, name := range mutant.Listing {
				t.Run(name, func(t *testing.T) {
					defer mutant.Set(name)()
					var caught []string
					for _, lt := range storetest.ListingTests {
						c := &catchTB{TB: t}
						t.Run(lt.Name, func(t *testing.T) {
							c.TB = t
							c.run(func() { lt.Run(c, f) })
						})
						if c.skipped != "" {
							t.Fatalf("%s did not run: %s", lt.Name, c.skipped)
						}
						if c.first != "" {
							caught = append(caught, lt.Name)
							t.Logf("%s caught by %s: %s", name, lt.Name, firstLines(c.first, 2))
						}
					}
					want := mustCatch[name]
					if !strings.Contains(" "+strings.Join(caught, " ")+" ", " "+want+" ") {
						t.Fatalf("mutant %s on %s was not caught by %s (caught by: %v)", name, store.name, want, caught)
					}
				})
			}
		})
	}
}

// listingMutantsRapid runs the rapid property on SQLite with each broken
// listing; each must fail it (no failfile is kept: the conformance tests
// above are the listing's regression).
func listingMutantsRapid(t *testing.T) {
	longerSequences()
	if f := flag.Lookup("rapid.nofailfile"); f != nil {
		old := f.Value.String()
		flag.Set("rapid.nofailfile", "true")
		defer flag.Set("rapid.nofailfile", old)
	}
	if f := flag.Lookup("rapid.shrinktime"); f != nil && f.Value.String() == f.DefValue {
		flag.Set("rapid.shrinktime", "1s")
		defer flag.Set("rapid.shrinktime", f.DefValue)
	}
	for _, name := range mutant.Listing {
		t.Run(name, func(t *testing.T) {
			defer mutant.Set(name)()
			// A round is 100 sequences; a listing is a few actions of each,
			// so a round may miss a boundary inside a tie: up to three.
			p := &Property{Factory: sqlitetest.Factory, Config: TestConfig()}
			for round := 1; round <= 3 && p.FirstFailure == nil; round++ {
				capture := NewCaptureTB(t.Name())
				capture.Run(func() { rapid.Check(capture, p.Check(t)) })
			}
			if p.FirstFailure == nil {
				t.Fatalf("mutant %s survived %d operations over %d sequences of the rapid property", name, p.Counters.Operations, p.Counters.Checks)
			}
			t.Logf("mutant %s caught by the rapid property after %d operations: %s", name, p.FirstFailure.Operations, firstLines(p.FirstFailure.Message, 1))
		})
	}
}

// catchTB is a testing.TB that records failures instead of failing the test
// it wraps (which still gives it its temporary directories, cleanups and
// log). Fatal and Skip end the calling goroutine, so run calls into it.
type catchTB struct {
	testing.TB
	mu      sync.Mutex
	first   string // the first failure
	skipped string
}

func (c *catchTB) record(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first == "" {
		c.first = msg
	}
}

func (c *catchTB) Helper()                           {}
func (c *catchTB) Fail()                             { c.record("failed") }
func (c *catchTB) Failed() bool                      { c.mu.Lock(); defer c.mu.Unlock(); return c.first != "" }
func (c *catchTB) Error(args ...any)                 { c.record(fmt.Sprint(args...)) }
func (c *catchTB) Errorf(format string, args ...any) { c.record(fmt.Sprintf(format, args...)) }
func (c *catchTB) FailNow()                          { c.Fail(); runtime.Goexit() }
func (c *catchTB) Fatal(args ...any)                 { c.Error(args...); runtime.Goexit() }
func (c *catchTB) Fatalf(format string, args ...any) { c.Errorf(format, args...); runtime.Goexit() }
func (c *catchTB) SkipNow()                          { c.skip("skipped") }
func (c *catchTB) Skip(args ...any)                  { c.skip(fmt.Sprint(args...)) }
func (c *catchTB) Skipf(format string, args ...any)  { c.skip(fmt.Sprintf(format, args...)) }

func (c *catchTB) skip(msg string) {
	c.mu.Lock()
	c.skipped = msg
	c.mu.Unlock()
	runtime.Goexit()
}

// run calls f on a goroutine of its own and waits for it.
func (c *catchTB) run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

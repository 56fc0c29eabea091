//go:build leasehold_mutants

package harness

import (
	"flag"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
)

// TestMutants proves the property bites: each deliberately broken SQLite
// store (impl/sqlite/mutants.go) must be caught by the rapid model-vs-store
// property within one rapid round (100 sequences). A mutant that survives
// fails this test. The failing case is kept under reports/failfiles with a
// replay command (expected to fail: it reproduces the mutant's bug).
func TestMutants(t *testing.T) {
	// Shrinking only shortens the report; cap it so five mutants stay quick.
	if f := flag.Lookup("rapid.shrinktime"); f != nil && f.Value.String() == f.DefValue {
		flag.Set("rapid.shrinktime", "5s")
		defer flag.Set("rapid.shrinktime", f.DefValue)
	}
	for _, name := range sqlite.Mutants {
		t.Run(name, func(t *testing.T) {
			restore := sqlite.SetMutant(name)
			defer restore()
			p := &Property{Factory: sqlitetest.Factory, Config: TestConfig()}
			capture := NewCaptureTB(t.Name())
			start := time.Now()
			capture.Run(func() { rapid.Check(capture, p.Check(t)) })
			if !capture.Failed() || p.FirstFailure == nil {
				t.Fatalf("mutant %s survived %d operations over %d sequences: the property does not detect it", name, p.Counters.Operations, p.Counters.Checks)
			}
			f := p.FirstFailure
			t.Logf("mutant %s caught after %d operations in %s (then shrunk; %s in all)\n%s",
				name, f.Operations, f.Elapsed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), firstLines(f.Message, 4))
			k, err := KeepFailfile(t.Name(), start, Kept{Test: "TestMutantReplay", Tags: "leasehold_mutants",
				Env: map[string]string{"LEASEHOLD_MUTANT": name}, Expect: "fail"})
			if err != nil {
				t.Fatalf("keep the mutant's failfile: %v", err)
			}
			t.Logf("seed %s; replay: %s", k.Seed, k.Command)
			ReportMetrics(t, Metrics{Check: "mutant/" + name, Store: "sqlite", Operations: int64(f.Operations)})
		})
	}
}

// TestMutantReplay replays a kept mutant failfile (see TestMutants) with the
// mutant named by LEASEHOLD_MUTANT switched on. It fails when the failfile
// still reproduces the mutant's bug, which is what `leasehold replay` expects.
func TestMutantReplay(t *testing.T) {
	name := os.Getenv("LEASEHOLD_MUTANT")
	if name == "" {
		t.Skip("set LEASEHOLD_MUTANT and -rapid.failfile to replay a kept mutant failfile (leasehold replay does both)")
	}
	defer sqlite.SetMutant(name)()
	p := &Property{Factory: sqlitetest.Factory, Config: TestConfig()}
	rapid.Check(t, p.Check(t))
}

func firstLines(s string, n int) string {
	lines := 0
	for i, r := range s {
		if r == '\n' {
			lines++
			if lines == n {
				return s[:i]
			}
		}
	}
	return s
}

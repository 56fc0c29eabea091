//go:build leasehold_mutants

package harness

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/model"
)

// TestMutants proves the property bites: each deliberately broken SQLite
// store (package mutant) must be caught by the rapid model-vs-store
// property within one rapid round (100 sequences). A mutant that survives
// fails this test. The failing case is kept under reports/failfiles with a
// replay command (expected to fail: it reproduces the mutant's bug).
func TestMutants(t *testing.T) {
	longerSequences()
	// Shrinking only shortens the report: a mutant is caught at its first
	// failure (p.FirstFailure), and the kept failfile reproduces it shrunk or
	// not. Cap it so the mutants stay quick; -rapid.shrinktime or
	// RAPID_SHRINKTIME asks for a shorter report.
	if f := flag.Lookup("rapid.shrinktime"); f != nil && f.Value.String() == f.DefValue && os.Getenv("RAPID_SHRINKTIME") == "" {
		flag.Set("rapid.shrinktime", "1s")
		defer flag.Set("rapid.shrinktime", f.DefValue)
	}
	for _, name := range mutant.Names {
		t.Run(name, func(t *testing.T) {
			restore := mutant.Set(name)
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
			k, err := report.KeepFailfile(t.Name(), start, report.Kept{Actions: ActionsVersion(), Test: "TestMutantReplay", Tags: "leasehold_mutants",
				Env: map[string]string{"LEASEHOLD_MUTANT": name}, Expect: "fail"})
			if err != nil {
				t.Fatalf("keep the mutant's failfile: %v", err)
			}
			t.Logf("%s\nkept failfile (seed %s), replays with: %s", reproduceLine(capture.Output()), k.Seed, k.Command)
			metrics.Report(t, metrics.Line{Check: "mutant/" + name, Store: "sqlite", Operations: int64(f.Operations)})
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
	defer mutant.Set(name)()
	longerSequences()
	p := &Property{Factory: sqlitetest.Factory, Config: TestConfig()}
	rapid.Check(t, p.Check(t))
}

// reproduceLine returns rapid's "To reproduce" line (this run's seed).
func reproduceLine(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "To reproduce") {
			return strings.TrimSpace(line)
		}
	}
	return "(rapid printed no reproduce line)"
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

// TestMutantsLinearizability: every SQLite mutant must also be caught by the
// concurrent layer — the porcupine check or the accounting — within
// linHistories histories. The schedule of a concurrent history is not the
// seed's alone: a mutant that needs a stale write (batch_ignores_generation
// needs a batch completion after its lease was reclaimed) can go
// unexercised by several histories in a row (bench/findings.md, "Figures
// behind the store's comments"); a history is short, and a caught mutant
// stops at once.
func TestMutantsLinearizability(t *testing.T) {
	const linHistories = 20
	for _, name := range mutant.Names {
		t.Run(name, func(t *testing.T) {
			defer mutant.Set(name)()
			for seed := uint64(1); seed <= linHistories; seed++ {
				w := Workload{Factory: sqlitetest.Factory, Config: TestConfig(), Seed: seed, Tenants: []string{"t1", "t2"},
					Workers: 3, APIs: 2, Ops: 1500, MaxUnknown: 1}
				scope := &scopedTB{TB: t}
				h, err := w.Record(t.Context(), scope)
				if err != nil {
					// A mutant may also break the workload itself (a drain that
					// never finishes because jobs are stranded): that is caught.
					scope.close()
					t.Logf("mutant %s caught by the workload on seed %d: %v", name, seed, err)
					return
				}
				v := validate.Judge(model.Model{Config: w.Config}, h, validate.Judgement{Partition: true, Timeout: hang.PhasePatience(), Drained: true})
				scope.close()
				if v.Violations() > 0 {
					t.Logf("mutant %s caught on seed %d after %d operations: linearizability %s, accounting %q",
						name, seed, len(h.Entries), v.Linearizable, firstN(v.Accounting, 2))
					return
				}
			}
			t.Fatalf("mutant %s survived %d concurrent histories", name, linHistories)
		})
	}
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestMutantsRuntime: the mutants that break what the worker runtime
// publishes must be caught by the runtime run (the model judging the
// runtime's store calls), within three runs each (seeds 1 to 3, or the one
// LEASEHOLD_SEED pins: the replay command of a caught run's history).
func TestMutantsRuntime(t *testing.T) {
	first, pinned := FirstSeed(t)
	last := first
	if !pinned {
		first, last = 1, 3
	}
	for _, name := range []string{mutant.CompleteIgnoresGeneration, mutant.BatchIgnoresGeneration, mutant.ClaimIgnoresExpired} {
		t.Run(name, func(t *testing.T) {
			defer mutant.Set(name)()
			for seed := first; seed <= last; seed++ {
				if r := runtimeOnce(t, Target{Name: "sqlite", Factory: sqlitetest.Factory}, seed); r.failure != "" {
					t.Logf("mutant %s caught by the runtime run on seed %d: %s", name, seed, firstLines(r.failure, 3))
					return
				}
			}
			t.Fatalf("mutant %s survived %d runtime runs (seeds %d to %d)", name, last-first+1, first, last)
		})
	}
}

// TestMutantsCoalescedAdmissions proves that TestCoalescedAdmissionsLinearizable
// judges the bulk admissions coalesced CreateRun calls become: with
// bulk_ignores_fingerprint, which breaks a bulk admission's members and not
// CreateRun alone, its check must fail.
func TestMutantsCoalescedAdmissions(t *testing.T) {
	restore := mutant.Set(mutant.BulkIgnoresFingerprint)
	defer restore()
	seed, _ := FirstSeed(t)
	failure, _ := coalescedAdmissions(t, seed)
	if failure == "" {
		t.Fatalf("mutant %s survived the coalesced admissions' check (seed %d)", mutant.BulkIgnoresFingerprint, seed)
	}
	t.Logf("mutant %s caught (seed %d): %s", mutant.BulkIgnoresFingerprint, seed, firstLines(failure, 2))
}

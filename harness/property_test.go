package harness

import (
	"flag"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
)

func TestPropertySQLite(t *testing.T) { runProperty(t, "sqlite", sqlitetest.Factory) }

func TestPropertyPostgres(t *testing.T) {
	pgtest.DSN(t) // skip loudly (or fail under CI) before any rapid machinery runs
	runProperty(t, "postgres", pgtest.Factory)
}

// runProperty runs the model-vs-store property: one rapid round (100 random
// sequences, 20 under -short) in a plain go test, or rounds until the
// LEASEHOLD_BUDGET is spent under leasehold verify. A failure keeps its
// failfile under reports/failfiles and prints the seed and the replay command.
func runProperty(t *testing.T, store string, f storetest.Factory) {
	p := &Property{Factory: f, Config: TestConfig()}
	budget := Budget(t, 0)
	start := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		k, err := KeepFailfile(t.Name(), start, Kept{Test: t.Name(), Expect: "pass"})
		if err != nil {
			t.Logf("could not keep the failfile: %v", err)
			return
		}
		t.Logf("seed %s; failfile kept at %s\nreplay: %s\n   or: make replay FILE=%s", k.Seed, k.File, k.Command, k.File)
	})
	rounds := 0
	for {
		rapid.Check(t, p.Check(t))
		rounds++
		if budget == 0 || seedPinned() || time.Since(start)*time.Duration(rounds+1) > budget*time.Duration(rounds) {
			break
		}
	}
	t.Logf("%d rounds, %d sequences, %d operations (%d refused, %d stale-generation writes) in %s",
		rounds, p.Counters.Checks, p.Counters.Operations, p.Counters.Refused, p.Counters.StaleWrite, time.Since(start).Round(time.Millisecond))
	t.Logf("outcomes: %v", p.Counters.Outcomes)
	if p.Counters.StaleWrite == 0 || p.Counters.Refused == 0 || p.Counters.Operations == p.Counters.Refused {
		t.Fatalf("vacuous run: %+v (want stale-generation writes, refusals and successes)", p.Counters)
	}
	metrics.Report(t, metrics.Line{Check: "rapid", Store: store, Operations: int64(p.Counters.Operations)})
}

// seedPinned reports a replay of one seed or failfile: run one round only.
func seedPinned() bool {
	for _, name := range []string{"rapid.seed", "rapid.failfile"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != f.DefValue {
			return true
		}
	}
	return os.Getenv("RAPID_SEED") != "" || os.Getenv("RAPID_FAILFILE") != ""
}

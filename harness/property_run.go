package harness

import (
	"flag"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
)

// RunProperty runs the model-vs-store property on the store f opens: one
// rapid round (100 random sequences of 80 steps, unless -rapid.checks,
// -rapid.steps or their RAPID_* twins say otherwise) in a plain go test, or
// rounds until LEASEHOLD_BUDGET is spent under leasehold verify. A failure
// keeps its failfile under reports/failfiles and prints the seed and the
// replay command (go test -run with the calling test's name); a run that
// exercised no stale write, no refusal or no success fails as vacuous. It
// reports its figures on a metrics line. Any store that passes storetest can
// be checked this way; store names the store in reports.
func RunProperty(t *testing.T, store string, f storetest.Factory) {
	RunPropertyOn(t, Target{Name: store, Factory: f})
}

// RunPropertyOn is RunProperty on a Target: its replay command carries the
// target's environment and build tags.
func RunPropertyOn(t *testing.T, target Target) {
	longerSequences()
	p := &Property{Factory: target.Factory, Config: TestConfig()}
	store := target.Name
	budget := Budget(t, 0)
	start := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		k, err := KeepFailfile(t.Name(), start, Kept{Test: t.Name(), Store: store, Expect: "pass", Env: target.Env, Tags: target.Tags,
			Transient: target.Transient})
		if err != nil {
			t.Logf("could not keep the failfile: %v", err)
			return
		}
		t.Logf("seed %s; failfile kept at %s\nreplay: %s\n   or: make replay FILE=%s", k.Seed, k.File, k.Command, k.File)
		metrics.Report(t, metrics.Line{Check: "rapid", Store: store, Operations: int64(p.Counters.Operations), Violations: 1,
			Seed: k.Seed, Replay: k.Command})
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
	if batches := p.Counters.Outcomes["complete_batch ok"]; batches > 0 && (p.Counters.Outcomes["complete_batch member ok"] == 0 ||
		p.Counters.Outcomes["complete_batch member lost_lease"] == 0) {
		t.Fatalf("vacuous run: %d batch completions, but none completed a member and refused another: %v", batches, p.Counters.Outcomes)
	}
	if o := p.Counters.Outcomes; o["create_runs ok"] > 0 && !seedPinned() && (o["create_runs member created"] == 0 ||
		o["create_runs member replayed"] == 0 || o["create_runs member idempotency_conflict"] == 0) {
		t.Fatalf("vacuous run: %d bulk admissions, but none created, replayed and conflicted members: %v", o["create_runs ok"], o)
	}
	if o := p.Counters.Outcomes; !seedPinned() && (o["outbox written"] == 0 || o["outbox none written"] == 0 || o["claim_outbox ok"] == 0 || o["mark_delivered ok"] == 0) {
		t.Fatalf("vacuous run: the outbox needs requests with messages written and refused, claims that took messages and marks that marked some: %v", o)
	}
	metrics.Report(t, metrics.Line{Check: "rapid", Store: store, Operations: int64(p.Counters.Operations)})
}

// longerSequences sets rapid's sequences to 80 steps unless the caller
// chose: the races worth finding need a claim, an expiry and a reclaim
// first, and rapid's default of 30 steps is too short for them.
func longerSequences() {
	if fl := flag.Lookup("rapid.steps"); fl != nil && fl.Value.String() == fl.DefValue && os.Getenv("RAPID_STEPS") == "" {
		flag.Set("rapid.steps", "80")
	}
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

package harness

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
)

// RunProperty runs the model-vs-store property on the store f opens: one
// rapid round (100 random sequences of 80 steps, unless -rapid.checks,
// -rapid.steps or their RAPID_* twins say otherwise) in a plain go test, or
// under leasehold verify rounds of a tenth of those sequences until
// LEASEHOLD_BUDGET is spent, and past it only while the run is vacuous, up
// to a plain run's sequences. A failure
// keeps its failfile (keptIn) and prints the seed and the
// replay command (go test -run with the calling test's name); a run that
// exercised no stale write, no refusal or no success fails as vacuous (no
// failfile: it prints the command that runs the test again). It
// reports its figures to verify (package metrics). Any store that passes storetest can
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
	rapidPinned := seedPinned() // before this run sets rapid's seed
	seed, leaseholdPinned := FirstSeed(t)
	pinned := rapidPinned || leaseholdPinned
	replay := report.TestCommand(withSeed(target.Env, seed), target.Tags, t.Name())
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		k, err := report.KeepFailfile(t.Name(), start, report.Kept{Actions: ActionsVersion(), Test: t.Name(), Store: store, Expect: "pass", Env: target.Env, Tags: target.Tags,
			Transient: target.Transient})
		if err != nil {
			// A vacuous run fails with no failfile: vacuity is judged over
			// all its sequences, so the replay is the whole test again.
			again := report.TestCommand(target.Env, target.Tags, t.Name())
			t.Logf("no failfile to keep (%v); run it again: %s", err, again)
			metrics.Report(t, metrics.Line{Check: "rapid", Store: store, Operations: int64(p.Counters.Operations), Violations: 1, Replay: again})
			return
		}
		t.Logf("seed %s; failfile kept at %s\nreplay: %s\n   or: make replay FILE=%s", k.Seed, k.File, k.Command, k.File)
		metrics.Report(t, metrics.Line{Check: "rapid", Store: store, Operations: int64(p.Counters.Operations), Violations: 1,
			Seed: k.Seed, Replay: k.Command})
	})
	// Under a budget a round is a slice of a plain run's sequences, so that
	// a small budget buys a few short rounds rather than one long one; the
	// rounds go on past the budget only while the run is still vacuous,
	// and never past a plain run's sequences (what the vacuity guard was
	// set for).
	full := rapidChecks()
	slice := full
	if budget > 0 && !pinned {
		slice = max(1, full/propertySlices)
		defer setRapidChecks(full)
		setRapidChecks(slice)
	}
	// Each round starts from a seed of its own, derived from the run's
	// (roundSeed), unless rapid's own flags pinned one: LEASEHOLD_SEED=seed
	// replays the first round, and a failing round prints its own
	// -rapid.seed and keeps its failfile.
	ownSeed := !rapidPinned
	if ownSeed {
		defer setRapidSeed(0)
	}
	r := newRounds(budget, pinned)
	for i := 0; ; i++ {
		if ownSeed {
			setRapidSeed(roundSeed(seed, i))
		}
		rapid.Check(t, p.Check(t))
		vacuous := len(propertyVacuity(p.Counters, pinned)) > 0
		if !r.next(budget > 0 && !pinned && vacuous && p.Counters.Checks < full) {
			break
		}
	}
	t.Logf("%d rounds of %d sequences (%d of them the least this run does), %d sequences, %d operations (%d refused, %d stale-generation writes), seed %d, in %s",
		r.done, slice, r.min(), p.Counters.Checks, p.Counters.Operations, p.Counters.Refused, p.Counters.StaleWrite, seed, time.Since(start).Round(time.Millisecond))
	t.Logf("outcomes: %v", p.Counters.Outcomes)
	for _, problem := range propertyVacuity(p.Counters, pinned) {
		t.Fatalf("vacuous run: %s", problem)
	}
	metrics.Report(t, metrics.Line{Check: "rapid", Store: store, Operations: int64(p.Counters.Operations), Sequences: int64(p.Counters.Checks),
		Rounds: int64(r.done), MinRounds: r.min(), Seed: strconv.FormatUint(seed, 10), Replay: replay})
}

// propertySlices is how many rounds a plain run's sequences make under a
// budget.
const propertySlices = 10

// propertyVacuity returns why a property run proved nothing, if it did
// not: it exercised no stale write, no refusal or no success, or an
// operation kind only without the outcomes that make it worth checking.
// A pinned seed (a replay) is held to the first three only.
func propertyVacuity(c Counters, pinned bool) []string {
	var out []string
	if c.StaleWrite == 0 || c.Refused == 0 || c.Operations == c.Refused {
		out = append(out, fmt.Sprintf("%+v (want stale-generation writes, refusals and successes)", c))
	}
	o := c.Outcomes
	if batches := o["complete_batch ok"]; batches > 0 && (o["complete_batch member ok"] == 0 || o["complete_batch member lost_lease"] == 0) {
		out = append(out, fmt.Sprintf("%d batch completions, but none completed a member and refused another: %v", batches, o))
	}
	if o["create_runs ok"] > 0 && !pinned && (o["create_runs member created"] == 0 ||
		o["create_runs member replayed"] == 0 || o["create_runs member idempotency_conflict"] == 0) {
		out = append(out, fmt.Sprintf("%d bulk admissions, but none created, replayed and conflicted members: %v", o["create_runs ok"], o))
	}
	if o["create_run_tx ok"] > 0 && !pinned && (o["create_run_tx rollback=false ok"] == 0 || o["create_run_tx rollback=true ok"] == 0 ||
		o["create_run_tx idempotency_conflict"] == 0) {
		out = append(out, fmt.Sprintf("%d admissions in transactions, but none committed, rolled back and conflicted: %v", o["create_run_tx ok"], o))
	}
	if !pinned && (o["outbox written"] == 0 || o["outbox none written"] == 0 || o["claim_outbox ok"] == 0 || o["mark_delivered ok"] == 0) {
		out = append(out, fmt.Sprintf("the outbox needs requests with messages written and refused, claims that took messages and marks that marked some: %v", o))
	}
	return out
}

// rapidChecks is rapid's sequences per Check: -rapid.checks, else
// RAPID_CHECKS, else rapid's default.
func rapidChecks() int {
	if fl := flag.Lookup("rapid.checks"); fl != nil {
		if n, err := strconv.Atoi(fl.Value.String()); err == nil && n > 0 {
			return n
		}
	}
	return 100
}

// roundSeed is the rapid seed of round i of a property run that starts
// from seed: seed itself for the first, then steps of the golden ratio
// (far apart: rapid seeds a round's sequences seed, seed+1, seed+3, ...),
// never 0 (which rapid takes for "pick one").
func roundSeed(seed uint64, i int) uint64 {
	s := seed + uint64(i)*0x9e3779b97f4a7c15
	if s == 0 {
		s = 1
	}
	return s
}

// setRapidSeed sets rapid's seed for the next Check (0: rapid picks one).
func setRapidSeed(seed uint64) {
	if flag.Lookup("rapid.seed") != nil {
		flag.Set("rapid.seed", strconv.FormatUint(seed, 10))
	}
}

func setRapidChecks(n int) {
	if flag.Lookup("rapid.checks") != nil {
		flag.Set("rapid.checks", strconv.Itoa(n))
	}
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

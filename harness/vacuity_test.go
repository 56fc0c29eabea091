package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// TestLinVacuity: a linearizability run is vacuous, and says why, when a
// race of linRaces never happened or it lacks bulk admissions (from a store
// that admits in bulk), outbox deliveries and refusals, or scheduled runs and
// purges.
func TestLinVacuity(t *testing.T) {
	all := validate.Races{}
	for _, race := range linRaces {
		all[race] = 1
	}
	noUnknown := validate.Races{}
	for _, race := range linRaces {
		if race != validate.RaceUnknownOutcome {
			noUnknown[race] = 1
		}
	}
	type counts struct {
		bulk, delivered, refused, scheduled, purged int64
		tx                                          txCounts
	}
	full := counts{1, 1, 1, 1, 1, txCounts{1, 1, 1}}
	for _, tc := range []struct {
		name    string
		races   validate.Races
		bulkCap bool
		c       counts
		want    []string // one substring per problem
	}{
		{"everything happened", all, true, full, nil},
		{"no admission in a transaction rolled back", all, true, counts{1, 1, 1, 1, 1, txCounts{1, 0, 1}}, []string{"0 rolled back"}},
		{"no unknown outcome (a purge history)", noUnknown, true, full, []string{"no unknown_outcome"}},
		{"no purge (a split history)", all, true, counts{1, 1, 1, 1, 0, full.tx}, []string{"0 runs purged"}},
		{"no bulk admission, store admits in bulk", all, true, counts{0, 1, 1, 1, 1, full.tx}, []string{"no bulk admission"}},
		{"no bulk admission, store does not", all, false, counts{0, 1, 1, 1, 1, full.tx}, nil},
		{"no outbox refusal", all, true, counts{1, 1, 0, 1, 1, full.tx}, []string{"0 writes with messages refused"}},
		{"nothing", validate.Races{}, true, counts{}, []string{"no stale_write_refused", "no lease_reclaimed", "no cancel_vs_finish",
			"no unknown_outcome", "no admission_vs_purge", "no bulk admission", "outbox", "admissions in transactions", "scheduled"}},
		{"no admission raced a purge", func() validate.Races {
			r := validate.Races{}
			r.Add(all)
			r[validate.RaceAdmissionVsPurge] = 0
			return r
		}(), true, full, []string{"no admission_vs_purge"}},
	} {
		got := linVacuity(tc.races, 1, 7, tc.c.bulk, tc.bulkCap, tc.c.delivered, tc.c.refused, tc.c.scheduled, tc.c.purged, tc.c.tx, tc.bulkCap)
		wantProblems(t, tc.name, got, tc.want)
	}
}

// TestRuntimeVacuity: a runtime run is vacuous, and says why, when a race of
// runtimeRaces never happened, or it lacks housekeeping, a completion, a lost
// lease, a purged run or, from a store that completes in batches, a batch
// and a batch held past its lease; while it is, the run records another
// history (up to runtimeMaxHistories).
func TestRuntimeVacuity(t *testing.T) {
	all := validate.Races{}
	for _, race := range runtimeRaces {
		all[race] = 1
	}
	full := worker.Stats{Reaped: 1, Completed: 1, Lost: 1, PurgedRuns: 1, Batches: 1}
	heldBatch := map[string]int64{"pause_before_" + string(spec.OpCompleteBatch): 1}
	noBatches := full
	noBatches.Batches = 0
	for _, tc := range []struct {
		name    string
		races   validate.Races
		stats   worker.Stats
		byKind  map[string]int64
		batches bool
		want    []string // one substring per problem
	}{
		{"everything happened", all, full, heldBatch, true, nil},
		{"no batch, store completes in batches", all, noBatches, heldBatch, true, []string{"no batch of completions"}},
		{"no batch, store does not", all, noBatches, nil, false, nil},
		{"no held batch", all, full, nil, true, []string{"held past its lease"}},
		{"nothing", validate.Races{}, worker.Stats{}, nil, true, []string{"no lease_reclaimed", "no stale_write_refused", "no fault_rolled_back",
			"housekeeping", "completed run", "lost lease", "purged", "batch of completions", "held past"}},
	} {
		got := runtimeVacuity(tc.races, tc.stats, tc.byKind, tc.batches)
		wantProblems(t, tc.name, got, tc.want)
	}
}

// wantProblems fails unless got holds exactly one problem per entry of
// want, in order, each mentioning its entry.
func wantProblems(t *testing.T, name string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d problems %q, want %d", name, len(got), got, len(want))
		return
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("%s: problem %d is %q, want it to mention %q", name, i, got[i], w)
		}
	}
}

// TestPropertyVacuity: a property run is vacuous, and says why, without
// stale writes, refusals or successes, or with batch completions, bulk
// admissions or outbox requests that lack the outcomes worth checking.
func TestPropertyVacuity(t *testing.T) {
	healthy := func() Counters {
		return Counters{Operations: 10, Refused: 3, StaleWrite: 2, Outcomes: map[string]int{
			"complete_batch ok": 1, "complete_batch member ok": 1, "complete_batch member lost_lease": 1,
			"create_runs ok": 1, "create_runs member created": 1, "create_runs member replayed": 1, "create_runs member idempotency_conflict": 1,
			"outbox written": 1, "outbox none written": 1, "claim_outbox ok": 1, "mark_delivered ok": 1,
			"create_run_tx ok": 2, "create_run_tx rollback=false ok": 1, "create_run_tx rollback=true ok": 1, "create_run_tx idempotency_conflict": 1,
		}}
	}
	for _, tc := range []struct {
		name   string
		change func(*Counters)
		want   string // a substring of the one problem; "" for none
	}{
		{"everything happened", func(*Counters) {}, ""},
		{"no stale write", func(c *Counters) { c.StaleWrite = 0 }, "want stale-generation writes"},
		{"no refusal", func(c *Counters) { c.Refused = 0 }, "want stale-generation writes"},
		{"only refusals", func(c *Counters) { c.Operations = c.Refused }, "want stale-generation writes"},
		{"batches without a refused member", func(c *Counters) { delete(c.Outcomes, "complete_batch member lost_lease") }, "batch completions"},
		{"no batch at all", func(c *Counters) {
			delete(c.Outcomes, "complete_batch ok")
			delete(c.Outcomes, "complete_batch member ok")
			delete(c.Outcomes, "complete_batch member lost_lease")
		}, ""},
		{"bulk admissions without a replayed member", func(c *Counters) { delete(c.Outcomes, "create_runs member replayed") }, "bulk admissions"},
		{"admissions in transactions that never roll back", func(c *Counters) { delete(c.Outcomes, "create_run_tx rollback=true ok") }, "admissions in transactions"},
		{"no outbox delivery", func(c *Counters) { delete(c.Outcomes, "mark_delivered ok") }, "the outbox needs"},
	} {
		c := healthy()
		tc.change(&c)
		got := propertyVacuity(c, false)
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s: vacuous: %v", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s: problems %q, want one about %q", tc.name, got, tc.want)
		}
	}
}

// TestRounds: an exploring test runs another round while its budget has
// room for one as long as the average so far (one the budget buys), and
// while one is forced (its minimum, its vacuity rules) whatever the budget;
// a plain run or a pinned seed buys none. The rounds it would have run at
// any budget are its minimum.
func TestRounds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  time.Duration
		pinned  bool
		elapsed time.Duration // since the start, as the round ends
		done    int           // rounds before this one
		forced  bool
		want    bool
		wantMin int64
	}{
		{"another round fits", 10 * time.Second, false, 3 * time.Second, 2, false, true, 0},
		{"another round would just fit", 10 * time.Second, false, 7900 * time.Millisecond, 3, false, true, 0},
		{"another round would end past the budget", 10 * time.Second, false, 9 * time.Second, 4, false, false, 5},
		{"one round longer than the budget", 10 * time.Second, false, 12 * time.Second, 0, false, false, 1},
		{"forced past the budget", 10 * time.Second, false, 12 * time.Second, 0, true, true, 1},
		{"a plain run buys none", 0, false, time.Millisecond, 0, false, false, 1},
		{"a pinned seed buys none", 10 * time.Second, true, time.Millisecond, 0, false, false, 1},
		{"forced in a plain run", 0, false, time.Millisecond, 0, true, true, 1},
	} {
		r := newRounds(tc.budget, tc.pinned)
		r.start = time.Now().Add(-tc.elapsed)
		r.done = tc.done
		if got := r.next(tc.forced); got != tc.want {
			t.Errorf("%s: next = %v, want %v", tc.name, got, tc.want)
		}
		if tc.done == 0 || !tc.want {
			if got := r.min(); tc.wantMin > 0 && got != tc.wantMin {
				t.Errorf("%s: min = %d after %d rounds, want %d", tc.name, got, r.done, tc.wantMin)
			}
		}
	}
	// A run of three budget-bought rounds after one forced one: depth 4.
	r := newRounds(time.Hour, false)
	r.next(true)
	for range 3 {
		r.next(false)
	}
	if r.done != 4 || r.min() != 1 {
		t.Errorf("one forced and three bought rounds: done %d, min %d; want 4 and 1", r.done, r.min())
	}
}

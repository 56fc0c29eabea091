package harness

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// TestLinVacuity: a linearizability run is vacuous, and says why, when a
// race of linRaces never happened or it lacks bulk admissions (from a store
// that admits in bulk), outbox deliveries and refusals, or scheduled runs and
// purges.
func TestLinVacuity(t *testing.T) {
	all := Races{}
	for _, race := range linRaces {
		all[race] = 1
	}
	noUnknown := Races{}
	for _, race := range linRaces {
		if race != RaceUnknownOutcome {
			noUnknown[race] = 1
		}
	}
	type counts struct{ bulk, delivered, refused, scheduled, purged int64 }
	full := counts{1, 1, 1, 1, 1}
	for _, tc := range []struct {
		name    string
		races   Races
		bulkCap bool
		c       counts
		want    []string // one substring per problem
	}{
		{"everything happened", all, true, full, nil},
		{"no unknown outcome (a purge history)", noUnknown, true, full, []string{"no unknown_outcome"}},
		{"no purge (a split history)", all, true, counts{1, 1, 1, 1, 0}, []string{"0 runs purged"}},
		{"no bulk admission, store admits in bulk", all, true, counts{0, 1, 1, 1, 1}, []string{"no bulk admission"}},
		{"no bulk admission, store does not", all, false, counts{0, 1, 1, 1, 1}, nil},
		{"no outbox refusal", all, true, counts{1, 1, 0, 1, 1}, []string{"0 writes with messages refused"}},
		{"nothing", Races{}, true, counts{}, []string{"no stale_write_refused", "no lease_reclaimed", "no cancel_vs_finish",
			"no unknown_outcome", "no bulk admission", "outbox", "scheduled"}},
	} {
		got := linVacuity(tc.races, 1, 7, tc.c.bulk, tc.bulkCap, tc.c.delivered, tc.c.refused, tc.c.scheduled, tc.c.purged)
		wantProblems(t, tc.name, got, tc.want)
	}
}

// TestRuntimeVacuity: a runtime run is vacuous, and says why, when a race of
// runtimeRaces never happened, or it lacks housekeeping, a completion, a lost
// lease, a purged run or, from a store that completes in batches, a batch
// and a batch held past its lease; while it is, the run records another
// history (up to runtimeMaxHistories).
func TestRuntimeVacuity(t *testing.T) {
	all := Races{}
	for _, race := range runtimeRaces {
		all[race] = 1
	}
	full := worker.Stats{Reaped: 1, Completed: 1, Lost: 1, PurgedRuns: 1, Batches: 1}
	heldBatch := map[string]int64{"pause_before_" + string(spec.OpCompleteBatch): 1}
	noBatches := full
	noBatches.Batches = 0
	for _, tc := range []struct {
		name    string
		races   Races
		stats   worker.Stats
		byKind  map[string]int64
		batches bool
		want    []string // one substring per problem
	}{
		{"everything happened", all, full, heldBatch, true, nil},
		{"no batch, store completes in batches", all, noBatches, heldBatch, true, []string{"no batch of completions"}},
		{"no batch, store does not", all, noBatches, nil, false, nil},
		{"no held batch", all, full, nil, true, []string{"held past its lease"}},
		{"nothing", Races{}, worker.Stats{}, nil, true, []string{"no lease_reclaimed", "no stale_write_refused", "no fault_rolled_back",
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

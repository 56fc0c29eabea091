package harness

import (
	"strings"
	"testing"
)

// TestLinVacuity: a linearizability run is vacuous, and says why, when a
// race of linRaces never happened or it lacks bulk admissions (from a store
// that admits in bulk), outbox deliveries and refusals, or scheduled runs and
// purges; a budgeted run stops after one history only when this is empty.
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
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d problems %q, want %d", tc.name, len(got), got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %d is %q, want it to mention %q", tc.name, i, got[i], w)
			}
		}
	}
}

package postgres

import (
	"fmt"
	"testing"
)

// TestStrongestKeepsEachRunOnce: the runs an admission decided from are
// locked and checked once each, in (tenant, run id) order, with the
// strongest lock any of its decisions needs (whose predicate implies the
// weaker ones').
func TestStrongestKeepsEachRunOnce(t *testing.T) {
	rec := func(tenant, runID string, mode lockMode) decidedRun {
		return decidedRun{jobKey{tenant, runID}, mode, scopeKey{tenant, "work", "k-" + runID}, 5}
	}
	for _, c := range []struct {
		name string
		in   []decidedRun
		want []decidedRun
	}{
		{"sorted by tenant, then run id",
			[]decidedRun{rec("b", "r1", lockTaken), rec("a", "r2", lockTaken), rec("a", "r10", lockTaken)},
			[]decidedRun{rec("a", "r10", lockTaken), rec("a", "r2", lockTaken), rec("b", "r1", lockTaken)}},
		{"a record beats a taken run id",
			[]decidedRun{rec("a", "r0", lockTaken), rec("a", "r0", lockRecord), rec("a", "r0", lockTaken)},
			[]decidedRun{rec("a", "r0", lockRecord)}},
		{"an expired record beats a taken run id",
			[]decidedRun{rec("a", "r0", lockExpired), rec("a", "r1", lockTaken), rec("a", "r0", lockTaken)},
			[]decidedRun{rec("a", "r0", lockExpired), rec("a", "r1", lockTaken)}},
		{"one replayed twice",
			[]decidedRun{rec("a", "r0", lockRecord), rec("a", "r0", lockRecord)},
			[]decidedRun{rec("a", "r0", lockRecord)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strongest(c.in); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("strongest = %v, want %v", got, c.want)
			}
		})
	}
}

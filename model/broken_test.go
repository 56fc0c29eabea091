package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/model"
)

// TestExploreCatchesBrokenVariants runs the explorer on each deliberately
// broken model and requires a violation with a short counterexample: the
// checks must bite, and the trace must be small enough to read.
func TestExploreCatchesBrokenVariants(t *testing.T) {
	for _, tc := range []struct {
		variant  string
		maxSteps int // the shortest counterexample is at most this long
	}{
		{"claim keeps generation", 2},      // create, claim
		{"retry skips terminal event", 6},  // create, claim, retry, wait, claim, retry at the budget
		{"complete ignores generation", 6}, // create, claim, expire, reclaim by the same worker, stale complete
		{"cancel leaves job claimable", 2}, // create, cancel
		{"claim steals live lease", 3},     // create, claim, claim
		{"retry resets generation", 3},     // create, claim, retry
		{"reserve reopens succeeded", 5},   // create, claim, reserve, record succeeded, reserve
		{"replay resets generation", 4},    // create, claim, fail, replay
		{"purge runs splits lineage", 7},   // create, claim, fail, replay, cancel, wait, purge
		{"purge runs ignores records", 4},  // create, cancel, wait, purge
	} {
		t.Run(tc.variant, func(t *testing.T) {
			sc := model.DefaultScope()
			m := model.Broken(model.Model{Config: sc.Config}, tc.variant)
			rep := model.Explore(m, sc)
			t.Logf("%s", rep)
			if rep.Violation == nil {
				t.Fatalf("broken variant %q survived %d states: the invariants do not catch it", tc.variant, rep.States)
			}
			if n := len(rep.Violation.Trace); n == 0 || n > tc.maxSteps {
				t.Fatalf("broken variant %q: counterexample has %d steps, want 1..%d", tc.variant, n, tc.maxSteps)
			}
		})
	}
}

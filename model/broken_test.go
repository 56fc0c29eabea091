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
		scope    func() model.Scope
	}{
		{"claim keeps generation", 2, nil},                        // create, claim
		{"retry skips terminal event", 6, nil},                    // create, claim, retry, wait, claim, retry at the budget
		{"complete ignores generation", 6, nil},                   // create, claim, expire, reclaim by the same worker, stale complete
		{"cancel leaves job claimable", 2, nil},                   // create, cancel
		{"claim steals live lease", 3, nil},                       // create, claim, claim
		{"retry resets generation", 3, nil},                       // create, claim, retry
		{"reserve reopens succeeded", 5, nil},                     // create, claim, reserve, record succeeded, reserve
		{"replay resets generation", 4, nil},                      // create, claim, fail, replay
		{"purge runs splits lineage", 7, nil},                     // create, claim, fail, replay, cancel, wait, purge
		{"purge runs ignores records", 4, nil},                    // create, cancel, wait, purge
		{"claim outbox takes claimed", 3, model.OutboxScope},      // create with a message, claim, claim
		{"purge runs drops pending outbox", 5, model.OutboxScope}, // create with a message, wait, cancel, wait, purge
		{"replayed create writes outbox", 2, model.OutboxScope},   // create with a message, create again
	} {
		t.Run(tc.variant, func(t *testing.T) {
			if tc.scope == nil {
				tc.scope = model.DefaultScope
			}
			sc := tc.scope()
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

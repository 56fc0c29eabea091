//go:build leasehold_mutants

package doctor

import (
	"testing"

	"github.com/leasehold/leasehold/impl/mutant"
)

// TestMutantScopedRepair: with the mutant whose repair scoped to one tenant
// skips the rule "repair nothing when the invariants fail", the check of
// testNoRepairInABrokenDatabase must fail (on SQLite: the rule is the
// doctor's, not the store's).
func TestMutantScopedRepair(t *testing.T) {
	defer mutant.Set(mutant.ScopedRepairSkipsInvariants)()
	problems := repairsInABrokenDatabase(t, sqliteKit)
	if len(problems) == 0 {
		t.Fatalf("mutant %s survived: a scoped repair went ahead in a broken database and nothing noticed", mutant.ScopedRepairSkipsInvariants)
	}
	t.Logf("mutant %s caught: %d findings, the first: %s", mutant.ScopedRepairSkipsInvariants, len(problems), problems[0])
}

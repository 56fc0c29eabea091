//go:build leasehold_mutants

package worker_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
)

// TestMutantFirstHousekeepingAfterInterval: with the mutant whose first
// housekeeping round waits a whole Maintenance.Every after the start, the
// check of TestHousekeepingAcrossRestarts must fail: no worker lives long
// enough to reap.
func TestMutantFirstHousekeepingAfterInterval(t *testing.T) {
	defer mutant.Set(mutant.FirstHousekeepingAfterInterval)()
	lives, open := housekeepingAcrossRestarts(t, backend{"sqlite", sqlitetest.Factory}, 10)
	if len(open) == 0 {
		t.Fatalf("mutant %s survived: the runs ended within %d restarts", mutant.FirstHousekeepingAfterInterval, lives)
	}
	t.Logf("mutant %s caught: after %d workers of 10 s each, %d runs still open: %v", mutant.FirstHousekeepingAfterInterval, lives, len(open), open)
}

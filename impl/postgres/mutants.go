package postgres

import (
	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

// mutantClaimIgnoresExpired is the claim statement without its
// expired-lease branch: it only takes queued jobs.
var mutantClaimIgnoresExpired = claimStatement(claimDue)

// The mutants' statements (see package mutant) are the store's own with one
// part changed, so that they cannot drift from what they break.
var (
	// finishJob guarded by state only.
	mutantFinishJobIgnoresGeneration = returningRun(mutant.Derive(finishJob, leaseGuard,
		`tenant = @tenant AND run_id = @run_id AND state = 'leased'`))
	// requeueJob that also sets the generation back to 0.
	mutantRequeueResetsGeneration = mutant.Derive(requeueJob, "attempt_retry_at = @available_at",
		"attempt_retry_at = @available_at, lease_generation = 0")
)

// mutantFinishJobOnlySQL is the first half of a non-atomic
// terminalization: the job ends, its run, event and attempt are left as
// they were.
const mutantFinishJobOnlySQL = `UPDATE jobs SET state = @state, lease_owner = NULL, lease_expires_at = NULL,
	last_error_code = coalesce(@error_code, last_error_code)
	WHERE ` + leaseGuard

// mutantFinishJobOnly applies mutantFinishJobOnlySQL.
func (s *Store) mutantFinishJobOnly(t *txn, ref spec.LeaseRef, now int64, tm terminal) error {
	_, err := t.exec(mutantFinishJobOnlySQL, leaseArgs(ref, now).with(tm.args()))
	return err
}

// The broken listings (package mutant's Listing), derived from listRuns.
var (
	mutantListIgnoresTenant = mutant.Derive(listRuns, "WHERE tenant = @tenant AND ", "WHERE ")
	mutantListSkipsTies     = mutant.Derive(listRuns, "(created_at, run_id) < (@below_at, @below_id)", "created_at < @below_at")
	mutantListByOffset      = mutant.Derive(listRuns, "LIMIT @limit", "LIMIT @limit OFFSET @offset")
)

package sqlite

import (
	"context"

	"github.com/leasehold/leasehold/impl/mutant"

	"github.com/leasehold/leasehold/spec"
)

// The mutants' statements (see package mutant) are the store's own with one
// part changed, so that they cannot drift from what they break.
var (
	// claimCandidates without its expired-lease branch: only queued jobs.
	mutantClaimIgnoresExpired = mutant.Derive(claimCandidates, "state = 'leased' AND lease_expires_at <= :now",
		"state = 'leased' AND 0")
	// finishJob guarded by state only.
	mutantFinishJobIgnoresGeneration = mutant.Derive(finishJob, leaseGuard,
		`tenant = :tenant AND run_id = :run_id AND state = 'leased'`)
	// requeueJob that also sets the generation back to 0.
	mutantRequeueResetsGeneration = mutant.Derive(requeueJob, "last_error_code = :error_code",
		"last_error_code = :error_code, lease_generation = 0")
)

// mutantFinishJobOnly is the first half of a non-atomic terminalization.
func (s *Store) mutantFinishJobOnly(ctx context.Context, tx *txn, ref spec.LeaseRef, now int64, t terminal) error {
	_, err := exec(ctx, tx, finishJob, leaseArgs(ref, now).with(args{"state": t.job, "error_code": t.errorCode}))
	return err
}

// The broken listings (package mutant's Listing), derived from listRuns.
var (
	mutantListIgnoresTenant = mutant.Derive(listRuns, "tenant = :tenant AND ", "")
	mutantListSkipsTies     = mutant.Derive(listRuns, "(created_at, run_id) < (:below_at, :below_id)", "created_at < :below_at")
	mutantListByOffset      = mutant.Derive(listRuns, "LIMIT :limit", "LIMIT :limit OFFSET :offset")
)

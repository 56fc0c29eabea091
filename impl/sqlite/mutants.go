package sqlite

import (
	"context"
	"database/sql"

	"github.com/leasehold/leasehold/spec"
)

// Mutants are deliberately broken variants of this store. They exist to prove
// that the conformance suite, the model comparison and the linearizability
// checks catch real bugs. They can only be switched on in a binary built with
// the leasehold_mutants tag (see mutant_on.go); in every other build
// activeMutant is the constant "" and the compiler drops the broken paths.
const (
	// MutantCompleteIgnoresGeneration completes with a guard on state only, as
	// River does: a stale worker can complete a newer attempt.
	MutantCompleteIgnoresGeneration = "complete_ignores_generation"
	// MutantClaimIgnoresExpired never reclaims expired leases.
	MutantClaimIgnoresExpired = "claim_ignores_expired"
	// MutantBudgetNotAtomic marks the job dead at the budget but leaves the
	// run and its terminal event to a second transaction that never happens.
	MutantBudgetNotAtomic = "budget_not_atomic"
	// MutantIdempotencyIgnoresFingerprint replays a key whatever the request.
	MutantIdempotencyIgnoresFingerprint = "idempotency_ignores_fingerprint"
	// MutantRetryResetsGeneration sets the generation back to 0 on retry (ABA).
	MutantRetryResetsGeneration = "retry_resets_generation"
)

// Mutants lists every mutant name.
var Mutants = []string{
	MutantCompleteIgnoresGeneration, MutantClaimIgnoresExpired, MutantBudgetNotAtomic,
	MutantIdempotencyIgnoresFingerprint, MutantRetryResetsGeneration,
}

const (
	mutantClaimIgnoresExpired = `SELECT run_id FROM jobs
		WHERE tenant = :tenant AND state = 'queued' AND available_at <= :now AND attempts < max_attempts
		ORDER BY available_at, run_id LIMIT :limit`
	mutantFinishJobIgnoresGeneration = `UPDATE jobs SET state = :state, lease_owner = NULL, lease_expires_at = NULL,
		last_error_code = coalesce(:error_code, last_error_code)
		WHERE tenant = :tenant AND run_id = :run_id AND state = 'leased'`
	mutantRequeueResetsGeneration = `UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
		available_at = :available_at, last_error_code = :error_code, lease_generation = 0
		WHERE ` + leaseGuard
)

// mutantFinishJobOnly is the first half of a non-atomic terminalization.
func (s *Store) mutantFinishJobOnly(ctx context.Context, tx *sql.Tx, ref spec.LeaseRef, now int64, t terminal) error {
	_, err := exec(ctx, tx, finishJob, leaseArgs(ref, now).with(args{"state": t.job, "error_code": t.errorCode}))
	return err
}

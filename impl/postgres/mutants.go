package postgres

import (
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// Mutants are deliberately broken variants of this store, the same ones, by
// the same names, as the SQLite store's (sqlite.Mutants), so that one harness
// can prove on both stores that the conformance suite, the model comparison
// and the linearizability checks catch real bugs. They can only be switched
// on in a binary built with the leasehold_mutants tag (see mutant_on.go); in
// every other build activeMutant is the constant "" and the compiler drops
// the broken paths.
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

// mutantClaimIgnoresExpired is the claim statement without its
// expired-lease branch: it only takes queued jobs.
var mutantClaimIgnoresExpired = claimStatement("@limit", claimDue)

// The mutants' statements are the store's own with one part changed, so
// that they cannot drift from what they break. (If a replacement stopped
// matching, the mutant would be the real statement and the mutant suites,
// which must catch every mutant, would fail.)
var (
	// finishJob guarded by state only.
	mutantFinishJobIgnoresGeneration = returningRun(strings.Replace(finishJob, leaseGuard,
		`tenant = @tenant AND run_id = @run_id AND state = 'leased'`, 1))
	// requeueJob that also sets the generation back to 0.
	mutantRequeueResetsGeneration = strings.Replace(requeueJob, "attempt_retry_at = @available_at",
		"attempt_retry_at = @available_at, lease_generation = 0", 1)
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

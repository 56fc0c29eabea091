// Package mutant names the deliberately broken variants of leasehold's
// stores, the same names for every store, and of the parts around them (the
// HTTP edge, the doctor, the store-protocol harness, the worker). They exist
// to prove that the conformance suite, the model comparison, the
// linearizability checks, the scenarios and each part's own tests catch
// real bugs. A mutant can only be switched on in a binary
// built with the leasehold_mutants tag (Set); in every other build On is
// false for every name and the compiler drops the broken paths.
package mutant

import (
	"math"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// The mutants.
const (
	// CompleteIgnoresGeneration completes with a guard on state only, as
	// River does: a stale worker can complete a newer attempt.
	CompleteIgnoresGeneration = "complete_ignores_generation"
	// ClaimIgnoresExpired never reclaims expired leases.
	ClaimIgnoresExpired = "claim_ignores_expired"
	// BudgetNotAtomic marks the job dead at the budget but leaves the run
	// and its terminal event to a second transaction that never happens.
	BudgetNotAtomic = "budget_not_atomic"
	// IdempotencyIgnoresFingerprint replays a key whatever the request.
	IdempotencyIgnoresFingerprint = "idempotency_ignores_fingerprint"
	// RetryResetsGeneration sets the generation back to 0 on retry (ABA).
	RetryResetsGeneration = "retry_resets_generation"
	// BatchIgnoresGeneration checks a batch completion's members by state
	// only (a batch completer that forgets the per-member lease): a stale
	// member completes a newer attempt. Complete alone stays correct.
	BatchIgnoresGeneration = "batch_ignores_generation"
	// BulkIgnoresFingerprint replays a bulk admission's member whose key is
	// bound to another request (a bulk path that forgets the fingerprint
	// check). CreateRun alone stays correct.
	BulkIgnoresFingerprint = "bulk_ignores_fingerprint"
)

// Names lists every store mutant, in the order reports list them.
var Names = []string{
	CompleteIgnoresGeneration, ClaimIgnoresExpired, BudgetNotAtomic,
	IdempotencyIgnoresFingerprint, RetryResetsGeneration, BatchIgnoresGeneration, BulkIgnoresFingerprint,
}

// The mutants of the parts around the stores. Each breaks one promise of
// one package, and that package's mutants test (built with the
// leasehold_mutants tag, run by verify) shows the test that holds the
// promise failing on it.
const (
	// TenantFromRequest makes httpadmit act for the tenant a request names
	// in its X-Tenant header instead of the one its Authenticator returned.
	TenantFromRequest = "httpadmit_tenant_from_request"
	// ScopedRepairSkipsInvariants makes the doctor's repair scoped to one
	// tenant go ahead although the database's invariants fail.
	ScopedRepairSkipsInvariants = "doctor_scoped_repair_skips_invariants"
	// AfterCommitAcceptsUnavailable makes the store-protocol harness accept
	// unavailable after a fault injected at after_commit (where only
	// unknown_outcome is true: the write committed).
	AfterCommitAcceptsUnavailable = "storeproto_after_commit_accepts_unavailable"
	// FirstHousekeepingAfterInterval makes a worker's first housekeeping
	// round wait a whole Maintenance.Every plus its jitter after the
	// start: a fleet restarted more often never reaps.
	FirstHousekeepingAfterInterval = "worker_first_housekeeping_after_interval"
)

// Parts lists the mutants of the parts around the stores.
var Parts = []string{TenantFromRequest, ScopedRepairSkipsInvariants, AfterCommitAcceptsUnavailable, FirstHousekeepingAfterInterval}

// The broken listings (spec.RunLister, SQLite and PostgreSQL). A listing is
// a read the writing checks never make, so they are not in Names: the
// listing's conformance tests (storetest.ListingTests) must catch each.
const (
	// ListIgnoresTenant lists every tenant's runs.
	ListIgnoresTenant = "list_ignores_tenant"
	// ListCursorSkipsTies resumes after a cursor by creation time alone,
	// skipping the rest of the runs created in the cursor's millisecond.
	ListCursorSkipsTies = "list_cursor_skips_ties"
	// ListByOffset pages with OFFSET (the cursor holds the count of runs
	// already listed): exact while nothing is admitted, but a run admitted
	// ahead of the position between two pages shifts every later run, so
	// one is listed twice.
	ListByOffset = "list_by_offset"
)

// Listing lists the broken listings.
var Listing = []string{ListIgnoresTenant, ListCursorSkipsTies, ListByOffset}

// The broken operator UIs (package ui). The UI's browser test
// (ui/browsertest, make test-ui) shows each of its checks failing on one.
const (
	// UIIgnoresActor lets a UI started without --actor act (as "anonymous").
	UIIgnoresActor = "ui_ignores_actor"
	// UITimelineLastGeneration draws only a run's current attempt, hiding
	// the generations a re-claim superseded.
	UITimelineLastGeneration = "ui_timeline_last_generation"
	// UIRunPageCached serves a run's page from what it read the first time
	// the page was shown, so an action's outcome never shows.
	UIRunPageCached = "ui_run_page_cached"
	// UICountsCached answers the live counts with the first counts it read.
	UICountsCached = "ui_counts_cached"
)

// UI lists the broken operator UIs.
var UI = []string{UIIgnoresActor, UITimelineLastGeneration, UIRunPageCached, UICountsCached}

// Derive returns a store's own statement with one part replaced, the way
// every mutant statement is made, so that a mutant cannot drift from what it
// breaks. It panics when old is not in stmt: the mutant would silently be
// the real statement.
func Derive(stmt, old, new string) string {
	if !strings.Contains(stmt, old) {
		panic("mutant: the statement no longer contains " + old)
	}
	return strings.Replace(stmt, old, new, 1)
}

// OffsetCursor is ListByOffset's cursor after n runs: a position that
// CheckListRuns accepts, holding the count.
func OffsetCursor(n int) string {
	return spec.RunPosition{CreatedAt: int64(n), RunID: "offset"}.Cursor()
}

// OffsetOf is the count an OffsetCursor holds (0 for any other cursor).
func OffsetOf(cursor string) int {
	p, err := spec.ParseCursor(cursor)
	if err != nil || p.RunID != "offset" {
		return 0
	}
	return int(p.CreatedAt)
}

// OffsetBound is the bound ListByOffset lists below: the creation range's
// end, never the cursor.
func OffsetBound(req spec.ListRunsRequest) spec.RunPosition {
	if req.CreatedBefore != 0 {
		return spec.RunPosition{CreatedAt: req.CreatedBefore}
	}
	return spec.RunPosition{CreatedAt: math.MaxInt64}
}

package postgres

import (
	"time"

	"github.com/leasehold/leasehold/clock"
)

// Exported for the external tests (package postgres_test), which cannot be
// internal because they use pgtest, which imports this package.

// Statements whose plans the plan test checks, exactly as the store runs them.
var (
	ClaimSQL       = claimJobs
	ReapSQL        = selectReapable
	IdempotencySQL = selectIdempotency
	FreshSQL       = insertFresh
	PurgeSQL       = purgeIdempotency
	RetiredSQL     = selectRetiredLeaves
	ListRunsSQL    = listRuns
	LockJobSQL     = lockJob
	ClockSQL       = clockQuery
	// Bulk admission's lookups, one primary-key lookup per member.
	AdmissionLookupsSQL = selectAdmissionLookups
	DecidedRunsReadSQL  = selectDecidedRuns
	ExpiredRecordsSQL   = deleteExpiredRecords
	DecidedRunsSQL      = lockDecidedRuns
)

// IndexPlans are the planner settings of the store's connections.
var IndexPlans = indexPlans

// SetAnnounceTimeout sets announceTimeout, which announcers read as they use it,
// and returns the function that restores it.
func SetAnnounceTimeout(d time.Duration) (restore func()) {
	old := announceTimeout
	announceTimeout = d
	return func() { announceTimeout = old }
}

// SetAnnounceInterval sets announceInterval, which announcers read as they
// use it, and returns the function that restores it.
func SetAnnounceInterval(d time.Duration) (restore func()) {
	old := announceInterval
	announceInterval = d
	return func() { announceInterval = old }
}

// SetAnnounceTimers sets what the announcers made from now on wait with,
// and returns the function that restores it.
func SetAnnounceTimers(t clock.Timers) (restore func()) {
	old := announceTimers
	announceTimers = t
	return func() { announceTimers = old }
}

// SetMaxAnnounceBatch sets how many notifications one announcement sends,
// and returns the function that restores it.
func SetMaxAnnounceBatch(n int) (restore func()) {
	old := maxAnnounceBatch
	maxAnnounceBatch = n
	return func() { maxAnnounceBatch = old }
}

// AdmissionScope is the admission lock's scope of (tenant, operation, key)
// in s (admissionScope), for a test that takes that lock itself.
func AdmissionScope(s *Store, tenant, operation, key string) string {
	return s.admissionScope(tenant, operation, key)
}

// LockedCreateRun makes s's CreateRun skip the fresh admission
// (createFresh) and decide every call under its scope's admission lock, so
// that a test reaches that path with a request that would be admitted
// fresh. Call it before s is used.
func LockedCreateRun(s *Store) { s.lockedOnly = true }

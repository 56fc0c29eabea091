package model

import (
	"cmp"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// Eligible reports whether a claim at time now may take job: available,
// with budget left, and queued or leased under an expired lease. It is the
// contract's definition, used by Check, CheckStep and Observe; the (possibly
// broken) Step path goes through Model.claimable.
func Eligible(job spec.Job, now int64) bool {
	if job.AvailableAt > now || job.Attempts >= job.MaxAttempts {
		return false
	}
	return job.State == spec.JobQueued || job.State == spec.JobLeased && job.LeaseExpiresAt <= now
}

// claimable is Eligible as this model (or a broken variant of it) applies it.
func (m Model) claimable(job spec.Job, now int64) bool {
	if m.bug == bugClaimStealsLiveLease && job.State == spec.JobLeased && job.AvailableAt <= now && job.Attempts < job.MaxAttempts {
		return true
	}
	return Eligible(job, now)
}

// EligibleAt is when a claimable job became claimable: its lease's expiry
// for a leased job, else its available_at. Claims take jobs in
// (EligibleAt, run id) order.
func EligibleAt(job spec.Job) int64 {
	if job.State == spec.JobLeased {
		return job.LeaseExpiresAt
	}
	return job.AvailableAt
}

// eligibleRows returns the tenant's claimable runs in (EligibleAt, run id)
// order: the order a sequential claim takes them in.
func (m Model) eligibleRows(s State, tenant string, now int64) []*runRow {
	var rows []*runRow
	for _, r := range s.runs {
		if r.run.Tenant == tenant && m.claimable(r.job, now) {
			rows = append(rows, r)
		}
	}
	slices.SortStableFunc(rows, func(a, b *runRow) int {
		return cmp.Or(cmp.Compare(EligibleAt(a.job), EligibleAt(b.job)), strings.Compare(a.run.ID, b.run.ID))
	})
	return rows
}

// claim is Claim, sequentially: the first Limit eligible jobs.
func (m Model) claim(s State, now int64, req spec.ClaimRequest) (State, Result) {
	expires, err := m.Config.CheckClaim(req, now)
	if err != nil {
		return s, failed(err)
	}
	rows := m.eligibleRows(s, req.Tenant, now)
	rows = rows[:min(len(rows), req.Limit)]
	next, leases := m.claimRows(s, now, expires, req.Worker, rows)
	return next, ok(leases)
}

// claimRows leases each of rows to worker, in order, and returns the leases in
// the same order. The caller has checked that each row is claimable.
func (m Model) claimRows(s State, now, expires int64, worker string, rows []*runRow) (State, []spec.Lease) {
	leases := make([]spec.Lease, 0, len(rows))
	for _, old := range rows {
		r := old.clone()
		// The superseded attempt (a lease that expired) is closed as expired.
		if a, found := r.attempt(r.job.Generation); found && a.Outcome == spec.AttemptRunning {
			a.Outcome = spec.AttemptExpired
			a.FinishedAt = now
			r.putAttempt(a)
		}
		j := &r.job
		j.State = spec.JobLeased
		j.LeaseOwner = worker
		j.LeaseExpiresAt = expires
		if m.bug != bugClaimKeepsGeneration {
			j.Generation++
		}
		j.Attempts++
		r.putAttempt(spec.Attempt{
			Tenant: j.Tenant, RunID: j.RunID, Generation: j.Generation, Number: j.Attempts,
			Worker: worker, ClaimedAt: now, RenewedAt: now, Outcome: spec.AttemptRunning,
		})
		if r.run.State == spec.RunQueued {
			r.run.State = spec.RunRunning
			r.run.Version++
		}
		s = s.put(r)
		leases = append(leases, leaseOf(r))
	}
	return s, leases
}

// leaseOf is the Lease a claim or renewal hands out for the row's current lease.
func leaseOf(r *runRow) spec.Lease {
	return spec.Lease{
		Tenant: r.job.Tenant, RunID: r.job.RunID, Operation: r.run.Operation, Owner: r.job.LeaseOwner,
		Generation: r.job.Generation, ExpiresAt: r.job.LeaseExpiresAt, Attempt: r.job.Attempts,
		MaxAttempts: r.job.MaxAttempts, Payload: r.run.Payload, DeadlineAt: r.run.DeadlineAt,
	}
}

// isVictim reports whether Reap terminalizes job at now: leased, expired, and
// out of attempts, so no claim can ever take it again.
func isVictim(job spec.Job, now int64) bool {
	return job.State == spec.JobLeased && job.LeaseExpiresAt <= now && job.Attempts >= job.MaxAttempts
}

// victimRows returns the tenant's reapable runs in (lease_expires_at, run id) order.
func victimRows(s State, tenant string, now int64) []*runRow {
	var rows []*runRow
	for _, r := range s.runs {
		if r.run.Tenant == tenant && isVictim(r.job, now) {
			rows = append(rows, r)
		}
	}
	slices.SortStableFunc(rows, func(a, b *runRow) int {
		return cmp.Or(cmp.Compare(a.job.LeaseExpiresAt, b.job.LeaseExpiresAt), strings.Compare(a.run.ID, b.run.ID))
	})
	return rows
}

// reap is Reap, sequentially: the first Limit victims.
func (m Model) reap(s State, now int64, req spec.ReapRequest) (State, Result) {
	if err := m.Config.CheckReap(req, now); err != nil {
		return s, failed(err)
	}
	rows := victimRows(s, req.Tenant, now)
	rows = rows[:min(len(rows), req.Limit)]
	next, ids := reapRows(s, now, rows)
	return next, ok(ids)
}

// reapRows makes each row's job dead and its run failed with lease_expired.
func reapRows(s State, now int64, rows []*runRow) (State, []string) {
	ids := make([]string, 0, len(rows))
	for _, old := range rows {
		r := old.clone()
		r.failRun(now, spec.ReapErrorCode, spec.ClassExpired, true)
		s = s.put(r)
		ids = append(ids, r.run.ID)
	}
	return s, ids
}

package model

import "github.com/leasehold/leasehold/spec"

// guard is the check every guarded write makes after validation: the job of
// (tenant, run) exists (not_found) and ref is its current, unexpired lease
// (spec.LeaseError decides the code otherwise).
func guard(s State, ref spec.LeaseRef, now int64) (*runRow, *spec.Error) {
	r := s.row(ref.Tenant, ref.RunID)
	if r == nil {
		return nil, notFound("job", ref.Tenant, ref.RunID)
	}
	if err := spec.LeaseError(r.job, ref, now); err != nil {
		return nil, err
	}
	return r, nil
}

// renew is Renew: the lease moves to now+LeaseMs unless that passes the run's
// deadline.
func (m Model) renew(s State, now int64, req spec.RenewRequest) (State, Result) {
	expires, err := m.Config.CheckRenew(req, now)
	if err != nil {
		return s, failed(err)
	}
	old, gerr := guard(s, req.Lease, now)
	if gerr != nil {
		return s, failed(gerr)
	}
	if expires > old.run.DeadlineAt {
		return s, failed(spec.Errorf(spec.CodeDeadlineExceeded,
			"renewal to %d would pass run %s's deadline %d", expires, old.run.ID, old.run.DeadlineAt))
	}
	r := old.clone()
	r.job.LeaseExpiresAt = expires
	if a, found := r.attempt(r.job.Generation); found { // always, by invariant 11
		a.RenewedAt = now
		r.putAttempt(a)
	}
	return s.put(r), ok(leaseOf(r))
}

// complete is Complete: job and run completed with the result, run_completed,
// and the request's outbox messages written at the lease's generation.
func (m Model) complete(s State, now int64, req spec.CompleteRequest) (State, Result) {
	result, err := m.Config.CheckComplete(req, now)
	if err != nil {
		return s, failed(err)
	}
	outbox, _ := spec.NormalizeOutbox(req.Outbox) // CheckComplete checked them
	ref := req.Lease
	if m.bug == bugCompleteIgnoresGeneration {
		if r := s.row(ref.Tenant, ref.RunID); r != nil {
			ref.Generation = r.job.Generation
		}
	}
	old, gerr := guard(s, ref, now)
	if gerr != nil {
		return s, failed(gerr)
	}
	r := old.clone()
	gen := r.job.Generation
	r.endJob(spec.JobCompleted)
	r.run.Result = result
	r.endRun(spec.RunCompleted, now, spec.EventRunCompleted, spec.CompletedPayload(gen))
	r.closeAttempt(gen, now, spec.AttemptCompleted, "", spec.ClassNone, 0)
	r.writeOutbox(outbox, gen, now)
	return s.put(r), ok(r.run)
}

// fail is Fail: a terminal failure; job dead, run failed, run_failed.
func (m Model) fail(s State, now int64, req spec.FailRequest) (State, Result) {
	if err := m.Config.CheckFail(req, now); err != nil {
		return s, failed(err)
	}
	old, gerr := guard(s, req.Lease, now)
	if gerr != nil {
		return s, failed(gerr)
	}
	r := old.clone()
	r.failRun(now, req.ErrorCode, spec.ClassTerminal, true)
	return s.put(r), ok(r.run)
}

// retry is Retry: below the budget the job is requeued after the backoff
// delay (jitter is the store's random draw); at the budget it is exactly
// Fail's writes, with the attempt classed retryable.
func (m Model) retry(s State, now, jitter int64, req spec.RetryRequest) (State, Result) {
	if err := m.Config.CheckRetry(req, now); err != nil {
		return s, failed(err)
	}
	old, gerr := guard(s, req.Lease, now)
	if gerr != nil {
		return s, failed(gerr)
	}
	r := old.clone()
	gen := r.job.Generation
	if r.job.Attempts >= r.job.MaxAttempts {
		r.failRun(now, req.ErrorCode, spec.ClassRetryable, m.bug != bugRetrySkipsTerminalEvent)
		return s.put(r), ok(r.job)
	}
	delay, err := m.Config.Backoff.Delay(r.job.Attempts, req.RetryAfterMs, jitter)
	if err != nil {
		return s, failed(err)
	}
	available, err := spec.Deadline(now, delay, "retry time")
	if err != nil {
		return s, failed(err)
	}
	r.endJob(spec.JobQueued)
	r.job.AvailableAt = available
	r.job.LastErrorCode = req.ErrorCode
	if m.bug == bugRetryResetsGeneration {
		r.job.Generation = 0
	}
	r.closeAttempt(gen, now, spec.AttemptRetried, req.ErrorCode, spec.ClassRetryable, available)
	return s.put(r), ok(r.job)
}

// release is Release: the owner gives the lease back; the job is queued and
// available now, the attempt refunded, the generation kept, the run unchanged.
func (m Model) release(s State, now int64, req spec.ReleaseRequest) (State, Result) {
	if err := m.Config.CheckRelease(req, now); err != nil {
		return s, failed(err)
	}
	old, gerr := guard(s, req.Lease, now)
	if gerr != nil {
		return s, failed(gerr)
	}
	r := old.clone()
	gen := r.job.Generation
	r.endJob(spec.JobQueued)
	r.job.AvailableAt = now
	r.job.Attempts--
	r.closeAttempt(gen, now, spec.AttemptReleased, "", spec.ClassNone, 0)
	return s.put(r), ok(r.job)
}

// cancel is Cancel: not guarded by a lease. A non-terminal run is cancelled
// together with its job (whose lease, if any, ends); a terminal one reports
// the winner's state.
func (m Model) cancel(s State, now int64, req spec.CancelRequest) (State, Result) {
	reason, err := m.Config.CheckCancel(req, now)
	if err != nil {
		return s, failed(err)
	}
	old := s.row(req.Tenant, req.RunID)
	if old == nil {
		return s, failed(notFound("run", req.Tenant, req.RunID))
	}
	if old.job.State.Terminal() {
		return s, failed(spec.TerminalError(spec.RunStateFor(old.job.State), old.run.ID))
	}
	r := old.clone()
	gen := r.job.Generation
	if r.job.State == spec.JobLeased {
		r.closeAttempt(gen, now, spec.AttemptCancelled, "", spec.ClassNone, 0)
	}
	if m.bug != bugCancelLeavesJobClaimable {
		r.endJob(spec.JobCancelled)
	}
	r.run.ErrorCode = reason
	r.endRun(spec.RunCancelled, now, spec.EventRunCancelled, spec.CancelledPayload(reason, gen))
	return s.put(r), ok(r.run)
}

// failRun is Fail's writes (also Retry at the budget and Reap): job dead with
// the code, run failed with it, run_failed appended (unless event is false,
// which only a broken variant asks for), the current attempt dead.
func (r *runRow) failRun(now int64, code string, class spec.ErrorClass, event bool) {
	gen := r.job.Generation
	r.job.LastErrorCode = code
	r.endJob(spec.JobDead)
	r.run.ErrorCode = code
	if event {
		r.endRun(spec.RunFailed, now, spec.EventRunFailed, spec.FailedPayload(code, gen))
	} else {
		r.run.State = spec.RunFailed
		r.run.Version++
	}
	r.closeAttempt(gen, now, spec.AttemptDead, code, class, 0)
}

// endJob moves the job to state and clears its lease (the generation stays).
func (r *runRow) endJob(state spec.JobState) {
	r.job.State = state
	r.job.LeaseOwner = ""
	r.job.LeaseExpiresAt = 0
}

// endRun moves the run to its terminal state and appends its terminal event:
// one change to the run row, so one version.
func (r *runRow) endRun(state spec.RunState, now int64, kind spec.EventKind, payload string) {
	r.run.State = state
	r.run.Version++
	r.appendEvent(kind, now, payload)
}

// closeAttempt ends the attempt of generation gen (the current lease's).
func (r *runRow) closeAttempt(gen, now int64, outcome spec.AttemptOutcome, code string, class spec.ErrorClass, retryAt int64) {
	a, found := r.attempt(gen)
	if !found {
		return
	}
	a.Outcome = outcome
	a.FinishedAt = now
	a.ErrorCode = code
	a.ErrorClass = class
	a.RetryAt = retryAt
	r.putAttempt(a)
}

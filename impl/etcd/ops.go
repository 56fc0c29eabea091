package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/leasehold/leasehold/spec"
)

// In-process lock names (lockTable).
func runLock(t, r string) string      { return "run\x00" + t + "\x00" + r }
func idemLock(t, op, k string) string { return "idem\x00" + t + "\x00" + op + "\x00" + k }
func msgLock(k spec.OutboxKey) string {
	return fmt.Sprintf("msg\x00%s\x00%s\x00%d", k.Tenant, k.RunID, k.Seq)
}

// getRunRec reads a run as stored.
func (w *wtx) getRunRec(t, r string) (runRecord, bool, error) {
	var rec runRecord
	ok, err := w.getJSON(w.s.runKey(t, r), &rec)
	return rec, ok, err
}

func (w *wtx) getJob(t, r string) (spec.Job, bool, error) {
	var j spec.Job
	ok, err := w.getJSON(w.s.jobKey(t, r), &j)
	return j, ok, err
}

func notFound(t, r string) error {
	return spec.Errorf(spec.CodeNotFound, "run %s not found for tenant %s", r, t)
}

// mustRun reads a run that must exist because its job does.
func (w *wtx) mustRun(t, r string) (runRecord, error) {
	rec, ok, err := w.getRunRec(t, r)
	if err == nil && !ok {
		err = fmt.Errorf("etcd: invariant violated: job %s/%s has no run", t, r)
	}
	return rec, err
}

// CreateRun implements spec.Store: admit on one attempt, its refusal the
// operation's error.
func (s *Store) CreateRun(ctx context.Context, req spec.CreateRunRequest) (res spec.CreateRunResult, err error) {
	err = s.write(ctx, spec.OpCreateRun, admissionLocks(req), func(w *wtx, now int64) error {
		n, err := s.cfg.NormalizeCreate(req, now)
		if err != nil {
			return err
		}
		res, err = w.admit(n, now, false)
		return err
	})
	return res, err
}

// admissionLocks are the in-process locks an admission of req writes
// under: its idempotency scope and its run.
func admissionLocks(req spec.CreateRunRequest) []string {
	return []string{idemLock(req.Tenant, req.Operation, req.IdempotencyKey), runLock(req.Tenant, req.RunID)}
}

// admit is CreateRun's decision and writes for n at now, on the attempt's
// overlay, so that a bulk admission's member sees the members before it: a
// live record of its scope replays (same fingerprint) or conflicts; a taken
// run id is already_exists; else the run, its event, job, outbox messages
// and record are staged, replacing an expired record of the scope. Every
// check comes before the first staged write, so a refusal stages nothing
// (not even the expired record's deletion). bulk: a member of CreateRuns
// (the bulk_ignores_fingerprint mutant breaks only that path).
func (w *wtx) admit(n spec.NormalizedCreate, now int64, bulk bool) (spec.CreateRunResult, error) {
	s := w.s
	ik := s.idemKey(n.Tenant, n.Operation, n.Key)
	var rec spec.IdempotencyRecord
	found, err := w.getJSON(ik, &rec)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	if found && rec.ExpiresAt > now {
		if rec.Fingerprint != n.Fingerprint && !(bulk && mutant(mutantBulkIgnoresFingerprint)) {
			return spec.CreateRunResult{}, spec.IdempotencyConflict(n.Key, n.Operation, rec.Fingerprint)
		}
		run, err := w.mustRun(n.Tenant, rec.RunID)
		if err != nil {
			return spec.CreateRunResult{}, err
		}
		return spec.CreateRunResult{Run: run.Run, Replayed: true}, nil
	}
	if _, exists, err := w.getRunRec(n.Tenant, n.RunID); err != nil || exists {
		if err == nil {
			err = spec.RunExists(n.Tenant, n.RunID)
		}
		return spec.CreateRunResult{}, err
	}
	if found { // expired but not yet purged: the key is free again
		w.del(ik)
		w.del(s.idemExpiryKey(rec))
	}
	run := runRecord{Run: n.QueuedRun(now), IdemOperation: n.Operation, IdemKey: n.Key}
	w.putOutbox(&run, 0, now, n.Outbox)
	w.put(s.runKey(n.Tenant, n.RunID), run)
	w.put(s.createdKey(n.Tenant, now, n.RunID), n.RunID)
	w.put(s.eventKey(n.Tenant, n.RunID, 1), spec.Event{Tenant: n.Tenant, RunID: n.RunID, Seq: 1, Kind: spec.EventRunQueued, At: now,
		Payload: spec.QueuedPayload("", "", 0)})
	w.putJob(nil, spec.Job{Tenant: n.Tenant, RunID: n.RunID, Operation: n.Operation, State: spec.JobQueued, AvailableAt: n.AvailableAt,
		MaxAttempts: n.MaxAttempts})
	nrec := spec.IdempotencyRecord{Tenant: n.Tenant, Operation: n.Operation, Key: n.Key, Fingerprint: n.Fingerprint, RunID: n.RunID,
		CreatedAt: now, ExpiresAt: n.ExpiresAt}
	w.put(ik, nrec)
	w.put(s.idemExpiryKey(nrec), "")
	return spec.CreateRunResult{Run: run.Run}, nil
}

// putOutbox stages msgs as the run's next outbox messages, written at now
// by generation gen (0: the admission), with their pending index entries.
func (w *wtx) putOutbox(run *runRecord, gen, now int64, msgs []spec.OutgoingMessage) {
	for _, m := range msgs {
		run.Outbox++
		msg := spec.OutboxMessage{Tenant: run.Tenant, RunID: run.ID, Seq: run.Outbox,
			ID: spec.OutboxID(run.Tenant, run.ID, run.CreatedAt, run.Outbox), Subject: m.Subject, Payload: m.Payload,
			Generation: gen, CreatedAt: now, State: spec.OutboxPending}
		w.put(w.s.outboxKey(run.Tenant, run.ID, msg.Seq), msg)
		for _, k := range w.s.pendingKeys(msg) {
			w.put(k, "")
		}
	}
}

// Claim implements spec.Store: candidates from a range read of the
// tenant's claimable index (eligible_at <= now, in claim order), each one
// skipped if this process's writers hold it, then one Txn that compares
// every taken candidate's job. A conflict tries again with what is
// claimable then, other candidates included.
func (s *Store) Claim(ctx context.Context, req spec.ClaimRequest) (leases []spec.Lease, err error) {
	err = s.write(ctx, spec.OpClaim, nil, func(w *wtx, now int64) error {
		expiresAt, err := s.cfg.CheckClaim(req, now)
		if err != nil {
			return err
		}
		from := s.under(famClaimable, req.Tenant)
		// Read past the limit by what this process's writers hold (they are
		// skipped) and, after a conflict, by a random number of candidates
		// others are likely taking: the loser tries other candidates. A
		// first attempt takes the first eligible jobs, in order.
		skip := 0
		if w.attempt > 0 {
			skip = rand.IntN(w.attempt*req.Limit + 1)
		}
		page := int64(2*req.Limit + 8 + skip + s.locks.size())
		kvs, err := w.scan(from, s.under(famClaimable, req.Tenant, num(now+1)), page)
		if err != nil {
			return err
		}
		if skip >= len(kvs) {
			skip = 0
		}
		var candidates []string
		for _, kv := range kvs[skip:] {
			runID := lastPart(string(kv.Key))
			if len(candidates) < req.Limit && w.tryLock(runLock(req.Tenant, runID)) {
				candidates = append(candidates, runID)
			}
		}
		keys := make([]string, 0, 2*len(candidates))
		for _, r := range candidates {
			keys = append(keys, s.jobKey(req.Tenant, r), s.runKey(req.Tenant, r))
		}
		if err := w.prefetch(keys...); err != nil {
			return err
		}
		leases = []spec.Lease{}
		for _, runID := range candidates {
			job, ok, err := w.getJob(req.Tenant, runID)
			if err != nil {
				return err
			}
			if !ok || !claimable(job, now) {
				continue // the index entry's job changed since the scan: the compare fails, or the job is not ours to take
			}
			l, err := w.claimOne(job, req.Worker, now, expiresAt)
			if err != nil {
				return err
			}
			leases = append(leases, l)
		}
		return nil
	})
	return leases, err
}

// claimable is the claim predicate (SPEC.md, Claim).
func claimable(j spec.Job, now int64) bool {
	return j.AvailableAt <= now && j.Attempts < j.MaxAttempts &&
		(j.State == spec.JobQueued || j.State == spec.JobLeased && j.LeaseExpiresAt <= now)
}

func lastPart(k string) string {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == sep {
			return k[i+1:]
		}
	}
	return k
}

// claimOne stages one claim of an eligible job.
func (w *wtx) claimOne(job spec.Job, worker string, now, expiresAt int64) (spec.Lease, error) {
	s, t, r := w.s, job.Tenant, job.RunID
	run, err := w.mustRun(t, r)
	if err != nil {
		return spec.Lease{}, err
	}
	if job.Generation > 0 {
		var old spec.Attempt
		ok, err := w.getJSON(s.attemptKey(t, r, job.Generation), &old)
		if err != nil {
			return spec.Lease{}, err
		}
		if ok && old.Outcome == spec.AttemptRunning {
			old.Outcome, old.FinishedAt = spec.AttemptExpired, now
			w.put(s.attemptKey(t, r, job.Generation), old)
		}
	}
	nj := job
	nj.State, nj.LeaseOwner, nj.LeaseExpiresAt = spec.JobLeased, worker, expiresAt
	nj.Generation++
	nj.Attempts++
	w.putJob(&job, nj)
	w.put(s.attemptKey(t, r, nj.Generation), spec.Attempt{Tenant: t, RunID: r, Generation: nj.Generation, Number: nj.Attempts,
		Worker: worker, ClaimedAt: now, RenewedAt: now, Outcome: spec.AttemptRunning})
	if run.State == spec.RunQueued {
		run.State = spec.RunRunning
		run.Version++
		w.put(s.runKey(t, r), run)
	}
	return leaseOf(nj, run.Run), nil
}

func leaseOf(j spec.Job, r spec.Run) spec.Lease {
	return spec.Lease{Tenant: j.Tenant, RunID: j.RunID, Operation: j.Operation, Owner: j.LeaseOwner, Generation: j.Generation,
		ExpiresAt: j.LeaseExpiresAt, Attempt: j.Attempts, MaxAttempts: j.MaxAttempts, Payload: r.Payload, DeadlineAt: r.DeadlineAt}
}

// guarded reads the job a lease names and holds the write to the lease
// guard: not_found, or spec.LeaseError's reason from the job as read, or
// the guard's compares added to the commit (with the job's, as for every
// key read).
func (w *wtx) guarded(op spec.Op, ref spec.LeaseRef, now int64) (spec.Job, error) {
	// What a guarded write reads, in one round trip: the job, its run and
	// the lease's attempt.
	if err := w.prefetch(w.s.jobKey(ref.Tenant, ref.RunID), w.s.runKey(ref.Tenant, ref.RunID),
		w.s.attemptKey(ref.Tenant, ref.RunID, ref.Generation)); err != nil {
		return spec.Job{}, err
	}
	job, ok, err := w.getJob(ref.Tenant, ref.RunID)
	if err != nil {
		return job, err
	}
	if !ok {
		return job, notFound(ref.Tenant, ref.RunID)
	}
	if e := spec.LeaseError(job, ref, now); e != nil {
		w.s.log.DebugContext(w.ctx, "guarded write refused", "op", op, "tenant", ref.Tenant, "run_id", ref.RunID,
			"generation", ref.Generation, "code", e.Code)
		return job, e
	}
	w.guard(w.s.leaseGuard(ref, now)...)
	return job, nil
}

// Renew implements spec.Store.
func (s *Store) Renew(ctx context.Context, req spec.RenewRequest) (lease spec.Lease, err error) {
	ref := req.Lease
	err = s.write(ctx, spec.OpRenew, []string{runLock(ref.Tenant, ref.RunID)}, func(w *wtx, now int64) error {
		expiresAt, err := s.cfg.CheckRenew(req, now)
		if err != nil {
			return err
		}
		job, err := w.guarded(spec.OpRenew, ref, now)
		if err != nil {
			return err
		}
		run, err := w.mustRun(ref.Tenant, ref.RunID)
		if err != nil {
			return err
		}
		if expiresAt > run.DeadlineAt {
			return spec.Errorf(spec.CodeDeadlineExceeded, "renewing to %d would pass run %s's deadline %d; finish or fail the attempt", expiresAt, run.ID, run.DeadlineAt)
		}
		nj := job
		nj.LeaseExpiresAt = expiresAt
		w.putJob(&job, nj)
		var a spec.Attempt
		if ok, err := w.getJSON(s.attemptKey(ref.Tenant, ref.RunID, ref.Generation), &a); err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("etcd: invariant violated: leased job %s/%s has no attempt %d", ref.Tenant, ref.RunID, ref.Generation)
			}
			return err
		}
		a.RenewedAt = now
		w.put(s.attemptKey(ref.Tenant, ref.RunID, ref.Generation), a)
		lease = leaseOf(nj, run.Run)
		return nil
	})
	return lease, err
}

// terminal describes one terminal transition.
type terminal struct {
	job        spec.JobState
	run        spec.RunState
	event      spec.EventKind
	payload    string
	errorCode  string
	errorClass spec.ErrorClass
	result     string
	outcome    spec.AttemptOutcome
}

// finishRun stages a run's terminal transition: state, version+1, its
// next event and its entry in the finished index.
func (w *wtx) finishRun(run *runRecord, now int64, t terminal) error {
	if run.State.Terminal() {
		return fmt.Errorf("etcd: invariant violated: run %s/%s is terminal while its job was not", run.Tenant, run.ID)
	}
	run.State, run.ErrorCode, run.Result, run.FinishedAt = t.run, t.errorCode, t.result, now
	run.Version++
	run.LastSeq++
	w.put(w.s.eventKey(run.Tenant, run.ID, run.LastSeq), spec.Event{Tenant: run.Tenant, RunID: run.ID, Seq: run.LastSeq, Kind: t.event,
		At: now, Payload: t.payload})
	w.put(w.s.finishedKey(run.Tenant, now, run.ID), "")
	w.put(w.s.runKey(run.Tenant, run.ID), *run)
	return nil
}

// finishAttempt stages the end of attempt gen if it is running.
func (w *wtx) finishAttempt(t, r string, gen, now int64, outcome spec.AttemptOutcome, code string, class spec.ErrorClass, retryAt int64) error {
	k := w.s.attemptKey(t, r, gen)
	var a spec.Attempt
	ok, err := w.getJSON(k, &a)
	if err != nil || !ok || a.Outcome != spec.AttemptRunning {
		return err
	}
	a.Outcome, a.FinishedAt, a.ErrorCode, a.ErrorClass, a.RetryAt = outcome, now, code, class, retryAt
	w.put(k, a)
	return nil
}

// finish applies a terminal transition under the lease guard: job, run and
// its event, attempt.
func (w *wtx) finish(op spec.Op, ref spec.LeaseRef, now int64, t terminal) (runRecord, error) {
	job, err := w.guarded(op, ref, now)
	if err != nil {
		return runRecord{}, err
	}
	return w.finishJob(job, ref.Generation, now, t)
}

// finishJob terminalizes a job the caller checked, with its run, event and
// attempt.
func (w *wtx) finishJob(job spec.Job, gen, now int64, t terminal) (runRecord, error) {
	run, err := w.mustRun(job.Tenant, job.RunID)
	if err != nil {
		return run, err
	}
	nj := job
	nj.State, nj.LeaseOwner, nj.LeaseExpiresAt = t.job, "", 0
	if t.errorCode != "" && t.job != spec.JobCancelled {
		nj.LastErrorCode = t.errorCode
	}
	w.putJob(&job, nj)
	if err := w.finishRun(&run, now, t); err != nil {
		return run, err
	}
	if t.outcome != "" {
		if err := w.finishAttempt(job.Tenant, job.RunID, gen, now, t.outcome, t.attemptCode(), t.errorClass, 0); err != nil {
			return run, err
		}
	}
	return run, nil
}

// attemptCode is the error code the attempt row records: the failure's,
// none for a completion or a cancel.
func (t terminal) attemptCode() string {
	if t.outcome == spec.AttemptCompleted || t.outcome == spec.AttemptCancelled {
		return ""
	}
	return t.errorCode
}

// Complete implements spec.Store.
func (s *Store) Complete(ctx context.Context, req spec.CompleteRequest) (run spec.Run, err error) {
	ref := req.Lease
	err = s.write(ctx, spec.OpComplete, []string{runLock(ref.Tenant, ref.RunID)}, func(w *wtx, now int64) error {
		var err error
		run, err = w.complete(spec.OpComplete, req, now)
		return err
	})
	return run, err
}

// complete is Complete's checks and writes inside the caller's attempt.
func (w *wtx) complete(op spec.Op, req spec.CompleteRequest, now int64) (spec.Run, error) {
	result, err := w.s.cfg.CheckComplete(req, now)
	if err != nil {
		return spec.Run{}, err
	}
	run, err := w.finish(op, req.Lease, now, terminal{job: spec.JobCompleted, run: spec.RunCompleted, event: spec.EventRunCompleted,
		payload: spec.CompletedPayload(req.Lease.Generation), result: result, outcome: spec.AttemptCompleted})
	if err != nil {
		return spec.Run{}, err
	}
	outbox, _ := spec.NormalizeOutbox(req.Outbox) // CheckComplete checked them
	if len(outbox) > 0 {
		w.putOutbox(&run, req.Lease.Generation, now, outbox)
		w.put(w.s.runKey(run.Tenant, run.ID), run)
	}
	return run.Run, nil
}

// CompleteBatch implements spec.BatchCompleter: one Txn, one clock reading
// per attempt, each member Complete's checks and writes on the attempt's
// overlay (a repeated member sees the first one's completion). A member
// refused by a contract check staged nothing and is reported in its outcome.
func (s *Store) CompleteBatch(ctx context.Context, reqs []spec.CompleteRequest) (outcomes []spec.BatchOutcome, err error) {
	if len(reqs) == 0 {
		return []spec.BatchOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d completions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	locks := make([]string, len(reqs))
	for i, r := range reqs {
		locks[i] = runLock(r.Lease.Tenant, r.Lease.RunID)
	}
	err = s.write(ctx, spec.OpCompleteBatch, locks, func(w *wtx, now int64) error {
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		outcomes = make([]spec.BatchOutcome, len(reqs))
		for i, req := range reqs {
			run, err := w.complete(spec.OpCompleteBatch, req, now)
			if err != nil {
				if _, ok := err.(*spec.Error); !ok {
					return err
				}
				outcomes[i].Err = err
				continue
			}
			outcomes[i].Run = run
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// Fail implements spec.Store.
func (s *Store) Fail(ctx context.Context, req spec.FailRequest) (run spec.Run, err error) {
	ref := req.Lease
	err = s.write(ctx, spec.OpFail, []string{runLock(ref.Tenant, ref.RunID)}, func(w *wtx, now int64) error {
		if err := s.cfg.CheckFail(req, now); err != nil {
			return err
		}
		rec, err := w.finish(spec.OpFail, ref, now, terminal{job: spec.JobDead, run: spec.RunFailed, event: spec.EventRunFailed,
			payload: spec.FailedPayload(req.ErrorCode, ref.Generation), errorCode: req.ErrorCode, errorClass: spec.ClassTerminal,
			outcome: spec.AttemptDead})
		run = rec.Run
		return err
	})
	return run, err
}

// Retry implements spec.Store.
func (s *Store) Retry(ctx context.Context, req spec.RetryRequest) (job spec.Job, err error) {
	ref := req.Lease
	err = s.write(ctx, spec.OpRetry, []string{runLock(ref.Tenant, ref.RunID)}, func(w *wtx, now int64) error {
		if err := s.cfg.CheckRetry(req, now); err != nil {
			return err
		}
		old, err := w.guarded(spec.OpRetry, ref, now)
		if err != nil {
			return err
		}
		if old.Attempts >= old.MaxAttempts {
			if _, err := w.finishJob(old, ref.Generation, now, terminal{job: spec.JobDead, run: spec.RunFailed, event: spec.EventRunFailed,
				payload: spec.FailedPayload(req.ErrorCode, ref.Generation), errorCode: req.ErrorCode, errorClass: spec.ClassRetryable,
				outcome: spec.AttemptDead}); err != nil {
				return err
			}
			job, _, err = w.getJob(ref.Tenant, ref.RunID)
			return err
		}
		delay, err := s.cfg.Backoff.Delay(old.Attempts, req.RetryAfterMs, s.jitter())
		if err != nil {
			return err
		}
		availableAt, err := spec.Deadline(now, delay, "retry time")
		if err != nil {
			return err
		}
		job = old
		job.State, job.LeaseOwner, job.LeaseExpiresAt, job.AvailableAt, job.LastErrorCode = spec.JobQueued, "", 0, availableAt, req.ErrorCode
		w.putJob(&old, job)
		return w.finishAttempt(ref.Tenant, ref.RunID, ref.Generation, now, spec.AttemptRetried, req.ErrorCode, spec.ClassRetryable, availableAt)
	})
	return job, err
}

// Cancel implements spec.Store.
func (s *Store) Cancel(ctx context.Context, req spec.CancelRequest) (run spec.Run, err error) {
	err = s.write(ctx, spec.OpCancel, []string{runLock(req.Tenant, req.RunID)}, func(w *wtx, now int64) error {
		reason, err := s.cfg.CheckCancel(req, now)
		if err != nil {
			return err
		}
		job, ok, err := w.getJob(req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		if !ok {
			return notFound(req.Tenant, req.RunID)
		}
		if job.State.Terminal() {
			return spec.TerminalError(spec.RunStateFor(job.State), req.RunID)
		}
		t := terminal{job: spec.JobCancelled, run: spec.RunCancelled, event: spec.EventRunCancelled,
			payload: spec.CancelledPayload(reason, job.Generation), errorCode: reason}
		if job.State == spec.JobLeased {
			t.outcome = spec.AttemptCancelled
		}
		rec, err := w.finishJob(job, job.Generation, now, t)
		run = rec.Run
		return err
	})
	return run, err
}

// Release implements spec.Store.
func (s *Store) Release(ctx context.Context, req spec.ReleaseRequest) (job spec.Job, err error) {
	ref := req.Lease
	err = s.write(ctx, spec.OpRelease, []string{runLock(ref.Tenant, ref.RunID)}, func(w *wtx, now int64) error {
		if err := s.cfg.CheckRelease(req, now); err != nil {
			return err
		}
		old, err := w.guarded(spec.OpRelease, ref, now)
		if err != nil {
			return err
		}
		job = old
		job.State, job.LeaseOwner, job.LeaseExpiresAt, job.AvailableAt = spec.JobQueued, "", 0, now
		job.Attempts--
		w.putJob(&old, job)
		return w.finishAttempt(ref.Tenant, ref.RunID, ref.Generation, now, spec.AttemptReleased, "", "", 0)
	})
	return job, err
}

// Reap implements spec.Store: victims from a range read of the tenant's
// reapable index (expiry <= now, in (expiry, run id) order), skipping those
// this process's writers hold.
func (s *Store) Reap(ctx context.Context, req spec.ReapRequest) (reaped []string, err error) {
	err = s.write(ctx, spec.OpReap, nil, func(w *wtx, now int64) error {
		if err := s.cfg.CheckReap(req, now); err != nil {
			return err
		}
		kvs, err := w.scan(s.under(famReapable, req.Tenant), s.under(famReapable, req.Tenant, num(now+1)), int64(2*req.Limit+8))
		if err != nil {
			return err
		}
		reaped = []string{}
		for _, kv := range kvs {
			if len(reaped) == req.Limit {
				break
			}
			runID := lastPart(string(kv.Key))
			if !w.tryLock(runLock(req.Tenant, runID)) {
				continue
			}
			job, ok, err := w.getJob(req.Tenant, runID)
			if err != nil {
				return err
			}
			if !ok || job.State != spec.JobLeased || job.LeaseExpiresAt > now || job.Attempts < job.MaxAttempts {
				continue
			}
			if _, err := w.finishJob(job, job.Generation, now, terminal{job: spec.JobDead, run: spec.RunFailed, event: spec.EventRunFailed,
				payload: spec.FailedPayload(spec.ReapErrorCode, job.Generation), errorCode: spec.ReapErrorCode,
				errorClass: spec.ClassExpired, outcome: spec.AttemptDead}); err != nil {
				return err
			}
			reaped = append(reaped, runID)
		}
		return nil
	})
	return reaped, err
}

// PurgeIdempotency implements spec.Store: the oldest expired records from
// the expiry index; exact under concurrency, because the scanned part of
// the index is compared as a range (no record added to it) and each record
// deleted is compared on its own (none deleted by another meanwhile).
func (s *Store) PurgeIdempotency(ctx context.Context, req spec.PurgeRequest) (deleted int, err error) {
	err = s.write(ctx, spec.OpPurge, nil, func(w *wtx, now int64) error {
		if err := spec.CheckPurge(req, now); err != nil {
			return err
		}
		from, to := s.under(famIdemExpiry), s.under(famIdemExpiry, num(now+1))
		kvs, err := w.scan(from, to, int64(req.Limit))
		if err != nil {
			return err
		}
		if len(kvs) == req.Limit {
			to = string(kvs[len(kvs)-1].Key) + "\x00"
		}
		w.compareRange(from, to)
		deleted = 0
		for _, kv := range kvs {
			parts := splitKey(string(kv.Key))
			t, op, k := parts[2], parts[3], parts[4]
			var rec spec.IdempotencyRecord
			ok, err := w.getJSON(s.idemKey(t, op, k), &rec)
			if err != nil {
				return err
			}
			w.del(string(kv.Key))
			if ok && rec.ExpiresAt <= now {
				w.del(s.idemKey(t, op, k))
				deleted++
			}
		}
		return nil
	})
	return deleted, err
}

// splitKey returns a key's parts after the prefix: family, then the parts.
func splitKey(k string) []string {
	var out []string
	start := 0
	for i := 0; i < len(k); i++ {
		if k[i] == sep {
			out = append(out, k[start:i])
			start = i + 1
		}
	}
	return append(out, k[start:])[1:]
}

// Replay implements spec.Store.
func (s *Store) Replay(ctx context.Context, req spec.ReplayRequest) (run spec.Run, err error) {
	locks := []string{runLock(req.Tenant, req.RunID), runLock(req.Tenant, req.NewRunID)}
	err = s.write(ctx, spec.OpReplay, locks, func(w *wtx, now int64) error {
		if err := s.cfg.CheckReplay(req, now); err != nil {
			return err
		}
		orig, ok, err := w.getRunRec(req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		if !ok {
			return notFound(req.Tenant, req.RunID)
		}
		if orig.State != spec.RunFailed {
			return spec.Errorf(spec.CodeFailedPrecondition, "run %s is %s; only a failed (dead) run can be replayed", orig.ID, orig.State)
		}
		depth := orig.ReplayDepth + 1
		if depth > s.cfg.MaxReplays {
			return spec.Errorf(spec.CodeReplayLimit, "run %s is replay %d of its lineage; the limit is %d", orig.ID, orig.ReplayDepth, s.cfg.MaxReplays)
		}
		rbk := s.replayedByKey(req.Tenant, req.RunID)
		if b, ok, err := w.raw(rbk); err != nil || ok {
			if err == nil {
				err = spec.Errorf(spec.CodeAlreadyExists, "run %s was already replayed as %s; replay that run instead", orig.ID, b)
			}
			return err
		}
		if _, exists, err := w.getRunRec(req.Tenant, req.NewRunID); err != nil || exists {
			if err == nil {
				err = spec.RunExists(req.Tenant, req.NewRunID)
			}
			return err
		}
		origJob, ok, err := w.getJob(req.Tenant, req.RunID)
		if err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("etcd: invariant violated: run %s/%s has no job", req.Tenant, req.RunID)
			}
			return err
		}
		deadline, err := spec.Deadline(now, orig.DeadlineAt-orig.CreatedAt, "run deadline")
		if err != nil {
			return err
		}
		nr := runRecord{Run: spec.Run{Tenant: req.Tenant, ID: req.NewRunID, Operation: orig.Operation, State: spec.RunQueued, Version: 1, LastSeq: 1,
			Payload: orig.Payload, Fingerprint: orig.Fingerprint, MaxAttempts: orig.MaxAttempts, CreatedAt: now, DeadlineAt: deadline,
			ReplayOf: orig.ID, ReplayDepth: depth}}
		w.put(s.runKey(req.Tenant, req.NewRunID), nr)
		w.put(s.createdKey(req.Tenant, now, req.NewRunID), req.NewRunID)
		w.put(rbk, req.NewRunID)
		w.put(s.eventKey(req.Tenant, req.NewRunID, 1), spec.Event{Tenant: req.Tenant, RunID: req.NewRunID, Seq: 1, Kind: spec.EventRunQueued,
			At: now, Payload: spec.QueuedPayload(orig.ID, req.Actor, depth)})
		w.putJob(nil, spec.Job{Tenant: req.Tenant, RunID: req.NewRunID, Operation: orig.Operation, State: spec.JobQueued, AvailableAt: now,
			Generation: origJob.Generation, MaxAttempts: orig.MaxAttempts})
		run = nr.Run
		return nil
	})
	return run, err
}

// ReserveEffect implements spec.Store.
func (s *Store) ReserveEffect(ctx context.Context, req spec.ReserveEffectRequest) (res spec.EffectReservation, err error) {
	ref := req.Lease
	err = s.write(ctx, spec.OpReserveEffect, []string{runLock(ref.Tenant, ref.RunID)}, func(w *wtx, now int64) error {
		if err := s.cfg.CheckReserveEffect(req, now); err != nil {
			return err
		}
		if _, err := w.guarded(spec.OpReserveEffect, ref, now); err != nil {
			return err
		}
		k := s.effectKey(ref.Tenant, ref.RunID, req.Step, req.Key)
		var eff spec.Effect
		ok, err := w.getJSON(k, &eff)
		if err != nil {
			return err
		}
		fresh := spec.Effect{Tenant: ref.Tenant, RunID: ref.RunID, Step: req.Step, Key: req.Key, State: spec.EffectReserved,
			Generation: ref.Generation, UpdatedAt: now}
		switch {
		case !ok || eff.State == spec.EffectFailed:
			w.put(k, fresh)
			res = spec.EffectReservation{Effect: fresh, Decision: spec.DecisionProceed}
		case eff.State == spec.EffectSucceeded:
			res = spec.EffectReservation{Effect: eff, Decision: spec.DecisionDone}
		default: // unknown, or reserved (by any generation, the caller's too): it may have been applied
			res = spec.EffectReservation{Effect: eff, Decision: spec.DecisionReconcile}
		}
		return nil
	})
	return res, err
}

// RecordEffect implements spec.Store.
func (s *Store) RecordEffect(ctx context.Context, req spec.RecordEffectRequest) (spec.Effect, error) {
	return s.resolveEffect(ctx, spec.OpRecordEffect, req)
}

// ReconcileEffect implements spec.Store.
func (s *Store) ReconcileEffect(ctx context.Context, req spec.ReconcileEffectRequest) (spec.Effect, error) {
	return s.resolveEffect(ctx, spec.OpReconcileEffect, spec.RecordEffectRequest(req))
}

func (s *Store) resolveEffect(ctx context.Context, op spec.Op, req spec.RecordEffectRequest) (eff spec.Effect, err error) {
	ref := req.Lease
	reconcile := op == spec.OpReconcileEffect
	err = s.write(ctx, op, []string{runLock(ref.Tenant, ref.RunID)}, func(w *wtx, now int64) error {
		if err := s.cfg.CheckRecordEffect(req, now, reconcile); err != nil {
			return err
		}
		if _, err := w.guarded(op, ref, now); err != nil {
			return err
		}
		k := s.effectKey(ref.Tenant, ref.RunID, req.Step, req.Key)
		var before spec.Effect
		ok, err := w.getJSON(k, &before)
		if err != nil {
			return err
		}
		if !ok {
			return spec.Errorf(spec.CodeNotFound, "effect %s/%s of run %s not found; reserve it first", req.Step, spec.ShortHash(req.Key), ref.RunID)
		}
		allowed := before.State == spec.EffectReserved && before.Generation == ref.Generation
		if reconcile {
			allowed = before.State == spec.EffectUnknown || before.State == spec.EffectReserved
		}
		if !allowed {
			return spec.Errorf(spec.CodeEffectConflict, "effect %s/%s is %s by generation %d; %s by generation %d is not allowed",
				req.Step, spec.ShortHash(req.Key), before.State, before.Generation, op, ref.Generation)
		}
		eff = before
		eff.State, eff.ProviderRef, eff.UpdatedAt = req.State, req.ProviderRef, now
		if reconcile {
			eff.Generation = ref.Generation
		}
		w.put(k, eff)
		return nil
	})
	return eff, err
}

// ClaimOutbox implements spec.Store: candidates from the pending index (of
// the tenant, or of all), in (created_at, tenant, run id, seq) order, those
// with a live claim passed over and those this process's writers hold
// skipped, then one Txn comparing each claimed message.
func (s *Store) ClaimOutbox(ctx context.Context, req spec.ClaimOutboxRequest) (claimed []spec.OutboxMessage, err error) {
	err = s.write(ctx, spec.OpClaimOutbox, nil, func(w *wtx, now int64) error {
		expiresAt, err := s.cfg.CheckClaimOutbox(req, now)
		if err != nil {
			return err
		}
		from := s.under(famPending)
		if req.Tenant != "" {
			from = s.under(famPendingOf, req.Tenant)
		}
		to := end(from)
		claimed = []spec.OutboxMessage{}
		for len(claimed) < req.Limit {
			kvs, err := w.scan(from, to, int64(2*req.Limit+8))
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				if len(claimed) == req.Limit {
					break
				}
				p := splitKey(string(kv.Key))
				var k spec.OutboxKey
				if req.Tenant != "" {
					k.Tenant, k.RunID = p[1], p[3]
					fmt.Sscan(p[4], &k.Seq)
				} else {
					k.Tenant, k.RunID = p[2], p[3]
					fmt.Sscan(p[4], &k.Seq)
				}
				if !w.tryLock(msgLock(k)) {
					continue
				}
				mk := s.outboxKey(k.Tenant, k.RunID, k.Seq)
				var m spec.OutboxMessage
				ok, err := w.getJSON(mk, &m)
				if err != nil {
					return err
				}
				if !ok || !spec.OutboxClaimable(m, now) {
					continue
				}
				m.Relay, m.ClaimExpiresAt = req.Relay, expiresAt
				m.Claims++
				w.put(mk, m)
				claimed = append(claimed, m)
			}
			if len(kvs) < 2*req.Limit+8 {
				break
			}
			from = string(kvs[len(kvs)-1].Key) + "\x00"
		}
		return nil
	})
	return claimed, err
}

// MarkDelivered implements spec.Store.
func (s *Store) MarkDelivered(ctx context.Context, req spec.MarkDeliveredRequest) (marked int, err error) {
	locks := make([]string, len(req.Messages))
	for i, k := range req.Messages {
		locks[i] = msgLock(k)
	}
	err = s.write(ctx, spec.OpMarkDelivered, locks, func(w *wtx, now int64) error {
		if err := s.cfg.CheckMarkDelivered(req, now); err != nil {
			return err
		}
		marked = 0
		for _, k := range req.Messages {
			mk := s.outboxKey(k.Tenant, k.RunID, k.Seq)
			var m spec.OutboxMessage
			ok, err := w.getJSON(mk, &m)
			if err != nil {
				return err
			}
			if !ok || m.State != spec.OutboxPending {
				continue
			}
			for _, pk := range s.pendingKeys(m) {
				w.del(pk)
			}
			m.State, m.DeliveredAt, m.Relay, m.ClaimExpiresAt = spec.OutboxDelivered, now, "", 0
			w.put(mk, m)
			marked++
		}
		return nil
	})
	return marked, err
}

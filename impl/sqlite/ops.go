package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

// args is a set of named statement parameters.
type args map[string]any

func (a args) list() []any {
	out := make([]any, 0, len(a))
	for k, v := range a {
		out = append(out, sql.Named(k, v))
	}
	return out
}

// with returns a copy of a with more parameters.
func (a args) with(kv args) args {
	out := make(args, len(a)+len(kv))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range kv {
		out[k] = v
	}
	return out
}

func leaseArgs(l spec.LeaseRef, now int64) args {
	return args{"tenant": l.Tenant, "run_id": l.RunID, "owner": l.Owner, "generation": l.Generation, "now": now}
}

// nullable turns "" and 0 into SQL NULL.
func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

func exec(ctx context.Context, tx *txn, query string, a args) (int64, error) {
	res, err := tx.ExecContext(ctx, query, a.list()...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// CreateRun implements spec.Store: admit with one member, which returns a
// refusal as the call's error, having written nothing.
func (s *Store) CreateRun(ctx context.Context, req spec.CreateRunRequest) (res spec.CreateRunResult, err error) {
	err = s.write(ctx, spec.OpCreateRun, func(tx *txn, now int64) error {
		outcomes, err := s.admit(ctx, tx, []spec.CreateRunRequest{req}, now, false)
		if err != nil {
			return err
		}
		res = outcomes[0].Result
		return outcomes[0].Err
	})
	return res, err
}

// Claim implements spec.Store.
func (s *Store) Claim(ctx context.Context, req spec.ClaimRequest) (leases []spec.Lease, err error) {
	err = s.write(ctx, spec.OpClaim, func(tx *txn, now int64) error {
		expiresAt, err := s.cfg.CheckClaim(req, now)
		if err != nil {
			return err
		}
		a := args{"tenant": req.Tenant, "worker": req.Worker, "now": now, "expires_at": expiresAt, "limit": req.Limit}
		query := claimCandidates
		if mutant.On(mutant.ClaimIgnoresExpired) {
			query = mutantClaimIgnoresExpired
		}
		rows, err := tx.QueryContext(ctx, query, a.list()...)
		if err != nil {
			return err
		}
		var candidates []string
		for rows.Next() {
			var runID string
			if err := rows.Scan(&runID); err != nil {
				rows.Close()
				return err
			}
			candidates = append(candidates, runID)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		leases = make([]spec.Lease, 0, len(candidates))
		for _, runID := range candidates {
			var generation int64
			var attempts int
			ja := a.with(args{"run_id": runID})
			if err := tx.QueryRowContext(ctx, claimJob, ja.list()...).Scan(&generation, &attempts); err != nil {
				// The writer lock is held since the candidates were read:
				// no row can have changed.
				return fmt.Errorf("sqlite: claim candidate %s no longer eligible: %w", runID, err)
			}
			ja["generation"] = generation - 1
			if _, err := exec(ctx, tx, closeSupersededAttempt, ja); err != nil {
				return err
			}
			ja["generation"], ja["number"] = generation, attempts
			if _, err := exec(ctx, tx, insertAttempt, ja); err != nil {
				return err
			}
			if _, err := exec(ctx, tx, markRunRunning, ja); err != nil {
				return err
			}
			l, err := leaseOf(ctx, tx, req.Tenant, runID)
			if err != nil {
				return err
			}
			leases = append(leases, l)
		}
		return nil
	})
	return leases, err
}

// leaseOf reads the lease a job holds now, with its run's payload and deadline.
func leaseOf(ctx context.Context, tx *txn, tenant, runID string) (spec.Lease, error) {
	job, err := getJob(ctx, tx, tenant, runID)
	if err != nil {
		return spec.Lease{}, err
	}
	run, err := getRun(ctx, tx, tenant, runID)
	if err != nil {
		return spec.Lease{}, err
	}
	return spec.Lease{Tenant: tenant, RunID: runID, Operation: job.Operation, Owner: job.LeaseOwner,
		Generation: job.Generation, ExpiresAt: job.LeaseExpiresAt, Attempt: job.Attempts, MaxAttempts: job.MaxAttempts,
		Payload: run.Payload, DeadlineAt: run.DeadlineAt}, nil
}

// leaseProblem reads the job as it is now and says why the lease guard
// would not match it: a *spec.Error, or nil when the lease is current.
func (s *Store) leaseProblem(ctx context.Context, tx *txn, op spec.Op, ref spec.LeaseRef, now int64) error {
	job, err := getJob(ctx, tx, ref.Tenant, ref.RunID)
	if err != nil {
		return err
	}
	if e := spec.LeaseError(job, ref, now); e != nil {
		s.log.DebugContext(ctx, "guarded write refused", "op", op, "tenant", ref.Tenant, "run_id", ref.RunID,
			"generation", ref.Generation, "code", e.Code)
		return e
	}
	return nil
}

// refused explains why a guarded statement matched no row. If the lease is
// current after all, the statement's own extra predicate refused it, which
// callers with such a predicate handle before calling refused.
func (s *Store) refused(ctx context.Context, tx *txn, op spec.Op, ref spec.LeaseRef, now int64) error {
	if err := s.leaseProblem(ctx, tx, op, ref, now); err != nil {
		return err
	}
	return fmt.Errorf("sqlite: %s matched no row although lease %s is current", op, ref)
}

// Renew implements spec.Store.
func (s *Store) Renew(ctx context.Context, req spec.RenewRequest) (lease spec.Lease, err error) {
	err = s.write(ctx, spec.OpRenew, func(tx *txn, now int64) error {
		expiresAt, err := s.cfg.CheckRenew(req, now)
		if err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now).with(args{"expires_at": expiresAt})
		n, err := exec(ctx, tx, renewLease, a)
		if err != nil {
			return err
		}
		if n == 0 {
			// The update also refuses a current lease whose new expiry would
			// pass the deadline: blame the deadline only if the lease is current.
			if err := s.leaseProblem(ctx, tx, spec.OpRenew, req.Lease, now); err != nil {
				return err
			}
			run, err := getRun(ctx, tx, req.Lease.Tenant, req.Lease.RunID)
			if err != nil {
				return err
			}
			return spec.Errorf(spec.CodeDeadlineExceeded, "renewing to %d would pass run %s's deadline %d; finish or fail the attempt", expiresAt, run.ID, run.DeadlineAt)
		}
		if _, err := exec(ctx, tx, touchAttempt, a); err != nil {
			return err
		}
		lease, err = leaseOf(ctx, tx, req.Lease.Tenant, req.Lease.RunID)
		return err
	})
	return lease, err
}

// terminal describes one terminal transition made under a lease.
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

// finish applies a terminal transition: the job under the lease guard, then
// the run, its next event and the attempt row.
func (s *Store) finish(ctx context.Context, tx *txn, op spec.Op, ref spec.LeaseRef, now int64, t terminal) error {
	a := leaseArgs(ref, now).with(args{"state": t.job, "error_code": nullable(t.errorCode)})
	query := finishJob
	completes := op == spec.OpComplete || op == spec.OpCompleteBatch
	if completes && mutant.On(mutant.CompleteIgnoresGeneration) || op == spec.OpCompleteBatch && mutant.On(mutant.BatchIgnoresGeneration) {
		query = mutantFinishJobIgnoresGeneration
	}
	n, err := exec(ctx, tx, query, a)
	if err != nil {
		return err
	}
	if n == 0 {
		return s.refused(ctx, tx, op, ref, now)
	}
	if err := finishRunWithEvent(ctx, tx, ref.Tenant, ref.RunID, now, t); err != nil {
		return err
	}
	_, err = exec(ctx, tx, finishAttempt, a.with(args{"outcome": t.outcome, "error_class": nullable(string(t.errorClass)), "retry_at": nil}))
	return err
}

// finishRunWithEvent terminalizes the run and appends its terminal event at
// the next sequence, in the caller's transaction.
func finishRunWithEvent(ctx context.Context, tx *txn, tenant, runID string, now int64, t terminal) error {
	a := args{"tenant": tenant, "run_id": runID, "now": now, "state": t.run, "error_code": nullable(t.errorCode), "result": nullable(t.result)}
	var seq int64
	err := tx.QueryRowContext(ctx, finishRun, a.list()...).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite: invariant violated: run %s/%s is terminal while its job was not", tenant, runID)
	}
	if err != nil {
		return err
	}
	_, err = exec(ctx, tx, insertEvent, a.with(args{"seq": seq, "kind": t.event, "payload": t.payload}))
	return err
}

// Complete implements spec.Store.
func (s *Store) Complete(ctx context.Context, req spec.CompleteRequest) (run spec.Run, err error) {
	err = s.write(ctx, spec.OpComplete, func(tx *txn, now int64) error {
		var err error
		run, err = s.completeIn(ctx, tx, req, now, false)
		return err
	})
	return run, err
}

// Fail implements spec.Store.
func (s *Store) Fail(ctx context.Context, req spec.FailRequest) (run spec.Run, err error) {
	err = s.write(ctx, spec.OpFail, func(tx *txn, now int64) error {
		if err := s.cfg.CheckFail(req, now); err != nil {
			return err
		}
		err = s.finish(ctx, tx, spec.OpFail, req.Lease, now, terminal{job: spec.JobDead, run: spec.RunFailed,
			event: spec.EventRunFailed, payload: spec.FailedPayload(req.ErrorCode, req.Lease.Generation),
			errorCode: req.ErrorCode, errorClass: spec.ClassTerminal, outcome: spec.AttemptDead})
		if err != nil {
			return err
		}
		run, err = getRun(ctx, tx, req.Lease.Tenant, req.Lease.RunID)
		return err
	})
	return run, err
}

// Retry implements spec.Store.
func (s *Store) Retry(ctx context.Context, req spec.RetryRequest) (job spec.Job, err error) {
	err = s.write(ctx, spec.OpRetry, func(tx *txn, now int64) error {
		if err := s.cfg.CheckRetry(req, now); err != nil {
			return err
		}
		ref := req.Lease
		a := leaseArgs(ref, now)
		var attempts, maxAttempts int
		err := tx.QueryRowContext(ctx, selectGuarded, a.list()...).Scan(&attempts, &maxAttempts)
		if errors.Is(err, sql.ErrNoRows) {
			return s.refused(ctx, tx, spec.OpRetry, ref, now)
		}
		if err != nil {
			return err
		}
		if attempts >= maxAttempts {
			t := terminal{job: spec.JobDead, run: spec.RunFailed, event: spec.EventRunFailed,
				payload: spec.FailedPayload(req.ErrorCode, ref.Generation), errorCode: req.ErrorCode,
				errorClass: spec.ClassRetryable, outcome: spec.AttemptDead}
			if mutant.On(mutant.BudgetNotAtomic) {
				err = s.mutantFinishJobOnly(ctx, tx, ref, now, t)
			} else {
				err = s.finish(ctx, tx, spec.OpRetry, ref, now, t)
			}
		} else {
			err = s.requeue(ctx, tx, req, attempts, now)
		}
		if err != nil {
			return err
		}
		job, err = getJob(ctx, tx, ref.Tenant, ref.RunID)
		return err
	})
	return job, err
}

// requeue schedules the next attempt after the backoff delay.
func (s *Store) requeue(ctx context.Context, tx *txn, req spec.RetryRequest, attempts int, now int64) error {
	b := s.cfg.Backoff
	delay, err := b.Delay(attempts, req.RetryAfterMs, s.random.Int64N(b.JitterBound()))
	if err != nil {
		return err
	}
	availableAt, err := spec.Deadline(now, delay, "retry time")
	if err != nil {
		return err
	}
	a := leaseArgs(req.Lease, now).with(args{"available_at": availableAt, "error_code": req.ErrorCode})
	query := requeueJob
	if mutant.On(mutant.RetryResetsGeneration) {
		query = mutantRequeueResetsGeneration
	}
	n, err := exec(ctx, tx, query, a)
	if err != nil {
		return err
	}
	if n == 0 {
		return s.refused(ctx, tx, spec.OpRetry, req.Lease, now)
	}
	_, err = exec(ctx, tx, finishAttempt, a.with(args{"outcome": spec.AttemptRetried,
		"error_class": string(spec.ClassRetryable), "retry_at": availableAt}))
	return err
}

// Cancel implements spec.Store.
func (s *Store) Cancel(ctx context.Context, req spec.CancelRequest) (run spec.Run, err error) {
	err = s.write(ctx, spec.OpCancel, func(tx *txn, now int64) error {
		reason, err := s.cfg.CheckCancel(req, now)
		if err != nil {
			return err
		}
		job, err := getJob(ctx, tx, req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		if job.State.Terminal() {
			return spec.TerminalError(spec.RunStateFor(job.State), req.RunID)
		}
		a := args{"tenant": req.Tenant, "run_id": req.RunID, "now": now, "generation": job.Generation}
		if _, err := exec(ctx, tx, cancelJob, a); err != nil {
			return err
		}
		if job.State == spec.JobLeased {
			if _, err := exec(ctx, tx, finishAttempt, a.with(args{"outcome": spec.AttemptCancelled,
				"error_code": nil, "error_class": nil, "retry_at": nil})); err != nil {
				return err
			}
		}
		err = finishRunWithEvent(ctx, tx, req.Tenant, req.RunID, now, terminal{run: spec.RunCancelled,
			event: spec.EventRunCancelled, payload: spec.CancelledPayload(reason, job.Generation), errorCode: reason})
		if err != nil {
			return err
		}
		run, err = getRun(ctx, tx, req.Tenant, req.RunID)
		return err
	})
	return run, err
}

// Release implements spec.Store.
func (s *Store) Release(ctx context.Context, req spec.ReleaseRequest) (job spec.Job, err error) {
	err = s.write(ctx, spec.OpRelease, func(tx *txn, now int64) error {
		if err := s.cfg.CheckRelease(req, now); err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now)
		n, err := exec(ctx, tx, releaseJob, a)
		if err != nil {
			return err
		}
		if n == 0 {
			return s.refused(ctx, tx, spec.OpRelease, req.Lease, now)
		}
		if _, err := exec(ctx, tx, finishAttempt, a.with(args{"outcome": spec.AttemptReleased,
			"error_code": nil, "error_class": nil, "retry_at": nil})); err != nil {
			return err
		}
		job, err = getJob(ctx, tx, req.Lease.Tenant, req.Lease.RunID)
		return err
	})
	return job, err
}

// Reap implements spec.Store.
func (s *Store) Reap(ctx context.Context, req spec.ReapRequest) (reaped []string, err error) {
	err = s.write(ctx, spec.OpReap, func(tx *txn, now int64) error {
		if err := s.cfg.CheckReap(req, now); err != nil {
			return err
		}
		a := args{"tenant": req.Tenant, "now": now, "limit": req.Limit, "error_code": spec.ReapErrorCode}
		type victim struct {
			runID      string
			generation int64
		}
		var victims []victim
		rows, err := tx.QueryContext(ctx, selectReapable, a.list()...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v victim
			if err := rows.Scan(&v.runID, &v.generation); err != nil {
				rows.Close()
				return err
			}
			victims = append(victims, v)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		reaped = make([]string, 0, len(victims))
		for _, v := range victims {
			va := a.with(args{"run_id": v.runID, "generation": v.generation})
			n, err := exec(ctx, tx, reapJob, va)
			if err != nil {
				return err
			}
			if n == 0 {
				continue
			}
			t := terminal{run: spec.RunFailed, event: spec.EventRunFailed, payload: spec.FailedPayload(spec.ReapErrorCode, v.generation),
				errorCode: spec.ReapErrorCode}
			if err := finishRunWithEvent(ctx, tx, req.Tenant, v.runID, now, t); err != nil {
				return err
			}
			if _, err := exec(ctx, tx, finishAttempt, va.with(args{"outcome": spec.AttemptDead,
				"error_class": string(spec.ClassExpired), "retry_at": nil})); err != nil {
				return err
			}
			reaped = append(reaped, v.runID)
		}
		return nil
	})
	return reaped, err
}

// PurgeIdempotency implements spec.Store.
func (s *Store) PurgeIdempotency(ctx context.Context, req spec.PurgeRequest) (deleted int, err error) {
	err = s.write(ctx, spec.OpPurge, func(tx *txn, now int64) error {
		if err := spec.CheckPurge(req, now); err != nil {
			return err
		}
		n, err := exec(ctx, tx, purgeIdempotency, args{"now": now, "limit": req.Limit})
		deleted = int(n)
		return err
	})
	return deleted, err
}

// PurgeRuns implements spec.Store. The writer lock orders it against every
// other writer, so the lineages it picks cannot change before it commits.
func (s *Store) PurgeRuns(ctx context.Context, req spec.PurgeRunsRequest) (deleted []string, err error) {
	err = s.write(ctx, spec.OpPurgeRuns, func(tx *txn, now int64) error {
		if err := s.cfg.CheckPurgeRuns(req, now); err != nil {
			return err
		}
		deleted = []string{}
		by, on := s.cfg.RetiredBy(now)
		if !on {
			return nil
		}
		lineages, err := retiredLineages(ctx, tx, req.Tenant, by, now, req.Limit)
		if err != nil {
			return err
		}
		for _, l := range lineages {
			for _, runID := range l { // leaf first: a replay goes before the run it references
				a := args{"tenant": req.Tenant, "run_id": runID, "now": now}
				for _, q := range []string{deleteRunOutbox, deleteRunEffects, deleteRunAttempts, deleteRunJob, deleteRunEvents} {
					if _, err := exec(ctx, tx, q, a); err != nil {
						return err
					}
				}
				if n, err := exec(ctx, tx, deleteRun, a); err != nil || n != 1 {
					if err == nil {
						err = fmt.Errorf("sqlite: invariant violated: retired run %s/%s was not deleted (it holds a live idempotency record)", req.Tenant, runID)
					}
					return err
				}
				deleted = append(deleted, runID)
			}
		}
		return nil
	})
	return deleted, err
}

// retiredLineages returns up to limit lineages of the tenant every run of
// which is retired (SPEC.md, PurgeRuns), each leaf first, in (leaf finished,
// leaf run id) order. It reads the retired leaves a page at a time and walks
// each one's replay_of links (at most MaxReplays); a lineage with a run that
// is not retired is passed over, and the next page read, until limit
// lineages are found or no leaf is left.
func retiredLineages(ctx context.Context, tx *txn, tenant string, by, now int64, limit int) ([][]string, error) {
	a := args{"tenant": tenant, "retired_by": by, "now": now, "after_at": int64(-1), "after_id": ""}
	var out [][]string
	for len(out) < limit {
		want := limit - len(out)
		type leaf struct {
			runID, replayOf string
			at              int64
		}
		var page []leaf
		rows, err := tx.QueryContext(ctx, selectRetiredLeaves, a.with(args{"limit": want}).list()...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var l leaf
			if err := rows.Scan(&l.runID, &l.replayOf, &l.at); err != nil {
				rows.Close()
				return nil, err
			}
			page = append(page, l)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		for _, l := range page {
			lineage, up := []string{l.runID}, l.replayOf
			for up != "" {
				var next string
				err := tx.QueryRowContext(ctx, selectRetiredRun, a.with(args{"run_id": up}).list()...).Scan(&next)
				if errors.Is(err, sql.ErrNoRows) {
					lineage = nil // a run of it is not retired: the lineage stays whole
					break
				}
				if err != nil {
					return nil, err
				}
				lineage, up = append(lineage, up), next
			}
			if lineage != nil {
				out = append(out, lineage)
			}
		}
		if len(page) < want {
			break // no leaf left
		}
		last := page[len(page)-1]
		a = a.with(args{"after_at": last.at, "after_id": last.runID})
	}
	return out, nil
}

// Replay implements spec.Store.
func (s *Store) Replay(ctx context.Context, req spec.ReplayRequest) (run spec.Run, err error) {
	err = s.write(ctx, spec.OpReplay, func(tx *txn, now int64) error {
		if err := s.cfg.CheckReplay(req, now); err != nil {
			return err
		}
		orig, err := getRun(ctx, tx, req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		if orig.State != spec.RunFailed {
			return spec.Errorf(spec.CodeFailedPrecondition, "run %s is %s; only a failed (dead) run can be replayed", orig.ID, orig.State)
		}
		depth := orig.ReplayDepth + 1
		if depth > s.cfg.MaxReplays {
			return spec.Errorf(spec.CodeReplayLimit, "run %s is replay %d of its lineage; the limit is %d", orig.ID, orig.ReplayDepth, s.cfg.MaxReplays)
		}
		var existing string
		err = tx.QueryRowContext(ctx, selectReplayOf, args{"tenant": req.Tenant, "run_id": req.RunID}.list()...).Scan(&existing)
		if err == nil {
			return spec.Errorf(spec.CodeAlreadyExists, "run %s was already replayed as %s; replay that run instead", orig.ID, existing)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if exists, err := runExists(ctx, tx, req.Tenant, req.NewRunID); err != nil || exists {
			if err == nil {
				err = spec.RunExists(req.Tenant, req.NewRunID)
			}
			return err
		}
		origJob, err := getJob(ctx, tx, req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		deadline, err := spec.Deadline(now, orig.DeadlineAt-orig.CreatedAt, "run deadline")
		if err != nil {
			return err
		}
		a := args{"tenant": req.Tenant, "run_id": req.NewRunID, "operation": orig.Operation, "payload": orig.Payload,
			"fingerprint": orig.Fingerprint, "max_attempts": orig.MaxAttempts, "now": now, "deadline_at": deadline,
			"replay_of": orig.ID, "replay_depth": depth, "generation": origJob.Generation, "available_at": now,
			// The audited run_queued event is the run row's (insertRun);
			// a replay holds no idempotency record.
			"queued_payload": spec.QueuedPayload(orig.ID, req.Actor, depth), "key": nil, "expires_at": nil}
		for _, q := range []string{insertRun, insertJob} {
			if _, err := exec(ctx, tx, q, a); err != nil {
				return err
			}
		}
		run, err = getRun(ctx, tx, req.Tenant, req.NewRunID)
		return err
	})
	return run, err
}

// guard checks that ref is the current lease, for writes that do not change
// the job row (effect ledger writes).
func (s *Store) guard(ctx context.Context, tx *txn, op spec.Op, ref spec.LeaseRef, now int64) error {
	var attempts, maxAttempts int
	err := tx.QueryRowContext(ctx, selectGuarded, leaseArgs(ref, now).list()...).Scan(&attempts, &maxAttempts)
	if errors.Is(err, sql.ErrNoRows) {
		return s.refused(ctx, tx, op, ref, now)
	}
	return err
}

// ReserveEffect implements spec.Store.
func (s *Store) ReserveEffect(ctx context.Context, req spec.ReserveEffectRequest) (res spec.EffectReservation, err error) {
	err = s.write(ctx, spec.OpReserveEffect, func(tx *txn, now int64) error {
		if err := s.cfg.CheckReserveEffect(req, now); err != nil {
			return err
		}
		if err := s.guard(ctx, tx, spec.OpReserveEffect, req.Lease, now); err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now).with(args{"step": req.Step, "key": req.Key})
		var state spec.EffectState
		err := tx.QueryRowContext(ctx, selectEffect, a.list()...).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = exec(ctx, tx, insertEffect, a)
			res.Decision = spec.DecisionProceed
		case err != nil:
		case state == spec.EffectSucceeded:
			res.Decision = spec.DecisionDone
		case state == spec.EffectFailed:
			_, err = exec(ctx, tx, reReserveEffect, a)
			res.Decision = spec.DecisionProceed
		default: // unknown, or reserved (by any generation, the caller's too): it may have been applied
			res.Decision = spec.DecisionReconcile
		}
		if err != nil {
			return err
		}
		res.Effect, err = getEffect(ctx, tx, req.Lease.Tenant, req.Lease.RunID, req.Step, req.Key)
		return err
	})
	return res, err
}

// RecordEffect implements spec.Store.
func (s *Store) RecordEffect(ctx context.Context, req spec.RecordEffectRequest) (spec.Effect, error) {
	return s.resolveEffect(ctx, spec.OpRecordEffect, req, recordEffect)
}

// ReconcileEffect implements spec.Store.
func (s *Store) ReconcileEffect(ctx context.Context, req spec.ReconcileEffectRequest) (spec.Effect, error) {
	return s.resolveEffect(ctx, spec.OpReconcileEffect, spec.RecordEffectRequest(req), reconcileEffect)
}

func (s *Store) resolveEffect(ctx context.Context, op spec.Op, req spec.RecordEffectRequest, query string) (eff spec.Effect, err error) {
	err = s.write(ctx, op, func(tx *txn, now int64) error {
		if err := s.cfg.CheckRecordEffect(req, now, op == spec.OpReconcileEffect); err != nil {
			return err
		}
		if err := s.guard(ctx, tx, op, req.Lease, now); err != nil {
			return err
		}
		before, err := getEffect(ctx, tx, req.Lease.Tenant, req.Lease.RunID, req.Step, req.Key)
		if err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now).with(args{"step": req.Step, "key": req.Key, "state": req.State, "provider_ref": req.ProviderRef})
		n, err := exec(ctx, tx, query, a)
		if err != nil {
			return err
		}
		if n == 0 {
			return spec.Errorf(spec.CodeEffectConflict, "effect %s/%s is %s by generation %d; %s by generation %d is not allowed",
				req.Step, spec.ShortHash(req.Key), before.State, before.Generation, op, req.Lease.Generation)
		}
		eff, err = getEffect(ctx, tx, req.Lease.Tenant, req.Lease.RunID, req.Step, req.Key)
		return err
	})
	return eff, err
}

// writeOutbox inserts msgs as the next pending outbox messages of run
// (tenant, runID), created at runCreatedAt, written at now by generation gen
// (0: the admission).
func writeOutbox(ctx context.Context, tx *txn, tenant, runID string, runCreatedAt, gen, now int64, msgs []spec.OutgoingMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	a := args{"tenant": tenant, "run_id": runID, "generation": gen, "now": now}
	var seq int64
	if err := tx.QueryRowContext(ctx, nextOutboxSeq, a.list()...).Scan(&seq); err != nil {
		return err
	}
	for i, m := range msgs {
		n := seq + int64(i)
		if _, err := exec(ctx, tx, insertOutbox, a.with(args{"seq": n, "message_id": spec.OutboxID(tenant, runID, runCreatedAt, n),
			"subject": m.Subject, "payload": m.Payload})); err != nil {
			return err
		}
	}
	return nil
}

// ClaimOutbox implements spec.Store.
func (s *Store) ClaimOutbox(ctx context.Context, req spec.ClaimOutboxRequest) (claimed []spec.OutboxMessage, err error) {
	err = s.write(ctx, spec.OpClaimOutbox, func(tx *txn, now int64) error {
		expiresAt, err := s.cfg.CheckClaimOutbox(req, now)
		if err != nil {
			return err
		}
		a := args{"tenant": req.Tenant, "relay": req.Relay, "now": now, "expires_at": expiresAt, "limit": req.Limit}
		query := selectClaimableOutbox
		if req.Tenant != "" {
			query = selectClaimableOutboxOfTenant
		}
		keys, err := queryAll(ctx, tx, func(row scanner) (spec.OutboxKey, error) {
			var k spec.OutboxKey
			return k, row.Scan(&k.Tenant, &k.RunID, &k.Seq)
		}, query, a.list()...)
		if err != nil {
			return err
		}
		claimed = make([]spec.OutboxMessage, 0, len(keys))
		for _, k := range keys {
			m, err := scanOutbox(tx.QueryRowContext(ctx, claimOutbox, a.with(args{"tenant": k.Tenant, "run_id": k.RunID, "seq": k.Seq}).list()...))
			if err != nil {
				// The writer lock is held since the candidates were read.
				return fmt.Errorf("sqlite: outbox candidate %s/%s#%d no longer claimable: %w", k.Tenant, k.RunID, k.Seq, err)
			}
			claimed = append(claimed, m)
		}
		return nil
	})
	return claimed, err
}

// MarkDelivered implements spec.Store.
func (s *Store) MarkDelivered(ctx context.Context, req spec.MarkDeliveredRequest) (marked int, err error) {
	err = s.write(ctx, spec.OpMarkDelivered, func(tx *txn, now int64) error {
		if err := s.cfg.CheckMarkDelivered(req, now); err != nil {
			return err
		}
		marked = 0
		for _, k := range req.Messages {
			n, err := exec(ctx, tx, markDelivered, args{"tenant": k.Tenant, "run_id": k.RunID, "seq": k.Seq, "now": now})
			if err != nil {
				return err
			}
			marked += int(n)
		}
		return nil
	})
	return marked, err
}

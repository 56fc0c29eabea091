package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

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

func (t *txn) exec(query string, a args) (int64, error) {
	tag, err := t.Exec(t.ctx, query, a)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// lockJob locks the job row of (tenant, runID) and returns it, or found =
// false when the run has no job (it does not exist for this tenant).
func (t *txn) lockJob(tenant, runID string) (job spec.Job, found bool, err error) {
	job, err = scanJob(t.QueryRow(t.ctx, lockJob, args{"tenant": tenant, "run_id": runID}))
	if errors.Is(err, pgx.ErrNoRows) {
		job, err = spec.Job{}, nil
	} else {
		found = err == nil
	}
	if err == nil {
		t.locked = &lockedRow{key: jobKey{tenant, runID}, job: job, found: found}
	}
	return job, found, err
}

// lockedNow locks the job of (tenant, runID), then reads the operation's
// clock: the order that makes a writer's time no earlier than the commit of
// the writer it waited for.
func (t *txn) lockedNow(tenant, runID string) (int64, error) {
	if _, _, err := t.lockJob(tenant, runID); err != nil {
		return 0, err
	}
	return t.clock()
}

// admissionScope names the admission lock (lockAdmission) of one
// idempotency scope.
func (s *Store) admissionScope(tenant, operation, key string) string {
	return "leasehold.admit/" + s.schema + "/" + tenant + "/" + operation + "/" + key
}

// Claim implements spec.Store in one round trip and the COMMIT: BEGIN, the
// plan setting (genericPlans, see claimJobs), the database clock's reading
// (setClaimNow), the claim statement and the commit marker are sent as one
// pipelined batch. No ordering lock to take first: the claim statement
// locks its rows with SKIP LOCKED and never waits for one.
func (s *Store) Claim(ctx context.Context, req spec.ClaimRequest) (leases []spec.Lease, err error) {
	if err := s.precheck(func(now int64) error { _, err := s.cfg.CheckClaim(req, now); return err }); err != nil {
		return nil, err
	}
	// The injected clock is read here; the database clock by setClaimNow.
	var now *int64
	if s.clock != nil {
		n := s.clock.Now()
		now = &n
	}
	query := claimJobs
	if mutant.On(mutant.ClaimIgnoresExpired) {
		query = mutantClaimIgnoresExpired
	}
	first := func(b *pgx.Batch) {
		b.Queue(genericPlans)
		if now == nil {
			b.Queue(setClaimNow)
		}
		b.Queue(query, claimArgs(req, now))
		b.Queue(markCommitQuery)
	}
	err = s.writePipelined(ctx, spec.OpClaim, first, func(t *txn, br pgx.BatchResults) error {
		settings := 1 // genericPlans
		if now == nil {
			settings++ // setClaimNow
		}
		for range settings {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return err
		}
		// The leases in claim order, then one row with the statement's time.
		var claimed []spec.Lease
		var at *int64
		for rows.Next() {
			var l spec.Lease
			var pickedAt, rowAt *int64
			var runID *string
			if err := rows.Scan(&pickedAt, &runID, &l.Operation, &l.Generation, &l.Attempt, &l.MaxAttempts,
				&l.Payload, &l.DeadlineAt, &rowAt); err != nil {
				rows.Close()
				br.Close()
				return err
			}
			if runID == nil {
				at = rowAt
				continue
			}
			l.Tenant, l.RunID, l.Owner = req.Tenant, *runID, req.Worker
			claimed = append(claimed, l)
		}
		if err := rows.Err(); err != nil {
			br.Close()
			return err
		}
		if at == nil {
			br.Close()
			return fmt.Errorf("postgres: the claim statement returned no time")
		}
		t.now, t.timed = *at, true
		// The statement claimed only at a time in range, so this fails only
		// when it claimed nothing: the claim is refused for its time.
		expiresAt, err := s.cfg.CheckClaim(req, *at)
		if err != nil {
			br.Close()
			if len(claimed) > 0 {
				return fmt.Errorf("postgres: the claim statement claimed %d jobs at time %d, which the spec refuses: %w", len(claimed), *at, err)
			}
			return err
		}
		leases = append([]spec.Lease{}, claimed...)
		for i := range leases {
			leases[i].ExpiresAt = expiresAt
		}
		return t.readMark(br)
	})
	if err != nil {
		return nil, err
	}
	return leases, nil
}

// claimArgs are the claim statement's arguments; now is nil for the
// database clock.
func claimArgs(req spec.ClaimRequest, now *int64) args {
	return args{"tenant": req.Tenant, "worker": req.Worker, "now": now, "lease_ms": req.LeaseMs,
		"latest": int64(math.MaxInt64) - req.LeaseMs, "limit": req.Limit}
}

// refused explains why a guarded statement matched no row, from the job row
// as it is now: the row lockJob read under the lock the transaction still
// holds, when the transaction has not written it (every caller refuses
// before its first write to the row), else read again.
func (s *Store) refused(t *txn, op spec.Op, ref spec.LeaseRef, now int64) error {
	job, err := t.heldJob(ref.Tenant, ref.RunID)
	if err != nil {
		return err
	}
	e := spec.LeaseError(job, ref, now)
	if e == nil {
		return fmt.Errorf("postgres: %s matched no row although lease %s is current", op, ref)
	}
	s.log.DebugContext(t.ctx, "guarded write refused", "op", op, "tenant", ref.Tenant, "run_id", ref.RunID,
		"generation", ref.Generation, "code", e.Code)
	return e
}

// heldJob returns the job row of (tenant, runID) as the transaction
// locked it, or not_found; it reads the row only when lockJob did not.
func (t *txn) heldJob(tenant, runID string) (spec.Job, error) {
	if l := t.locked; l != nil && l.key == (jobKey{tenant, runID}) {
		if !l.found {
			return spec.Job{}, spec.Errorf(spec.CodeNotFound, "run %s not found for tenant %s", runID, tenant)
		}
		return l.job, nil
	}
	return getJob(t.ctx, t, tenant, runID)
}

// leaseOf reads the lease a job holds now, with its run's payload and deadline.
func leaseOf(t *txn, tenant, runID string) (spec.Lease, error) {
	job, err := getJob(t.ctx, t, tenant, runID)
	if err != nil {
		return spec.Lease{}, err
	}
	run, err := getRun(t.ctx, t, tenant, runID)
	if err != nil {
		return spec.Lease{}, err
	}
	return spec.Lease{Tenant: tenant, RunID: runID, Operation: job.Operation, Owner: job.LeaseOwner,
		Generation: job.Generation, ExpiresAt: job.LeaseExpiresAt, Attempt: job.Attempts, MaxAttempts: job.MaxAttempts,
		Payload: run.Payload, DeadlineAt: run.DeadlineAt}, nil
}

// Renew implements spec.Store.
func (s *Store) Renew(ctx context.Context, req spec.RenewRequest) (lease spec.Lease, err error) {
	if err := s.precheck(func(now int64) error { _, err := s.cfg.CheckRenew(req, now); return err }); err != nil {
		return lease, err
	}
	err = s.write(ctx, spec.OpRenew, func(t *txn) error {
		now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
		if err != nil {
			return err
		}
		expiresAt, err := s.cfg.CheckRenew(req, now)
		if err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now).with(args{"expires_at": expiresAt})
		n, err := t.exec(renewLease, a)
		if err != nil {
			return err
		}
		if n == 0 {
			// The update also refuses a current lease whose new expiry would
			// pass the deadline: ask LeaseError first, and only then blame
			// the deadline.
			job, err := t.heldJob(req.Lease.Tenant, req.Lease.RunID)
			if err != nil {
				return err
			}
			if spec.LeaseError(job, req.Lease, now) != nil {
				return s.refused(t, spec.OpRenew, req.Lease, now)
			}
			run, err := getRun(ctx, t, req.Lease.Tenant, req.Lease.RunID)
			if err != nil {
				return err
			}
			return spec.Errorf(spec.CodeDeadlineExceeded, "renewing to %d would pass run %s's deadline %d; finish or fail the attempt", expiresAt, run.ID, run.DeadlineAt)
		}
		lease, err = leaseOf(t, req.Lease.Tenant, req.Lease.RunID)
		return err
	})
	return lease, err
}

// terminal describes one terminal transition: the job's new state, the
// run's, its terminal event's payload, and how the attempt ends (if the job
// was leased).
type terminal struct {
	job        spec.JobState
	run        spec.RunState
	payload    string
	errorCode  string
	errorClass spec.ErrorClass
	result     string
	outcome    spec.AttemptOutcome
}

// args are the parameters of runEnds and attemptEnds for tm.
func (tm terminal) args() args {
	return args{"state": string(tm.job), "run_state": string(tm.run), "error_code": nullable(tm.errorCode),
		"result": nullable(tm.result), "payload": tm.payload, "outcome": string(tm.outcome),
		"error_class": nullable(string(tm.errorClass))}
}

// finishStatement and cancelStatement are finishJob and cancelJob
// returning the run.
var (
	finishStatement = returningRun(finishJob)
	cancelStatement = returningRun(cancelJob)
)

// finish applies a terminal transition under the lease guard: the job, its
// run, its terminal event and its attempt, in the one job row. It returns
// the run as updated.
func (s *Store) finish(t *txn, op spec.Op, ref spec.LeaseRef, now int64, tm terminal) (spec.Run, error) {
	query := finishStatement
	if op == spec.OpComplete && mutant.On(mutant.CompleteIgnoresGeneration) {
		query = mutantFinishJobIgnoresGeneration
	}
	run, err := scanRun(t.QueryRow(t.ctx, query, leaseArgs(ref, now).with(tm.args())))
	if errors.Is(err, pgx.ErrNoRows) {
		return spec.Run{}, s.refused(t, op, ref, now)
	}
	return run, err
}

// Complete implements spec.Store.
func (s *Store) Complete(ctx context.Context, req spec.CompleteRequest) (run spec.Run, err error) {
	if err := s.precheck(func(now int64) error { _, err := s.cfg.CheckComplete(req, now); return err }); err != nil {
		return run, err
	}
	err = s.write(ctx, spec.OpComplete, func(t *txn) error {
		now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
		if err != nil {
			return err
		}
		run, err = s.completeIn(t, req, now)
		return err
	})
	return run, err
}

// Fail implements spec.Store.
func (s *Store) Fail(ctx context.Context, req spec.FailRequest) (run spec.Run, err error) {
	if err := s.precheck(func(now int64) error { return s.cfg.CheckFail(req, now) }); err != nil {
		return run, err
	}
	err = s.write(ctx, spec.OpFail, func(t *txn) error {
		now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
		if err != nil {
			return err
		}
		if err := s.cfg.CheckFail(req, now); err != nil {
			return err
		}
		run, err = s.finish(t, spec.OpFail, req.Lease, now, terminal{job: spec.JobDead, run: spec.RunFailed,
			payload:   spec.FailedPayload(req.ErrorCode, req.Lease.Generation),
			errorCode: req.ErrorCode, errorClass: spec.ClassTerminal, outcome: spec.AttemptDead})
		return err
	})
	return run, err
}

// Retry implements spec.Store.
func (s *Store) Retry(ctx context.Context, req spec.RetryRequest) (job spec.Job, err error) {
	if err := s.precheck(func(now int64) error { return s.cfg.CheckRetry(req, now) }); err != nil {
		return job, err
	}
	err = s.write(ctx, spec.OpRetry, func(t *txn) error {
		ref := req.Lease
		now, err := t.lockedNow(ref.Tenant, ref.RunID)
		if err != nil {
			return err
		}
		if err := s.cfg.CheckRetry(req, now); err != nil {
			return err
		}
		var attempts, maxAttempts int
		err = t.QueryRow(ctx, selectGuarded, leaseArgs(ref, now)).Scan(&attempts, &maxAttempts)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.refused(t, spec.OpRetry, ref, now)
		}
		if err != nil {
			return err
		}
		if attempts >= maxAttempts {
			tm := terminal{job: spec.JobDead, run: spec.RunFailed,
				payload: spec.FailedPayload(req.ErrorCode, ref.Generation), errorCode: req.ErrorCode,
				errorClass: spec.ClassRetryable, outcome: spec.AttemptDead}
			if mutant.On(mutant.BudgetNotAtomic) {
				err = s.mutantFinishJobOnly(t, ref, now, tm)
			} else {
				_, err = s.finish(t, spec.OpRetry, ref, now, tm)
			}
		} else {
			err = s.requeue(t, req, attempts, now)
		}
		if err != nil {
			return err
		}
		job, err = getJob(ctx, t, ref.Tenant, ref.RunID)
		return err
	})
	return job, err
}

// requeue schedules the next attempt after the backoff delay.
func (s *Store) requeue(t *txn, req spec.RetryRequest, attempts int, now int64) error {
	b := s.cfg.Backoff
	delay, err := b.Delay(attempts, req.RetryAfterMs, s.random.Int64N(b.JitterBound()))
	if err != nil {
		return err
	}
	availableAt, err := spec.Deadline(now, delay, "retry time")
	if err != nil {
		return err
	}
	a := leaseArgs(req.Lease, now).with(args{"available_at": availableAt, "error_code": req.ErrorCode,
		"outcome": string(spec.AttemptRetried), "error_class": string(spec.ClassRetryable)})
	query := requeueJob
	if mutant.On(mutant.RetryResetsGeneration) {
		query = mutantRequeueResetsGeneration
	}
	n, err := t.exec(query, a)
	if err != nil {
		return err
	}
	if n == 0 {
		return s.refused(t, spec.OpRetry, req.Lease, now)
	}
	return nil
}

// Cancel implements spec.Store.
func (s *Store) Cancel(ctx context.Context, req spec.CancelRequest) (run spec.Run, err error) {
	if err := s.precheck(func(now int64) error { _, err := s.cfg.CheckCancel(req, now); return err }); err != nil {
		return run, err
	}
	err = s.write(ctx, spec.OpCancel, func(t *txn) error {
		job, found, err := t.lockJob(req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		now, err := t.clock()
		if err != nil {
			return err
		}
		reason, err := s.cfg.CheckCancel(req, now)
		if err != nil {
			return err
		}
		if !found {
			return spec.Errorf(spec.CodeNotFound, "run %s not found for tenant %s", req.RunID, req.Tenant)
		}
		if job.State.Terminal() {
			return spec.TerminalError(spec.RunStateFor(job.State), req.RunID)
		}
		tm := terminal{run: spec.RunCancelled, payload: spec.CancelledPayload(reason, job.Generation), errorCode: reason}
		run, err = scanRun(t.QueryRow(ctx, cancelStatement, args{"tenant": req.Tenant, "run_id": req.RunID, "now": now}.with(tm.args())))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres: run %s/%s: cancel matched no row although its job was %s under lock", req.Tenant, req.RunID, job.State)
		}
		if err != nil {
			return err
		}
		return s.notify(t, spec.NotifyRunCancelled, req.Tenant, req.RunID, job.Generation)
	})
	return run, err
}

// Release implements spec.Store.
func (s *Store) Release(ctx context.Context, req spec.ReleaseRequest) (job spec.Job, err error) {
	if err := s.precheck(func(now int64) error { return s.cfg.CheckRelease(req, now) }); err != nil {
		return job, err
	}
	err = s.write(ctx, spec.OpRelease, func(t *txn) error {
		now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
		if err != nil {
			return err
		}
		if err := s.cfg.CheckRelease(req, now); err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now).with(args{"outcome": string(spec.AttemptReleased), "error_code": nil, "error_class": nil})
		n, err := t.exec(releaseJob, a)
		if err != nil {
			return err
		}
		if n == 0 {
			return s.refused(t, spec.OpRelease, req.Lease, now)
		}
		job, err = getJob(ctx, t, req.Lease.Tenant, req.Lease.RunID)
		return err
	})
	return job, err
}

// Reap implements spec.Store.
func (s *Store) Reap(ctx context.Context, req spec.ReapRequest) (reaped []string, err error) {
	if err := s.precheck(func(now int64) error { return s.cfg.CheckReap(req, now) }); err != nil {
		return nil, err
	}
	err = s.write(ctx, spec.OpReap, func(t *txn) error {
		now, err := t.clock()
		if err != nil {
			return err
		}
		if err := s.cfg.CheckReap(req, now); err != nil {
			return err
		}
		a := args{"tenant": req.Tenant, "now": now, "limit": req.Limit}
		type victim struct {
			runID      string
			generation int64
			expiresAt  int64
		}
		rows, err := t.Query(ctx, selectReapable, a)
		if err != nil {
			return err
		}
		victims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (victim, error) {
			var v victim
			return v, row.Scan(&v.runID, &v.generation, &v.expiresAt)
		})
		if err != nil {
			return err
		}
		// The rows come back in the ORDER BY's order unless a locked row was
		// re-checked after a concurrent change; sort to be sure.
		sort.Slice(victims, func(i, j int) bool {
			if victims[i].expiresAt != victims[j].expiresAt {
				return victims[i].expiresAt < victims[j].expiresAt
			}
			return victims[i].runID < victims[j].runID
		})
		reaped = make([]string, 0, len(victims))
		for _, v := range victims {
			tm := terminal{run: spec.RunFailed, payload: spec.FailedPayload(spec.ReapErrorCode, v.generation),
				errorCode: spec.ReapErrorCode, errorClass: spec.ClassExpired, outcome: spec.AttemptDead}
			n, err := t.exec(reapJob, a.with(tm.args()).with(args{"run_id": v.runID, "generation": v.generation}))
			if err != nil {
				return err
			}
			if n == 0 {
				continue
			}
			reaped = append(reaped, v.runID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return reaped, nil
}

// PurgeIdempotency implements spec.Store.
func (s *Store) PurgeIdempotency(ctx context.Context, req spec.PurgeRequest) (deleted int, err error) {
	if err := s.precheck(func(now int64) error { return spec.CheckPurge(req, now) }); err != nil {
		return 0, err
	}
	err = s.write(ctx, spec.OpPurge, func(t *txn) error {
		now, err := t.clock()
		if err != nil {
			return err
		}
		if err := spec.CheckPurge(req, now); err != nil {
			return err
		}
		n, err := t.exec(purgeIdempotency, args{"now": now, "limit": req.Limit})
		deleted = int(n)
		return err
	})
	if err != nil {
		return 0, err
	}
	return deleted, nil
}

// purgeRounds bounds how often PurgeRuns picks again after its locks
// found the lineages it picked changed.
const purgeRounds = 4

// PurgeRuns implements spec.Store. It reads the clock, picks the retired
// lineages (retiredLineages), locks their job and run rows (lockPurged), and picks
// again: when the second pick holds no run
// the locks do not cover, nothing can change what it picked before the
// commit, and it deletes them. A pick changed by a concurrent write (a
// replay of a leaf, a run finishing, another purge) is locked too and the
// pick repeated, up to purgeRounds times, after which it gives up with
// unavailable, having written nothing.
func (s *Store) PurgeRuns(ctx context.Context, req spec.PurgeRunsRequest) (deleted []string, err error) {
	if err := s.precheck(func(now int64) error { return s.cfg.CheckPurgeRuns(req, now) }); err != nil {
		return nil, err
	}
	err = s.write(ctx, spec.OpPurgeRuns, func(t *txn) error {
		now, err := t.clock()
		if err != nil {
			return err
		}
		if err := s.cfg.CheckPurgeRuns(req, now); err != nil {
			return err
		}
		deleted = []string{}
		by, on := s.cfg.RetiredBy(now)
		if !on {
			return nil
		}
		locked := map[string]bool{}
		for round := 0; ; round++ {
			lineages, err := t.retiredLineages(req.Tenant, by, now, req.Limit)
			if err != nil {
				return err
			}
			picked, unlocked := []string{}, []string(nil)
			for _, l := range lineages {
				for _, id := range l {
					picked = append(picked, id)
					if !locked[id] {
						unlocked = append(unlocked, id)
					}
				}
			}
			if len(unlocked) == 0 {
				deleted = picked
				break
			}
			if round == purgeRounds {
				return spec.Errorf(spec.CodeUnavailable, "purge_runs: the runs it picked kept changing under concurrent writes (%d rounds); nothing was written, retry", purgeRounds)
			}
			if err := t.lockPurged(req.Tenant, unlocked); err != nil {
				return err
			}
			for _, id := range unlocked {
				locked[id] = true
			}
		}
		if len(deleted) == 0 {
			return nil
		}
		a := args{"tenant": req.Tenant, "run_ids": deleted, "now": now}
		for _, q := range []string{deletePurgedOutbox, deletePurgedEffects, deletePurgedAttempts, deletePurgedJobs} {
			if _, err := t.exec(q, a); err != nil {
				return err
			}
		}
		n, err := t.exec(deletePurgedRuns, a)
		if err == nil && n != int64(len(deleted)) {
			err = fmt.Errorf("postgres: purged %d of %d retired runs: a live idempotency record names one", n, len(deleted))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return deleted, nil
}

// lockPurged takes the job and run row locks of runIDs (the statement
// lockPurged). It takes no admission lock: an admission that finds a
// purged run's record gone is one after the purge; one that found a row
// the purge deletes finds it gone where it depends on it (the read of the
// runs it decided from, readDecided; the expired record's deletion; a bulk
// admission's lock of the runs it decided from), rolls back and runs again
// (errRaced, admit);
// and a bulk admission that writes holds what it decided from until it
// commits (lockDecidedRuns), so the purge waits for it.
func (t *txn) lockPurged(tenant string, runIDs []string) error {
	_, err := t.exec(lockPurged, args{"tenant": tenant, "run_ids": runIDs})
	return err
}

// retiredLineages is the SQLite store's retiredLineages on this schema: up
// to limit lineages of the tenant every run of which is retired, each leaf
// first, in (leaf finished, leaf run id) order, reading the leaves a page at
// a time and walking each one's replay_of links.
func (t *txn) retiredLineages(tenant string, by, now int64, limit int) ([][]string, error) {
	a := args{"tenant": tenant, "retired_by": by, "now": now, "after_at": int64(-1), "after_id": ""}
	var out [][]string
	for len(out) < limit {
		want := limit - len(out)
		type leaf struct {
			runID, replayOf string
			at              int64
		}
		rows, err := t.Query(t.ctx, selectRetiredLeaves, a.with(args{"limit": want}))
		if err != nil {
			return nil, err
		}
		page, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leaf, error) {
			var l leaf
			return l, row.Scan(&l.runID, &l.replayOf, &l.at)
		})
		if err != nil {
			return nil, err
		}
		for _, l := range page {
			lineage, up := []string{l.runID}, l.replayOf
			for up != "" {
				var next string
				err := t.QueryRow(t.ctx, selectRetiredRun, a.with(args{"run_id": up})).Scan(&next)
				if errors.Is(err, pgx.ErrNoRows) {
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
	if err := s.precheck(func(now int64) error { return s.cfg.CheckReplay(req, now) }); err != nil {
		return run, err
	}
	err = s.write(ctx, spec.OpReplay, func(t *txn) error {
		// Locking the original's job serializes replays of one run, so the
		// second sees the first's replay_of link.
		origJob, found, err := t.lockJob(req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		now, err := t.clock()
		if err != nil {
			return err
		}
		if err := s.cfg.CheckReplay(req, now); err != nil {
			return err
		}
		orig, err := getRun(ctx, t, req.Tenant, req.RunID)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("postgres: invariant violated: run %s/%s has no job", req.Tenant, req.RunID)
		}
		if orig.State != spec.RunFailed {
			return spec.Errorf(spec.CodeFailedPrecondition, "run %s is %s; only a failed (dead) run can be replayed", orig.ID, orig.State)
		}
		depth := orig.ReplayDepth + 1
		if depth > s.cfg.MaxReplays {
			return spec.Errorf(spec.CodeReplayLimit, "run %s is replay %d of its lineage; the limit is %d", orig.ID, orig.ReplayDepth, s.cfg.MaxReplays)
		}
		var existing string
		err = t.QueryRow(ctx, selectReplayOf, args{"tenant": req.Tenant, "run_id": req.RunID}).Scan(&existing)
		if err == nil {
			return spec.Errorf(spec.CodeAlreadyExists, "run %s was already replayed as %s; replay that run instead", orig.ID, existing)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Checked here, before the deadline, to keep SQLite's check order;
		// insertRun's ON CONFLICT still catches an id taken concurrently.
		if exists, err := runExists(ctx, t, req.Tenant, req.NewRunID); err != nil || exists {
			if err == nil {
				err = spec.RunExists(req.Tenant, req.NewRunID)
			}
			return err
		}
		deadline, err := spec.Deadline(now, orig.DeadlineAt-orig.CreatedAt, "run deadline")
		if err != nil {
			return err
		}
		a := args{"tenant": req.Tenant, "run_id": req.NewRunID, "operation": orig.Operation, "payload": orig.Payload,
			"fingerprint": orig.Fingerprint, "max_attempts": orig.MaxAttempts, "now": now, "deadline_at": deadline,
			"replay_of": orig.ID, "replay_depth": depth, "generation": origJob.Generation, "available_at": now,
			"queued_payload": spec.QueuedPayload(orig.ID, req.Actor, depth)}
		run, err = scanRun(t.QueryRow(ctx, insertRun, a))
		if errors.Is(err, pgx.ErrNoRows) {
			return spec.RunExists(req.Tenant, req.NewRunID)
		}
		if err != nil {
			return err
		}
		return s.notify(t, spec.NotifyRunCreated, req.Tenant, req.NewRunID, 0)
	})
	return run, err
}

// guard checks that ref is the current lease, for writes that do not change
// the job row (effect ledger writes). The caller holds the job's lock.
func (s *Store) guard(t *txn, op spec.Op, ref spec.LeaseRef, now int64) error {
	var attempts, maxAttempts int
	err := t.QueryRow(t.ctx, selectGuarded, leaseArgs(ref, now)).Scan(&attempts, &maxAttempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.refused(t, op, ref, now)
	}
	return err
}

// ReserveEffect implements spec.Store.
func (s *Store) ReserveEffect(ctx context.Context, req spec.ReserveEffectRequest) (res spec.EffectReservation, err error) {
	if err := s.precheck(func(now int64) error { return s.cfg.CheckReserveEffect(req, now) }); err != nil {
		return res, err
	}
	err = s.write(ctx, spec.OpReserveEffect, func(t *txn) error {
		now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
		if err != nil {
			return err
		}
		if err := s.cfg.CheckReserveEffect(req, now); err != nil {
			return err
		}
		if err := s.guard(t, spec.OpReserveEffect, req.Lease, now); err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now).with(args{"step": req.Step, "key": req.Key})
		var state spec.EffectState
		err = t.QueryRow(ctx, selectEffect, a).Scan(&state)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			_, err = t.exec(insertEffect, a)
			res.Decision = spec.DecisionProceed
		case err != nil:
		case state == spec.EffectSucceeded:
			res.Decision = spec.DecisionDone
		case state == spec.EffectFailed:
			_, err = t.exec(reReserveEffect, a)
			res.Decision = spec.DecisionProceed
		default: // unknown, or reserved (by any generation, the caller's too): it may have been applied
			res.Decision = spec.DecisionReconcile
		}
		if err != nil {
			return err
		}
		res.Effect, err = getEffect(ctx, t, req.Lease.Tenant, req.Lease.RunID, req.Step, req.Key)
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
	reconcile := op == spec.OpReconcileEffect
	if err := s.precheck(func(now int64) error { return s.cfg.CheckRecordEffect(req, now, reconcile) }); err != nil {
		return eff, err
	}
	err = s.write(ctx, op, func(t *txn) error {
		now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
		if err != nil {
			return err
		}
		if err := s.cfg.CheckRecordEffect(req, now, reconcile); err != nil {
			return err
		}
		if err := s.guard(t, op, req.Lease, now); err != nil {
			return err
		}
		before, err := getEffect(ctx, t, req.Lease.Tenant, req.Lease.RunID, req.Step, req.Key)
		if err != nil {
			return err
		}
		a := leaseArgs(req.Lease, now).with(args{"step": req.Step, "key": req.Key, "state": string(req.State), "provider_ref": req.ProviderRef})
		n, err := t.exec(query, a)
		if err != nil {
			return err
		}
		if n == 0 {
			return spec.Errorf(spec.CodeEffectConflict, "effect %s/%s is %s by generation %d; %s by generation %d is not allowed",
				req.Step, spec.ShortHash(req.Key), before.State, before.Generation, op, req.Lease.Generation)
		}
		eff, err = getEffect(ctx, t, req.Lease.Tenant, req.Lease.RunID, req.Step, req.Key)
		return err
	})
	return eff, err
}

// outboxWrite is a set of outbox messages to write in one statement
// (insertOutbox's arrays): each with its run and generation.
type outboxWrite struct {
	tenants, runIDs, subjects, payloads []string
	created, generations                []int64
}

// add appends msgs, written by generation gen (0: the admission) of run.
func (w *outboxWrite) add(run spec.Run, gen int64, msgs []spec.OutgoingMessage) {
	for _, m := range msgs {
		w.tenants, w.runIDs = append(w.tenants, run.Tenant), append(w.runIDs, run.ID)
		w.created, w.generations = append(w.created, run.CreatedAt), append(w.generations, gen)
		w.subjects, w.payloads = append(w.subjects, m.Subject), append(w.payloads, m.Payload)
	}
}

// args are insertOutbox's parameters for w's messages at now.
func (w outboxWrite) args(now int64) args {
	return args{"tenants": w.tenants, "run_ids": w.runIDs, "created": w.created,
		"generations": w.generations, "subjects": w.subjects, "payloads": w.payloads, "now": now}
}

// writeOutbox inserts w's messages at now, if any.
func (t *txn) writeOutbox(w outboxWrite, now int64) error {
	if len(w.tenants) == 0 {
		return nil
	}
	n, err := t.exec(insertOutbox, w.args(now))
	if err == nil && n != int64(len(w.tenants)) {
		err = fmt.Errorf("postgres: wrote %d outbox messages of %d", n, len(w.tenants))
	}
	return err
}

// ClaimOutbox implements spec.Store.
func (s *Store) ClaimOutbox(ctx context.Context, req spec.ClaimOutboxRequest) (claimed []spec.OutboxMessage, err error) {
	if err := s.precheck(func(now int64) error { _, err := s.cfg.CheckClaimOutbox(req, now); return err }); err != nil {
		return nil, err
	}
	err = s.write(ctx, spec.OpClaimOutbox, func(t *txn) error {
		// Like Claim: no lock to wait for first, the statement skips rows
		// others hold.
		now, err := t.clock()
		if err != nil {
			return err
		}
		expiresAt, err := s.cfg.CheckClaimOutbox(req, now)
		if err != nil {
			return err
		}
		query := claimOutboxAll
		if req.Tenant != "" {
			query = claimOutboxTenant
		}
		claimed, err = queryAll(ctx, t, scanOutbox, query, args{"tenant": req.Tenant, "relay": req.Relay, "now": now,
			"expires_at": expiresAt, "limit": req.Limit})
		sort.Slice(claimed, func(i, j int) bool {
			a, b := claimed[i], claimed[j]
			if a.CreatedAt != b.CreatedAt {
				return a.CreatedAt < b.CreatedAt
			}
			if a.Tenant != b.Tenant {
				return a.Tenant < b.Tenant
			}
			if a.RunID != b.RunID {
				return a.RunID < b.RunID
			}
			return a.Seq < b.Seq
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// MarkDelivered implements spec.Store. It locks the pending messages it
// names, then reads the clock, then marks them.
func (s *Store) MarkDelivered(ctx context.Context, req spec.MarkDeliveredRequest) (marked int, err error) {
	if err := s.precheck(func(now int64) error { return s.cfg.CheckMarkDelivered(req, now) }); err != nil {
		return 0, err
	}
	err = s.write(ctx, spec.OpMarkDelivered, func(t *txn) error {
		a := args{"tenants": make([]string, len(req.Messages)), "run_ids": make([]string, len(req.Messages)),
			"seqs": make([]int64, len(req.Messages))}
		for i, k := range req.Messages {
			a["tenants"].([]string)[i], a["run_ids"].([]string)[i], a["seqs"].([]int64)[i] = k.Tenant, k.RunID, k.Seq
		}
		if _, err := t.exec(lockDelivered, a); err != nil {
			return err
		}
		now, err := t.clock()
		if err != nil {
			return err
		}
		if err := s.cfg.CheckMarkDelivered(req, now); err != nil {
			return err
		}
		n, err := t.exec(markDelivered, a.with(args{"now": now}))
		marked = int(n)
		return err
	})
	if err != nil {
		return 0, err
	}
	return marked, nil
}

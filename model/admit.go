package model

import (
	"cmp"
	"slices"

	"github.com/leasehold/leasehold/spec"
)

// createRun is CreateRun: idempotent admission of a run, its run_queued event,
// its job (available now, or at its schedule), its idempotency record and
// its outbox messages, all or nothing.
func (m Model) createRun(s State, now int64, req spec.CreateRunRequest) (State, Result) {
	n, err := m.normalizeCreate(req, now)
	if err != nil {
		return s, failed(err)
	}
	next := s
	if rec, _, found := s.idempotency(n.Tenant, n.Operation, n.Key); found {
		if rec.ExpiresAt > now { // live
			if rec.Fingerprint != n.Fingerprint {
				return s, failed(spec.Errorf(spec.CodeIdempotencyConflict,
					"idempotency key %s is bound to another request", spec.ShortHash(n.Key)))
			}
			orig := s.row(rec.Tenant, rec.RunID)
			if orig == nil { // unreachable in a state that passes Check (invariant 7)
				return s, failed(notFound("run of idempotency record", rec.Tenant, rec.RunID))
			}
			if m.bug == bugReplayedCreateWritesOutbox && len(n.Outbox) > 0 {
				r := orig.clone()
				r.writeOutbox(n.Outbox, 0, now)
				return s.put(r), ok(spec.CreateRunResult{Run: orig.run, Replayed: true})
			}
			return s, ok(spec.CreateRunResult{Run: orig.run, Replayed: true})
		}
		// Expired: deleted, then the key is treated as absent. The deletion
		// is part of this transaction and is undone with it on an error.
		next = next.withoutIdempotency(func(r spec.IdempotencyRecord) bool {
			return r.Tenant == n.Tenant && r.Operation == n.Operation && r.Key == n.Key
		})
	}
	if s.row(n.Tenant, n.RunID) != nil {
		return s, failed(spec.Errorf(spec.CodeAlreadyExists, "run %s/%s already exists", n.Tenant, n.RunID))
	}
	r := &runRow{
		run: spec.Run{
			Tenant: n.Tenant, ID: n.RunID, Operation: n.Operation, State: spec.RunQueued,
			Version: 1, Payload: n.Payload, Fingerprint: n.Fingerprint, MaxAttempts: n.MaxAttempts,
			CreatedAt: now, DeadlineAt: n.DeadlineAt,
		},
		job: spec.Job{
			Tenant: n.Tenant, RunID: n.RunID, Operation: n.Operation, State: spec.JobQueued,
			AvailableAt: n.AvailableAt, MaxAttempts: n.MaxAttempts,
		},
	}
	r.appendEvent(spec.EventRunQueued, now, spec.QueuedPayload("", "", 0))
	r.writeOutbox(n.Outbox, 0, now)
	next = next.put(r).putIdempotency(spec.IdempotencyRecord{
		Tenant: n.Tenant, Operation: n.Operation, Key: n.Key, Fingerprint: n.Fingerprint,
		RunID: n.RunID, CreatedAt: now, ExpiresAt: n.ExpiresAt,
	})
	return next, ok(spec.CreateRunResult{Run: r.run})
}

// createRunTx is TxAdmitter.AdmitInTx: CreateRun inside the application's
// transaction, which then commits (CreateRun's change) or rolls back (no
// change). Either way the caller was told exactly what CreateRun says.
func (m Model) createRunTx(s State, now int64, req spec.CreateRunTxRequest) (State, Result) {
	next, res := m.createRun(s, now, req.Request)
	if req.Rollback {
		return s, res
	}
	return next, res
}

// replay is Replay: a failed run runs again under a new identity, with a fresh
// attempt budget and the original job's generation (never lowered), audited by
// its run_queued event. No idempotency record: the new run is reached by id.
func (m Model) replay(s State, now int64, req spec.ReplayRequest) (State, Result) {
	if err := m.Config.CheckReplay(req, now); err != nil {
		return s, failed(err)
	}
	orig := s.row(req.Tenant, req.RunID)
	if orig == nil {
		return s, failed(notFound("run", req.Tenant, req.RunID))
	}
	o := orig.run
	if o.State != spec.RunFailed {
		return s, failed(spec.Errorf(spec.CodeFailedPrecondition, "run %s is %s; only a failed run can be replayed", o.ID, o.State))
	}
	depth := o.ReplayDepth + 1
	if depth > m.Config.MaxReplays {
		return s, failed(spec.Errorf(spec.CodeReplayLimit, "run %s is replay %d of its lineage; the limit is %d", o.ID, o.ReplayDepth, m.Config.MaxReplays))
	}
	for _, r := range s.runs {
		if r.run.Tenant == o.Tenant && r.run.ReplayOf == o.ID {
			return s, failed(spec.Errorf(spec.CodeAlreadyExists, "run %s was already replayed as %s", o.ID, r.run.ID))
		}
	}
	if s.row(req.Tenant, req.NewRunID) != nil {
		return s, failed(spec.Errorf(spec.CodeAlreadyExists, "run %s/%s already exists", req.Tenant, req.NewRunID))
	}
	deadline, err := spec.Deadline(now, o.DeadlineAt-o.CreatedAt, "run deadline")
	if err != nil {
		return s, failed(err)
	}
	gen := orig.job.Generation
	if m.bug == bugReplayResetsGeneration {
		gen = 0
	}
	r := &runRow{
		run: spec.Run{
			Tenant: o.Tenant, ID: req.NewRunID, Operation: o.Operation, State: spec.RunQueued,
			Version: 1, Payload: o.Payload, Fingerprint: o.Fingerprint, MaxAttempts: o.MaxAttempts,
			CreatedAt: now, DeadlineAt: deadline, ReplayOf: o.ID, ReplayDepth: depth,
		},
		job: spec.Job{
			Tenant: o.Tenant, RunID: req.NewRunID, Operation: o.Operation, State: spec.JobQueued,
			AvailableAt: now, Generation: gen, MaxAttempts: o.MaxAttempts,
		},
	}
	r.appendEvent(spec.EventRunQueued, now, spec.QueuedPayload(o.ID, req.Actor, depth))
	return s.put(r), ok(r.run)
}

// purge is PurgeIdempotency: delete up to Limit expired records, oldest first
// in (expires_at, tenant, operation, key) order, and return how many.
func (m Model) purge(s State, now int64, req spec.PurgeRequest) (State, Result) {
	if err := spec.CheckPurge(req, now); err != nil {
		return s, failed(err)
	}
	var expired []spec.IdempotencyRecord
	for _, rec := range s.idem {
		if rec.ExpiresAt <= now {
			expired = append(expired, rec)
		}
	}
	if len(expired) == 0 {
		return s, ok(0)
	}
	slices.SortFunc(expired, func(a, b spec.IdempotencyRecord) int {
		return cmp.Or(cmp.Compare(a.ExpiresAt, b.ExpiresAt), idemOrder(a, b.Tenant, b.Operation, b.Key))
	})
	expired = expired[:min(len(expired), req.Limit)]
	next := s.withoutIdempotency(func(r spec.IdempotencyRecord) bool {
		return slices.ContainsFunc(expired, func(x spec.IdempotencyRecord) bool { return idemOrder(x, r.Tenant, r.Operation, r.Key) == 0 })
	})
	return next, ok(len(expired))
}

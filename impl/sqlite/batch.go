package sqlite

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCompleter = (*Store)(nil)

// CompleteBatch implements spec.BatchCompleter: one BEGIN IMMEDIATE
// transaction, one clock reading, and for each member exactly Complete's
// checks and writes. A member refused by a contract check (a *spec.Error:
// its lease is not current, its run is missing, its result is invalid) wrote
// nothing before it was refused, so it is recorded in its outcome and the
// transaction goes on with the next member; any other error rolls the whole
// batch back.
func (s *Store) CompleteBatch(ctx context.Context, reqs []spec.CompleteRequest) (outcomes []spec.BatchOutcome, err error) {
	if len(reqs) == 0 {
		return []spec.BatchOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d completions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	err = s.write(ctx, spec.OpCompleteBatch, func(tx *txn, now int64) error {
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		// write may run fn again after a busy database: build afresh.
		outcomes = make([]spec.BatchOutcome, len(reqs))
		for i, req := range reqs {
			run, err := s.completeIn(ctx, tx, req, now, true)
			var se *spec.Error
			switch {
			case err == nil:
				outcomes[i].Run = run
			case errors.As(err, &se):
				outcomes[i].Err = err
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// completeIn is Complete's body inside the caller's transaction: the
// guarded transition, then its outbox messages. batch says which operation
// it is part of (the mutants differ).
func (s *Store) completeIn(ctx context.Context, tx *txn, req spec.CompleteRequest, now int64, batch bool) (spec.Run, error) {
	result, err := s.cfg.CheckComplete(req, now)
	if err != nil {
		return spec.Run{}, err
	}
	op := spec.OpComplete
	if batch {
		op = spec.OpCompleteBatch
	}
	err = s.finish(ctx, tx, op, req.Lease, now, terminal{job: spec.JobCompleted, run: spec.RunCompleted,
		event: spec.EventRunCompleted, payload: spec.CompletedPayload(req.Lease.Generation), result: result, outcome: spec.AttemptCompleted})
	if err != nil {
		return spec.Run{}, err
	}
	run, err := getRun(ctx, tx, req.Lease.Tenant, req.Lease.RunID)
	if err != nil {
		return spec.Run{}, err
	}
	outbox, _ := spec.NormalizeOutbox(req.Outbox) // CheckComplete checked them
	return run, writeOutbox(ctx, tx, run.Tenant, run.ID, run.CreatedAt, req.Lease.Generation, now, outbox)
}

package sqlite

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCompleter = (*Store)(nil)

// CompleteBatch implements spec.BatchCompleter: one BEGIN IMMEDIATE
// transaction, one clock reading, and for each member exactly Complete's
// checks and writes (completeIn).
func (s *Store) CompleteBatch(ctx context.Context, reqs []spec.CompleteRequest) ([]spec.BatchOutcome, error) {
	return eachMember(ctx, s, spec.OpCompleteBatch, "completions", reqs,
		func(tx *txn, req spec.CompleteRequest, now int64) (spec.Run, error) {
			return s.completeIn(ctx, tx, req, now, true)
		},
		func(run spec.Run, err error) spec.BatchOutcome { return spec.BatchOutcome{Run: run, Err: err} })
}

// eachMember runs a batch operation: at most spec.MaxBatch members in one
// BEGIN IMMEDIATE transaction with one clock reading, each member's body
// (in) in request order, each seeing the members before it. A member
// refused by a contract check (a *spec.Error) wrote nothing before it was
// refused — the bodies refuse before their first write — so the refusal is
// recorded in its outcome and the transaction goes on with the next member;
// any other error rolls the whole batch back. An empty batch writes nothing.
func eachMember[Req, Res, Out any](ctx context.Context, s *Store, op spec.Op, noun string, reqs []Req,
	in func(*txn, Req, int64) (Res, error), outcome func(Res, error) Out) ([]Out, error) {
	if len(reqs) == 0 {
		return []Out{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d %s is over the limit of %d", len(reqs), noun, spec.MaxBatch)
	}
	var outcomes []Out
	err := s.write(ctx, op, func(tx *txn, now int64) error {
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		// write may run fn again after a busy database: build afresh.
		outcomes = make([]Out, len(reqs))
		for i, req := range reqs {
			res, err := in(tx, req, now)
			var se *spec.Error
			switch {
			case err == nil:
				outcomes[i] = outcome(res, nil)
			case errors.As(err, &se):
				var zero Res
				outcomes[i] = outcome(zero, err)
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

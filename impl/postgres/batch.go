package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCompleter = (*Store)(nil)

// CompleteBatch implements spec.BatchCompleter: one READ COMMITTED
// transaction that first locks every member's job row, in (tenant, run id)
// order, then reads the clock once, then applies each member's guarded
// completion (Complete's statements) in request order.
//
// Locking all the jobs before the clock keeps Complete's lock-then-clock
// rule for every member: the time is no earlier than the commit of any
// writer a member waited for. Taking them in one global order means two
// batches with overlapping members cannot deadlock each other, and since
// the batch holds a member's job lock before it touches that member's run
// (like every other transaction), it cannot deadlock with single-run
// operations either.
//
// A member refused by a contract check (lease not current, run missing,
// invalid result) matched no row and wrote nothing: it gets its *spec.Error
// and the transaction goes on. Any database error aborts the whole batch.
func (s *Store) CompleteBatch(ctx context.Context, reqs []spec.CompleteRequest) (outcomes []spec.BatchOutcome, err error) {
	if len(reqs) == 0 {
		return []spec.BatchOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d completions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	// Validation before any database access: a malformed member never
	// reaches SQL (its outcome is decided here and never locked).
	invalid := make([]error, len(reqs))
	type key struct{ tenant, runID string }
	var lockList []key
	for i, r := range reqs {
		if _, err := s.cfg.CheckComplete(r, 0); err != nil {
			invalid[i] = err
			continue
		}
		lockList = append(lockList, key{r.Lease.Tenant, r.Lease.RunID})
	}
	slices.SortFunc(lockList, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.runID, b.runID))
	})
	lockList = slices.Compact(lockList)

	err = s.write(ctx, spec.OpCompleteBatch, func(t *txn) error {
		for _, k := range lockList {
			if _, _, err := t.lockJob(k.tenant, k.runID); err != nil {
				return err
			}
		}
		now, err := t.clock()
		if err != nil {
			return err
		}
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		outcomes = make([]spec.BatchOutcome, len(reqs))
		for i, req := range reqs {
			if invalid[i] != nil {
				outcomes[i].Err = invalid[i]
				continue
			}
			run, err := s.completeIn(t, req, now)
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

// completeIn is Complete's body after the lock and the clock: check the
// request at now, then the guarded terminal transition.
func (s *Store) completeIn(t *txn, req spec.CompleteRequest, now int64) (spec.Run, error) {
	result, err := s.cfg.CheckComplete(req, now)
	if err != nil {
		return spec.Run{}, err
	}
	return s.finish(t, spec.OpComplete, req.Lease, now, terminal{job: spec.JobCompleted, run: spec.RunCompleted,
		event: spec.EventRunCompleted, payload: spec.CompletedPayload(req.Lease.Generation), result: result, outcome: spec.AttemptCompleted})
}

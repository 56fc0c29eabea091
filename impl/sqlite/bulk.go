package sqlite

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCreator = (*Store)(nil)

// CreateRuns implements spec.BatchCreator: one BEGIN IMMEDIATE transaction,
// one clock reading, and for each member, in order, exactly CreateRun's
// checks and writes (createIn), each seeing the members before it. A member
// refused by a contract check wrote nothing before it was refused (createIn
// refuses before its first write), so it is recorded in its outcome and the
// transaction goes on with the next member; any other error rolls the whole
// batch back.
func (s *Store) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) (outcomes []spec.CreateOutcome, err error) {
	if len(reqs) == 0 {
		return []spec.CreateOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d admissions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	err = s.write(ctx, spec.OpCreateRuns, func(tx *txn, now int64) error {
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		// write may run fn again after a busy database: build afresh.
		outcomes = make([]spec.CreateOutcome, len(reqs))
		for i, req := range reqs {
			res, err := s.createIn(ctx, tx, req, now, true)
			var se *spec.Error
			switch {
			case err == nil:
				outcomes[i].Result = res
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

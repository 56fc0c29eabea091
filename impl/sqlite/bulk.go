package sqlite

import (
	"context"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCreator = (*Store)(nil)

// CreateRuns implements spec.BatchCreator: one BEGIN IMMEDIATE transaction,
// one clock reading, and for each member, in order, exactly CreateRun's
// checks and writes (createIn, which refuses before its first write).
func (s *Store) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	return eachMember(ctx, s, spec.OpCreateRuns, "admissions", reqs,
		func(tx *txn, req spec.CreateRunRequest, now int64) (spec.CreateRunResult, error) {
			return s.createIn(ctx, tx, req, now, true)
		},
		func(res spec.CreateRunResult, err error) spec.CreateOutcome {
			return spec.CreateOutcome{Result: res, Err: err}
		})
}

package model

import "github.com/leasehold/leasehold/spec"

// createRuns is BatchCreator.CreateRuns: every member is CreateRun, in
// request order, at the batch's one clock reading, inside one transaction.
// A member CreateRun refuses wrote nothing (not even the deletion of an
// expired record of its key) and carries its error; the others are
// admitted or replayed, each seeing the members before it (a repeated key
// replays or conflicts, a repeated run id is already_exists). An empty
// batch reads no clock and writes nothing; more than MaxBatch members or a
// clock reading below 0 refuse the whole batch.
func (m Model) createRuns(s State, now int64, req spec.CreateRunsRequest) (State, Result) {
	if len(req.Requests) == 0 {
		return s, ok([]spec.CreateOutcome{})
	}
	if len(req.Requests) > spec.MaxBatch {
		return s, failed(spec.Errorf(spec.CodeInvalidArgument, "a batch of %d admissions is over the limit of %d", len(req.Requests), spec.MaxBatch))
	}
	if err := spec.CheckNow(now); err != nil {
		return s, failed(err)
	}
	outcomes := make([]spec.CreateOutcome, len(req.Requests))
	for i, member := range req.Requests {
		next, res := m.createRun(s, now, member)
		if res.Err != nil {
			outcomes[i].Err = res.Err
			continue
		}
		s, outcomes[i].Result = next, res.Value.(spec.CreateRunResult)
	}
	return s, ok(outcomes)
}

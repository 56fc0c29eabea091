package model

import "github.com/leasehold/leasehold/spec"

// completeBatch is BatchCompleter.CompleteBatch: every member is Complete,
// in request order, at the batch's one clock reading, inside one
// transaction. A member Complete refuses wrote nothing and carries its error;
// the others complete (a lease repeated in the batch completes once, the
// repeat is already_terminal). An empty batch reads no clock and writes
// nothing; more than MaxBatch members or a clock reading below 0 refuse the
// whole batch.
func (m Model) completeBatch(s State, now int64, req spec.CompleteBatchRequest) (State, Result) {
	if len(req.Requests) == 0 {
		return s, ok([]spec.BatchOutcome{})
	}
	if len(req.Requests) > spec.MaxBatch {
		return s, failed(spec.Errorf(spec.CodeInvalidArgument, "a batch of %d completions is over the limit of %d", len(req.Requests), spec.MaxBatch))
	}
	if err := spec.CheckNow(now); err != nil {
		return s, failed(err)
	}
	outcomes := make([]spec.BatchOutcome, len(req.Requests))
	for i, member := range req.Requests {
		next, res := m.complete(s, now, member)
		if res.Err != nil {
			outcomes[i].Err = res.Err
			continue
		}
		s, outcomes[i].Run = next, res.Value.(spec.Run)
	}
	return s, ok(outcomes)
}

package model

import (
	"slices"

	"github.com/leasehold/leasehold/spec"
)

// The reads: validation of the (tenant, run id) pair, then the run's rows,
// or not_found for a run the tenant does not have. They read no clock and
// change nothing.

func (m Model) getRun(s State, req spec.GetRunRequest) Result {
	return readRun(m, s, req.Tenant, req.RunID, func(r *runRow) any { return r.run })
}

func (m Model) getJob(s State, req spec.GetJobRequest) Result {
	return readRun(m, s, req.Tenant, req.RunID, func(r *runRow) any { return r.job })
}

func (m Model) events(s State, req spec.EventsRequest) Result {
	return readRun(m, s, req.Tenant, req.RunID, func(r *runRow) any { return slices.Clone(r.events) })
}

func (m Model) attempts(s State, req spec.AttemptsRequest) Result {
	return readRun(m, s, req.Tenant, req.RunID, func(r *runRow) any { return slices.Clone(r.attempts) })
}

func (m Model) effects(s State, req spec.EffectsRequest) Result {
	return readRun(m, s, req.Tenant, req.RunID, func(r *runRow) any { return slices.Clone(r.effects) })
}

// snapshot is the table row's Snapshot: every row, or one tenant's.
func (m Model) snapshot(s State, req spec.SnapshotRequest) Result {
	return ok(m.Snapshot(s).Of(req.Tenant))
}

func readRun(m Model, s State, tenant, runID string, rows func(*runRow) any) Result {
	if err := m.Config.CheckRunRef(tenant, runID); err != nil {
		return failed(err)
	}
	r := s.row(tenant, runID)
	if r == nil {
		return failed(notFound("run", tenant, runID))
	}
	return ok(rows(r))
}

// listRuns is RunLister.ListRuns: the tenant's runs that the validated
// listing matches, in its order, cut into the page.
func (m Model) listRuns(s State, req spec.ListRunsRequest) Result {
	l, err := m.Config.CheckListRuns(req)
	if err != nil {
		return failed(err)
	}
	var runs []spec.Run
	for _, r := range s.runs {
		if l.Matches(r.run) {
			runs = append(runs, r.run)
		}
	}
	slices.SortFunc(runs, func(a, b spec.Run) int {
		if spec.PositionOf(a).Before(spec.PositionOf(b)) {
			return -1
		}
		return 1 // positions are distinct: a tenant's run ids are
	})
	return ok(l.Page(runs[:min(len(runs), l.Limit+1)]))
}

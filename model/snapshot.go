package model

import (
	"slices"

	"github.com/leasehold/leasehold/spec"
)

// Snapshot returns every row of s in the canonical order spec.Snapshot
// documents: runs and jobs by (tenant, run id); events by (tenant, run id,
// seq); attempts by (tenant, run id, generation); idempotency records by
// (tenant, operation, key); effects by (tenant, run id, step, key); outbox
// messages by (tenant, run id, seq). Strings
// order bytewise. A store's Snapshot after the same operations must equal it
// (an empty table is a nil slice here; compare with nil and empty equal).
// The slices are fresh: the caller may change them.
func (m Model) Snapshot(s State) spec.Snapshot {
	var snap spec.Snapshot
	for _, r := range s.runs {
		snap.Runs = append(snap.Runs, r.run)
		snap.Jobs = append(snap.Jobs, r.job)
		snap.Events = append(snap.Events, r.events...)
		snap.Attempts = append(snap.Attempts, r.attempts...)
		snap.Effects = append(snap.Effects, r.effects...)
		snap.Outbox = append(snap.Outbox, r.outbox...)
	}
	snap.Idempotency = slices.Clone(s.idem)
	return snap
}

// Run returns the run (tenant, id) as GetRun would, and whether it exists.
func (s State) Run(tenant, id string) (spec.Run, bool) {
	if r := s.row(tenant, id); r != nil {
		return r.run, true
	}
	return spec.Run{}, false
}

// Job returns the job of run (tenant, id) as GetJob would, and whether it exists.
func (s State) Job(tenant, id string) (spec.Job, bool) {
	if r := s.row(tenant, id); r != nil {
		return r.job, true
	}
	return spec.Job{}, false
}

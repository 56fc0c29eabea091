package model

import (
	"fmt"
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

// FromSnapshot returns the State that holds snap's rows, so that Check can
// judge a store's rows as it judges the model's own (a test holds Check and
// package invariant to the same verdicts through it). Rows keep snap's order
// within each run and the runs' and records' order, so a snapshot out of its
// canonical order gives a State out of order. A State keeps every row under
// its run with exactly one job, so what it cannot hold is an error naming
// the row: a row of a run snap does not have (an orphan), a run without a
// job, a run or a job twice.
func FromSnapshot(snap spec.Snapshot) (State, error) {
	type ref struct{ tenant, run string }
	rows := map[ref]*runRow{}
	var s State
	for _, r := range snap.Runs {
		k := ref{r.Tenant, r.ID}
		if rows[k] != nil {
			return State{}, fmt.Errorf("model: run %s/%s appears twice", r.Tenant, r.ID)
		}
		rows[k] = &runRow{run: r}
		s.runs = append(s.runs, rows[k])
	}
	owner := func(what, tenant, run string) (*runRow, error) {
		if r := rows[ref{tenant, run}]; r != nil {
			return r, nil
		}
		return nil, fmt.Errorf("model: %s of %s/%s, a run the snapshot does not have", what, tenant, run)
	}
	jobs := map[ref]bool{}
	for _, j := range snap.Jobs {
		r, err := owner("a job", j.Tenant, j.RunID)
		if err != nil {
			return State{}, err
		}
		if jobs[ref{j.Tenant, j.RunID}] {
			return State{}, fmt.Errorf("model: run %s/%s has two jobs", j.Tenant, j.RunID)
		}
		jobs[ref{j.Tenant, j.RunID}] = true
		r.job = j
	}
	for _, r := range snap.Runs {
		if !jobs[ref{r.Tenant, r.ID}] {
			return State{}, fmt.Errorf("model: run %s/%s has no job", r.Tenant, r.ID)
		}
	}
	for _, e := range snap.Events {
		r, err := owner("an event", e.Tenant, e.RunID)
		if err != nil {
			return State{}, err
		}
		r.events = append(r.events, e)
	}
	for _, a := range snap.Attempts {
		r, err := owner("an attempt", a.Tenant, a.RunID)
		if err != nil {
			return State{}, err
		}
		r.attempts = append(r.attempts, a)
	}
	for _, e := range snap.Effects {
		r, err := owner("an effect", e.Tenant, e.RunID)
		if err != nil {
			return State{}, err
		}
		r.effects = append(r.effects, e)
	}
	for _, m := range snap.Outbox {
		r, err := owner("an outbox message", m.Tenant, m.RunID)
		if err != nil {
			return State{}, err
		}
		r.outbox = append(r.outbox, m)
	}
	s.idem = slices.Clone(snap.Idempotency)
	return s, nil
}

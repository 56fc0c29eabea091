package model

import (
	"cmp"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// State is every row of a store: runs with their job, events, attempts,
// effects and outbox messages, and the idempotency records. It is an immutable value: no method
// and no Model function ever changes a State that has been returned, so states
// can be kept, compared and shared freely (the explorer keeps millions; the
// linearizability checker keeps one per search node). The zero State is the
// empty store.
type State struct {
	runs []*runRow                // by (tenant, run id); rows are never mutated once in a State
	idem []spec.IdempotencyRecord // by (tenant, operation, key)
}

// runRow is one run with every row that belongs to it, which makes orphans
// unrepresentable except through the idempotency records. An operation that
// changes a run copies its row (and each slice it changes) before writing and
// puts the copy into a new State, so unchanged rows stay shared between states.
type runRow struct {
	run      spec.Run
	job      spec.Job
	events   []spec.Event         // by seq
	attempts []spec.Attempt       // by generation
	effects  []spec.Effect        // by (step, key)
	outbox   []spec.OutboxMessage // by seq
}

// clone returns a private copy of r that the caller may change before putting
// it into a new State. Slices are still shared: change them only through the
// copying helpers below.
func (r *runRow) clone() *runRow {
	c := *r
	return &c
}

// appendEvent appends the run's next event and bumps LastSeq. The event slice
// is copied, never appended in place, because the old slice may be shared
// with other states (appending into spare capacity would clobber them).
func (r *runRow) appendEvent(kind spec.EventKind, now int64, payload string) {
	r.run.LastSeq++
	ev := spec.Event{Tenant: r.run.Tenant, RunID: r.run.ID, Seq: r.run.LastSeq, Kind: kind, At: now, Payload: payload}
	r.events = append(slices.Clip(r.events), ev)
}

// attempt returns the attempt row of the given generation.
func (r *runRow) attempt(gen int64) (spec.Attempt, bool) {
	i, ok := slices.BinarySearchFunc(r.attempts, gen, func(a spec.Attempt, g int64) int { return cmp.Compare(a.Generation, g) })
	if !ok {
		return spec.Attempt{}, false
	}
	return r.attempts[i], true
}

// putAttempt inserts or replaces the attempt row of a.Generation, copying the slice.
func (r *runRow) putAttempt(a spec.Attempt) {
	i, ok := slices.BinarySearchFunc(r.attempts, a.Generation, func(x spec.Attempt, g int64) int { return cmp.Compare(x.Generation, g) })
	r.attempts = putAt(r.attempts, i, ok, a)
}

func effectOrder(e spec.Effect, step, key string) int {
	return cmp.Or(strings.Compare(e.Step, step), strings.Compare(e.Key, key))
}

// effect returns the ledger row (step, key) of the run.
func (r *runRow) effect(step, key string) (spec.Effect, bool) {
	i, ok := slices.BinarySearchFunc(r.effects, step, func(e spec.Effect, s string) int { return effectOrder(e, s, key) })
	if !ok {
		return spec.Effect{}, false
	}
	return r.effects[i], true
}

// putEffect inserts or replaces the ledger row (e.Step, e.Key), copying the slice.
func (r *runRow) putEffect(e spec.Effect) {
	i, ok := slices.BinarySearchFunc(r.effects, e.Step, func(x spec.Effect, s string) int { return effectOrder(x, s, e.Key) })
	r.effects = putAt(r.effects, i, ok, e)
}

// putAt returns a copy of xs with v replacing xs[i] (found) or inserted at i.
func putAt[T any](xs []T, i int, found bool, v T) []T {
	if found {
		c := slices.Clone(xs)
		c[i] = v
		return c
	}
	c := make([]T, 0, len(xs)+1)
	c = append(c, xs[:i]...)
	c = append(c, v)
	return append(c, xs[i:]...)
}

func runOrder(r *runRow, tenant, id string) int {
	return cmp.Or(strings.Compare(r.run.Tenant, tenant), strings.Compare(r.run.ID, id))
}

// row returns the run (tenant, id), or nil. Runs are tenant-scoped: another
// tenant's run of the same id is a different run.
func (s State) row(tenant, id string) *runRow {
	i, ok := slices.BinarySearchFunc(s.runs, tenant, func(r *runRow, t string) int { return runOrder(r, t, id) })
	if !ok {
		return nil
	}
	return s.runs[i]
}

// put returns a State with r stored in place of the run of the same (tenant,
// id), or inserted. s is unchanged; the caller must not change r afterwards.
func (s State) put(r *runRow) State {
	i, ok := slices.BinarySearchFunc(s.runs, r.run.Tenant, func(x *runRow, t string) int { return runOrder(x, t, r.run.ID) })
	s.runs = putAt(s.runs, i, ok, r)
	return s
}

func idemOrder(rec spec.IdempotencyRecord, tenant, op, key string) int {
	return cmp.Or(strings.Compare(rec.Tenant, tenant), strings.Compare(rec.Operation, op), strings.Compare(rec.Key, key))
}

// idempotency returns the record of (tenant, operation, key) and its index.
func (s State) idempotency(tenant, op, key string) (spec.IdempotencyRecord, int, bool) {
	i, ok := slices.BinarySearchFunc(s.idem, tenant, func(r spec.IdempotencyRecord, t string) int { return idemOrder(r, t, op, key) })
	if !ok {
		return spec.IdempotencyRecord{}, i, false
	}
	return s.idem[i], i, true
}

// putIdempotency returns a State with rec stored (replacing the record of the same scope).
func (s State) putIdempotency(rec spec.IdempotencyRecord) State {
	_, i, ok := s.idempotency(rec.Tenant, rec.Operation, rec.Key)
	s.idem = putAt(s.idem, i, ok, rec)
	return s
}

// withoutIdempotency returns a State without the records for which drop is true.
func (s State) withoutIdempotency(drop func(spec.IdempotencyRecord) bool) State {
	s.idem = slices.DeleteFunc(slices.Clone(s.idem), drop)
	return s
}

// Runs returns how many runs the state holds (every tenant).
func (s State) Runs() int { return len(s.runs) }

// equalBesidesOutbox reports whether two rows hold the same values but for
// their outbox messages.
func (r *runRow) equalBesidesOutbox(o *runRow) bool {
	return r.run == o.run && r.job == o.job && slices.Equal(r.events, o.events) &&
		slices.Equal(r.attempts, o.attempts) && slices.Equal(r.effects, o.effects)
}

// equal reports whether two rows hold the same values.
func (r *runRow) equal(o *runRow) bool {
	return r == o || r.run == o.run && r.job == o.job && slices.Equal(r.events, o.events) &&
		slices.Equal(r.attempts, o.attempts) && slices.Equal(r.effects, o.effects) && slices.Equal(r.outbox, o.outbox)
}

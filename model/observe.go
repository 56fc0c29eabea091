package model

import (
	"reflect"

	"github.com/leasehold/leasehold/spec"
)

// Observe accepts or refuses a result a store returned for op from state s,
// and returns the state the store must then be in. It is the concurrent
// semantics a linearizability checker needs:
//
//   - Claim: any subset of the jobs eligible at op.Now, of at most Limit, in
//     any order (SKIP LOCKED skips rows other transactions hold, and order is
//     not FIFO under concurrency); each lease must be exactly what claiming
//     that job gives. An empty claim is always accepted: it does not prove
//     that no job was eligible.
//   - Reap: any subset of the victims, of at most Limit, in any order.
//   - ClaimOutbox: any subset of the claimable messages, of at most Limit,
//     in any order, each claimed exactly as claiming it makes it.
//   - Everything else: observed must Equal Step's result.
//   - A CodeUnavailable error is accepted for any op, with s unchanged: it
//     promises that nothing was written (busy database, serialization failure).
//
// Validation errors are deterministic, so a Claim or Reap that Step refuses
// must be refused with the same code. CodeUnknownOutcome is never accepted
// here: an operation whose outcome is unknown has no observed result; use
// Unknown for it.
func (m Model) Observe(s State, op Op, observed Result) (State, bool) {
	if observed.Err != nil && observed.Err.Code == spec.CodeUnavailable {
		return s, true
	}
	next, want := m.Step(s, op)
	if want.Err != nil || observed.Err != nil {
		return s, want.Equal(observed)
	}
	switch op.Kind() {
	case spec.OpClaim:
		return m.observeClaim(s, op, observed.Value)
	case spec.OpReap:
		return observeReap(s, op, observed.Value)
	case spec.OpClaimOutbox:
		return m.observeClaimOutbox(s, op, observed.Value)
	}
	return next, want.Equal(observed)
}

// observeClaim checks an observed successful claim; Step has accepted op.
func (m Model) observeClaim(s State, op Op, value any) (State, bool) {
	req := op.Req.(spec.ClaimRequest)
	leases, isLeases := value.([]spec.Lease)
	if value != nil && !isLeases || len(leases) > req.Limit {
		return s, false
	}
	rows := make([]*runRow, 0, len(leases))
	for _, l := range leases {
		r := s.row(req.Tenant, l.RunID)
		if l.Tenant != req.Tenant || r == nil || !m.claimable(r.job, op.Now) || containsRow(rows, r) {
			return s, false
		}
		rows = append(rows, r)
	}
	expires, _ := m.Config.CheckClaim(req, op.Now) // Step accepted op, so no error
	next, got := m.claimRows(s, op.Now, expires, req.Worker, rows)
	if !reflect.DeepEqual(got, leases) && len(leases) > 0 {
		return s, false
	}
	return next, true
}

// observeReap checks an observed successful reap; Step has accepted op.
func observeReap(s State, op Op, value any) (State, bool) {
	req := op.Req.(spec.ReapRequest)
	ids, isIDs := value.([]string)
	if value != nil && !isIDs || len(ids) > req.Limit {
		return s, false
	}
	rows := make([]*runRow, 0, len(ids))
	for _, id := range ids {
		r := s.row(req.Tenant, id)
		if r == nil || !isVictim(r.job, op.Now) || containsRow(rows, r) {
			return s, false
		}
		rows = append(rows, r)
	}
	next, _ := reapRows(s, op.Now, rows)
	return next, true
}

func containsRow(rows []*runRow, r *runRow) bool {
	for _, x := range rows {
		if x == r {
			return true
		}
	}
	return false
}

// Unknown returns every state op may have left when its outcome is unknown
// (the connection died after COMMIT was sent): s unchanged first, then each
// distinct state the op may have committed. For Claim, Reap and
// ClaimOutbox that is one state per non-empty subset (of at most Limit) of
// the eligible jobs, victims or claimable messages, so it grows combinatorially with them: keep such operations few
// per history. An op that Step refuses leaves only s.
func (m Model) Unknown(s State, op Op) []State {
	states := []State{s}
	seen := map[string]bool{s.Key(): true}
	for _, o := range m.Outcomes(s, op) {
		if k := o.State.Key(); !seen[k] {
			seen[k] = true
			states = append(states, o.State)
		}
	}
	return states
}

// Outcome is one way an operation may succeed: the state after it and the
// result the store returns.
type Outcome struct {
	State  State
	Result Result
}

// Outcomes returns every successful outcome op may have from s: for Claim
// and Reap one per non-empty subset (of at most Limit) of the eligible jobs or
// victims, taken in the sequential order, the sequential outcome among them;
// for any other op Step's outcome. An op that Step refuses has none, and
// neither has a Claim or Reap with nothing to take (Step's empty result leaves
// s unchanged).
func (m Model) Outcomes(s State, op Op) []Outcome {
	next, res := m.Step(s, op)
	if res.Err != nil {
		return nil
	}
	var rows []*runRow
	var limit int
	switch op.Kind() {
	case spec.OpClaim:
		req := op.Req.(spec.ClaimRequest)
		rows, limit = m.eligibleRows(s, req.Tenant, op.Now), req.Limit
	case spec.OpReap:
		req := op.Req.(spec.ReapRequest)
		rows, limit = victimRows(s, req.Tenant, op.Now), req.Limit
	case spec.OpClaimOutbox:
		return m.claimOutboxOutcomes(s, op)
	default:
		return []Outcome{{State: next, Result: res}}
	}
	var out []Outcome
	forEachSubset(rows, limit, func(pick []*runRow) {
		if op.Kind() == spec.OpClaim {
			req := op.Req.(spec.ClaimRequest)
			expires, _ := m.Config.CheckClaim(req, op.Now)
			st, leases := m.claimRows(s, op.Now, expires, req.Worker, pick)
			out = append(out, Outcome{State: st, Result: ok(leases)})
			return
		}
		st, ids := reapRows(s, op.Now, pick)
		out = append(out, Outcome{State: st, Result: ok(ids)})
	})
	return out
}

// forEachSubset calls f with every non-empty subset of rows of at most limit
// elements, each in the order of rows. f must not keep the slice.
func forEachSubset[T any](rows []T, limit int, f func([]T)) {
	pick := make([]T, 0, min(limit, len(rows)))
	var rec func(from int)
	rec = func(from int) {
		if len(pick) > 0 {
			f(pick)
		}
		if len(pick) == limit {
			return
		}
		for i := from; i < len(rows); i++ {
			pick = append(pick, rows[i])
			rec(i + 1)
			pick = pick[:len(pick)-1]
		}
	}
	rec(0)
}

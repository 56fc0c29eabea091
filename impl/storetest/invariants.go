package storetest

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/spec"
)

// runKey identifies a run across tenants.
type runKey struct{ tenant, run string }

func (k runKey) String() string { return k.tenant + "/" + k.run }

// invariantViolations checks a snapshot against the invariants of SPEC.md
// that rows alone can show (1-4, 6-9, 11-15, and the canonical order of
// Snapshot), and describes each violation. Invariants 5 and 10 are about
// steps; the tests that make those steps check them.
func invariantViolations(s spec.Snapshot) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }

	checkOrder(bad, "runs", s.Runs, func(a, b spec.Run) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
	})
	checkOrder(bad, "jobs", s.Jobs, func(a, b spec.Job) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID))
	})
	checkOrder(bad, "events", s.Events, func(a, b spec.Event) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Seq, b.Seq))
	})
	checkOrder(bad, "attempts", s.Attempts, func(a, b spec.Attempt) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Generation, b.Generation))
	})
	checkOrder(bad, "idempotency records", s.Idempotency, func(a, b spec.IdempotencyRecord) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Key, b.Key))
	})
	checkOrder(bad, "effects", s.Effects, func(a, b spec.Effect) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Step, b.Step), cmp.Compare(a.Key, b.Key))
	})
	checkOrder(bad, "outbox messages", s.Outbox, func(a, b spec.OutboxMessage) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Seq, b.Seq))
	})

	runs := map[runKey]spec.Run{}
	for _, r := range s.Runs {
		runs[runKey{r.Tenant, r.ID}] = r
	}
	jobs := map[runKey]spec.Job{}
	for _, j := range s.Jobs {
		k := runKey{j.Tenant, j.RunID}
		if _, ok := runs[k]; !ok {
			bad("7: job %s has no run", k)
		}
		if _, dup := jobs[k]; dup {
			bad("7: run %s has more than one job", k)
		}
		jobs[k] = j
		if j.Attempts < 0 || j.Attempts > j.MaxAttempts {
			bad("6: job %s has %d attempts of %d", k, j.Attempts, j.MaxAttempts)
		}
		if leased := j.State == spec.JobLeased; leased != (j.LeaseOwner != "") || leased != (j.LeaseExpiresAt != 0) {
			bad("8: job %s is %s with owner %q and expiry %d", k, j.State, j.LeaseOwner, j.LeaseExpiresAt)
		}
	}
	events := map[runKey][]spec.Event{}
	for _, e := range s.Events {
		k := runKey{e.Tenant, e.RunID}
		if _, ok := runs[k]; !ok {
			bad("7: event %s#%d has no run", k, e.Seq)
		}
		events[k] = append(events[k], e)
	}
	attempts := map[runKey][]spec.Attempt{}
	for _, a := range s.Attempts {
		k := runKey{a.Tenant, a.RunID}
		if _, ok := jobs[k]; !ok {
			bad("7: attempt %s@%d has no job", k, a.Generation)
		}
		attempts[k] = append(attempts[k], a)
	}
	for _, ef := range s.Effects {
		k := runKey{ef.Tenant, ef.RunID}
		j, ok := jobs[k]
		if !ok {
			bad("7: effect %s %s/%s has no job", k, ef.Step, ef.Key)
			continue
		}
		if ef.Generation > j.Generation {
			bad("12: effect %s %s/%s has generation %d > job generation %d", k, ef.Step, ef.Key, ef.Generation, j.Generation)
		}
	}
	outbox := map[runKey][]spec.OutboxMessage{}
	for _, m := range s.Outbox {
		k := runKey{m.Tenant, m.RunID}
		if _, ok := runs[k]; !ok {
			bad("7: outbox message %s#%d has no run", k, m.Seq)
		}
		outbox[k] = append(outbox[k], m)
		if (m.State == spec.OutboxDelivered) != (m.DeliveredAt != 0) || m.State == spec.OutboxDelivered && m.Relay != "" ||
			(m.Relay == "") != (m.ClaimExpiresAt == 0) {
			bad("14: outbox message %s#%d is %s, delivered at %d, claimed by %q until %d", k, m.Seq, m.State, m.DeliveredAt, m.Relay, m.ClaimExpiresAt)
		}
	}
	seen := map[[3]string]bool{}
	for _, r := range s.Idempotency {
		k := runKey{r.Tenant, r.RunID}
		run, ok := runs[k]
		if !ok {
			bad("7: idempotency record %s/%s/%s points at missing run %s", r.Tenant, r.Operation, r.Key, k)
		} else if run.Operation != r.Operation {
			bad("9: idempotency record %s/%s/%s is for operation %s but run %s is %s", r.Tenant, r.Operation, r.Key, r.Operation, k, run.Operation)
		}
		id := [3]string{r.Tenant, r.Operation, r.Key}
		if seen[id] {
			bad("9: two idempotency records for %v", id)
		}
		seen[id] = true
	}

	for k, r := range runs {
		ev := events[k]
		if int64(len(ev)) != r.LastSeq {
			bad("1: run %s has last seq %d but %d events", k, r.LastSeq, len(ev))
		}
		terminals := 0
		for i, e := range ev {
			if e.Seq != int64(i+1) {
				bad("1: run %s event %d has seq %d", k, i+1, e.Seq)
			}
			if (e.Kind == spec.EventRunQueued) != (i == 0) {
				bad("2: run %s has %s at seq %d", k, e.Kind, e.Seq)
			}
			if e.Kind.Terminal() {
				terminals++
				if i != len(ev)-1 {
					bad("3: run %s has terminal event %s at seq %d, not last", k, e.Kind, e.Seq)
				}
				if want := terminalKind(r.State); e.Kind != want {
					bad("3: run %s is %s but its terminal event is %s", k, r.State, e.Kind)
				}
			}
		}
		if terminals > 1 || (terminals == 1) != r.State.Terminal() {
			bad("3: run %s is %s with %d terminal events", k, r.State, terminals)
		}
		j, ok := jobs[k]
		if !ok {
			bad("7: run %s has no job", k)
			continue
		}
		if r.State.Terminal() {
			if spec.RunStateFor(j.State) != r.State {
				bad("4: run %s is %s but its job is %s", k, r.State, j.State)
			}
		} else if j.State.Terminal() {
			bad("4: run %s is %s but its job is %s", k, r.State, j.State)
		}
		if r.State == spec.RunQueued && (j.State != spec.JobQueued || len(attempts[k]) != 0) {
			bad("4: run %s is queued but its job is %s with %d attempts", k, j.State, len(attempts[k]))
		}
		running := 0
		for _, a := range attempts[k] {
			if a.Generation > j.Generation {
				bad("11: run %s attempt generation %d > job generation %d", k, a.Generation, j.Generation)
			}
			if a.Outcome == spec.AttemptRunning {
				running++
				if a.Generation != j.Generation {
					bad("11: run %s attempt %d is running but the job is at generation %d", k, a.Generation, j.Generation)
				}
			}
		}
		if (j.State == spec.JobLeased) != (running == 1) || running > 1 {
			bad("11: run %s job is %s with %d running attempts", k, j.State, running)
		}
		for i, m := range outbox[k] {
			if m.Seq != int64(i+1) || m.ID != spec.OutboxID(r.Tenant, r.ID, r.CreatedAt, m.Seq) {
				bad("14: run %s outbox message %d has seq %d and id %q", k, i+1, m.Seq, m.ID)
			}
			// 15: the admission's (at its time) or the completing generation's.
			done := r.State == spec.RunCompleted && len(ev) > 0 && ev[len(ev)-1].Payload == spec.CompletedPayload(m.Generation) && ev[len(ev)-1].At == m.CreatedAt
			if m.Generation == 0 && m.CreatedAt != r.CreatedAt || m.Generation > 0 && !done {
				bad("15: run %s (%s) has outbox message %d of generation %d written at %d, neither its admission's nor its completion's", k, r.State, m.Seq, m.Generation, m.CreatedAt)
			}
		}
	}
	return out
}

func terminalKind(s spec.RunState) spec.EventKind {
	switch s {
	case spec.RunCompleted:
		return spec.EventRunCompleted
	case spec.RunFailed:
		return spec.EventRunFailed
	case spec.RunCancelled:
		return spec.EventRunCancelled
	}
	return ""
}

// checkOrder reports a list that is not strictly increasing under cmp.
func checkOrder[T any](bad func(string, ...any), what string, list []T, cmp func(a, b T) int) {
	for i := 1; i < len(list); i++ {
		if cmp(list[i-1], list[i]) >= 0 {
			bad("Snapshot: %s not in canonical order (or duplicated) at %d: %+v then %+v", what, i, list[i-1], list[i])
		}
	}
}

// checkReadsMatch checks that, for every run in snap, GetRun, GetJob, Events,
// Attempts and Effects return exactly the snapshot's rows for that run.
func (e *env) checkReadsMatch(snap spec.Snapshot) {
	e.t.Helper()
	for _, r := range snap.Runs {
		k := runKey{r.Tenant, r.ID}
		got, err := e.s.GetRun(e.ctx, r.Tenant, r.ID)
		if err != nil {
			e.t.Errorf("GetRun(%s): %v", k, err)
			continue
		}
		checkEqual(e.t, "GetRun("+k.String()+") vs Snapshot", got, r)
		if i := slices.IndexFunc(snap.Jobs, func(j spec.Job) bool { return j.Tenant == r.Tenant && j.RunID == r.ID }); i >= 0 {
			job, err := e.s.GetJob(e.ctx, r.Tenant, r.ID)
			if err != nil {
				e.t.Errorf("GetJob(%s): %v", k, err)
			} else {
				checkEqual(e.t, "GetJob("+k.String()+") vs Snapshot", job, snap.Jobs[i])
			}
		}
		ev, err := e.s.Events(e.ctx, r.Tenant, r.ID)
		if err != nil {
			e.t.Errorf("Events(%s): %v", k, err)
		} else {
			checkEqual(e.t, "Events("+k.String()+") vs Snapshot", ev, filter(snap.Events, func(x spec.Event) bool { return x.Tenant == r.Tenant && x.RunID == r.ID }))
		}
		at, err := e.s.Attempts(e.ctx, r.Tenant, r.ID)
		if err != nil {
			e.t.Errorf("Attempts(%s): %v", k, err)
		} else {
			checkEqual(e.t, "Attempts("+k.String()+") vs Snapshot", at, filter(snap.Attempts, func(x spec.Attempt) bool { return x.Tenant == r.Tenant && x.RunID == r.ID }))
		}
		ef, err := e.s.Effects(e.ctx, r.Tenant, r.ID)
		if err != nil {
			e.t.Errorf("Effects(%s): %v", k, err)
		} else {
			checkEqual(e.t, "Effects("+k.String()+") vs Snapshot", ef, filter(snap.Effects, func(x spec.Effect) bool { return x.Tenant == r.Tenant && x.RunID == r.ID }))
		}
	}
}

// filter returns the elements of list that keep accepts (never nil).
func filter[T any](list []T, keep func(T) bool) []T {
	out := []T{}
	for _, x := range list {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

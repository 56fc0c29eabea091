// Package invariant checks a spec.Snapshot against the invariants of
// spec/SPEC.md that rows alone can show: 1-4, 6-9, 11-15 and the
// canonical order of Snapshot. Every row is keyed by its own tenant, so a
// row that names another tenant's run (13) is reported as an orphan (7).
// Invariants 5 and 10 are about steps (a
// generation never falls, no stale write is accepted); the tests that make
// those steps, the model's CheckStep and the harness check them.
//
// It is the one list both the conformance suite (impl/storetest, after every
// test) and `leasehold doctor` (on a live database) check, so that a
// database the doctor calls healthy is one the suite would accept.
package invariant

import (
	"cmp"
	"fmt"

	"github.com/leasehold/leasehold/spec"
)

// Violation is one broken invariant, found in one snapshot.
type Violation struct {
	// Invariant is the invariant's number in SPEC.md ("1" … "15"), or
	// "Snapshot" for rows out of Snapshot's canonical order.
	Invariant string `json:"invariant"`
	// Tenant and RunID name the run the violation is about, when there is
	// one (an order violation has none; an orphan names the run it lacks).
	Tenant string `json:"tenant,omitempty"`
	RunID  string `json:"run_id,omitempty"`
	// Message says what is wrong, naming the rows.
	Message string `json:"message"`
}

// String is "N: message", the form the conformance suite prints.
func (v Violation) String() string { return v.Invariant + ": " + v.Message }

// Titles are the short names of the invariants Check checks, by their
// label in Violation.Invariant.
var Titles = map[string]string{
	"1":        "event sequences are 1..n, contiguous, n = the run's last seq",
	"2":        "exactly one run_queued, at seq 1",
	"3":        "at most one terminal event, last, matching a terminal run's state",
	"4":        "run and job states agree; a queued run's job was never claimed",
	"6":        "attempts <= max attempts",
	"7":        "no orphans: every row belongs to an existing run; every run has one job",
	"8":        "a leased job has an owner and an expiry; any other job has neither",
	"9":        "one run per idempotency (tenant, operation, key), of the record's operation",
	"11":       "a job is leased iff exactly one attempt, at its generation, is running; attempt generations in [1, the job's]",
	"12":       "an effect's generation <= its job's generation",
	"14":       "an outbox message's seq and id are its run's; delivered iff it has a delivery time, and then unclaimed; claimed iff it has a claim expiry",
	"15":       "an outbox message is the admission's (at its time, first) or the completing generation's",
	"Snapshot": "rows in Snapshot's canonical order, no duplicates",
}

// runKey identifies a run across tenants.
type runKey struct{ tenant, run string }

func (k runKey) String() string { return k.tenant + "/" + k.run }

// Check returns every violation s shows, in a fixed order for a given
// snapshot (ordering checks first, then rows by kind, then run by run in
// the snapshot's run order); none for a healthy snapshot. It reads no clock.
func Check(s spec.Snapshot) []Violation {
	var out []Violation
	bad := func(inv string, k runKey, format string, a ...any) {
		out = append(out, Violation{Invariant: inv, Tenant: k.tenant, RunID: k.run, Message: fmt.Sprintf(format, a...)})
	}
	order := func(format string, a ...any) { bad("Snapshot", runKey{}, format, a...) }

	checkOrder(order, "runs", s.Runs, func(a, b spec.Run) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
	})
	checkOrder(order, "jobs", s.Jobs, func(a, b spec.Job) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID))
	})
	checkOrder(order, "events", s.Events, func(a, b spec.Event) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Seq, b.Seq))
	})
	checkOrder(order, "attempts", s.Attempts, func(a, b spec.Attempt) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Generation, b.Generation))
	})
	checkOrder(order, "idempotency records", s.Idempotency, func(a, b spec.IdempotencyRecord) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Key, b.Key))
	})
	checkOrder(order, "outbox messages", s.Outbox, func(a, b spec.OutboxMessage) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Seq, b.Seq))
	})
	checkOrder(order, "effects", s.Effects, func(a, b spec.Effect) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.Step, b.Step), cmp.Compare(a.Key, b.Key))
	})

	runs := map[runKey]spec.Run{}
	for _, r := range s.Runs {
		runs[runKey{r.Tenant, r.ID}] = r
	}
	jobs := map[runKey]spec.Job{}
	for _, j := range s.Jobs {
		k := runKey{j.Tenant, j.RunID}
		if _, ok := runs[k]; !ok {
			bad("7", k, "job %s has no run", k)
		}
		if _, dup := jobs[k]; dup {
			bad("7", k, "run %s has more than one job", k)
		}
		jobs[k] = j
		if j.Attempts < 0 || j.Attempts > j.MaxAttempts {
			bad("6", k, "job %s has %d attempts of %d", k, j.Attempts, j.MaxAttempts)
		}
		if leased := j.State == spec.JobLeased; leased != (j.LeaseOwner != "") || leased != (j.LeaseExpiresAt != 0) {
			bad("8", k, "job %s is %s with owner %q and expiry %d", k, j.State, j.LeaseOwner, j.LeaseExpiresAt)
		}
	}
	events := map[runKey][]spec.Event{}
	for _, e := range s.Events {
		k := runKey{e.Tenant, e.RunID}
		if _, ok := runs[k]; !ok {
			bad("7", k, "event %s#%d has no run", k, e.Seq)
		}
		events[k] = append(events[k], e)
	}
	attempts := map[runKey][]spec.Attempt{}
	for _, a := range s.Attempts {
		k := runKey{a.Tenant, a.RunID}
		if _, ok := jobs[k]; !ok {
			bad("7", k, "attempt %s@%d has no job", k, a.Generation)
		}
		attempts[k] = append(attempts[k], a)
	}
	for _, ef := range s.Effects {
		k := runKey{ef.Tenant, ef.RunID}
		j, ok := jobs[k]
		if !ok {
			bad("7", k, "effect %s %s/%s has no job", k, ef.Step, ef.Key)
			continue
		}
		if ef.Generation > j.Generation {
			bad("12", k, "effect %s %s/%s has generation %d > job generation %d", k, ef.Step, ef.Key, ef.Generation, j.Generation)
		}
	}
	outbox := map[runKey][]spec.OutboxMessage{}
	for _, m := range s.Outbox {
		k := runKey{m.Tenant, m.RunID}
		if _, ok := runs[k]; !ok {
			bad("7", k, "outbox message %s#%d has no run", k, m.Seq)
		}
		outbox[k] = append(outbox[k], m)
		if (m.State == spec.OutboxDelivered) != (m.DeliveredAt != 0) || m.State == spec.OutboxDelivered && m.Relay != "" ||
			(m.Relay == "") != (m.ClaimExpiresAt == 0) {
			bad("14", k, "outbox message %s#%d is %s, delivered at %d, claimed by %q until %d", k, m.Seq, m.State, m.DeliveredAt, m.Relay, m.ClaimExpiresAt)
		}
	}
	seen := map[[3]string]bool{}
	for _, r := range s.Idempotency {
		k := runKey{r.Tenant, r.RunID}
		run, ok := runs[k]
		if !ok {
			bad("7", k, "idempotency record %s/%s/%s points at missing run %s", r.Tenant, r.Operation, r.Key, k)
		} else if run.Operation != r.Operation {
			bad("9", k, "idempotency record %s/%s/%s is for operation %s but run %s is %s", r.Tenant, r.Operation, r.Key, r.Operation, k, run.Operation)
		}
		id := [3]string{r.Tenant, r.Operation, r.Key}
		if seen[id] {
			bad("9", k, "two idempotency records for %v", id)
		}
		seen[id] = true
	}

	checked := map[runKey]bool{}
	for _, run := range s.Runs {
		k := runKey{run.Tenant, run.ID}
		if checked[k] {
			continue // a duplicate: reported above, checked once
		}
		checked[k] = true
		r := runs[k] // the last of duplicates, as the maps hold
		ev := events[k]
		if int64(len(ev)) != r.LastSeq {
			bad("1", k, "run %s has last seq %d but %d events", k, r.LastSeq, len(ev))
		}
		terminals := 0
		for i, e := range ev {
			if e.Seq != int64(i+1) {
				bad("1", k, "run %s event %d has seq %d", k, i+1, e.Seq)
			}
			if (e.Kind == spec.EventRunQueued) != (i == 0) {
				bad("2", k, "run %s has %s at seq %d", k, e.Kind, e.Seq)
			}
			if e.Kind.Terminal() {
				terminals++
				if i != len(ev)-1 {
					bad("3", k, "run %s has terminal event %s at seq %d, not last", k, e.Kind, e.Seq)
				}
				if want := terminalKind(r.State); e.Kind != want {
					bad("3", k, "run %s is %s but its terminal event is %s", k, r.State, e.Kind)
				}
			}
		}
		if terminals > 1 || (terminals == 1) != r.State.Terminal() {
			bad("3", k, "run %s is %s with %d terminal events", k, r.State, terminals)
		}
		j, ok := jobs[k]
		if !ok {
			bad("7", k, "run %s has no job", k)
			continue
		}
		if r.State.Terminal() {
			if spec.RunStateFor(j.State) != r.State {
				bad("4", k, "run %s is %s but its job is %s", k, r.State, j.State)
			}
		} else if j.State.Terminal() {
			bad("4", k, "run %s is %s but its job is %s", k, r.State, j.State)
		}
		if r.State == spec.RunQueued && (j.State != spec.JobQueued || len(attempts[k]) != 0) {
			bad("4", k, "run %s is queued but its job is %s with %d attempts", k, j.State, len(attempts[k]))
		}
		running := 0
		for _, a := range attempts[k] {
			if a.Generation > j.Generation {
				bad("11", k, "run %s attempt generation %d > job generation %d", k, a.Generation, j.Generation)
			} else if a.Generation < 1 {
				bad("11", k, "run %s attempt generation %d < 1 (a claim's generation is at least 1)", k, a.Generation)
			}
			if a.Outcome == spec.AttemptRunning {
				running++
				if a.Generation != j.Generation {
					bad("11", k, "run %s attempt %d is running but the job is at generation %d", k, a.Generation, j.Generation)
				}
			}
		}
		if (j.State == spec.JobLeased) != (running == 1) || running > 1 {
			bad("11", k, "run %s job is %s with %d running attempts", k, j.State, running)
		}
		completion := int64(0) // the generation of the last completion's message so far
		for i, m := range outbox[k] {
			if m.Seq != int64(i+1) || m.ID != spec.OutboxID(r.Tenant, r.ID, r.CreatedAt, m.Seq) {
				bad("14", k, "run %s outbox message %d has seq %d and id %q", k, i+1, m.Seq, m.ID)
			}
			// 15: the admission's (at its time) or the completing generation's.
			done := r.State == spec.RunCompleted && len(ev) > 0 && ev[len(ev)-1].Payload == spec.CompletedPayload(m.Generation) && ev[len(ev)-1].At == m.CreatedAt
			if m.Generation == 0 && m.CreatedAt != r.CreatedAt || m.Generation > 0 && !done {
				bad("15", k, "run %s (%s) has outbox message %d of generation %d written at %d, neither its admission's nor its completion's", k, r.State, m.Seq, m.Generation, m.CreatedAt)
			} else if m.Generation < completion {
				bad("15", k, "run %s outbox message %d of generation %d follows one of generation %d (the admission's come first)", k, m.Seq, m.Generation, completion)
			}
			completion = max(completion, m.Generation)
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
			bad("%s not in canonical order (or duplicated) at %d: %+v then %+v", what, i, list[i-1], list[i])
		}
	}
}

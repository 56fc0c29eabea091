package model

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// Violations is the error Check and CheckStep return: every violated
// invariant found, one line each, prefixed with its number in SPEC.md.
type Violations []string

// Error lists the violations, one per line.
func (v Violations) Error() string {
	return fmt.Sprintf("%d invariant violation(s):\n  %s", len(v), strings.Join(v, "\n  "))
}

func (v *Violations) add(inv, format string, args ...any) {
	*v = append(*v, "invariant "+inv+": "+fmt.Sprintf(format, args...))
}

func (v Violations) err() error {
	if len(v) == 0 {
		return nil
	}
	return v
}

// Check returns nil when s satisfies every state invariant of SPEC.md
// (1-4, 6-9, 11-13; 5, 10 and 12's finality are transitions, see CheckStep),
// and otherwise a Violations listing each one found. It reads no time, so it
// holds whatever the clock says. Two invariants implied by Replay are checked
// as "R": a replay links to a failed run of its tenant one level shallower,
// and each run is replayed at most once, within Config.MaxReplays.
func (m Model) Check(s State) error {
	var v Violations
	replays := map[string]string{} // tenant/original -> replay
	for i, r := range s.runs {
		if i > 0 && runOrder(s.runs[i-1], r.run.Tenant, r.run.ID) >= 0 {
			v.add("7", "runs %s/%s and %s/%s are out of order or duplicated", s.runs[i-1].run.Tenant, s.runs[i-1].run.ID, r.run.Tenant, r.run.ID)
		}
		checkRun(&v, r)
		if r.run.ReplayOf != "" {
			checkReplay(&v, m, s, r, replays)
		}
	}
	checkIdempotency(&v, s)
	return v.err()
}

// checkRun checks one run and the rows that belong to it.
func checkRun(v *Violations, r *runRow) {
	run, job := r.run, r.job
	name := run.Tenant + "/" + run.ID
	if run.Version < 1 {
		v.add("7", "run %s has version %d", name, run.Version)
	}

	// 1, 2, 3: the event log.
	if int64(len(r.events)) != run.LastSeq {
		v.add("1", "run %s has %d events but last_seq %d", name, len(r.events), run.LastSeq)
	}
	terminals := 0
	for k, ev := range r.events {
		if ev.Seq != int64(k+1) {
			v.add("1", "run %s: event %d has seq %d (sequences must be 1..n contiguous)", name, k+1, ev.Seq)
		}
		if ev.Tenant != run.Tenant || ev.RunID != run.ID {
			v.add("13", "run %s: event %d belongs to %s/%s", name, ev.Seq, ev.Tenant, ev.RunID)
		}
		if (ev.Kind == spec.EventRunQueued) != (k == 0) {
			v.add("2", "run %s: event %d is %s (run_queued must be exactly seq 1)", name, ev.Seq, ev.Kind)
		}
		if ev.Kind.Terminal() {
			terminals++
			if k != len(r.events)-1 {
				v.add("3", "run %s: terminal event %s at seq %d is not last", name, ev.Kind, ev.Seq)
			}
		}
	}
	if len(r.events) == 0 {
		v.add("2", "run %s has no run_queued event", name)
	}
	if terminals > 1 {
		v.add("3", "run %s has %d terminal events", name, terminals)
	}
	if run.State.Terminal() != (terminals > 0) {
		v.add("3", "run %s is %s with %d terminal events (a run is terminal iff it has one)", name, run.State, terminals)
	}
	if terminals > 0 && len(r.events) > 0 {
		if want := terminalEvent[run.State]; r.events[len(r.events)-1].Kind != want && want != "" {
			v.add("3", "run %s is %s but its terminal event is %s", name, run.State, r.events[len(r.events)-1].Kind)
		}
	}

	// 4: run and job agree.
	switch want := jobStateFor[run.State]; {
	case run.State.Terminal() && job.State != want:
		v.add("4", "run %s is %s but its job is %s (want %s)", name, run.State, job.State, want)
	case !run.State.Terminal() && job.State.Terminal():
		v.add("4", "run %s is %s but its job is terminal (%s)", name, run.State, job.State)
	}
	if run.State == spec.RunQueued && (job.State != spec.JobQueued || len(r.attempts) > 0) {
		v.add("4", "run %s is queued but its job is %s with %d attempt rows (never claimed since admission)", name, job.State, len(r.attempts))
	}
	if run.State == spec.RunRunning && len(r.attempts) == 0 {
		v.add("4", "run %s is running but was never claimed", name)
	}

	// 6: the budget.
	if job.Attempts < 0 || job.Attempts > job.MaxAttempts {
		v.add("6", "run %s: job attempts %d outside [0, max_attempts %d]", name, job.Attempts, job.MaxAttempts)
	}

	// 7, 13: the job is this run's, in this tenant.
	if job.Tenant != run.Tenant || job.RunID != run.ID || job.Operation != run.Operation || job.MaxAttempts != run.MaxAttempts {
		v.add("13", "run %s: job row is %s/%s op %s max %d, run is op %s max %d", name, job.Tenant, job.RunID, job.Operation, job.MaxAttempts, run.Operation, run.MaxAttempts)
	}

	// 8: a lease exactly when leased.
	leased := job.State == spec.JobLeased
	if leased && (job.LeaseOwner == "" || job.LeaseExpiresAt <= 0) {
		v.add("8", "run %s: leased job has owner %q, expiry %d", name, job.LeaseOwner, job.LeaseExpiresAt)
	}
	if !leased && (job.LeaseOwner != "" || job.LeaseExpiresAt != 0) {
		v.add("8", "run %s: %s job keeps a lease (owner %q, expiry %d)", name, job.State, job.LeaseOwner, job.LeaseExpiresAt)
	}

	// 11: leased iff exactly one running attempt, of the job's generation.
	running := 0
	for k, a := range r.attempts {
		if k > 0 && r.attempts[k-1].Generation >= a.Generation {
			v.add("11", "run %s: attempt generations %d, %d are not strictly increasing", name, r.attempts[k-1].Generation, a.Generation)
		}
		if a.Tenant != run.Tenant || a.RunID != run.ID {
			v.add("13", "run %s: attempt %d belongs to %s/%s", name, a.Generation, a.Tenant, a.RunID)
		}
		if a.Generation > job.Generation || a.Generation < 1 {
			v.add("11", "run %s: attempt generation %d outside [1, job generation %d]", name, a.Generation, job.Generation)
		}
		if a.Outcome == spec.AttemptRunning {
			running++
			if !leased || a.Generation != job.Generation || a.Worker != job.LeaseOwner {
				v.add("11", "run %s: attempt %d by %q is running but the job is %s at generation %d owned by %q",
					name, a.Generation, a.Worker, job.State, job.Generation, job.LeaseOwner)
			}
		}
		if a.Number < 1 || a.Number > job.MaxAttempts {
			v.add("6", "run %s: attempt %d has number %d outside [1, %d]", name, a.Generation, a.Number, job.MaxAttempts)
		}
	}
	if leased && running != 1 {
		v.add("11", "run %s: leased job has %d running attempts (want 1)", name, running)
	}

	// 12, 13: effects.
	for k, e := range r.effects {
		if k > 0 && effectOrder(r.effects[k-1], e.Step, e.Key) >= 0 {
			v.add("7", "run %s: effects %s/%s and %s/%s are out of order or duplicated", name, r.effects[k-1].Step, r.effects[k-1].Key, e.Step, e.Key)
		}
		if e.Tenant != run.Tenant || e.RunID != run.ID {
			v.add("13", "run %s: effect %s belongs to %s/%s", name, e.Step, e.Tenant, e.RunID)
		}
		if e.Generation > job.Generation || e.Generation < 1 {
			v.add("12", "run %s: effect %s generation %d outside [1, job generation %d]", name, e.Step, e.Generation, job.Generation)
		}
	}

	// 14, 15: outbox messages.
	checkOutbox(v, r)
}

var terminalEvent = map[spec.RunState]spec.EventKind{
	spec.RunCompleted: spec.EventRunCompleted,
	spec.RunFailed:    spec.EventRunFailed,
	spec.RunCancelled: spec.EventRunCancelled,
}

var jobStateFor = map[spec.RunState]spec.JobState{
	spec.RunCompleted: spec.JobCompleted,
	spec.RunFailed:    spec.JobDead,
	spec.RunCancelled: spec.JobCancelled,
}

// checkReplay checks the lineage link of a replayed run.
func checkReplay(v *Violations, m Model, s State, r *runRow, replays map[string]string) {
	name := r.run.Tenant + "/" + r.run.ID
	orig := s.row(r.run.Tenant, r.run.ReplayOf)
	switch {
	case orig == nil:
		v.add("R", "run %s replays %s, which does not exist in its tenant", name, r.run.ReplayOf)
	case orig.run.State != spec.RunFailed:
		v.add("R", "run %s replays %s, which is %s (only failed runs are replayed)", name, r.run.ReplayOf, orig.run.State)
	case r.run.ReplayDepth != orig.run.ReplayDepth+1:
		v.add("R", "run %s has replay depth %d, its original %d", name, r.run.ReplayDepth, orig.run.ReplayDepth)
	}
	if r.run.ReplayDepth > m.Config.MaxReplays {
		v.add("R", "run %s has replay depth %d past MaxReplays %d", name, r.run.ReplayDepth, m.Config.MaxReplays)
	}
	k := r.run.Tenant + "/" + r.run.ReplayOf
	if other, dup := replays[k]; dup {
		v.add("R", "run %s is replayed twice, as %s and %s", k, other, r.run.ID)
	}
	replays[k] = r.run.ID
}

// checkIdempotency checks invariants 7, 9 and 13 for the records.
func checkIdempotency(v *Violations, s State) {
	byRun := map[string]string{}
	for i, rec := range s.idem {
		scope := rec.Tenant + "/" + rec.Operation + "/" + spec.ShortHash(rec.Key)
		if i > 0 && idemOrder(s.idem[i-1], rec.Tenant, rec.Operation, rec.Key) >= 0 {
			v.add("9", "idempotency scope %s is duplicated or out of order", scope)
		}
		r := s.row(rec.Tenant, rec.RunID)
		switch {
		case r == nil:
			v.add("7", "idempotency record %s names run %s, which its tenant does not have", scope, rec.RunID)
		case r.run.Operation != rec.Operation || r.run.Fingerprint != rec.Fingerprint:
			v.add("9", "idempotency record %s (op %s) does not match run %s (op %s) or its fingerprint", scope, rec.Operation, rec.RunID, r.run.Operation)
		}
		if other, dup := byRun[rec.Tenant+"/"+rec.RunID]; dup {
			v.add("9", "run %s/%s is bound to two idempotency scopes (%s and %s)", rec.Tenant, rec.RunID, other, scope)
		}
		byRun[rec.Tenant+"/"+rec.RunID] = scope
		if rec.ExpiresAt < rec.CreatedAt {
			v.add("9", "idempotency record %s expires at %d before its creation %d", scope, rec.ExpiresAt, rec.CreatedAt)
		}
	}
}

package scenarios

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// checkFinal compares the store's final rows (the final scan) with
// sc.Final. The store must hold exactly the runs the file lists: a run it
// does not list is a mismatch too.
func (r *runner) checkFinal(snap spec.Snapshot) {
	bad := func(format string, args ...any) { r.mismatch(FinalStep, format, args...) }
	t := r.sc.Tenant
	for _, run := range snap.Runs {
		if run.Tenant != t || r.sc.Final.Runs[run.ID] == nil {
			bad("the store holds run %s/%s (state %s), which final.runs does not list", run.Tenant, run.ID, run.State)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.sc.Final.Runs)) {
		r.checkRun(rowsOf(snap, t, id), id, r.sc.Final.Runs[id])
	}
	for _, id := range r.sc.Final.Absent {
		if rows := rowsOf(snap, t, id); rows.run != nil {
			bad("run %s: expected absent, got a run in state %s", id, rows.run.State)
		}
	}
}

// runRows are one run's rows in a snapshot.
type runRows struct {
	run      *spec.Run
	job      spec.Job
	events   []spec.Event
	attempts []spec.Attempt
	effects  []spec.Effect
}

func rowsOf(snap spec.Snapshot, tenant, id string) runRows {
	var out runRows
	for i, run := range snap.Runs {
		if run.Tenant == tenant && run.ID == id {
			out.run = &snap.Runs[i]
		}
	}
	for _, j := range snap.Jobs {
		if j.Tenant == tenant && j.RunID == id {
			out.job = j
		}
	}
	for _, e := range snap.Events {
		if e.Tenant == tenant && e.RunID == id {
			out.events = append(out.events, e)
		}
	}
	for _, a := range snap.Attempts {
		if a.Tenant == tenant && a.RunID == id {
			out.attempts = append(out.attempts, a)
		}
	}
	for _, e := range snap.Effects {
		if e.Tenant == tenant && e.RunID == id {
			out.effects = append(out.effects, e)
		}
	}
	return out
}

func (r *runner) checkRun(rows runRows, id string, want *FinalRun) {
	bad := func(format string, args ...any) {
		r.mismatch(FinalStep, "run %s: %s", id, fmt.Sprintf(format, args...))
	}
	if rows.run == nil {
		bad("expected state %s, but the store has no such run", want.State)
		return
	}
	run, job, events, attempts, effects := *rows.run, rows.job, rows.events, rows.attempts, rows.effects
	check := func(field string, want, got any) {
		if fmt.Sprint(want) != fmt.Sprint(got) {
			bad("%s: expected %v, got %v", field, want, got)
		}
	}
	check("state", want.State, run.State)
	check("job_state", want.JobState, job.State)
	check("generation", want.Generation, job.Generation)
	check("attempts", want.Attempts, job.Attempts)
	if want.ErrorCode != nil {
		check("error_code", fmt.Sprintf("%q", *want.ErrorCode), fmt.Sprintf("%q", run.ErrorCode))
	}
	if want.Result != nil {
		w, _ := canonicalOrNull(want.Result)
		check("result", textOrNull(w), textOrNull(run.Result))
	}
	if want.LeaseOwner != nil {
		check("lease_owner", fmt.Sprintf("%q", *want.LeaseOwner), fmt.Sprintf("%q", job.LeaseOwner))
	}
	if want.LeaseExpiresAt != nil {
		check("lease_expires_at", *want.LeaseExpiresAt, job.LeaseExpiresAt)
	}
	if want.AvailableAt != nil {
		check("available_at", *want.AvailableAt, job.AvailableAt)
	}
	if want.ReplayOf != nil {
		check("replay_of", fmt.Sprintf("%q", *want.ReplayOf), fmt.Sprintf("%q", run.ReplayOf))
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, string(e.Kind))
	}
	var wantKinds []string
	for _, k := range want.Events {
		wantKinds = append(wantKinds, string(k))
	}
	check("events", "["+strings.Join(wantKinds, " ")+"]", "["+strings.Join(kinds, " ")+"]")
	if want.EventPayloads != nil && len(events) == len(want.EventPayloads) {
		for i, p := range want.EventPayloads {
			w, err := spec.Canonicalize(p)
			if err != nil {
				bad("event_payloads[%d]: %v", i, err)
				continue
			}
			check(fmt.Sprintf("event %d (%s) payload", i+1, events[i].Kind), w, events[i].Payload)
		}
	}
	var outcomes []string
	for _, a := range attempts {
		outcomes = append(outcomes, string(a.Outcome))
	}
	var wantOutcomes []string
	for _, o := range want.AttemptOutcomes {
		wantOutcomes = append(wantOutcomes, string(o))
	}
	check("attempt_outcomes (by generation)", "["+strings.Join(wantOutcomes, " ")+"]", "["+strings.Join(outcomes, " ")+"]")
	effectText := func(step, key string, state spec.EffectState, gen int64, ref *string) string {
		s := fmt.Sprintf("{%s/%s %s gen %d", step, key, state, gen)
		if ref != nil {
			s += fmt.Sprintf(" ref %q", *ref)
		}
		return s + "}"
	}
	var wantEffects, gotEffects []string
	for i, e := range want.Effects {
		wantEffects = append(wantEffects, effectText(e.Step, e.Key, e.State, *e.Generation, e.ProviderRef))
		if i < len(effects) {
			var ref *string
			if e.ProviderRef != nil {
				ref = &effects[i].ProviderRef
			}
			gotEffects = append(gotEffects, effectText(effects[i].Step, effects[i].Key, effects[i].State, effects[i].Generation, ref))
		}
	}
	for _, e := range effects[min(len(effects), len(want.Effects)):] {
		gotEffects = append(gotEffects, effectText(e.Step, e.Key, e.State, e.Generation, &e.ProviderRef))
	}
	check("effects", "["+strings.Join(wantEffects, " ")+"]", "["+strings.Join(gotEffects, " ")+"]")
}

package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// checkFinal compares the store's final rows with sc.Final, through the
// runner's own store (no hook, no barrier). The store must hold exactly the
// runs the file lists: a run it does not list is a mismatch too.
func (r *runner) checkFinal(ctx context.Context) {
	bad := func(format string, args ...any) { r.mismatch(FinalStep, format, args...) }
	snap, err := r.observer.Snapshot(ctx)
	if err != nil {
		bad("snapshot: %v", err)
		return
	}
	for _, run := range snap.Runs {
		if run.Tenant != r.sc.Tenant || r.sc.Final.Runs[run.ID] == nil {
			bad("the store holds run %s/%s (state %s), which final.runs does not list", run.Tenant, run.ID, run.State)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.sc.Final.Runs)) {
		r.checkRun(ctx, id, r.sc.Final.Runs[id])
	}
	for _, id := range r.sc.Final.Absent {
		run, err := r.observer.GetRun(ctx, r.sc.Tenant, id)
		if code := spec.CodeOf(err); code != spec.CodeNotFound {
			if err == nil {
				bad("run %s: expected absent (not_found), got a run in state %s", id, run.State)
			} else {
				bad("run %s: expected absent (not_found), got error %v", id, err)
			}
		}
	}
}

func (r *runner) checkRun(ctx context.Context, id string, want *FinalRun) {
	bad := func(format string, args ...any) {
		r.mismatch(FinalStep, "run %s: %s", id, fmt.Sprintf(format, args...))
	}
	t := r.sc.Tenant
	run, err := r.observer.GetRun(ctx, t, id)
	if err != nil {
		bad("expected state %s, got error %v", want.State, err)
		return
	}
	job, err := r.observer.GetJob(ctx, t, id)
	if err != nil {
		bad("get job: %v", err)
		return
	}
	events, err := r.observer.Events(ctx, t, id)
	if err != nil {
		bad("events: %v", err)
		return
	}
	attempts, err := r.observer.Attempts(ctx, t, id)
	if err != nil {
		bad("attempts: %v", err)
		return
	}
	effects, err := r.observer.Effects(ctx, t, id)
	if err != nil {
		bad("effects: %v", err)
		return
	}
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
		w, _ := decodeField("result", want.Result)
		check("result", formatValue("result", w), formatValue("result", run.Result))
	}
	if want.Owner != nil {
		check("owner", fmt.Sprintf("%q", *want.Owner), fmt.Sprintf("%q", job.LeaseOwner))
	}
	if want.ExpiresAt != nil {
		check("expires_at", *want.ExpiresAt, job.LeaseExpiresAt)
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
		wantEffects = append(wantEffects, effectText(e.Effect, e.Key, e.State, *e.Generation, e.ProviderRef))
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

package storetest

import (
	"slices"

	"github.com/leasehold/leasehold/invariant"
	"github.com/leasehold/leasehold/spec"
)

// runKey identifies a run across tenants.
type runKey struct{ tenant, run string }

func (k runKey) String() string { return k.tenant + "/" + k.run }

// invariantViolations checks a snapshot against the invariants of SPEC.md
// that rows alone can show (package invariant, the list `leasehold doctor`
// checks too) and describes each violation. Invariants 5 and 10 are about
// steps; the tests that make those steps check them.
func invariantViolations(s spec.Snapshot) []string {
	var out []string
	for _, v := range invariant.Check(s) {
		out = append(out, v.String())
	}
	return out
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

package harness

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// Verdict is the layered judgement of one history: linearizability against
// the model, then Jepsen-style accounting, with the race counts that show the
// run was not vacuous.
type Verdict struct {
	Linearizable porcupine.CheckResult
	Info         porcupine.LinearizationInfo
	Partitioned  bool
	CheckTime    time.Duration
	// Accounting lists every violation found by the accounting checks.
	Accounting []string
	Races      Races
	// Culprit, set by Explain, says where an illegal history goes wrong.
	Culprit *Culprit
}

// Races counts the named races a history actually contains.
type Races struct {
	StaleRefused     int // a write with a superseded generation was refused
	ExpiredReclaimed int // a lease expired and another claim took the job over
	CancelVsFinish   int // a cancel and a finishing write on one run raced: they overlapped in time, or the worker's write lost to the cancel
	UnknownOutcomes  int // operations whose outcome was unknown
	Rollbacks        int // operations that rolled back on an injected fault
}

// Violations returns the number of violations: one for a history that is
// not linearizable (or that the checker could not decide in time), plus one
// per accounting finding.
func (v Verdict) Violations() int {
	n := len(v.Accounting)
	if v.Linearizable != porcupine.Ok {
		n++
	}
	return n
}

// Judge checks h: porcupine first (a timeout is a failure, never a pass),
// then the accounting on the history and the final scan.
func Judge(m model.Model, h *History, partition bool, timeout time.Duration) Verdict {
	v := Verdict{Partitioned: partition}
	start := time.Now()
	v.Linearizable, v.Info = porcupine.CheckOperationsVerbose(PorcupineModel(m, partition), h.Operations(), timeout)
	v.CheckTime = time.Since(start)
	v.Accounting, v.Races = account(h)
	return v
}

// account runs the checks that need no model: nothing lost, nothing
// duplicated, no stale write accepted, no row the history cannot explain.
func account(h *History) (violations []string, races Races) {
	var final *spec.Snapshot
	for i := range h.Entries {
		if h.Entries[i].Op.Kind == OpSnapshot && h.Entries[i].Op.Req.(SnapshotRequest).Tenant == "" {
			s := h.Entries[i].Out.Result.Value.(spec.Snapshot)
			final = &s
		}
	}
	if final == nil { // per-tenant scans: merge them
		merged := spec.Snapshot{}
		for _, e := range h.Entries {
			if e.Op.Kind == OpSnapshot {
				s := e.Out.Result.Value.(spec.Snapshot)
				merged.Runs = append(merged.Runs, s.Runs...)
				merged.Jobs = append(merged.Jobs, s.Jobs...)
				merged.Attempts = append(merged.Attempts, s.Attempts...)
				merged.Effects = append(merged.Effects, s.Effects...)
			}
		}
		final = &merged
	}
	type runKey struct{ tenant, id string }
	type attemptKey struct {
		run runKey
		gen int64
	}
	// What the history explains: runs created or replayed (acknowledged, or
	// possibly applied), attempts handed out by claims, effect rows reserved.
	acknowledged := map[runKey]bool{}
	maybeRuns := map[runKey]bool{}
	claimed := map[attemptKey]int64{} // -> Return of the claim that handed it out
	maybeClaimTenants := map[string]bool{}
	reserved := map[string]bool{}
	for _, e := range h.Entries {
		ok := !e.Out.Unknown && e.Out.Result.Err == nil
		switch req := e.Op.Req.(type) {
		case spec.CreateRunRequest:
			k := runKey{req.Tenant, req.RunID}
			if ok && !e.Out.Result.Value.(spec.CreateRunResult).Replayed {
				acknowledged[k] = true
			}
			if e.Out.Unknown {
				maybeRuns[k] = true
			}
		case spec.ReplayRequest:
			k := runKey{req.Tenant, req.NewRunID}
			if ok {
				acknowledged[k] = true
			}
			if e.Out.Unknown {
				maybeRuns[k] = true
			}
		case spec.ClaimRequest:
			if e.Out.Unknown {
				maybeClaimTenants[req.Tenant] = true
			}
			if ok {
				for _, l := range e.Out.Result.Value.([]spec.Lease) {
					claimed[attemptKey{runKey{l.Tenant, l.RunID}, l.Generation}] = e.Return
				}
			}
		case spec.ReserveEffectRequest:
			if ok || e.Out.Unknown {
				reserved[req.Lease.Tenant+"/"+req.Lease.RunID+"/"+req.Step+"/"+req.Key] = true
			}
		}
	}
	finalRuns := map[runKey]spec.Run{}
	for _, r := range final.Runs {
		k := runKey{r.Tenant, r.ID}
		finalRuns[k] = r
		if !r.State.Terminal() {
			violations = append(violations, fmt.Sprintf("lost: run %s/%s is %s after the workers drained", r.Tenant, r.ID, r.State))
		}
		if !acknowledged[k] && !maybeRuns[k] {
			violations = append(violations, fmt.Sprintf("unexpected: run %s/%s exists but no create or replay in the history made it", r.Tenant, r.ID))
		}
	}
	for k := range acknowledged {
		if _, ok := finalRuns[k]; !ok {
			violations = append(violations, fmt.Sprintf("lost: run %s/%s was acknowledged but is not in the store", k.tenant, k.id))
		}
	}
	for _, a := range final.Attempts {
		k := attemptKey{runKey{a.Tenant, a.RunID}, a.Generation}
		if _, ok := claimed[k]; !ok && !maybeClaimTenants[a.Tenant] {
			violations = append(violations, fmt.Sprintf("unexpected: attempt %s/%s generation %d was never handed out by a claim", a.Tenant, a.RunID, a.Generation))
		}
		if a.Outcome == spec.AttemptExpired {
			races.ExpiredReclaimed++
		}
	}
	for _, e := range final.Effects {
		if !reserved[e.Tenant+"/"+e.RunID+"/"+e.Step+"/"+e.Key] {
			violations = append(violations, fmt.Sprintf("unexpected: effect %s/%s %s/%s was never reserved", e.Tenant, e.RunID, e.Step, e.Key))
		}
	}
	dups := h.Provider.Duplicates()
	keys := make([]string, 0, len(dups))
	for k := range dups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		violations = append(violations, fmt.Sprintf("duplicated: effect %s was applied %d times by the provider", k, dups[k]))
	}
	// Stale writes: a write with generation g that succeeded, called after a
	// claim of g+1 or later on the same run had returned.
	for _, e := range h.Entries {
		ref, guarded := leaseOf(e.Op)
		if !guarded {
			continue
		}
		superseded := false
		for k, ret := range claimed {
			if k.run == (runKey{ref.Tenant, ref.RunID}) && k.gen > ref.Generation && ret < e.Call {
				superseded = true
				break
			}
		}
		if !superseded {
			continue
		}
		switch {
		case !e.Out.Unknown && e.Out.Result.Err == nil:
			violations = append(violations, fmt.Sprintf("stale write accepted: %s by generation %d after a newer claim", e.Op.Kind, ref.Generation))
		case !e.Out.Unknown && e.Out.Result.Err.Code == spec.CodeLostLease:
			races.StaleRefused++
		}
	}
	races.CancelVsFinish = cancelRaces(h)
	for _, e := range h.Entries {
		switch {
		case e.Out.Unknown:
			races.UnknownOutcomes++
		case e.Out.Result.Err != nil && e.Out.Result.Err.Code == spec.CodeUnavailable:
			races.Rollbacks++
		}
	}
	return violations, races
}

// cancelRaces counts cancels that raced a complete, fail or retry of the
// same run: the finishing write was refused with cancelled (the worker was
// still running when the cancel won), or the two overlapped in time and one
// of them was told the other won.
func cancelRaces(h *History) int {
	n := 0
	for _, f := range h.Entries {
		if (f.Op.Kind == spec.OpComplete || f.Op.Kind == spec.OpFail || f.Op.Kind == spec.OpRetry) &&
			!f.Out.Unknown && f.Out.Result.Err != nil && f.Out.Result.Err.Code == spec.CodeCancelled {
			n++
		}
	}
	for _, c := range h.Entries {
		cancel, isCancel := c.Op.Req.(spec.CancelRequest)
		if !isCancel || c.Out.Unknown {
			continue
		}
		for _, f := range h.Entries {
			ref, guarded := leaseOf(f.Op)
			if !guarded || f.Out.Unknown || ref.Tenant != cancel.Tenant || ref.RunID != cancel.RunID ||
				(f.Op.Kind != spec.OpComplete && f.Op.Kind != spec.OpFail && f.Op.Kind != spec.OpRetry) {
				continue
			}
			overlap := c.Call <= f.Return && f.Call <= c.Return
			finishWon := f.Out.Result.Err == nil && c.Out.Result.Err != nil && c.Out.Result.Err.Code == spec.CodeAlreadyTerminal
			if overlap && finishWon { // the cancel-won side is counted above
				n++
			}
		}
	}
	return n
}

// leaseOf returns the lease a guarded write presents.
func leaseOf(op model.Op) (spec.LeaseRef, bool) {
	switch r := op.Req.(type) {
	case spec.RenewRequest:
		return r.Lease, true
	case spec.CompleteRequest:
		return r.Lease, true
	case spec.RetryRequest:
		return r.Lease, true
	case spec.FailRequest:
		return r.Lease, true
	case spec.ReleaseRequest:
		return r.Lease, true
	case spec.ReserveEffectRequest:
		return r.Lease, true
	case spec.RecordEffectRequest:
		return r.Lease, true
	}
	return spec.LeaseRef{}, false
}

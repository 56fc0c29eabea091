package validate

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/harness/history"
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

// Judgement says how to judge a history.
type Judgement struct {
	// Partition checks the history per tenant (see PorcupineModel).
	Partition bool
	// Timeout bounds the checker: a guard against a history it cannot
	// decide (hang.PhasePatience), never a judgement of a slow machine. A
	// timeout is a failure (the history proves nothing), never a pass.
	Timeout time.Duration
	// Drained says the history ends with a drain after which every
	// acknowledged run must be terminal; without it "lost" is not judged
	// (a scenario may end with a run still queued).
	Drained bool
}

// Judge checks h: porcupine first, then the accounting on the history and
// its final scan.
func Judge(m model.Model, h *history.History, j Judgement) Verdict {
	v := Verdict{Partitioned: j.Partition}
	start := time.Now()
	v.Linearizable, v.Info = porcupine.CheckOperationsVerbose(PorcupineModel(m, j.Partition), h.Operations(), j.Timeout)
	v.CheckTime = time.Since(start)
	v.Accounting = account(h, j.Drained)
	v.Races = RacesIn(h)
	return v
}

// account runs the checks that need no model: nothing lost, nothing
// duplicated, no stale write accepted, no row the history cannot explain.
func account(h *history.History, drained bool) (violations []string) {
	final := spec.Snapshot{}
	for _, s := range h.FinalScans() {
		final.Runs = append(final.Runs, s.Runs...)
		final.Attempts = append(final.Attempts, s.Attempts...)
		final.Effects = append(final.Effects, s.Effects...)
		final.Outbox = append(final.Outbox, s.Outbox...)
	}
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
	// What the history deleted: runs a purge of runs returned, and the
	// tenants of a purge whose outcome is unknown (it may have deleted any
	// of their finished runs).
	purged := map[runKey]bool{}
	maybePurgedTenants := map[string]bool{}
	for _, e := range h.Entries {
		ok := !e.Out.Unknown && e.Out.Result.Err == nil
		switch req := history.Committed(e.Op.Req).(type) {
		case spec.PurgeRunsRequest:
			if e.Out.Unknown {
				maybePurgedTenants[req.Tenant] = true
			}
			if ok {
				for _, id := range e.Out.Result.Value.([]string) {
					purged[runKey{req.Tenant, id}] = true
				}
			}
		case spec.CreateRunRequest:
			k := runKey{req.Tenant, req.RunID}
			if ok && !e.Out.Result.Value.(spec.CreateRunResult).Replayed {
				acknowledged[k] = true
			}
			if e.Out.Unknown {
				maybeRuns[k] = true
			}
		case spec.CreateRunsRequest:
			outs, _ := e.Out.Result.Value.([]spec.CreateOutcome)
			for i, m := range req.Requests {
				k := runKey{m.Tenant, m.RunID}
				if ok && i < len(outs) && outs[i].Err == nil && !outs[i].Result.Replayed {
					acknowledged[k] = true
				}
				if e.Out.Unknown {
					maybeRuns[k] = true
				}
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
		if drained && !r.State.Terminal() {
			violations = append(violations, fmt.Sprintf("lost: run %s/%s is %s after the workers drained", r.Tenant, r.ID, r.State))
		}
		if !acknowledged[k] && !maybeRuns[k] {
			violations = append(violations, fmt.Sprintf("unexpected: run %s/%s exists but no create or replay in the history made it", r.Tenant, r.ID))
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(acknowledged), func(a, b runKey) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.id, b.id))
	}) {
		if _, ok := finalRuns[k]; !ok && !purged[k] && !maybePurgedTenants[k.tenant] {
			violations = append(violations, fmt.Sprintf("lost: run %s/%s was acknowledged but is not in the store (and no purge of runs deleted it)", k.tenant, k.id))
		}
	}
	for _, a := range final.Attempts {
		k := attemptKey{runKey{a.Tenant, a.RunID}, a.Generation}
		if _, ok := claimed[k]; !ok && !maybeClaimTenants[a.Tenant] {
			violations = append(violations, fmt.Sprintf("unexpected: attempt %s/%s generation %d was never handed out by a claim", a.Tenant, a.RunID, a.Generation))
		}
	}
	for _, e := range final.Effects {
		if !reserved[e.Tenant+"/"+e.RunID+"/"+e.Step+"/"+e.Key] {
			violations = append(violations, fmt.Sprintf("unexpected: effect %s/%s %s/%s was never reserved", e.Tenant, e.RunID, e.Step, e.Key))
		}
	}
	violations = append(violations, accountOutbox(h, final, drained, purged, maybePurgedTenants)...)
	if h.Provider != nil {
		dups := h.Provider.Duplicates()
		for _, k := range slices.Sorted(maps.Keys(dups)) {
			violations = append(violations, fmt.Sprintf("duplicated: effect %s was applied %d times by the provider", k, dups[k]))
		}
	}
	// Stale writes: a write with generation g that succeeded, called after a
	// claim of g+1 or later on the same run had returned.
	for _, e := range h.Entries {
		if e.Out.Unknown || e.Out.Result.Err != nil {
			continue
		}
		for _, ref := range e.Op.Req.Leases() {
			for k, ret := range claimed {
				if k.run == (runKey{ref.Tenant, ref.RunID}) && k.gen > ref.Generation && ret < e.Call && acceptedFor(e, ref) {
					violations = append(violations, fmt.Sprintf("stale write accepted: %s by generation %d of %s/%s after a newer claim",
						e.Op.Kind(), ref.Generation, ref.Tenant, ref.RunID))
					break
				}
			}
		}
	}
	return violations
}

// outboxWrite is the messages one write asked for: of a run, by a
// generation (0: its admission).
type outboxWrite struct {
	run  runKey
	gen  int64
	msgs string // the messages, subject and canonical payload, in order
}

// accountOutbox checks the final scan's outbox messages against the writes
// of the history: every message of an acknowledged write is there (unless a
// purge of runs deleted its run), none of a refused write is, none that no
// write asked for, and after a drain every message is delivered.
func accountOutbox(h *history.History, final spec.Snapshot, drained bool, purged map[runKey]bool, maybePurgedTenants map[string]bool) (violations []string) {
	render := func(ms []spec.Message) string {
		out, err := spec.NormalizeOutbox(ms)
		if err != nil {
			return ""
		}
		s := ""
		for _, m := range out {
			s += m.Subject + " " + m.Payload + "\n"
		}
		return s
	}
	acked, maybe := map[outboxWrite]bool{}, map[outboxWrite]bool{}
	note := func(e history.Entry, w outboxWrite) {
		if w.msgs == "" {
			return
		}
		switch {
		case e.Out.Unknown:
			maybe[w] = true
		case e.Out.Result.Err == nil:
			acked[w] = true
		}
	}
	for _, e := range h.Entries {
		switch req := history.Committed(e.Op.Req).(type) {
		case spec.CreateRunRequest:
			if e.Out.Unknown || e.Out.Result.Err == nil && !e.Out.Result.Value.(spec.CreateRunResult).Replayed {
				note(e, outboxWrite{runKey{req.Tenant, req.RunID}, 0, render(req.Outbox)})
			}
		case spec.CreateRunsRequest:
			outs, _ := e.Out.Result.Value.([]spec.CreateOutcome)
			for i, m := range req.Requests {
				if e.Out.Unknown || i < len(outs) && outs[i].Err == nil && !outs[i].Result.Replayed {
					note(e, outboxWrite{runKey{m.Tenant, m.RunID}, 0, render(m.Outbox)})
				}
			}
		case spec.CompleteRequest:
			note(e, outboxWrite{runKey{req.Lease.Tenant, req.Lease.RunID}, req.Lease.Generation, render(req.Outbox)})
		case spec.CompleteBatchRequest:
			outs, _ := e.Out.Result.Value.([]spec.BatchOutcome)
			for i, m := range req.Requests {
				if e.Out.Unknown || i < len(outs) && outs[i].Err == nil {
					note(e, outboxWrite{runKey{m.Lease.Tenant, m.Lease.RunID}, m.Lease.Generation, render(m.Outbox)})
				}
			}
		}
	}
	found := map[outboxWrite]bool{}
	var order []outboxWrite
	groups := map[outboxWrite]string{}
	for _, m := range final.Outbox {
		k := outboxWrite{run: runKey{m.Tenant, m.RunID}, gen: m.Generation}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] += m.Subject + " " + m.Payload + "\n"
		if drained && m.State != spec.OutboxDelivered {
			violations = append(violations, fmt.Sprintf("lost: outbox message %s/%s#%d is still %s after the drain", m.Tenant, m.RunID, m.Seq, m.State))
		}
	}
	for _, k := range order {
		w := outboxWrite{k.run, k.gen, groups[k]}
		found[w] = true
		if !acked[w] && !maybe[w] {
			violations = append(violations, fmt.Sprintf("unexpected: outbox messages of %s/%s by generation %d were written by no acknowledged write in the history (a refused or stale one?)",
				k.run.tenant, k.run.id, k.gen))
		}
	}
	for _, w := range slices.SortedFunc(maps.Keys(acked), func(a, b outboxWrite) int {
		return cmp.Or(cmp.Compare(a.run.tenant, b.run.tenant), cmp.Compare(a.run.id, b.run.id), cmp.Compare(a.gen, b.gen))
	}) {
		if !found[w] && !purged[w.run] && !maybePurgedTenants[w.run.tenant] {
			violations = append(violations, fmt.Sprintf("lost: the outbox messages of %s/%s by generation %d were acknowledged but are not in the store", w.run.tenant, w.run.id, w.gen))
		}
	}
	return violations
}

// acceptedFor reports whether a successful operation accepted the write of
// ref: every guarded write does, and a batch does for the members it did not
// refuse.
func acceptedFor(e history.Entry, ref spec.LeaseRef) bool {
	outs, isBatch := e.Out.Result.Value.([]spec.BatchOutcome)
	if !isBatch {
		return true
	}
	for i, m := range e.Op.Req.(spec.CompleteBatchRequest).Requests {
		if m.Lease == ref && i < len(outs) && outs[i].Err == nil {
			return true
		}
	}
	return false
}

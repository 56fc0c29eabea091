package model

import (
	"slices"

	"github.com/leasehold/leasehold/spec"
)

// CheckStep returns nil when the move from prev to next by op respects every
// transition invariant of SPEC.md, and otherwise a Violations listing each
// one found:
//
//   - 5: a job's generation never decreases; a claim raises it by exactly one
//     and only for a job that was eligible at op.Now and is now leased to the
//     claiming worker; nothing else changes it; a new run's job starts at 0
//     (CreateRun) or at the original job's generation (Replay).
//   - 10: a guarded write (Renew, Complete, Retry, Fail, Release and the
//     effect calls) changes nothing unless op's lease was current and
//     unexpired in prev, and then only that run's rows.
//   - 12: a succeeded effect never changes again; effects are never deleted
//     but with their run.
//   - 13: an operation naming a tenant changes only that tenant's rows.
//   - 14: outbox messages are written only by an admission (with its new
//     run) and a completion; a message's content never changes; only
//     ClaimOutbox changes a claim (of a claimable message, to what the
//     claim gives) and only MarkDelivered delivers (a named pending
//     message, at op.Now); a delivered message never changes; neither
//     changes anything else; PurgeRuns never deletes a run with a pending
//     message; CreateRun and Replay never change a run that existed.
//   - and the history rules the invariants rest on (reported under the
//     invariant they protect, or "H"): runs, events and attempt rows are
//     never deleted, except by PurgeRuns, which deletes a run with all its
//     rows only when it is retired (terminal, finished at least
//     RunRetentionMs before op.Now, named by no live idempotency record, in
//     op's tenant) and only together with its whole replay lineage, and
//     changes nothing else; events are append-only; a finished attempt and
//     a terminal run never change; every change to a run row raises its
//     version by exactly one (H); idempotency records are never rewritten
//     and are deleted only once expired (by CreateRun of their scope, Purge,
//     or PurgeRuns with the run they name).
//
// It does not recompute Step: it holds for any next a correct store may
// reach, including Observe's non-FIFO claims.
func (m Model) CheckStep(prev State, op Op, next State) error {
	var v Violations
	tenant, scoped := op.Req.TenantScope()
	guardRefs := op.Req.Leases()
	claimReq, isClaim := op.Req.(spec.ClaimRequest)

	var deleted []*runRow
	// Both run lists are sorted by (tenant, run id): walk them together.
	pi, ni := 0, 0
	for pi < len(prev.runs) || ni < len(next.runs) {
		var p, n *runRow
		switch {
		case ni == len(next.runs):
			p, pi = prev.runs[pi], pi+1
		case pi == len(prev.runs):
			n, ni = next.runs[ni], ni+1
		default:
			c := runOrder(prev.runs[pi], next.runs[ni].run.Tenant, next.runs[ni].run.ID)
			if c <= 0 {
				p, pi = prev.runs[pi], pi+1
			}
			if c >= 0 {
				n, ni = next.runs[ni], ni+1
			}
		}
		switch {
		case n == nil:
			deleted = append(deleted, p)
			m.checkDeleted(&v, op, tenant, prev, p)
		case p == nil:
			checkNewRun(&v, op, tenant, scoped, prev, n)
		case !n.equal(p):
			name := p.run.Tenant + "/" + p.run.ID
			if scoped && p.run.Tenant != tenant {
				v.add("13", "%s for tenant %s changed run %s of another tenant", op.Kind(), tenant, name)
			}
			if op.Kind() == spec.OpPurge {
				v.add("13", "purge_idempotency changed run %s (it may only delete idempotency records)", name)
			}
			if op.Kind() == spec.OpPurgeRuns {
				v.add("7", "purge_runs changed run %s (it may only delete whole retired lineages)", name)
			}
			if guardRefs != nil {
				checkGuarded(&v, op, guardRefs, p, name)
			}
			if admits(op) || op.Kind() == spec.OpReplay {
				v.add("7", "%s changed run %s, which existed before (it may only create a run)", op.Kind(), name)
			}
			checkOutboxStep(&v, op, name, p, n)
			checkRunStep(&v, op, isClaim, claimReq, name, p, n)
		}
	}
	checkLineagesWhole(&v, prev, next, deleted)
	checkIdempotencyStep(&v, op, tenant, scoped, prev, next)
	return v.err()
}

// checkDeleted checks a run that op deleted: only purge_runs deletes runs,
// only its tenant's, and only a retired one.
func (m Model) checkDeleted(v *Violations, op Op, tenant string, prev State, p *runRow) {
	name := p.run.Tenant + "/" + p.run.ID
	if op.Kind() != spec.OpPurgeRuns {
		v.add("7", "run %s was deleted by %s (only purge_runs deletes runs)", name, op.Kind())
		return
	}
	if p.run.Tenant != tenant {
		v.add("13", "purge_runs for tenant %s deleted run %s of another tenant", tenant, name)
	}
	// Stated here again, not through the step's helpers: the judge must not
	// share a defect of what it judges.
	held := slices.ContainsFunc(prev.idem, func(rec spec.IdempotencyRecord) bool {
		return rec.Tenant == p.run.Tenant && rec.RunID == p.run.ID && rec.ExpiresAt > op.Now
	})
	switch {
	case m.Config.RunRetentionMs == 0:
		v.add("7", "purge_runs deleted run %s with retention off (RunRetentionMs 0)", name)
	case !p.run.State.Terminal() || len(p.events) == 0:
		v.add("7", "purge_runs deleted run %s, which is %s (only terminal runs are deleted)", name, p.run.State)
	case p.events[len(p.events)-1].At > op.Now-m.Config.RunRetentionMs:
		v.add("7", "purge_runs at %d deleted run %s, finished at %d: not %d ms ago yet", op.Now, name, p.events[len(p.events)-1].At, m.Config.RunRetentionMs)
	case held:
		v.add("9", "purge_runs deleted run %s, which a live idempotency record names (its retried request must still get it)", name)
	case p.pendingOutbox():
		v.add("14", "purge_runs deleted run %s with outbox messages not yet delivered (they are lost)", name)
	}
}

// checkLineagesWhole checks that every deleted run went with its whole
// replay lineage: its original and its replay, if any, were deleted too.
func checkLineagesWhole(v *Violations, prev, next State, deleted []*runRow) {
	for _, p := range deleted {
		name := p.run.Tenant + "/" + p.run.ID
		if o := p.run.ReplayOf; o != "" && next.row(p.run.Tenant, o) != nil {
			v.add("R", "replay %s was deleted but its original %s was kept (it could be replayed a second time)", name, o)
		}
		for _, r := range prev.runs {
			if r.run.Tenant == p.run.Tenant && r.run.ReplayOf == p.run.ID && next.row(r.run.Tenant, r.run.ID) != nil {
				v.add("R", "run %s was deleted but its replay %s was kept (its replay_of link would dangle)", name, r.run.ID)
			}
		}
	}
}

// checkNewRun checks a run that op created.
func checkNewRun(v *Violations, op Op, tenant string, scoped bool, prev State, n *runRow) {
	name := n.run.Tenant + "/" + n.run.ID
	if scoped && n.run.Tenant != tenant {
		v.add("13", "%s for tenant %s created run %s", op.Kind(), tenant, name)
	}
	switch op.Kind() {
	case spec.OpCreateRun, spec.OpCreateRuns, spec.OpCreateRunTx:
		if n.job.Generation != 0 {
			v.add("5", "created run %s starts at generation %d (want 0)", name, n.job.Generation)
		}
	case spec.OpReplay:
		orig := prev.row(n.run.Tenant, n.run.ReplayOf)
		if orig == nil || n.job.Generation != orig.job.Generation {
			v.add("5", "replay %s of %s starts at generation %d (want the original's, never lowered)", name, n.run.ReplayOf, n.job.Generation)
		}
	default:
		v.add("7", "%s created run %s", op.Kind(), name)
	}
	if n.job.Attempts != 0 || len(n.attempts) != 0 || len(n.effects) != 0 {
		v.add("7", "new run %s starts with attempts %d, %d attempt rows, %d effects", name, n.job.Attempts, len(n.attempts), len(n.effects))
	}
	for _, m := range n.outbox {
		if !admits(op) || m.State != spec.OutboxPending || m.Relay != "" || m.Claims != 0 {
			v.add("14", "new run %s (by %s) starts with outbox message %d %s, claimed %d times (only an admission writes messages, pending)", name, op.Kind(), m.Seq, m.State, m.Claims)
		}
	}
}

// checkRunStep checks the transition of one run that changed.
func checkRunStep(v *Violations, op Op, isClaim bool, claim spec.ClaimRequest, name string, p, n *runRow) {
	// History: a terminal run never changes (but for the claim and delivery
	// of its outbox messages); events only append.
	if p.run.State.Terminal() && !p.equalBesidesOutbox(n) {
		v.add("3", "terminal (%s) run %s changed", p.run.State, name)
	}
	if len(n.events) < len(p.events) || !slices.Equal(p.events, n.events[:len(p.events)]) {
		v.add("1", "run %s: events were rewritten or deleted (the log is append-only)", name)
	}
	if p.run != n.run && n.run.Version != p.run.Version+1 {
		v.add("H", "run %s changed with version %d -> %d (every change to a run row raises it by one)", name, p.run.Version, n.run.Version)
	}

	// 5: the generation.
	pg, ng := p.job.Generation, n.job.Generation
	claimed := isClaim && ng == pg+1
	switch {
	case ng < pg:
		v.add("5", "run %s: generation decreased %d -> %d", name, pg, ng)
	case isClaim && ng != pg && !claimed:
		v.add("5", "run %s: claim moved generation %d -> %d (want +1)", name, pg, ng)
	case !isClaim && ng != pg:
		v.add("5", "run %s: %s moved generation %d -> %d (only a claim may, by one)", name, op.Kind(), pg, ng)
	}
	if isClaim && !claimed && (p.job.Attempts != n.job.Attempts || p.job.State != n.job.State || p.job.LeaseOwner != n.job.LeaseOwner) {
		v.add("5", "run %s: claim changed the job (%s -> %s) without raising its generation", name, p.job.State, n.job.State)
	}
	if claimed {
		if !Eligible(p.job, op.Now) {
			v.add("5", "run %s: claim at %d took a job that was not eligible (%s, available %d, expiry %d, attempts %d/%d)",
				name, op.Now, p.job.State, p.job.AvailableAt, p.job.LeaseExpiresAt, p.job.Attempts, p.job.MaxAttempts)
		}
		if n.job.State != spec.JobLeased || n.job.LeaseOwner != claim.Worker || n.job.Attempts != p.job.Attempts+1 {
			v.add("5", "run %s: claimed job is %s by %q with attempts %d (want leased by %q, attempts %d)",
				name, n.job.State, n.job.LeaseOwner, n.job.Attempts, claim.Worker, p.job.Attempts+1)
		}
	}

	// History: attempts are never deleted, and a finished one never changes.
	for _, a := range p.attempts {
		b, found := n.attempt(a.Generation)
		switch {
		case !found:
			v.add("11", "run %s: attempt %d was deleted (history is kept)", name, a.Generation)
		case a.Outcome != spec.AttemptRunning && a != b:
			v.add("11", "run %s: finished attempt %d (%s) was rewritten", name, a.Generation, a.Outcome)
		}
	}

	// 12: effects are never deleted; a succeeded effect never changes.
	for _, e := range p.effects {
		f, found := n.effect(e.Step, e.Key)
		switch {
		case !found:
			v.add("12", "run %s: effect %s was deleted", name, e.Step)
		case e.State == spec.EffectSucceeded && e != f:
			v.add("12", "run %s: succeeded effect %s changed to %s by generation %d", name, e.Step, f.State, f.Generation)
		}
	}
}

// checkIdempotencyStep checks that records are only inserted, or deleted once expired.
func checkIdempotencyStep(v *Violations, op Op, tenant string, scoped bool, prev, next State) {
	for _, rec := range prev.idem {
		got, _, found := next.idempotency(rec.Tenant, rec.Operation, rec.Key)
		if found && got == rec {
			continue
		}
		if scoped && rec.Tenant != tenant {
			v.add("13", "%s for tenant %s changed an idempotency record of tenant %s", op.Kind(), tenant, rec.Tenant)
		}
		switch {
		case rec.ExpiresAt > op.Now:
			v.add("9", "%s changed or deleted a live idempotency record (%s/%s/%s, expires %d, now %d)", op.Kind(), rec.Tenant, rec.Operation, spec.ShortHash(rec.Key), rec.ExpiresAt, op.Now)
		case op.Kind() == spec.OpPurgeRuns && next.row(rec.Tenant, rec.RunID) != nil:
			v.add("9", "purge_runs deleted the idempotency record of %s/%s, a run it kept", rec.Tenant, rec.RunID)
		case op.Kind() != spec.OpPurge && !admits(op) && op.Kind() != spec.OpPurgeRuns:
			v.add("9", "%s deleted an idempotency record", op.Kind())
		}
	}
	for _, rec := range next.idem {
		old, _, found := prev.idempotency(rec.Tenant, rec.Operation, rec.Key)
		if found && old == rec {
			continue
		}
		if !admits(op) {
			v.add("9", "%s wrote an idempotency record", op.Kind())
		}
		if scoped && rec.Tenant != tenant {
			v.add("13", "%s for tenant %s wrote an idempotency record of tenant %s", op.Kind(), tenant, rec.Tenant)
		}
	}
}

// checkGuarded checks invariant 10 for a run that a guarded write changed:
// one of its leases is for the run and was current in prev.
func checkGuarded(v *Violations, op Op, refs []spec.LeaseRef, p *runRow, name string) {
	var lastErr *spec.Error
	for _, ref := range refs {
		if ref.Tenant != p.run.Tenant || ref.RunID != p.run.ID {
			continue
		}
		if lastErr = spec.LeaseError(p.job, ref, op.Now); lastErr == nil {
			return
		}
	}
	if lastErr == nil {
		v.add("10", "%s through lease %s changed another run %s", op.Kind(), refs[0], name)
		return
	}
	v.add("10", "%s through a lease that was not current (%s: %s) changed run %s", op.Kind(), lastErr.Code, lastErr.Message, name)
}

// sameState reports whether two states hold the same rows.
func sameState(a, b State) bool {
	if len(a.runs) != len(b.runs) || !slices.Equal(a.idem, b.idem) {
		return false
	}
	for i := range a.runs {
		if !a.runs[i].equal(b.runs[i]) {
			return false
		}
	}
	return true
}

// admits reports an admission: CreateRun, CreateRuns (its members), or
// AdmitInTx.
func admits(op Op) bool {
	return op.Kind() == spec.OpCreateRun || op.Kind() == spec.OpCreateRuns || op.Kind() == spec.OpCreateRunTx
}

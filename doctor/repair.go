package doctor

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

// reapBatch is the limit of each Reap call a repair makes.
const reapBatch = 100

// Repair diagnoses the target, applies the repairs the diagnosis plans, and
// returns a diagnosis made after them whose Repairs (Mode "applied") say
// what each did and Repairs.Before what was found first. actor names who
// repairs, for the audit trail (1-128 printable ASCII bytes; else
// invalid_argument and nothing is done).
//
// Every repair is one of the store's own guarded operations, so it keeps
// every invariant and rewrites no history: Store.Reap for the jobs leased
// with no attempts left whose lease expired (no claim can ever take them;
// their runs fail with lease_expired, exactly what the workers'
// housekeeping does; such a run's last attempt may have called an external
// system, and its effect rows then say reserved or unknown), and Store.Release, with the lease's owner and
// generation, for each unexpired lease of an owner in o.ReleaseOwners (the
// operator's word that the worker is dead). The rows to repair are read
// again just before, and the store's guard re-checks each: a lease renewed
// or taken over meanwhile is refused (Outcome refused, nothing changed).
//
// Each repair is recorded in the target's leasehold_doctor_audit table
// (created on first use; no other table is written outside the store's
// operations): a "started" row before the operation and its outcome after,
// with the actor. A crash between the two leaves the started row; the
// run's own events show whether the operation committed. If an audit row
// cannot be written, Repair stops and returns the error with the report so
// far. A refused or failed repair is in the report (Report.RepairFailed),
// not an error.
//
// A database whose invariants fail is not repaired (failed_precondition,
// with the diagnosis), whatever o.Tenant: the operations keep invariants
// that hold, and rows already broken need a person; a repair scoped to one
// tenant is refused while any tenant's rows are broken. When the invariants were not checked (more
// runs than Options.MaxRuns) the repairs go ahead, each re-checked by its
// operation's guard. A run makes at most the reaps its diagnosis listed
// (1000); run it again for more.
func Repair(ctx context.Context, t *Target, o Options, actor string) (*Report, error) {
	if err := checkActor(actor, "repairing"); err != nil {
		return nil, err
	}
	before, err := Diagnose(ctx, t, o)
	if err != nil {
		return nil, err
	}
	broken := before.Invariants.Status == StatusFail || before.Invariants.DatabaseViolations > 0
	if mutant.On(mutant.ScopedRepairSkipsInvariants) && o.Tenant != "" {
		broken = false
	}
	if broken {
		before.Repairs.Notes = append(before.Repairs.Notes, "Not repaired: the database violates the contract's invariants (above; "+
			"a repair scoped to one tenant is refused for any tenant's), and the store's operations are only shown to keep invariants that hold. "+
			"Find out how the rows got so first.")
		return before, spec.Errorf(spec.CodeFailedPrecondition, "doctor: %s violates contract invariants (%d violations); nothing was repaired (the report says where)",
			t.name, before.Invariants.DatabaseViolations)
	}
	a := &auditor{t: t, actor: actor, o: o}
	actions, err := a.apply(ctx, before.Repairs.Actions)
	after, derr := Diagnose(ctx, t, o)
	if derr != nil {
		return nil, errors.Join(err, derr)
	}
	after.Repairs = Repairs{Mode: "applied", Actor: actor, Actions: actions,
		Before: &Before{Verdict: before.Verdict, Failed: before.Failed()}}
	if len(actions) == 0 {
		after.Repairs.Notes = []string{"Nothing needed repair; nothing was changed."}
	}
	if err != nil {
		return after, err
	}
	return after, nil
}

// auditor applies repairs and records each.
type auditor struct {
	t     *Target
	actor string
	o     Options
}

// apply runs the planned repairs: reaps per tenant (the store picks the
// victims again, in its own order and under its own predicate), releases
// one by one.
func (a *auditor) apply(ctx context.Context, planned []Action) ([]Action, error) {
	done := []Action{}
	if len(planned) == 0 {
		return done, nil
	}
	if err := a.ensureAudit(ctx); err != nil {
		return done, err
	}
	// The reapable jobs as planned, by tenant: a reap's result names run
	// ids, and the plan knows their owners and generations.
	var tenants []string
	count := map[string]int{}
	known := map[[2]string]Action{}
	for _, p := range planned {
		if p.Action != "reap" {
			continue
		}
		if count[p.Tenant] == 0 {
			tenants = append(tenants, p.Tenant)
		}
		count[p.Tenant]++
		known[[2]string{p.Tenant, p.RunID}] = p
	}
	for _, tenant := range tenants {
		n := count[tenant]
		if err := a.record(ctx, Action{Action: "reap", Tenant: tenant, Outcome: "started",
			Message: fmt.Sprintf("reaping the %d jobs of tenant %s leased with no attempts left and expired (the store re-checks each)", n, tenant)}); err != nil {
			return done, err
		}
		// At most the planned number: jobs that became reapable since wait
		// for the next diagnosis, so a repair does what its dry run said.
		for left := n; left > 0; {
			ids, err := a.t.store.Reap(ctx, spec.ReapRequest{Tenant: tenant, Limit: min(left, reapBatch)})
			if err != nil {
				act := Action{Action: "reap", Tenant: tenant, Outcome: OutcomeFailed, Code: string(spec.CodeOf(err)), Message: err.Error()}
				done = append(done, act)
				if err := a.record(ctx, act); err != nil {
					return done, err
				}
				break
			}
			for _, id := range ids {
				act := known[[2]string{tenant, id}]
				act.Action, act.Tenant, act.RunID, act.Outcome = "reap", tenant, id, OutcomeApplied
				done = append(done, act)
				if err := a.record(ctx, act); err != nil {
					return done, err
				}
			}
			left -= len(ids)
			if len(ids) == 0 {
				break // the rest were taken over, finished or are held by another reaper
			}
		}
	}
	for _, p := range planned {
		if p.Action != "release" {
			continue
		}
		start := p
		start.Outcome = "started"
		if err := a.record(ctx, start); err != nil {
			return done, err
		}
		act := p
		_, err := a.t.store.Release(ctx, spec.ReleaseRequest{Lease: spec.LeaseRef{Tenant: p.Tenant, RunID: p.RunID, Owner: p.Owner, Generation: p.Generation}})
		switch code := spec.CodeOf(err); {
		case err == nil:
			act.Outcome = OutcomeApplied
		case code == spec.CodeLostLease || code == spec.CodeCancelled || code == spec.CodeAlreadyTerminal || code == spec.CodeNotFound:
			act.Outcome, act.Code, act.Message = OutcomeRefused, string(code), err.Error()
		default:
			act.Outcome, act.Code, act.Message = OutcomeFailed, string(code), err.Error()
		}
		done = append(done, act)
		if err := a.record(ctx, act); err != nil {
			return done, err
		}
	}
	return done, nil
}

// record appends one audit row.
func (a *auditor) record(ctx context.Context, act Action) error {
	now, _, err := a.t.clockNow(ctx, a.o, hostClock(a.o))
	if err == nil {
		err = a.t.db.exec(ctx, insertAudit, args{"at": now, "actor": a.actor, "action": act.Action, "tenant": act.Tenant,
			"run_id": act.RunID, "owner": act.Owner, "generation": act.Generation, "outcome": act.Outcome,
			"code": act.Code, "message": act.Message})
	}
	if err != nil {
		return fmt.Errorf("doctor: cannot write the audit trail (%s), so the repairs stopped; the last %s of %s/%s is not recorded there (its run's events show whether it happened): %w",
			auditTable, act.Action, act.Tenant, act.RunID, err)
	}
	return nil
}

// AuditEntry is one row of the audit trail.
type AuditEntry struct {
	ID         int64  `json:"id"`
	At         int64  `json:"at"`
	Actor      string `json:"actor"`
	Action     string `json:"action"`
	Tenant     string `json:"tenant"`
	RunID      string `json:"run_id"`
	Owner      string `json:"owner"`
	Generation int64  `json:"generation"`
	Outcome    string `json:"outcome"` // started, applied, refused or failed
	Code       string `json:"code"`
	Message    string `json:"message"`
}

// ReadAudit returns the target's audit trail, oldest first (none before
// the first repair).
func ReadAudit(ctx context.Context, t *Target) ([]AuditEntry, error) {
	var exists int64
	q := `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = @table`
	a := args{"table": auditTable}
	if t.pg != nil {
		q, a["schema"] = `SELECT count(*) FROM information_schema.tables WHERE table_schema = @schema AND table_name = @table`, t.pg.Schema()
	}
	if err := one(ctx, t.db, q, a, &exists); err != nil || exists == 0 {
		return []AuditEntry{}, err
	}
	out := []AuditEntry{}
	err := t.db.query(ctx, selectAudit, nil, func(scan func(...any) error) error {
		var e AuditEntry
		if err := scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Tenant, &e.RunID, &e.Owner, &e.Generation, &e.Outcome, &e.Code, &e.Message); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

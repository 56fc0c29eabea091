package doctor

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/spec"
)

// An operator's actions (`leasehold ui --actor NAME`) are audited exactly as
// the doctor's repairs are: each goes through the store's own guarded
// operation, with a "started" row in leasehold_doctor_audit before it and its
// outcome after, naming the actor. One audit trail, one place.

// Store returns the target's store, for reads and guarded operations.
func (t *Target) Store() spec.Store { return t.store }

// checkActor holds an actor to the audit trail's spelling (1-128 printable
// ASCII bytes).
func checkActor(actor, what string) error {
	if err := spec.CheckWorker(actor); err != nil {
		return spec.Errorf(spec.CodeInvalidArgument, "doctor: actor %q: want who is %s, 1-128 printable ASCII bytes, for the audit trail", actor, what)
	}
	return nil
}

// Cancel cancels tenant's run through Store.Cancel on behalf of actor,
// recorded in the audit trail (action "cancel"). The store's answer is
// returned unchanged: a run already terminal is already_terminal, another
// tenant's run not_found, and the audit row says refused. An invalid actor
// is invalid_argument and nothing is done; an audit row that cannot be
// written stops it before the cancel (or reports the cancel's outcome
// unrecorded, with the error).
func Cancel(ctx context.Context, t *Target, o Options, actor, tenant, runID string) (spec.Run, error) {
	if err := checkActor(actor, "cancelling"); err != nil {
		return spec.Run{}, err
	}
	var run spec.Run
	err := (&auditor{t: t, actor: actor, o: o}).guarded(ctx, Action{Action: "cancel", Tenant: tenant, RunID: runID}, func() (err error) {
		run, err = t.store.Cancel(ctx, spec.CancelRequest{Tenant: tenant, RunID: runID})
		return err
	}, spec.CodeAlreadyTerminal, spec.CodeNotFound, spec.CodeInvalidArgument)
	return run, err
}

// Replay replays tenant's failed run as newRunID through Store.Replay on
// behalf of actor, who is also the actor of the replay's audited run_queued
// event, recorded in the audit trail (action "replay"). As Cancel: the
// store's answer unchanged (failed_precondition for a run that is not
// failed, already_exists, replay_limit, not_found: refused in the audit).
func Replay(ctx context.Context, t *Target, o Options, actor, tenant, runID, newRunID string) (spec.Run, error) {
	if err := checkActor(actor, "replaying"); err != nil {
		return spec.Run{}, err
	}
	var run spec.Run
	err := (&auditor{t: t, actor: actor, o: o}).guarded(ctx, Action{Action: "replay", Tenant: tenant, RunID: runID}, func() (err error) {
		run, err = t.store.Replay(ctx, spec.ReplayRequest{Tenant: tenant, RunID: runID, NewRunID: newRunID, Actor: actor})
		return err
	}, spec.CodeFailedPrecondition, spec.CodeAlreadyExists, spec.CodeReplayLimit, spec.CodeNotFound, spec.CodeInvalidArgument)
	return run, err
}

// ensureAudit creates the audit table if it is not there yet.
func (a *auditor) ensureAudit(ctx context.Context) error {
	create := createAuditSQLite
	if a.t.pg != nil {
		create = createAuditPG
	}
	if err := a.t.db.exec(ctx, create, nil); err != nil {
		return fmt.Errorf("doctor: cannot create the audit table %s, so nothing was done: %w", auditTable, err)
	}
	return nil
}

// guarded records act as started, runs op, and records its outcome:
// applied, refused (op's error has one of the refused codes: the store's
// guard said no) or failed. It returns op's error, or the audit's when a row
// cannot be written (then op did not run, or its outcome is unrecorded).
func (a *auditor) guarded(ctx context.Context, act Action, op func() error, refused ...spec.Code) error {
	if err := a.ensureAudit(ctx); err != nil {
		return err
	}
	start := act
	start.Outcome = "started"
	if err := a.record(ctx, start); err != nil {
		return err
	}
	err := op()
	act.Outcome = OutcomeApplied
	if err != nil {
		code := spec.CodeOf(err)
		act.Outcome, act.Code, act.Message = OutcomeFailed, string(code), err.Error()
		for _, c := range refused {
			if code == c {
				act.Outcome = OutcomeRefused
			}
		}
	}
	if rerr := a.record(ctx, act); rerr != nil {
		return rerr
	}
	return err
}

// RunOutbox returns tenant's run's outbox messages in seq order (none for a
// run that wrote none): the contract
// has no per-run read of the outbox, so the doctor reads its table, as for
// its findings. Another tenant's run has none.
func RunOutbox(ctx context.Context, t *Target, tenant, runID string) ([]spec.OutboxMessage, error) {
	out := []spec.OutboxMessage{}
	err := t.db.query(ctx, runOutbox, args{"tenant": tenant, "run_id": runID}, func(scan func(...any) error) error {
		var m spec.OutboxMessage
		var state string
		if err := scan(&m.Tenant, &m.RunID, &m.Seq, &m.ID, &m.Subject, &m.Payload, &m.Generation, &m.CreatedAt, &state,
			&m.Relay, &m.ClaimExpiresAt, &m.Claims, &m.DeliveredAt); err != nil {
			return err
		}
		m.State = spec.OutboxState(state)
		out = append(out, m)
		return nil
	})
	return out, err
}

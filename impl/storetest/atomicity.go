package storetest

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Projection/event atomicity: a failure after every write of an operation is
// done but before its commit must leave no trace; a failure after the commit
// must be reported as an unknown outcome, and the writes must be there.
// Faults are injected through the store's hook (CapHooks).

func init() {
	register("ProjectionEventAtomicity", testProjectionEventAtomicity)
	register("AfterCommitFailureIsUnknownOutcome", testAfterCommitFailureIsUnknownOutcome)
}

// atomicCase prepares a store and returns the operation under test.
type atomicCase struct {
	op      spec.Op
	name    string
	mods    []func(*spec.Config)
	prepare func(e *env) func() error
}

func atomicCases() []atomicCase {
	one := func(c *spec.Config) {
		p := c.Operations["work"]
		p.DefaultMaxAttempts = 1
		c.Operations["work"] = p
	}
	claimed := func(e *env) spec.Lease {
		e.newRun("acme", "r1")
		return e.claimOne("acme", "r1", "w1", 10_000)
	}
	return []atomicCase{
		{op: spec.OpCreateRun, name: "CreateRun", prepare: func(e *env) func() error {
			return func() error { _, err := e.s.CreateRun(e.ctx, req("acme", "r1")); return err }
		}},
		{op: spec.OpCreateRun, name: "CreateRunReplacingExpiredKey", prepare: func(e *env) func() error {
			e.newRun("acme", "old")
			e.set(t0 + e.cfg.IdempotencyRetentionMs)
			r := req("acme", "new")
			r.IdempotencyKey = "k-old"
			return func() error { _, err := e.s.CreateRun(e.ctx, r); return err }
		}},
		{op: spec.OpClaim, name: "Claim", prepare: func(e *env) func() error {
			e.newRun("acme", "r1")
			e.newRun("acme", "r2")
			return func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 1000, Limit: 2})
				return err
			}
		}},
		{op: spec.OpClaim, name: "ClaimOfExpiredLease", prepare: func(e *env) func() error {
			claimed(e)
			e.set(t0 + 10_000)
			return func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 1000, Limit: 1})
				return err
			}
		}},
		{op: spec.OpRenew, name: "Renew", prepare: func(e *env) func() error {
			l := claimed(e)
			e.set(t0 + 10)
			return func() error {
				_, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 10_000})
				return err
			}
		}},
		{op: spec.OpComplete, name: "Complete", prepare: func(e *env) func() error {
			l := claimed(e)
			return func() error {
				_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"x":1}`)})
				return err
			}
		}},
		{op: spec.OpComplete, name: "CompleteWithOutbox", prepare: func(e *env) func() error {
			l := claimed(e)
			return func() error {
				_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Outbox: msgs("done", 2)})
				return err
			}
		}},
		{op: spec.OpCreateRun, name: "CreateRunWithOutbox", prepare: func(e *env) func() error {
			r := req("acme", "r1")
			r.Outbox = msgs("created", 2)
			return func() error { _, err := e.s.CreateRun(e.ctx, r); return err }
		}},
		{op: spec.OpClaimOutbox, name: "ClaimOutbox", prepare: func(e *env) func() error {
			r := req("acme", "r1")
			r.Outbox = msgs("created", 2)
			e.create(r)
			return func() error {
				_, err := e.s.ClaimOutbox(e.ctx, spec.ClaimOutboxRequest{Relay: "relay", LeaseMs: 1000, Limit: 5})
				return err
			}
		}},
		{op: spec.OpMarkDelivered, name: "MarkDelivered", prepare: func(e *env) func() error {
			r := req("acme", "r1")
			r.Outbox = msgs("created", 2)
			e.create(r)
			return func() error {
				_, err := e.s.MarkDelivered(e.ctx, spec.MarkDeliveredRequest{Messages: []spec.OutboxKey{
					{Tenant: "acme", RunID: "r1", Seq: 1}, {Tenant: "acme", RunID: "r1", Seq: 2}}})
				return err
			}
		}},
		{op: spec.OpFail, name: "Fail", prepare: func(e *env) func() error {
			l := claimed(e)
			return func() error {
				_, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: l.Ref(), ErrorCode: "bad"})
				return err
			}
		}},
		{op: spec.OpRetry, name: "RetryBelowBudget", prepare: func(e *env) func() error {
			l := claimed(e)
			return func() error {
				_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: "flaky"})
				return err
			}
		}},
		{op: spec.OpRetry, name: "RetryAtBudget", mods: []func(*spec.Config){one}, prepare: func(e *env) func() error {
			l := claimed(e)
			return func() error {
				_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: "flaky"})
				return err
			}
		}},
		{op: spec.OpCancel, name: "CancelQueued", prepare: func(e *env) func() error {
			e.newRun("acme", "r1")
			return func() error { _, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1"}); return err }
		}},
		{op: spec.OpCancel, name: "CancelLeased", prepare: func(e *env) func() error {
			claimed(e)
			return func() error {
				_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1", Reason: "stop"})
				return err
			}
		}},
		{op: spec.OpRelease, name: "Release", prepare: func(e *env) func() error {
			l := claimed(e)
			return func() error { _, err := e.s.Release(e.ctx, spec.ReleaseRequest{Lease: l.Ref()}); return err }
		}},
		{op: spec.OpReap, name: "Reap", mods: []func(*spec.Config){one}, prepare: func(e *env) func() error {
			claimed(e)
			e.set(t0 + 10_000)
			return func() error { _, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: "acme", Limit: 10}); return err }
		}},
		{op: spec.OpPurge, name: "PurgeIdempotency", prepare: func(e *env) func() error {
			e.newRun("acme", "r1")
			e.set(t0 + e.cfg.IdempotencyRetentionMs)
			return func() error { _, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 10}); return err }
		}},
		{op: spec.OpPurgeRuns, name: "PurgeRuns", mods: []func(*spec.Config){retentionConfig}, prepare: func(e *env) func() error {
			e.failedRun("acme", "r1")
			_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "r1", NewRunID: "r1-b", Actor: "ops"})
			mustOK(e.t, "Replay", err)
			e.cancel("acme", "r1-b", "")
			e.set(t0 + e.cfg.RunRetentionMs)
			return func() error {
				_, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 10})
				return err
			}
		}},
		{op: spec.OpCreateRun, name: "CreateRunScheduled", prepare: func(e *env) func() error {
			r := req("acme", "r1")
			r.DelayMs = 1000
			return func() error { _, err := e.s.CreateRun(e.ctx, r); return err }
		}},
		{op: spec.OpReplay, name: "Replay", prepare: func(e *env) func() error {
			e.failedRun("acme", "r1")
			return func() error {
				_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "r1", NewRunID: "r1-b", Actor: "ops"})
				return err
			}
		}},
		{op: spec.OpReserveEffect, name: "ReserveEffect", prepare: func(e *env) func() error {
			l := claimed(e)
			return func() error {
				_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1"})
				return err
			}
		}},
		{op: spec.OpRecordEffect, name: "RecordEffect", prepare: func(e *env) func() error {
			l := claimed(e)
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1"})
			mustOK(e.t, "ReserveEffect", err)
			return func() error {
				_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1",
					State: spec.EffectSucceeded, ProviderRef: "p-1"})
				return err
			}
		}},
		{op: spec.OpReconcileEffect, name: "ReconcileEffect", prepare: func(e *env) func() error {
			l := claimed(e)
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1"})
			mustOK(e.t, "ReserveEffect", err)
			_, err = e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1", State: spec.EffectUnknown})
			mustOK(e.t, "RecordEffect unknown", err)
			return func() error {
				_, err := e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1",
					State: spec.EffectSucceeded, ProviderRef: "p-1"})
				return err
			}
		}},
	}
}

func testProjectionEventAtomicity(t *testing.T, f Factory) {
	newEnv(t, f).need(CapHooks)
	for _, c := range atomicCases() {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, f, c.mods...)
			call := c.prepare(e)
			before := e.snap()
			e.hook.arm(c.op, spec.BeforeCommit)
			err := call()
			fired := e.hook.disarm()
			if fired != 1 {
				t.Fatalf("%s: want the %s hook called once at %s, called %d times", c.name, c.op, spec.BeforeCommit, fired)
			}
			if !errors.Is(err, errInjected) {
				t.Fatalf("%s: a failing %s hook must fail the operation with the hook's error, got %v", c.name, spec.BeforeCommit, err)
			}
			e.unchanged(c.name+" rolled back by the hook", before)
			// The same call, undisturbed, does write: the rollback above was
			// not a no-op.
			mustOK(t, c.name+" without the hook", call())
			if diff(e.snap(), before) == "" {
				t.Fatalf("%s: the undisturbed call changed nothing, so the rollback check proved nothing", c.name)
			}
		})
	}
}

func testAfterCommitFailureIsUnknownOutcome(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.need(CapHooks)
	// CreateRun: the caller learns nothing, retries with the same key and
	// gets the committed run back as a replay.
	r := req("acme", "r1")
	e.hook.arm(spec.OpCreateRun, spec.AfterCommit)
	_, err := e.s.CreateRun(e.ctx, r)
	e.hook.disarm()
	mustCode(t, "CreateRun with a failing after-commit hook", err, spec.CodeUnknownOutcome)
	res, err := e.s.CreateRun(e.ctx, r)
	mustOK(t, "CreateRun retried after an unknown outcome", err)
	mustEqual(t, "retried CreateRun", res, spec.CreateRunResult{Run: e.wantRun(r, t0), Replayed: true})

	// Complete: committed although the caller saw unknown_outcome; a second
	// Complete by the same lease sees the run already terminal.
	l := e.claimOne("acme", "r1", "w1", 10_000)
	e.hook.arm(spec.OpComplete, spec.AfterCommit)
	_, err = e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref()})
	e.hook.disarm()
	mustCode(t, "Complete with a failing after-commit hook", err, spec.CodeUnknownOutcome)
	mustEqual(t, "run state after an unknown-outcome Complete", e.getRun("acme", "r1").State, spec.RunCompleted)
	_, err = e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref()})
	mustCodeState(t, "Complete again", err, spec.CodeAlreadyTerminal, spec.RunCompleted)
}

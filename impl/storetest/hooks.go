package storetest

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Which writes call the hooks (SPEC.md, "For porters"): every writing
// operation that answers with a result calls both, also when it wrote
// nothing — a replayed admission, a claim, reap, purge or outbox claim that
// found nothing, an effect reservation decided done or reconcile, a mark of
// messages already gone — since the harness's faults and barriers are
// placed on the hooks and must reach every operation that can succeed. A
// write that is refused (any error code) calls neither: its checks came
// before any write and it commits nothing.

func init() {
	register("HooksOnEveryAnsweredWrite", testHooksOnEveryAnsweredWrite)
}

// hookCase is one write whose hooks are checked: call runs it; refused is
// the code it is refused with, or "" when it answers with a result.
type hookCase struct {
	name    string
	op      spec.Op
	call    func() error
	refused spec.Code
}

func hookCases(e *env) []hookCase {
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 60_000)
	e.newRun("acme", "r2")
	l2 := e.claimOne("acme", "r2", "w", 60_000)
	mustOK(e.t, "reserve", func() error {
		_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "k1"})
		return err
	}())
	_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "charge", Key: "k1", State: spec.EffectSucceeded, ProviderRef: "p-1"})
	mustOK(e.t, "record", err)
	_, err = e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "k2"})
	mustOK(e.t, "reserve k2", err)
	stale := l2.Ref()
	stale.Generation++
	replayed := req("acme", "r1")
	replayed.RunID = "r1-again"
	conflicting := req("acme", "r3")
	conflicting.IdempotencyKey = req("acme", "r1").IdempotencyKey
	conflicting.Payload = []byte(`{"other":true}`)
	cases := []hookCase{
		{"CreateRun replayed", spec.OpCreateRun, func() error { _, err := e.s.CreateRun(e.ctx, replayed); return err }, ""},
		{"Claim of nothing", spec.OpClaim, func() error {
			_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 1000, Limit: 1})
			return err
		}, ""},
		{"ReserveEffect decided done", spec.OpReserveEffect, func() error {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "k1"})
			return err
		}, ""},
		{"ReserveEffect decided reconcile", spec.OpReserveEffect, func() error {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "k2"})
			return err
		}, ""},
		{"Reap of nothing", spec.OpReap, func() error { _, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: "acme", Limit: 1}); return err }, ""},
		{"PurgeIdempotency of nothing", spec.OpPurge, func() error { _, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 1}); return err }, ""},
		{"PurgeRuns of nothing", spec.OpPurgeRuns, func() error {
			_, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 1})
			return err
		}, ""},
		{"ClaimOutbox of nothing", spec.OpClaimOutbox, func() error {
			_, err := e.s.ClaimOutbox(e.ctx, spec.ClaimOutboxRequest{Relay: "relay", LeaseMs: 1000, Limit: 1})
			return err
		}, ""},
		{"MarkDelivered of a message that is not there", spec.OpMarkDelivered, func() error {
			_, err := e.s.MarkDelivered(e.ctx, spec.MarkDeliveredRequest{Messages: []spec.OutboxKey{{Tenant: "acme", RunID: "r1", Seq: 9}}})
			return err
		}, ""},
		{"CreateRun refused as invalid", spec.OpCreateRun, func() error { _, err := e.s.CreateRun(e.ctx, req("acme", "-r")); return err }, spec.CodeInvalidArgument},
		{"CreateRun refused as a conflict", spec.OpCreateRun, func() error { _, err := e.s.CreateRun(e.ctx, conflicting); return err }, spec.CodeIdempotencyConflict},
		{"Complete refused for a stale lease", spec.OpComplete, func() error {
			_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: stale})
			return err
		}, spec.CodeLostLease},
		{"Renew refused past the deadline", spec.OpRenew, func() error {
			_, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: l2.Ref(), LeaseMs: e.cfg.MaxLeaseMs})
			return err
		}, spec.CodeDeadlineExceeded},
		{"Cancel refused for a missing run", spec.OpCancel, func() error {
			_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "nope"})
			return err
		}, spec.CodeNotFound},
	}
	if a, ok := e.s.(spec.TxAdmitter); ok {
		admit := func(r spec.CreateRunRequest, rollback bool) func() error {
			return func() error {
				_, err := a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: r, Rollback: rollback})
				return err
			}
		}
		cases = append(cases,
			hookCase{"AdmitInTx replayed", spec.OpCreateRunTx, admit(replayed, false), ""},
			hookCase{"AdmitInTx rolled back", spec.OpCreateRunTx, admit(req("acme", "r4"), true), ""},
			hookCase{"AdmitInTx refused as a conflict", spec.OpCreateRunTx, admit(conflicting, false), spec.CodeIdempotencyConflict})
	}
	return cases
}

func testHooksOnEveryAnsweredWrite(t *testing.T, f Factory) {
	e := newEnv(t, f, func(c *spec.Config) {
		p := c.Operations["work"]
		p.DefaultTimeoutMs = 30_000 // so that a renewal of MaxLeaseMs passes the deadline
		c.Operations["work"] = p
	})
	e.need(CapHooks)
	for _, c := range hookCases(e) {
		before := e.snap()
		for _, point := range []spec.HookPoint{spec.BeforeCommit, spec.AfterCommit} {
			e.hook.arm(c.op, point)
			err := c.call()
			fired := e.hook.disarm()
			switch {
			case c.refused != "":
				if fired != 0 || spec.CodeOf(err) != c.refused {
					t.Errorf("%s: want %s and no hook called (a refused write commits nothing), got %v and the %s hook called %d times",
						c.name, c.refused, err, point, fired)
				}
			case fired != 1 || !errors.Is(err, errInjected):
				t.Errorf("%s: want the %s hook called once, its fault returned (a write that answers calls both hooks, "+
					"also when it wrote nothing), got it called %d times and %v", c.name, point, fired, err)
			case point == spec.BeforeCommit && spec.CodeOf(err) != spec.CodeUnavailable,
				point == spec.AfterCommit && spec.CodeOf(err) != spec.CodeUnknownOutcome:
				t.Errorf("%s: a fault at %s must be answered %s, got %v", c.name, point,
					map[spec.HookPoint]spec.Code{spec.BeforeCommit: spec.CodeUnavailable, spec.AfterCommit: spec.CodeUnknownOutcome}[point], err)
			}
		}
		e.unchanged(c.name, before)
	}
}

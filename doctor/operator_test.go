package doctor

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// testOperatorActions: Cancel and Replay go through the store's guarded
// operations and land in the repairs' audit trail with their actor; a
// refused one is audited as refused and changes nothing; no actor, nothing
// done and nothing audited; RunOutbox reads one tenant's run only.
func testOperatorActions(t *testing.T, k kit) {
	f := newFx(t, k)
	f.create("acme", "r-live", 3)
	l := f.claimNew("acme", "r-dead", 3, "w1", 60_000)
	if _, err := f.s.Fail(f.ctx, spec.FailRequest{Lease: l.Ref(), ErrorCode: "boom"}); err != nil {
		t.Fatal(err)
	}
	f.create("beta", "b-q", 3)

	if _, err := Cancel(f.ctx, f.target, Options{Clock: f.clock}, "", "acme", "r-live"); spec.CodeOf(err) != spec.CodeInvalidArgument {
		t.Fatalf("Cancel without an actor: %v, want invalid_argument", err)
	}
	equal(t, "audit after a cancel without an actor", len(f.audit()), 0)
	if run, _ := f.s.GetRun(f.ctx, "acme", "r-live"); run.State != spec.RunQueued {
		t.Fatalf("a cancel without an actor changed the run: %+v", run)
	}

	run, err := Cancel(f.ctx, f.target, Options{Clock: f.clock}, "ops-carol", "acme", "r-live")
	if err != nil || run.State != spec.RunCancelled {
		t.Fatalf("Cancel: %+v, %v", run, err)
	}
	if _, err := Cancel(f.ctx, f.target, Options{Clock: f.clock}, "ops-carol", "acme", "b-q"); spec.CodeOf(err) != spec.CodeNotFound {
		t.Fatalf("Cancel of another tenant's run: %v, want not_found", err)
	}
	if run, _ := f.s.GetRun(f.ctx, "beta", "b-q"); run.State != spec.RunQueued {
		t.Fatalf("a cancel through another tenant changed the run: %+v", run)
	}
	re, err := Replay(f.ctx, f.target, Options{Clock: f.clock}, "ops-carol", "acme", "r-dead", "r-dead-2")
	if err != nil || re.ReplayOf != "r-dead" || re.State != spec.RunQueued {
		t.Fatalf("Replay: %+v, %v", re, err)
	}
	if ev, _ := f.s.Events(f.ctx, "acme", "r-dead-2"); len(ev) != 1 || !strings.Contains(ev[0].Payload, `"ops-carol"`) {
		t.Fatalf("the replay's run_queued event does not name the actor: %+v", ev)
	}
	if _, err := Replay(f.ctx, f.target, Options{Clock: f.clock}, "ops-carol", "acme", "r-live", "r-live-2"); spec.CodeOf(err) != spec.CodeFailedPrecondition {
		t.Fatalf("Replay of a cancelled run: %v, want failed_precondition", err)
	}
	audit := f.audit()
	for i := range audit {
		audit[i].ID, audit[i].Message = 0, ""
	}
	at := int64(t0)
	equal(t, "audit", audit, []AuditEntry{
		{At: at, Actor: "ops-carol", Action: "cancel", Tenant: "acme", RunID: "r-live", Outcome: "started"},
		{At: at, Actor: "ops-carol", Action: "cancel", Tenant: "acme", RunID: "r-live", Outcome: OutcomeApplied},
		{At: at, Actor: "ops-carol", Action: "cancel", Tenant: "acme", RunID: "b-q", Outcome: "started"},
		{At: at, Actor: "ops-carol", Action: "cancel", Tenant: "acme", RunID: "b-q", Outcome: OutcomeRefused, Code: "not_found"},
		{At: at, Actor: "ops-carol", Action: "replay", Tenant: "acme", RunID: "r-dead", Outcome: "started"},
		{At: at, Actor: "ops-carol", Action: "replay", Tenant: "acme", RunID: "r-dead", Outcome: OutcomeApplied},
		{At: at, Actor: "ops-carol", Action: "replay", Tenant: "acme", RunID: "r-live", Outcome: "started"},
		{At: at, Actor: "ops-carol", Action: "replay", Tenant: "acme", RunID: "r-live", Outcome: OutcomeRefused, Code: "failed_precondition"},
	})

	msgs, err := RunOutbox(f.ctx, f.target, "acme", "r-live")
	equal(t, "outbox of a run without messages", msgs, []spec.OutboxMessage{})
	if err != nil {
		t.Fatal(err)
	}
	l2 := f.claimNew("gamma", "r-out", 3, "w1", 60_000)
	if _, err := f.s.Complete(f.ctx, spec.CompleteRequest{Lease: l2.Ref(), Result: []byte(`{}`),
		Outbox: []spec.Message{{Subject: "orders.done", Payload: []byte(`{"n":1}`)}}}); err != nil {
		t.Fatal(err)
	}
	msgs, err = RunOutbox(f.ctx, f.target, "gamma", "r-out")
	if err != nil || len(msgs) != 1 || msgs[0].Subject != "orders.done" || msgs[0].Generation != 1 || msgs[0].State != spec.OutboxPending {
		t.Fatalf("RunOutbox: %+v, %v", msgs, err)
	}
	if other, _ := RunOutbox(f.ctx, f.target, "acme", "r-out"); len(other) != 0 {
		t.Fatalf("RunOutbox through another tenant: %+v", other)
	}
}

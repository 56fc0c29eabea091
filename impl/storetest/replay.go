package storetest

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Replay of a dead run: a new, audited identity, once per run, capped per
// lineage, never lowering the generation.

func init() {
	register("ReplayCreatesAuditedRun", testReplayCreatesAuditedRun)
	register("ReplayRules", testReplayRules)
	register("ReplayDepthLimit", testReplayDepthLimit)
}

func testReplayCreatesAuditedRun(t *testing.T, f Factory) {
	e := newEnv(t, f)
	r := req("acme", "r1")
	r.TimeoutMs, r.MaxAttempts = 5000, 2
	r.Payload = []byte(`{"b":2,"a":1}`)
	orig := e.create(r)
	l := e.claimOne("acme", "r1", "w", 1000)
	failed := e.fail(l, "bad")
	before := e.snap()

	e.set(t0 + 700)
	got, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "r1", NewRunID: "r1-again", Actor: "ops@example.com"})
	mustOK(t, "Replay", err)
	wantRun := spec.Run{Tenant: "acme", ID: "r1-again", Operation: "work", State: spec.RunQueued, Version: 1, LastSeq: 1,
		Payload: `{"a":1,"b":2}`, Fingerprint: orig.Fingerprint, MaxAttempts: 2, CreatedAt: t0 + 700, DeadlineAt: t0 + 700 + 5000,
		ReplayOf: "r1", ReplayDepth: 1}
	mustEqual(t, "replayed run", got, wantRun)
	wantEvent := spec.Event{Tenant: "acme", RunID: "r1-again", Seq: 1, Kind: spec.EventRunQueued, At: t0 + 700,
		Payload: `{"actor":"ops@example.com","replay_depth":1,"replay_of":"r1"}`}
	wantJob := spec.Job{Tenant: "acme", RunID: "r1-again", Operation: "work", State: spec.JobQueued, AvailableAt: t0 + 700,
		Generation: 1, MaxAttempts: 2}
	// Exactly the new run, its audited event and its job; the original and
	// the idempotency records are untouched (a replay has no key).
	want := before
	want.Runs = []spec.Run{failed, wantRun}
	want.Events = append(append([]spec.Event{}, before.Events...), wantEvent)
	want.Jobs = append(append([]spec.Job{}, before.Jobs...), wantJob)
	mustEqual(t, "snapshot after Replay", e.snap(), want)
	if p := spec.QueuedPayload("r1", "ops@example.com", 1); p != wantEvent.Payload {
		t.Fatalf("spec.QueuedPayload disagrees with the documented audit bytes: %s", p)
	}
	// The original request's key still answers with the original run.
	res, err := e.s.CreateRun(e.ctx, r)
	mustOK(t, "CreateRun with the original key", err)
	if !res.Replayed || res.Run.ID != "r1" {
		t.Fatalf("CreateRun with the original key after a replay: want r1 replayed, got %+v", res)
	}
	// The replay runs like any run, with a fresh budget.
	l2 := e.claimOne("acme", "r1-again", "w", 1000)
	if l2.Attempt != 1 || l2.Generation != 2 || l2.DeadlineAt != t0+5700 {
		t.Fatalf("replay's first lease: want attempt 1, generation 2, deadline %d; got %+v", t0+5700, l2)
	}
	e.complete(l2, "")
}

func testReplayRules(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.failedRun("acme", "dead")
	e.failedRun("acme", "dead2")
	// Claimed runs first: a claim takes the lowest run id available.
	e.newRun("acme", "running")
	e.claimOne("acme", "running", "w", 10_000)
	e.newRun("acme", "completed")
	e.complete(e.claimOne("acme", "completed", "w", 10_000), "")
	e.newRun("acme", "queued")
	e.newRun("acme", "cancelled")
	e.cancel("acme", "cancelled", "")
	before := e.snap()

	replay := func(run, newID string) error {
		_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: run, NewRunID: newID, Actor: "ops"})
		return err
	}
	for _, id := range []string{"queued", "running", "completed", "cancelled"} {
		checkCode(t, "Replay of a "+id+" run", replay(id, id+"-r"), spec.CodeFailedPrecondition)
	}
	checkCode(t, "Replay of a missing run", replay("ghost", "ghost-r"), spec.CodeNotFound)
	checkCode(t, "Replay onto a taken id", replay("dead", "dead2"), spec.CodeAlreadyExists)
	checkCode(t, "Replay onto its own id", replay("dead", "dead"), spec.CodeAlreadyExists)
	e.unchanged("refused replays", before)

	mustOK(t, "first Replay", replay("dead", "dead-r"))
	before = e.snap()
	// Once per run, whatever id is proposed; also when the proposed id is
	// taken (the replay check comes first).
	checkCode(t, "second Replay of the same run", replay("dead", "dead-r2"), spec.CodeAlreadyExists)
	checkCode(t, "second Replay onto the first replay's id", replay("dead", "dead-r"), spec.CodeAlreadyExists)
	e.unchanged("second replays", before)
}

func testReplayDepthLimit(t *testing.T, f Factory) {
	e := newEnv(t, f) // MaxReplays 3
	e.failedRun("acme", "gen0")
	prev := "gen0"
	for depth := 1; depth <= 3; depth++ {
		id := fmt.Sprintf("gen%d", depth)
		run, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: prev, NewRunID: id, Actor: "ops"})
		mustOK(t, "Replay to depth "+id, err)
		if run.ReplayDepth != depth || run.ReplayOf != prev {
			t.Fatalf("replay %s: want depth %d of %s, got %+v", id, depth, prev, run)
		}
		if depth < 3 {
			e.fail(e.claimOne("acme", id, "w", 10_000), "bad")
		}
		prev = id
	}
	// gen3 is at the limit: while it is not failed, the state check comes
	// first; once failed, the lineage is full.
	_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "gen3", NewRunID: "gen4", Actor: "ops"})
	mustCode(t, "Replay of a queued run at the limit", err, spec.CodeFailedPrecondition)
	e.fail(e.claimOne("acme", "gen3", "w", 10_000), "bad")
	before := e.snap()
	_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "gen3", NewRunID: "gen4", Actor: "ops"})
	mustCode(t, "Replay past MaxReplays", err, spec.CodeReplayLimit)
	// The limit is checked before the id: a taken id still says replay_limit.
	_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "gen3", NewRunID: "gen0", Actor: "ops"})
	mustCode(t, "Replay past MaxReplays onto a taken id", err, spec.CodeReplayLimit)
	e.unchanged("replays past the limit", before)

	// MaxReplays 0 forbids replay altogether.
	e0 := newEnv(t, f, func(c *spec.Config) { c.MaxReplays = 0 })
	e0.failedRun("acme", "r1")
	_, err = e0.s.Replay(e0.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "r1", NewRunID: "r2", Actor: "ops"})
	mustCode(t, "Replay with MaxReplays 0", err, spec.CodeReplayLimit)
}

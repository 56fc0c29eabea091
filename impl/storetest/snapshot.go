package storetest

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Snapshot is the verification view of a store: it must be exactly the rows
// the per-run reads return, in canonical order. (Every test also checks this
// when it ends; this test builds a store with every kind of row first.)

func init() {
	register("SnapshotEqualsReads", testSnapshotEqualsReads)
	register("ReadsOfMissingAndEmpty", testReadsOfMissingAndEmpty)
}

func testSnapshotEqualsReads(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// Two tenants with interleaving run ids, and every state and row kind.
	for _, tn := range []string{"tb", "ta"} {
		e.newRun(tn, "z-queued")
		e.newRun(tn, "a-running")
		l := e.claimOne(tn, "a-running", "w", 10_000)
		for _, key := range []string{"k2", "k1"} {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "s", Key: key})
			mustOK(t, "reserve", err)
		}
		_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "s", Key: "k1", State: spec.EffectSucceeded, ProviderRef: "p"})
		mustOK(t, "record", err)
		e.newRun(tn, "m-done")
		e.complete(e.claimOne(tn, "m-done", "w", 10_000), `{"r":[1,2]}`)
		e.newRun(tn, "b-retried")
		e.retry(e.claimOne(tn, "b-retried", "w", 10_000), "flaky", 0)
		e.cancel(tn, "z-queued", "")
		e.failedRun(tn, "c-dead")
		_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: tn, RunID: "c-dead", NewRunID: "c-dead-2", Actor: "ops"})
		mustOK(t, "replay", err)
	}
	snap := e.snap()
	if v := invariantViolations(snap); len(v) != 0 {
		t.Fatalf("invariants: %v", v)
	}
	e.checkReadsMatch(snap)
	if len(snap.Runs) != 12 || len(snap.Effects) != 4 || len(snap.Idempotency) != 10 {
		t.Fatalf("want 12 runs, 4 effects, 10 idempotency records (replays have none); got %d, %d, %d",
			len(snap.Runs), len(snap.Effects), len(snap.Idempotency))
	}
	// Snapshot reads no clock and writes nothing: two in a row are equal.
	mustEqual(t, "second snapshot", e.snap(), snap)
}

func testReadsOfMissingAndEmpty(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	// An existing run with no attempts or effects: empty lists, not errors.
	mustEqual(t, "attempts of a queued run", len(e.attempts("acme", "r1")), 0)
	mustEqual(t, "effects of a queued run", len(e.effects("acme", "r1")), 0)
	mustEqual(t, "events of a queued run", len(e.events("acme", "r1")), 1)
	// A missing run: not_found from every read.
	_, err := e.s.GetRun(e.ctx, "acme", "ghost")
	checkCode(t, "GetRun of a missing run", err, spec.CodeNotFound)
	_, err = e.s.GetJob(e.ctx, "acme", "ghost")
	checkCode(t, "GetJob of a missing run", err, spec.CodeNotFound)
	_, err = e.s.Events(e.ctx, "acme", "ghost")
	checkCode(t, "Events of a missing run", err, spec.CodeNotFound)
	_, err = e.s.Attempts(e.ctx, "acme", "ghost")
	checkCode(t, "Attempts of a missing run", err, spec.CodeNotFound)
	_, err = e.s.Effects(e.ctx, "acme", "ghost")
	checkCode(t, "Effects of a missing run", err, spec.CodeNotFound)
}

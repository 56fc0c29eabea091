package storetest

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Scheduled admission and run retention: a run created to become available
// later, and the purge of finished runs older than the retention policy.

func init() {
	register("ScheduledAdmission", testScheduledAdmission)
	register("ScheduledAdmissionFingerprint", testScheduledAdmissionFingerprint)
	register("PurgeRunsRetention", testPurgeRunsRetention)
	register("PurgeRunsLineagesAndRecords", testPurgeRunsLineagesAndRecords)
	register("PurgeRunsOrderAndLimit", testPurgeRunsOrderAndLimit)
}

func testScheduledAdmission(t *testing.T, f Factory) {
	e := newEnv(t, f)
	delayed := req("acme", "later")
	delayed.DelayMs = 5000
	run := e.create(delayed)
	mustEqual(t, "scheduled run", run, e.wantRun(delayed, t0))
	at := req("acme", "at")
	at.AvailableAt = t0 + 3000
	e.create(at)
	past := req("acme", "past")
	past.AvailableAt = t0 - 500 // in the past: available now
	e.create(past)
	want := func(id string, available int64) spec.Job {
		return spec.Job{Tenant: "acme", RunID: id, Operation: "work", State: spec.JobQueued, AvailableAt: available, MaxAttempts: 3}
	}
	mustEqual(t, "jobs", e.snap().Jobs, []spec.Job{want("at", t0+3000), want("later", t0+5000), want("past", t0)})
	mustEqual(t, "events of the scheduled run", e.events("acme", "later"), []spec.Event{
		{Tenant: "acme", RunID: "later", Seq: 1, Kind: spec.EventRunQueued, At: t0, Payload: "{}"}})

	// No claim takes a job before its time; at its time a claim does, in
	// (available_at, run id) order.
	e.claimOne("acme", "past", "w", 60_000)
	e.set(t0 + 2999)
	e.claimNone("acme", "w")
	e.set(t0 + 4999)
	e.claimOne("acme", "at", "w", 60_000)
	e.claimNone("acme", "w")
	e.set(t0 + 5000)
	l := e.claimOne("acme", "later", "w", 60_000)
	mustEqual(t, "the scheduled run's lease", l.Attempt, 1)

	// A run scheduled for later is cancelled like any queued run, and never
	// claimed afterwards.
	gone := req("acme", "gone")
	gone.DelayMs = 1000
	e.create(gone)
	e.cancel("acme", "gone", "")
	e.set(t0 + 10_000)
	e.claimNone("acme", "w")
}

// testScheduledAdmissionFingerprint: the schedule is part of the
// fingerprint as given: the same delay later is a replay (the job keeps its
// first time), any other schedule is a conflict, and an unscheduled
// request's fingerprint is what it always was.
func testScheduledAdmissionFingerprint(t *testing.T, f Factory) {
	e := newEnv(t, f)
	plain := e.newRun("acme", "plain")
	mustEqual(t, "unscheduled fingerprint", plain.Fingerprint, spec.Fingerprint(spec.FingerprintInput{
		Tenant: "acme", Operation: "work", SchemaVersion: 1, MaxAttempts: 3, TimeoutMs: 3_600_000, Payload: `{"n":1}`}))
	const pinned = "fp1:2ca2101ca698bf786437732518b14db2a507b6566636e1e1b4dcbf25979eb6bd"
	if plain.Fingerprint != pinned {
		t.Fatalf("unscheduled fingerprint %s, want %s: records written before scheduling existed would not match", plain.Fingerprint, pinned)
	}
	delayed := req("acme", "r1")
	delayed.DelayMs = 5000
	run := e.create(delayed)
	mustEqual(t, "scheduled fingerprint", run.Fingerprint, spec.Fingerprint(spec.FingerprintInput{
		Tenant: "acme", Operation: "work", SchemaVersion: 1, MaxAttempts: 3, TimeoutMs: 3_600_000, Payload: `{"n":1}`, DelayMs: 5000}))
	before := e.snap()

	e.set(t0 + 100)
	again := delayed
	again.RunID = "r1-retry"
	res, err := e.s.CreateRun(e.ctx, again)
	mustOK(t, "the same delay, later", err)
	mustEqual(t, "the same delay, later", res, spec.CreateRunResult{Run: run, Replayed: true})
	e.unchanged("a replayed scheduled request", before)
	mustEqual(t, "the job keeps its first time", e.getJob("acme", "r1").AvailableAt, int64(t0+5000))

	for name, change := range map[string]func(r *spec.CreateRunRequest){
		"delay":                        func(r *spec.CreateRunRequest) { r.DelayMs = 5001 },
		"no schedule":                  func(r *spec.CreateRunRequest) { r.DelayMs = 0 },
		"the same time, asked as such": func(r *spec.CreateRunRequest) { r.DelayMs, r.AvailableAt = 0, t0+5000 },
	} {
		r := again
		change(&r)
		_, err := e.s.CreateRun(e.ctx, r)
		checkCode(t, "same key, another "+name, err, spec.CodeIdempotencyConflict)
	}
	// And the other way round: a key first used unscheduled.
	scheduled := req("acme", "plain-2")
	scheduled.IdempotencyKey, scheduled.AvailableAt = "k-plain", t0+100
	_, err = e.s.CreateRun(e.ctx, scheduled)
	checkCode(t, "an unscheduled request's key, scheduled", err, spec.CodeIdempotencyConflict)
	e.unchanged("conflicting schedules", before)
}

// retentionConfig keeps finished runs 10 s and idempotency records 5 s.
func retentionConfig(c *spec.Config) { c.RunRetentionMs, c.IdempotencyRetentionMs = 10_000, 5_000 }

// without returns snap without the rows of the runs ids of tenant.
func without(snap spec.Snapshot, tenant string, ids ...string) spec.Snapshot {
	gone := func(t, id string) bool { return t == tenant && slices.Contains(ids, id) }
	return spec.Snapshot{
		Runs:        slices.DeleteFunc(slices.Clone(snap.Runs), func(r spec.Run) bool { return gone(r.Tenant, r.ID) }),
		Events:      slices.DeleteFunc(slices.Clone(snap.Events), func(r spec.Event) bool { return gone(r.Tenant, r.RunID) }),
		Jobs:        slices.DeleteFunc(slices.Clone(snap.Jobs), func(r spec.Job) bool { return gone(r.Tenant, r.RunID) }),
		Attempts:    slices.DeleteFunc(slices.Clone(snap.Attempts), func(r spec.Attempt) bool { return gone(r.Tenant, r.RunID) }),
		Idempotency: slices.DeleteFunc(slices.Clone(snap.Idempotency), func(r spec.IdempotencyRecord) bool { return gone(r.Tenant, r.RunID) }),
		Effects:     slices.DeleteFunc(slices.Clone(snap.Effects), func(r spec.Effect) bool { return gone(r.Tenant, r.RunID) }),
		Outbox:      slices.DeleteFunc(slices.Clone(snap.Outbox), func(r spec.OutboxMessage) bool { return gone(r.Tenant, r.RunID) }),
	}
}

// purgeRuns purges tenant's runs and requires exactly want deleted, with
// every row of theirs and nothing else.
func (e *env) purgeRuns(tenant string, limit int, want ...string) {
	e.t.Helper()
	before := e.snap()
	got, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: tenant, Limit: limit})
	mustOK(e.t, "PurgeRuns", err)
	if want == nil {
		want = []string{}
	}
	mustEqual(e.t, "runs purged", got, want)
	mustEqual(e.t, "rows after the purge", e.snap(), without(before, tenant, want...))
}

func testPurgeRunsRetention(t *testing.T, f Factory) {
	e := newEnv(t, f, retentionConfig)
	e.newRun("acme", "done")
	e.newRun("other", "done")
	l := e.claimOne("acme", "done", "w", 60_000)
	_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1"})
	mustOK(t, "reserve", err)
	e.set(t0 + 100)
	e.retry(l, "flaky", 0) // a retried attempt, kept in the history
	e.set(t0 + 2000)
	l = e.claimOne("acme", "done", "w", 60_000)
	e.set(t0 + 3000)
	e.complete(l, `{"ok":true}`) // finished at t0+3000, with two attempts and an effect
	e.set(t0 + 3000)
	e.complete(e.claimOne("other", "done", "w", 60_000), "")
	e.newRun("acme", "leased")
	e.claimOne("acme", "leased", "w", 3_600_000)
	e.newRun("acme", "queued")

	// Retention off: nothing is ever deleted.
	off := newEnv(t, f)
	off.newRun("acme", "r1")
	off.cancel("acme", "r1", "")
	off.set(t0 + 1<<40)
	off.purgeRuns("acme", 10)

	e.set(t0 + 12_999) // 9,999 ms after it finished
	e.purgeRuns("acme", 10)
	e.set(t0 + 13_000) // 10,000 ms: retired; its record expired at t0+5000
	e.purgeRuns("acme", 10, "done")
	_, err = e.s.GetRun(e.ctx, "acme", "done")
	checkCode(t, "GetRun of a purged run", err, spec.CodeNotFound)
	_, err = e.s.Events(e.ctx, "acme", "done")
	checkCode(t, "Events of a purged run", err, spec.CodeNotFound)
	// Another tenant's run, finished at the same time, is that tenant's to purge.
	mustEqual(t, "the other tenant's run", e.getRun("other", "done").State, spec.RunCompleted)
	e.set(t0 + 1<<40)
	e.purgeRuns("acme", 10) // queued and leased runs are never purged
	e.purgeRuns("other", 10, "done")

	// A purged run's key and id are free again: the same request is a new run.
	r := req("acme", "done")
	mustEqual(t, "the purged run's request again", e.create(r), e.wantRun(r, t0+1<<40))
}

func testPurgeRunsLineagesAndRecords(t *testing.T, f Factory) {
	e := newEnv(t, f, retentionConfig)
	e.failedRun("acme", "orig")                                                                                     // failed at t0
	_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "orig", NewRunID: "again", Actor: "ops"}) // queued
	mustOK(t, "replay", err)
	e.set(t0 + 20_000)
	// The original is retired but its replay is not: the lineage stays whole.
	e.purgeRuns("acme", 10)
	e.cancel("acme", "again", "") // the lineage's leaf finishes at t0+20,000
	e.set(t0 + 29_999)
	e.purgeRuns("acme", 10)
	e.set(t0 + 30_000)
	e.purgeRuns("acme", 10, "again", "orig") // the leaf first, then the run it replays
	_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "orig", NewRunID: "third", Actor: "ops"})
	checkCode(t, "Replay of a purged run", err, spec.CodeNotFound)

	// A run a live idempotency record names is kept, with its lineage: a
	// retried request still gets its original answer.
	h := newEnv(t, f, func(c *spec.Config) { c.RunRetentionMs, c.IdempotencyRetentionMs = 1000, 5000 })
	held := h.failedRun("acme", "held") // its record lives until t0+5000
	_, err = h.s.Replay(h.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "held", NewRunID: "held-2", Actor: "ops"})
	mustOK(t, "replay", err)
	h.cancel("acme", "held-2", "")
	h.set(t0 + 4999)
	h.purgeRuns("acme", 10)
	res, err := h.s.CreateRun(h.ctx, req("acme", "held"))
	mustOK(t, "the held run's request again", err)
	mustEqual(t, "the held run's request again", res, spec.CreateRunResult{Run: h.getRun("acme", "held"), Replayed: true})
	mustEqual(t, "the held run", res.Run.Fingerprint, held.Fingerprint)
	h.set(t0 + 5000) // the record has expired, not been purged: it goes with its run
	if n := len(h.snap().Idempotency); n != 1 {
		t.Fatalf("want the expired record still there before the purge, got %d records", n)
	}
	h.purgeRuns("acme", 10, "held-2", "held")
}

func testPurgeRunsOrderAndLimit(t *testing.T, f Factory) {
	e := newEnv(t, f, retentionConfig)
	for _, id := range []string{"b", "a", "c"} {
		e.newRun("acme", id)
	}
	e.set(t0 + 7)
	e.cancel("acme", "c", "")
	e.set(t0 + 9)
	e.cancel("acme", "b", "")
	e.cancel("acme", "a", "")
	e.failedRun("acme", "e") // finished at t0+9, with a replay finished later
	_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "e", NewRunID: "e-2", Actor: "ops"})
	mustOK(t, "replay", err)
	e.set(t0 + 11)
	e.cancel("acme", "e-2", "")
	e.newRun("acme", "d")
	e.set(t0 + 20)
	e.cancel("acme", "d", "")
	// Lineages in (leaf finished, leaf run id) order: c (7), a, b (9),
	// e-2 with e (11), d (20); a limit counts lineages.
	e.set(t0 + 100_000)
	e.purgeRuns("acme", 1, "c")
	e.purgeRuns("acme", 2, "a", "b")
	e.purgeRuns("acme", 1, "e-2", "e")
	e.purgeRuns("acme", 5, "d")
	e.purgeRuns("acme", 5)
}

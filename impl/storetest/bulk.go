package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Bulk admission (spec.BatchCreator). Each test is not applicable
// (CapCreateRuns) when the store does not implement the optional interface.

func init() {
	register("CreateRunsMembersAreIndependent", testCreateRunsMembers)
	register("CreateRunsEqualsCreateRun", testCreateRunsEqualsCreateRun)
	register("CreateRunsAtomicity", testCreateRunsAtomicity)
	register("CreateRunsLimits", testCreateRunsLimits)
	register("ConcurrentOverlappingBulkAdmissions", testConcurrentOverlappingBulk)
}

// bulk returns the env's store as a spec.BatchCreator, or stops the test
// as not applicable.
func (e *env) bulk() spec.BatchCreator {
	e.t.Helper()
	e.need(CapCreateRuns)
	return e.s.(spec.BatchCreator)
}

// withKey is r with another idempotency key.
func withKey(r spec.CreateRunRequest, key string) spec.CreateRunRequest {
	r.IdempotencyKey = key
	return r
}

func testCreateRunsMembers(t *testing.T, f Factory) {
	e := newEnv(t, f, retentionConfig) // records live 5 s
	b := e.bulk()
	e.newRun("acme", "taken")                             // key k-taken, live at the batch
	old := e.create(withKey(req("acme", "old"), "k-old")) // expired at the batch
	e.set(t0 + 6_000)
	e.newRun("acme", "live") // live at the batch
	e.set(t0 + 7_000)
	_, readsBefore := e.rec.Last()
	otherPayload := req("acme", "x")
	otherPayload.Payload = []byte(`{"n":2}`)
	reqs := []spec.CreateRunRequest{
		req("acme", "a_new"),                   // 0 created
		req("acme", "a_new"),                   // 1 the same request again: replay of member 0
		withKey(otherPayload, "k-a_new"),       // 2 member 0's key, another request: conflict
		withKey(req("acme", "a_new"), "k-dup"), // 3 another key, member 0's run id: already_exists
		req("acme", "live"),                    // 4 replay of a stored run
		withKey(otherPayload, "k-live"),        // 5 conflict with a stored record
		withKey(req("acme", "taken"), "k-t2"),  // 6 a stored run's id: already_exists
		withKey(req("acme", "old"), "k-old"),   // 7 expired key, its run id taken: already_exists, the record stays
		{Tenant: "acme", Operation: "work", IdempotencyKey: "k-bad", RunID: "bad", Payload: []byte(`{"a":`)}, // 8 invalid
		withKey(req("acme", "old2"), "k-old2"), // 9 created
		withKey(req("acme", "old3"), "k-old"),  // 10 the expired key with a free run id: created, the record replaced
		withKey(req("acme", "old4"), "k-old"),  // 11 ... whose key is live now: a replay (the run id is not fingerprinted)
	}
	outs, err := b.CreateRuns(e.ctx, reqs)
	mustOK(t, "CreateRuns with every kind of member", err)
	if _, reads := e.rec.Last(); reads-readsBefore != 1 {
		t.Errorf("CreateRuns read the clock %d times, want exactly once for the whole batch", reads-readsBefore)
	}
	if len(outs) != len(reqs) {
		t.Fatalf("CreateRuns returned %d outcomes for %d requests, want one per request", len(outs), len(reqs))
	}
	now := int64(t0 + 7_000)
	created := func(i int) spec.CreateOutcome {
		return spec.CreateOutcome{Result: spec.CreateRunResult{Run: e.wantRun(reqs[i], now)}}
	}
	replay := func(run spec.Run) spec.CreateOutcome {
		return spec.CreateOutcome{Result: spec.CreateRunResult{Run: run, Replayed: true}}
	}
	checkEqual(t, "member 0 (new)", outs[0], created(0))
	checkEqual(t, "member 1 (member 0 again)", outs[1], replay(e.wantRun(reqs[0], now)))
	checkEqual(t, "member 4 (a stored run's request again)", outs[4], replay(e.wantRun(req("acme", "live"), t0+6_000)))
	checkEqual(t, "member 9 (new)", outs[9], created(9))
	checkEqual(t, "member 10 (expired key, new run id)", outs[10], created(10))
	checkEqual(t, "member 11 (member 10's key and request, another run id)", outs[11], replay(e.wantRun(reqs[10], now)))
	for _, w := range []struct {
		i    int
		what string
		code spec.Code
	}{
		{2, "member 2 (member 0's key, another request)", spec.CodeIdempotencyConflict},
		{3, "member 3 (member 0's run id)", spec.CodeAlreadyExists},
		{5, "member 5 (a stored key, another request)", spec.CodeIdempotencyConflict},
		{6, "member 6 (a stored run's id)", spec.CodeAlreadyExists},
		{7, "member 7 (expired key, a stored run's id)", spec.CodeAlreadyExists},
		{8, "member 8 (payload is not JSON)", spec.CodeInvalidArgument},
	} {
		o := outs[w.i]
		checkCode(t, w.what, o.Err, w.code)
		var se *spec.Error
		if o.Err != nil && !errors.As(o.Err, &se) {
			t.Errorf("%s: want a *spec.Error, got %T", w.what, o.Err)
		}
		checkEqual(t, w.what+": result of a refused member", o.Result, spec.CreateRunResult{})
	}

	// What the store holds: the three new runs, each with its event, job
	// and record; the expired key's record now member 10's.
	snap := e.snap()
	ids := make([]string, len(snap.Runs))
	for i, r := range snap.Runs {
		ids[i] = r.ID
	}
	mustEqual(t, "runs after the batch", ids, []string{"a_new", "live", "old", "old2", "old3", "taken"})
	mustEqual(t, "events after the batch", len(snap.Events), 6)
	mustEqual(t, "jobs after the batch", len(snap.Jobs), 6)
	records := map[string]spec.IdempotencyRecord{}
	for _, r := range snap.Idempotency {
		records[r.Key] = r
	}
	mustEqual(t, "idempotency keys after the batch", len(records), 5)
	checkEqual(t, "record of the expired key", records["k-old"].RunID, "old3")
	checkEqual(t, "record of the expired key: created at the batch", records["k-old"].CreatedAt, now)
	checkEqual(t, "record of member 0", records["k-a_new"].RunID, "a_new")
	checkEqual(t, "the run of the expired key", e.getRun("acme", "old"), old)
	job := e.getJob("acme", "a_new")
	mustEqual(t, "job of member 0", job, spec.Job{Tenant: "acme", RunID: "a_new", Operation: "work", State: spec.JobQueued,
		AvailableAt: now, MaxAttempts: 3})
}

// testCreateRunsEqualsCreateRun admits one request with CreateRun and an
// identical one (other key and run id, an outbox message, a delay) in a
// batch, at the same time, and compares every row.
func testCreateRunsEqualsCreateRun(t *testing.T, f Factory) {
	e := newEnv(t, f)
	b := e.bulk()
	mk := func(id string) spec.CreateRunRequest {
		r := req("acme", id)
		r.DelayMs, r.Outbox = 500, []spec.Message{{Subject: "orders.created", Payload: []byte(`{"id":1}`)}}
		return r
	}
	e.set(t0 + 50)
	single, err := e.s.CreateRun(e.ctx, mk("a_single"))
	mustOK(t, "CreateRun", err)
	outs, err := b.CreateRuns(e.ctx, []spec.CreateRunRequest{mk("b_bulk")})
	mustOK(t, "CreateRuns of one member", err)
	want := single.Run
	want.ID, want.Fingerprint = "b_bulk", e.wantRun(mk("b_bulk"), t0+50).Fingerprint
	mustEqual(t, "bulk-admitted run vs the same run admitted by CreateRun", outs[0], spec.CreateOutcome{Result: spec.CreateRunResult{Run: want}})
	mustEqual(t, "stored run", e.getRun("acme", "b_bulk"), want)
	rows := func(id string) (spec.Snapshot, spec.Job) {
		s := e.snap()
		var out spec.Snapshot
		for _, ev := range s.Events {
			if ev.RunID == id {
				ev.RunID = "x"
				out.Events = append(out.Events, ev)
			}
		}
		for _, m := range s.Outbox {
			if m.RunID == id {
				m.RunID, m.ID = "x", ""
				out.Outbox = append(out.Outbox, m)
			}
		}
		for _, r := range s.Idempotency {
			if r.RunID == id {
				r.RunID, r.Key, r.Fingerprint = "x", "", ""
				out.Idempotency = append(out.Idempotency, r)
			}
		}
		job := e.getJob("acme", id)
		job.RunID = "x"
		return out, job
	}
	wantRows, wantJob := rows("a_single")
	gotRows, gotJob := rows("b_bulk")
	mustEqual(t, "events, outbox and record (bulk vs CreateRun)", gotRows, wantRows)
	mustEqual(t, "job (bulk vs CreateRun)", gotJob, wantJob)
}

func testCreateRunsAtomicity(t *testing.T, f Factory) {
	e := newEnv(t, f, retentionConfig)
	b := e.bulk()
	e.create(withKey(req("acme", "old"), "k-old"))
	e.set(t0 + 6_000) // k-old expired: a member replacing it deletes it
	reqs := []spec.CreateRunRequest{req("acme", "r1"), withKey(req("acme", "r2"), "k-old"), req("acme", "r1")}

	batchHookFaults(t, e, spec.OpCreateRuns, "CreateRuns", func() ([]spec.CreateOutcome, error) { return b.CreateRuns(e.ctx, reqs) })
	for _, id := range []string{"r1", "r2"} {
		mustEqual(t, "run "+id+" after the lost answer", e.getRun("acme", id).State, spec.RunQueued)
	}
	// Its retry replays every member.
	outs, err := b.CreateRuns(e.ctx, reqs)
	mustOK(t, "CreateRuns retried after the lost answer", err)
	for i, o := range outs {
		if o.Err != nil || !o.Result.Replayed {
			t.Errorf("member %d of the retried batch: %+v, want a replay", i, o)
		}
	}
}

func testCreateRunsLimits(t *testing.T, f Factory) {
	e := newEnv(t, f)
	b := e.bulk()
	before := e.snap()
	_, readsBefore := e.rec.Last()
	outs, err := b.CreateRuns(e.ctx, nil)
	mustOK(t, "CreateRuns of nothing", err)
	mustEqual(t, "outcomes of an empty batch", len(outs), 0)
	if _, reads := e.rec.Last(); reads != readsBefore {
		t.Errorf("an empty batch read the clock %d times, want 0 (it writes nothing)", reads-readsBefore)
	}

	tooMany := make([]spec.CreateRunRequest, spec.MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = req("acme", fmt.Sprintf("r%04d", i))
	}
	_, err = b.CreateRuns(e.ctx, tooMany)
	mustCode(t, fmt.Sprintf("CreateRuns of %d members", len(tooMany)), err, spec.CodeInvalidArgument)

	// A broken clock must not write, for any member.
	e.set(-1)
	outs, err = b.CreateRuns(e.ctx, []spec.CreateRunRequest{req("acme", "r1")})
	mustCode(t, "CreateRuns with the clock at -1", err, spec.CodeInvalidArgument)
	if outs != nil {
		t.Errorf("CreateRuns with a broken clock returned outcomes %+v, want nil", outs)
	}
	e.set(t0 + 1)
	e.unchanged("refused batches", before)

	// MaxBatch members are one batch.
	outs, err = b.CreateRuns(e.ctx, tooMany[:spec.MaxBatch])
	mustOK(t, fmt.Sprintf("CreateRuns of %d members", spec.MaxBatch), err)
	for i, o := range outs {
		if o.Err != nil || o.Result.Replayed {
			t.Fatalf("member %d of a full batch: %+v, want created", i, o)
		}
	}
	mustEqual(t, "runs after a full batch", len(e.snap().Runs), spec.MaxBatch)
}

// testConcurrentOverlappingBulk admits the same requests from two pools at
// once, in opposite orders: each is created exactly once, the other
// batch's member replaying it, and neither batch may fail (a deadlock
// between the two would be unavailable).
func testConcurrentOverlappingBulk(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.bulk()
	const runs = 16
	forward := make([]spec.CreateRunRequest, runs)
	for i := range forward {
		forward[i] = req("acme", fmt.Sprintf("r%02d", i))
	}
	backward := slices.Clone(forward)
	slices.Reverse(backward)
	stores := e.pools(2)
	var outs [2][]spec.CreateOutcome
	var errs [2]error
	race(
		func() { outs[0], errs[0] = stores[0].(spec.BatchCreator).CreateRuns(e.ctx, forward) },
		func() { outs[1], errs[1] = stores[1].(spec.BatchCreator).CreateRuns(e.ctx, backward) },
	)
	for i, err := range errs {
		mustOK(t, fmt.Sprintf("batch %d of two overlapping batches", i), err)
	}
	for i, r := range forward {
		a, bOut := outs[0][i], outs[1][runs-1-i]
		if a.Err != nil || bOut.Err != nil || a.Result.Replayed == bOut.Result.Replayed || a.Result.Run != bOut.Result.Run {
			t.Errorf("run %s: %+v / %+v; want one created and the other its replay", r.RunID, a, bOut)
		}
	}
	mustEqual(t, "runs after two overlapping batches", len(e.snap().Runs), runs)
}

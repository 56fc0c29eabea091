package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

func TestCreateRunAdmitsEveryRowTogether(t *testing.T) {
	w := newWorld(t).at(7)
	res := w.must(createReq("t1", "k1", "r1", `{"b":2, "a":1}`)).(spec.CreateRunResult)
	equal(t, "replayed", res.Replayed, false)
	fp := spec.Fingerprint(spec.FingerprintInput{Tenant: "t1", Operation: "work", SchemaVersion: 1, MaxAttempts: 2, TimeoutMs: 100, Payload: `{"a":1,"b":2}`})
	equal(t, "run", res.Run, spec.Run{Tenant: "t1", ID: "r1", Operation: "work", State: spec.RunQueued, Version: 1, LastSeq: 1,
		Payload: `{"a":1,"b":2}`, Fingerprint: fp, MaxAttempts: 2, CreatedAt: 7, DeadlineAt: 107})
	snap := w.snapshot()
	if len(snap.Runs) != 1 || len(snap.Events) != 1 || len(snap.Jobs) != 1 || len(snap.Idempotency) != 1 || len(snap.Attempts) != 0 || len(snap.Effects) != 0 {
		t.Fatalf("want one run, event, job and record, and no attempts or effects; got %+v", snap)
	}
	equal(t, "event", snap.Events[0], spec.Event{Tenant: "t1", RunID: "r1", Seq: 1, Kind: spec.EventRunQueued, At: 7, Payload: "{}"})
	equal(t, "job", snap.Jobs[0], spec.Job{Tenant: "t1", RunID: "r1", Operation: "work", State: spec.JobQueued, AvailableAt: 7, MaxAttempts: 2})
	equal(t, "record", snap.Idempotency[0], spec.IdempotencyRecord{Tenant: "t1", Operation: "work", Key: "k1", Fingerprint: fp, RunID: "r1", CreatedAt: 7, ExpiresAt: 57})
}

// TestCreateRunOutcomes covers every outcome of CreateRun in SPEC.md's check
// order: validation, live key (same or other fingerprint), expired key,
// taken run id.
func TestCreateRunOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(w *world)
		now      int64
		req      spec.CreateRunRequest
		code     spec.Code // "" for success
		replayed bool
		runID    string // the run returned
	}{
		{name: "negative clock", now: -1, req: createReq("t1", "k1", "r1", `{}`), code: spec.CodeInvalidArgument},
		{name: "unknown tenant", req: createReq("t9", "k1", "r1", `{}`), code: spec.CodeInvalidArgument},
		{name: "unknown operation", req: spec.CreateRunRequest{Tenant: "t1", Operation: "nope", IdempotencyKey: "k", RunID: "r", Payload: []byte(`{}`)}, code: spec.CodeInvalidArgument},
		{name: "duplicate JSON keys", req: createReq("t1", "k1", "r1", `{"a":1,"a":2}`), code: spec.CodeInvalidArgument},
		{name: "max attempts past the policy", req: spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: "k", RunID: "r", Payload: []byte(`{}`), MaxAttempts: 6}, code: spec.CodeInvalidArgument},
		{
			name:  "same key, same request (another spelling, another proposed id): the original run",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{"a":1}`) },
			now:   49, req: createReq("t1", "k1", "r2", `{ "a" : 1 }`), replayed: true, runID: "r1",
		},
		{
			name:  "same key, another request: conflict",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{"a":1}`) },
			now:   49, req: createReq("t1", "k1", "r2", `{"a":2}`), code: spec.CodeIdempotencyConflict,
		},
		{
			name:  "conflict is checked before the run id",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{"a":1}`) },
			req:   createReq("t1", "k1", "r1", `{"a":2}`), code: spec.CodeIdempotencyConflict,
		},
		{
			name:  "same key, another budget: another fingerprint",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{}`) },
			req:   spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: "k1", RunID: "r2", Payload: []byte(`{}`), MaxAttempts: 3},
			code:  spec.CodeIdempotencyConflict,
		},
		{
			name:  "expired key: a new run",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{"a":1}`) },
			now:   50, req: createReq("t1", "k1", "r2", `{"a":2}`), runID: "r2",
		},
		{
			name:  "expired key and a taken run id: already exists",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{"a":1}`) },
			now:   50, req: createReq("t1", "k1", "r1", `{"a":1}`), code: spec.CodeAlreadyExists,
		},
		{
			name:  "another key, a taken run id: already exists",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{}`) },
			req:   createReq("t1", "k2", "r1", `{}`), code: spec.CodeAlreadyExists,
		},
		{
			name:  "the same key and run id in another tenant: a distinct run",
			setup: func(w *world) { w.create("t1", "k1", "r1", `{}`) },
			req:   createReq("t2", "k1", "r1", `{}`), runID: "r1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if tc.setup != nil {
				tc.setup(w)
			}
			w.at(tc.now)
			if tc.code != "" {
				w.fails(tc.req, tc.code, "")
				return
			}
			res := w.must(tc.req).(spec.CreateRunResult)
			equal(t, "replayed", res.Replayed, tc.replayed)
			equal(t, "run id", res.Run.ID, tc.runID)
			equal(t, "tenant", res.Run.Tenant, tc.req.Tenant)
		})
	}
}

func TestCreateRunReplacesAnExpiredRecord(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	w.at(60).create("t1", "k1", "r2", `{}`)
	recs := w.snapshot().Idempotency
	if len(recs) != 1 || recs[0].RunID != "r2" || recs[0].CreatedAt != 60 || recs[0].ExpiresAt != 110 {
		t.Fatalf("want the one record of k1 rebound to r2 at 60, got %+v", recs)
	}
	// A replayed create writes nothing, not even a second run_queued event.
	before := w.s.Key()
	res := w.must(createReq("t1", "k1", "r3", `{}`)).(spec.CreateRunResult)
	equal(t, "replayed run", res.Run.ID, "r2")
	equal(t, "state unchanged", w.s.Key(), before)
}

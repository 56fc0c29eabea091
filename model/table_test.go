package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestStepsCoverTheTable: the model has a step for every operation of the
// contract's table.
func TestStepsCoverTheTable(t *testing.T) {
	for _, o := range spec.Operations() {
		if !model.HasStep(string(o.Op)) {
			t.Errorf("operation %s (%s) has no model step", o.Op, o.Method)
		}
	}
}

// TestReads: each read returns the run's rows for its tenant, not_found for
// another tenant's or a missing run, invalid_argument for a bad id, and
// changes nothing.
func TestReads(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	l := w.at(1).claimOne("t1", "w1")
	w.at(2).must(reserve(l))
	for _, tc := range []struct {
		req  spec.Request
		code spec.Code
		n    int // rows of a list
	}{
		{spec.GetRunRequest{Tenant: "t1", RunID: "r1"}, "", -1},
		{spec.GetJobRequest{Tenant: "t1", RunID: "r1"}, "", -1},
		{spec.EventsRequest{Tenant: "t1", RunID: "r1"}, "", 1},
		{spec.AttemptsRequest{Tenant: "t1", RunID: "r1"}, "", 1},
		{spec.EffectsRequest{Tenant: "t1", RunID: "r1"}, "", 1},
		{spec.GetRunRequest{Tenant: "t2", RunID: "r1"}, spec.CodeNotFound, 0},
		{spec.EventsRequest{Tenant: "t1", RunID: "r9"}, spec.CodeNotFound, 0},
		{spec.GetJobRequest{Tenant: "t1", RunID: "r/1"}, spec.CodeInvalidArgument, 0},
	} {
		before := w.s.Key()
		if tc.code != "" {
			w.fails(tc.req, tc.code, "")
			continue
		}
		got := w.must(tc.req)
		if w.s.Key() != before {
			t.Fatalf("%s changed the state", tc.req.Op())
		}
		switch v := got.(type) {
		case spec.Run:
			equal(t, "run", v, w.run("t1", "r1"))
		case spec.Job:
			equal(t, "job", v, w.job("t1", "r1"))
		case []spec.Event:
			equal(t, "events", len(v), tc.n)
		case []spec.Attempt:
			equal(t, "attempts", len(v), tc.n)
		case []spec.Effect:
			equal(t, "effects", len(v), tc.n)
		default:
			t.Fatalf("%s returned a %T", tc.req.Op(), got)
		}
	}
	snap := w.must(spec.SnapshotRequest{Tenant: "t2"}).(spec.Snapshot)
	if len(snap.Runs) != 0 || snap.Runs == nil {
		t.Errorf("snapshot of t2: %+v, want empty non-nil tables", snap)
	}
	equal(t, "snapshot of t1", len(w.must(spec.SnapshotRequest{Tenant: "t1"}).(spec.Snapshot).Runs), 1)
}

// TestCompleteBatch: each member is exactly Complete at the batch's time; a
// refused member changes nothing and the others complete; a repeat is
// already_terminal; limits refuse the whole batch.
func TestCompleteBatch(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	w.create("t1", "k2", "r2", `{}`)
	w.create("t1", "k3", "r3", `{}`)
	leases := w.at(1).claim("t1", "w1", 3)
	stale := leases[2].Ref()
	stale.Generation = 7
	batch := spec.CompleteBatchRequest{Requests: []spec.CompleteRequest{
		{Lease: leases[0].Ref(), Result: []byte(`{"n":1}`)},
		{Lease: stale},
		{Lease: leases[1].Ref(), Result: []byte(`{"x":1,"x":2}`)},
		{Lease: leases[0].Ref()},
		{Lease: leases[2].Ref()},
	}}
	outs := w.at(5).must(batch).([]spec.BatchOutcome)
	want := []spec.Code{"", spec.CodeLostLease, spec.CodeInvalidArgument, spec.CodeAlreadyTerminal, ""}
	for i, o := range outs {
		equal(t, "member code", spec.CodeOf(o.Err), want[i])
	}
	equal(t, "r1", w.run("t1", "r1").State, spec.RunCompleted)
	equal(t, "r1 result", w.run("t1", "r1").Result, `{"n":1}`)
	equal(t, "r2", w.run("t1", "r2").State, spec.RunRunning)
	equal(t, "r3", w.run("t1", "r3").State, spec.RunCompleted)
	equal(t, "r3 completed at the batch's time", w.lastEvent("t1", "r3").At, int64(5))
	equal(t, "empty batch", len(w.must(spec.CompleteBatchRequest{}).([]spec.BatchOutcome)), 0)
	big := spec.CompleteBatchRequest{Requests: make([]spec.CompleteRequest, spec.MaxBatch+1)}
	w.fails(big, spec.CodeInvalidArgument, "")
	w.at(-1).fails(spec.CompleteBatchRequest{Requests: []spec.CompleteRequest{{Lease: leases[1].Ref()}}}, spec.CodeInvalidArgument, "")
}

// TestCreateRuns: each member is exactly CreateRun at the batch's time, in
// order; a refused member changes nothing (not even the deletion of an
// expired record of its key) and the others are admitted; limits refuse
// the whole batch.
func TestCreateRuns(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "old", "r0", `{}`)           // its record expires at 50
	w.create("t1", "live", "rl", `{}`)          // expired too by the batch, kept (nothing of its key is admitted)
	w.at(40).create("t1", "live2", "rl2", `{}`) // live until 90
	batch := spec.CreateRunsRequest{Requests: []spec.CreateRunRequest{
		createReq("t1", "k1", "r1", `{"n":1}`),       // created
		createReq("t1", "k1", "rx", `{"n":1}`),       // replay of the member before
		createReq("t1", "k1", "ry", `{"n":2}`),       // conflict with it
		createReq("t1", "k2", "r1", `{}`),            // run id taken by the first member
		createReq("t1", "old", "r0", `{}`),           // expired key, run id taken: already_exists, the record stays
		createReq("t1", "live2", "rz", `{}`),         // live record of another request: replay
		createReq("t1", "k3", "r3", `{"x":1,"x":2}`), // invalid payload
		createReq("t1", "k4", "r4", `{}`),            // created
	}}
	outs := w.at(60).must(batch).([]spec.CreateOutcome)
	want := []spec.Code{"", "", spec.CodeIdempotencyConflict, spec.CodeAlreadyExists, spec.CodeAlreadyExists, "", spec.CodeInvalidArgument, ""}
	replayed := []bool{false, true, false, false, false, true, false, false}
	for i, o := range outs {
		equal(t, "member code", spec.CodeOf(o.Err), want[i])
		equal(t, "member replayed", o.Result.Replayed, replayed[i])
	}
	equal(t, "replay names the first member's run", outs[1].Result.Run.ID, "r1")
	equal(t, "replay of an earlier run", outs[5].Result.Run.ID, "rl2")
	equal(t, "r4 created at the batch's time", w.run("t1", "r4").CreatedAt, int64(60))
	equal(t, "records (old and live kept, live2, k1, k4 added)", len(w.snapshot().Idempotency), 5)
	equal(t, "empty batch", len(w.must(spec.CreateRunsRequest{}).([]spec.CreateOutcome)), 0)
	big := spec.CreateRunsRequest{Requests: make([]spec.CreateRunRequest, spec.MaxBatch+1)}
	w.fails(big, spec.CodeInvalidArgument, "")
	w.at(-1).fails(spec.CreateRunsRequest{Requests: []spec.CreateRunRequest{createReq("t1", "k9", "r9", `{}`)}}, spec.CodeInvalidArgument, "")
}

// TestCreateRunTx: an admission in a transaction that commits is exactly
// CreateRun; one that rolls back answers exactly what CreateRun would and
// changes nothing, so the key stays free (or bound to what it was) for the
// next admission.
func TestCreateRunTx(t *testing.T) {
	w := newWorld(t)
	in := func(req spec.CreateRunRequest, rollback bool) spec.CreateRunTxRequest {
		return spec.CreateRunTxRequest{Request: req, Rollback: rollback}
	}
	before := w.s.Key()
	_, want := w.m.Step(w.s, model.Op{Now: 10, Req: createReq("t1", "k1", "r1", `{"n":1}`)})
	got := w.at(10).must(in(createReq("t1", "k1", "r1", `{"n":1}`), true)).(spec.CreateRunResult)
	equal(t, "rolled-back admission: the run CreateRun would create", got, want.Value.(spec.CreateRunResult))
	equal(t, "rolled-back admission changes nothing", w.s.Key(), before)
	got = w.at(20).must(in(createReq("t1", "k1", "r2", `{"n":2}`), false)).(spec.CreateRunResult)
	equal(t, "committed admission after the rollback: created under its own id", got.Run.ID, "r2")
	equal(t, "created at the commit's time", w.run("t1", "r2").CreatedAt, int64(20))
	after := w.s.Key()
	got = w.at(30).must(in(createReq("t1", "k1", "rx", `{ "n" : 2 }`), true)).(spec.CreateRunResult)
	equal(t, "replay in a rolled-back transaction", got.Replayed && got.Run.ID == "r2", true)
	w.fails(in(createReq("t1", "k1", "ry", `{"n":1}`), false), spec.CodeIdempotencyConflict, "")
	w.fails(in(createReq("t1", "k1", "ry", `{"n":1}`), true), spec.CodeIdempotencyConflict, "")
	w.fails(in(createReq("t1", "k2", "r2", `{}`), false), spec.CodeAlreadyExists, "")
	w.fails(in(createReq("t1", "k3", "r3", `{"x":1,"x":2}`), false), spec.CodeInvalidArgument, "")
	equal(t, "replays and refusals change nothing", w.s.Key(), after)
}

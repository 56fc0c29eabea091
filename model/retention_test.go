package model_test

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestScheduledCreate: a scheduled run's job is not claimable before its
// time and is at it; the schedule is part of the fingerprint as given.
func TestScheduledCreate(t *testing.T) {
	w := newWorld(t)
	delayed := createReq("t1", "k1", "r1", `{}`)
	delayed.DelayMs = 30
	res := w.at(0).must(delayed).(spec.CreateRunResult)
	equal(t, "run state", res.Run.State, spec.RunQueued)
	equal(t, "job available at", w.job("t1", "r1").AvailableAt, int64(30))
	if got := w.at(29).claim("t1", "w1", 5); len(got) != 0 {
		t.Fatalf("claim at 29 took a job available at 30: %+v", got)
	}
	// A retry of the same request later is the same request: a replay, and
	// the job keeps the time of the first admission.
	again := delayed
	again.RunID = "r1-retry"
	equal(t, "replayed", w.at(10).must(again).(spec.CreateRunResult).Replayed, true)
	equal(t, "job available at after the replay", w.job("t1", "r1").AvailableAt, int64(30))
	// Another schedule is another request, however it resolves.
	for _, change := range []func(r *spec.CreateRunRequest){
		func(r *spec.CreateRunRequest) { r.DelayMs = 31 },
		func(r *spec.CreateRunRequest) { r.DelayMs, r.AvailableAt = 0, 30 }, // the same time, asked absolutely
		func(r *spec.CreateRunRequest) { r.DelayMs = 0 },
	} {
		r := again
		change(&r)
		w.at(0).fails(r, spec.CodeIdempotencyConflict, "")
	}
	equal(t, "claim at 30", len(w.at(30).claim("t1", "w1", 5)), 1)

	// An absolute time in the past means now; invalid schedules write nothing.
	past := createReq("t1", "k2", "r2", `{}`)
	past.AvailableAt = 10
	w.at(50).must(past)
	equal(t, "a past time means now", w.job("t1", "r2").AvailableAt, int64(50))
	for _, bad := range []struct{ at, delay int64 }{{60, 1}, {-1, 0}, {0, -1}, {0, 100}, {150, 0}} {
		r := createReq("t1", "k3", "r3", `{}`) // timeout 100: the deadline is 150
		r.AvailableAt, r.DelayMs = bad.at, bad.delay
		w.at(50).fails(r, spec.CodeInvalidArgument, "")
	}
}

// TestPurgeRuns covers PurgeRuns: only retired runs, whole lineages, oldest
// first, each with every row of its own.
func TestPurgeRuns(t *testing.T) {
	w := newWorld(t) // run retention 100, idempotency retention 50
	w.at(0)
	for _, id := range []string{"r1", "r2", "r3"} {
		w.create("t1", "k"+id, id, `{}`)
	}
	w.create("t2", "kr1", "r1", `{}`)
	w.at(3).must(spec.CancelRequest{Tenant: "t1", RunID: "r3"}) // finishes at 3
	l := w.at(5).claimOne("t1", "w1")                           // r1
	w.at(10).must(spec.CompleteRequest{Lease: l})               // r1 finishes at 10
	l = w.at(15).claimOne("t1", "w1")                           // r2
	w.at(20).must(spec.FailRequest{Lease: l, ErrorCode: "fatal"})
	w.at(30).must(spec.ReplayRequest{Tenant: "t1", RunID: "r2", NewRunID: "r2.r", Actor: "ops"})
	l = w.at(31).claimOne("t1", "w1")
	w.at(32).create("t1", "kr4", "r4", `{}`)      // stays queued
	w.at(40).must(spec.CompleteRequest{Lease: l}) // r2.r finishes at 40
	l = w.at(5).claimOne("t2", "w1")
	w.at(10).must(spec.CompleteRequest{Lease: l}) // t2/r1 finishes at 10

	purge := func(now int64, limit int, want ...string) {
		t.Helper()
		got := w.at(now).must(spec.PurgeRunsRequest{Tenant: "t1", Limit: limit}).([]string)
		if !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("purge_runs at %d (limit %d) deleted %v, want %v", now, limit, got, want)
		}
	}
	w.at(0).fails(spec.PurgeRunsRequest{Tenant: "t1"}, spec.CodeInvalidArgument, "")
	w.at(-1).fails(spec.PurgeRunsRequest{Tenant: "t1", Limit: 1}, spec.CodeInvalidArgument, "")
	w.fails(spec.PurgeRunsRequest{Tenant: "tx", Limit: 1}, spec.CodeInvalidArgument, "")
	purge(102, 10)               // nothing has been terminal for 100 ms
	purge(103, 10, "r3")         // r3 finished at 3 (its record expired at 50)
	purge(115, 10, "r1")         // r1 at 10; r2 is not a leaf, r2.r too young
	purge(139, 10)               // r2.r finished at 40
	purge(140, 10, "r2.r", "r2") // the lineage, leaf first
	purge(1000, 10)              // r4 is queued: never
	snap := w.snapshot()
	if len(snap.Runs) != 2 || snap.Runs[0].ID != "r4" || snap.Runs[1].Tenant != "t2" {
		t.Fatalf("runs left: want t1/r4 and t2/r1, got %+v", snap.Runs)
	}
	if len(snap.Idempotency) != 2 || len(snap.Events) != 3 || len(snap.Jobs) != 2 || len(snap.Attempts) != 1 {
		t.Fatalf("rows left: want only r4's and t2/r1's, got %+v", snap)
	}
	w.fails(spec.GetRunRequest{Tenant: "t1", RunID: "r1"}, spec.CodeNotFound, "")
	w.fails(spec.ReplayRequest{Tenant: "t1", RunID: "r2", NewRunID: "r2.x", Actor: "ops"}, spec.CodeNotFound, "")
	// The key and the run id of a purged run are free again.
	equal(t, "a purged run's key admits a new run", w.must(createReq("t1", "kr1", "r1", `{"new":1}`)).(spec.CreateRunResult).Replayed, false)

	t.Run("limit and order", func(t *testing.T) {
		w := newWorld(t)
		w.at(0)
		for _, id := range []string{"b", "a", "c"} {
			w.create("t1", "k"+id, id, `{}`)
		}
		w.at(7).must(spec.CancelRequest{Tenant: "t1", RunID: "c"})
		w.at(9).must(spec.CancelRequest{Tenant: "t1", RunID: "b"})
		w.at(9).must(spec.CancelRequest{Tenant: "t1", RunID: "a"})
		// (finished, run id): c at 7, then a and b at 9.
		for _, want := range []string{"c", "a", "b"} {
			w.at(200).must(spec.PurgeRunsRequest{Tenant: "t1", Limit: 1})
			if _, found := w.s.Run("t1", want); found {
				t.Fatalf("purge_runs limit 1 kept %s; want (finished, run id) order c, a, b", want)
			}
		}
	})

	t.Run("a live idempotency record keeps its run and its lineage", func(t *testing.T) {
		w := newWorld(t, func(c *spec.Config) { c.RunRetentionMs = 10 }) // records live 50 ms
		w.at(0).create("t1", "k1", "r1", `{}`)
		l := w.at(1).claimOne("t1", "w1")
		w.at(2).must(spec.FailRequest{Lease: l, ErrorCode: "fatal"})
		w.at(3).must(spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r1.r", Actor: "ops"})
		w.at(4).must(spec.CancelRequest{Tenant: "t1", RunID: "r1.r"})
		w.at(49).must(spec.PurgeRunsRequest{Tenant: "t1", Limit: 10})
		equal(t, "runs while r1's record lives", len(w.snapshot().Runs), 2)
		// The retried request still gets its original answer.
		equal(t, "replay of r1's request", w.must(createReq("t1", "k1", "other", `{}`)).(spec.CreateRunResult).Run.ID, "r1")
		got := w.at(50).must(spec.PurgeRunsRequest{Tenant: "t1", Limit: 10}).([]string)
		if !slices.Equal(got, []string{"r1.r", "r1"}) || len(w.snapshot().Idempotency) != 0 {
			t.Fatalf("purge once the record expired: deleted %v, records %+v; want [r1.r r1] and no record", got, w.snapshot().Idempotency)
		}
	})

	t.Run("retention off", func(t *testing.T) {
		w := newWorld(t, func(c *spec.Config) { c.RunRetentionMs = 0 })
		w.at(0).create("t1", "k1", "r1", `{}`)
		w.at(1).must(spec.CancelRequest{Tenant: "t1", RunID: "r1"})
		equal(t, "deleted with retention off", len(w.at(1<<40).must(spec.PurgeRunsRequest{Tenant: "t1", Limit: 10}).([]string)), 0)
		w.at(0).fails(spec.PurgeRunsRequest{Tenant: "t1", Limit: 0}, spec.CodeInvalidArgument, "")
	})
}

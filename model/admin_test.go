package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestCancel covers Cancel in every job state, in SPEC.md's check order.
func TestCancel(t *testing.T) {
	for _, tc := range []struct {
		name      string
		setup     func(w *world)
		req       spec.CancelRequest
		code      spec.Code
		state     spec.RunState // the winner's state carried by the error
		reason    string        // recorded reason on success
		attempt   spec.AttemptOutcome
		eventGen  int64
		versionTo int64
	}{
		{name: "invalid reason", req: spec.CancelRequest{Tenant: "t1", RunID: "r1", Reason: "No Way"}, code: spec.CodeInvalidArgument},
		{name: "unknown tenant", req: spec.CancelRequest{Tenant: "tx", RunID: "r1"}, code: spec.CodeInvalidArgument},
		{name: "missing run", req: spec.CancelRequest{Tenant: "t1", RunID: "r9"}, code: spec.CodeNotFound},
		{name: "another tenant's run", req: spec.CancelRequest{Tenant: "t2", RunID: "r1"}, code: spec.CodeNotFound},
		{name: "queued job, default reason", req: spec.CancelRequest{Tenant: "t1", RunID: "r1"}, reason: "cancelled", versionTo: 2},
		{name: "leased job: its attempt is cancelled", setup: func(w *world) { w.claimOne("t1", "w1") },
			req: spec.CancelRequest{Tenant: "t1", RunID: "r1", Reason: "user_asked"}, reason: "user_asked", attempt: spec.AttemptCancelled, eventGen: 1, versionTo: 3},
		{name: "expired lease: its running attempt is cancelled", setup: func(w *world) { w.claimOne("t1", "w1"); w.at(50) },
			req: spec.CancelRequest{Tenant: "t1", RunID: "r1"}, reason: "cancelled", attempt: spec.AttemptCancelled, eventGen: 1, versionTo: 3},
		{name: "retried job: the retried attempt is kept", setup: func(w *world) {
			l := w.claimOne("t1", "w1")
			w.must(spec.RetryRequest{Lease: l, ErrorCode: "busy"})
		}, req: spec.CancelRequest{Tenant: "t1", RunID: "r1"}, reason: "cancelled", attempt: spec.AttemptRetried, eventGen: 1, versionTo: 3},
		{name: "completed run: the winner's state", setup: func(w *world) {
			w.must(spec.CompleteRequest{Lease: w.claimOne("t1", "w1")})
		}, req: spec.CancelRequest{Tenant: "t1", RunID: "r1"}, code: spec.CodeAlreadyTerminal, state: spec.RunCompleted},
		{name: "failed run", setup: func(w *world) {
			w.must(spec.FailRequest{Lease: w.claimOne("t1", "w1"), ErrorCode: "x"})
		}, req: spec.CancelRequest{Tenant: "t1", RunID: "r1"}, code: spec.CodeAlreadyTerminal, state: spec.RunFailed},
		{name: "cancelled run", setup: func(w *world) {
			w.must(spec.CancelRequest{Tenant: "t1", RunID: "r1"})
		}, req: spec.CancelRequest{Tenant: "t1", RunID: "r1"}, code: spec.CodeCancelled, state: spec.RunCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.create("t1", "k1", "r1", `{}`)
			if tc.setup != nil {
				tc.setup(w)
			}
			if tc.code != "" {
				w.fails(tc.req, tc.code, tc.state)
				return
			}
			gen := w.job("t1", "r1").Generation
			run := w.must(tc.req).(spec.Run)
			equal(t, "run state", run.State, spec.RunCancelled)
			equal(t, "reason", run.ErrorCode, tc.reason)
			equal(t, "version", run.Version, tc.versionTo)
			j := w.job("t1", "r1")
			equal(t, "job state", j.State, spec.JobCancelled)
			equal(t, "generation kept", j.Generation, gen)
			equal(t, "lease cleared", j.LeaseOwner, "")
			equal(t, "event", w.lastEvent("t1", "r1"), spec.Event{Tenant: "t1", RunID: "r1", Seq: run.LastSeq, Kind: spec.EventRunCancelled, At: w.now,
				Payload: spec.CancelledPayload(tc.reason, tc.eventGen)})
			if tc.attempt != "" {
				equal(t, "attempt outcome", w.attempt("t1", "r1", 1).Outcome, tc.attempt)
			}
			// The job can never be claimed again.
			if got := w.at(w.now+1000).claim("t1", "w2", 1); len(got) != 0 {
				t.Fatalf("a cancelled job was claimed: %+v", got)
			}
		})
	}
}

func TestReap(t *testing.T) {
	w := newWorld(t)
	for _, id := range []string{"r3", "r2", "r1", "r0"} {
		w.create("t1", "k"+id, id, `{}`)
	}
	w.create("t2", "k1", "r1", `{}`)
	// r1, r2 and r3 use their whole budget; r2's last lease expires first.
	w.at(0).claim("t1", "w1", 3) // r0, r1, r2 (run id order)
	w.claim("t2", "w1", 1)
	w.at(10).claim("t1", "w1", 4)                                                  // r3 (queued since 0), then r0-r2 (expired at 10); expire at 20
	w.at(15).must(spec.RenewRequest{Lease: ref("t1", "r1", "w1", 2), LeaseMs: 20}) // r1 expires at 35
	w.at(20).claim("t2", "w1", 1)                                                  // t2/r1 out of budget too, expires 30

	w.at(19).fails(spec.ReapRequest{Tenant: "t1", Limit: 0}, spec.CodeInvalidArgument, "")
	got := w.must(spec.ReapRequest{Tenant: "t1", Limit: 5}).([]string)
	if len(got) != 0 {
		t.Fatalf("reap at 19: nothing has expired, got %v", got)
	}
	// At 40: r0 and r2 expired at 20, r1 at 35; r3 was claimed once (budget left).
	w.at(40)
	got = w.must(spec.ReapRequest{Tenant: "t1", Limit: 2}).([]string)
	if len(got) != 2 || got[0] != "r0" || got[1] != "r2" {
		t.Fatalf("reap limit 2: want [r0 r2] ((expiry, run id) order), got %v", got)
	}
	got = w.must(spec.ReapRequest{Tenant: "t1", Limit: 5}).([]string)
	if len(got) != 1 || got[0] != "r1" {
		t.Fatalf("second reap: want [r1], got %v", got)
	}
	run := w.run("t1", "r1")
	equal(t, "run state", run.State, spec.RunFailed)
	equal(t, "run error", run.ErrorCode, spec.ReapErrorCode)
	equal(t, "event", w.lastEvent("t1", "r1").Payload, spec.FailedPayload(spec.ReapErrorCode, 2))
	a := w.attempt("t1", "r1", 2)
	equal(t, "attempt outcome", a.Outcome, spec.AttemptDead)
	equal(t, "attempt class", a.ErrorClass, spec.ClassExpired)
	equal(t, "attempt finished", a.FinishedAt, int64(40))
	equal(t, "job error", w.job("t1", "r1").LastErrorCode, spec.ReapErrorCode)
	equal(t, "t1/r3 (expired, budget left) is no victim", w.job("t1", "r3").State, spec.JobLeased)
	equal(t, "t2/r1 untouched by t1's reap", w.job("t2", "r1").State, spec.JobLeased)
}

func TestPurgeIdempotency(t *testing.T) {
	w := newWorld(t)
	w.at(0).create("t2", "k1", "a", `{}`) // expires 50
	w.at(0).create("t1", "k2", "b", `{}`) // expires 50
	w.at(5).create("t1", "k1", "c", `{}`) // expires 55
	w.at(9).create("t1", "k3", "d", `{}`) // expires 59
	w.at(-1).fails(spec.PurgeRequest{Limit: 1}, spec.CodeInvalidArgument, "")
	w.at(55).fails(spec.PurgeRequest{Limit: 0}, spec.CodeInvalidArgument, "")
	equal(t, "purge limit 2 at 55", w.must(spec.PurgeRequest{Limit: 2}).(int), 2)
	recs := w.snapshot().Idempotency
	if len(recs) != 2 || recs[0].Key != "k1" || recs[0].Tenant != "t1" || recs[1].Key != "k3" {
		t.Fatalf("want the (expires_at, tenant, ...) oldest two purged, leaving t1/k1 and t1/k3; got %+v", recs)
	}
	equal(t, "purge at 55", w.must(spec.PurgeRequest{Limit: 10}).(int), 1)
	equal(t, "nothing left to purge", w.must(spec.PurgeRequest{Limit: 10}).(int), 0)
	equal(t, "runs are kept", len(w.snapshot().Runs), 4)
}

// TestReplay covers Replay's checks in SPEC.md's order and its writes.
func TestReplay(t *testing.T) {
	failRun := func(w *world, id string) {
		w.must(spec.FailRequest{Lease: w.claimOne("t1", "w1"), ErrorCode: "fatal"})
	}
	for _, tc := range []struct {
		name  string
		setup func(w *world)
		req   spec.ReplayRequest
		code  spec.Code
	}{
		{"invalid actor", func(w *world) { failRun(w, "r1") }, spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r2"}, spec.CodeInvalidArgument},
		{"missing run", nil, spec.ReplayRequest{Tenant: "t1", RunID: "r9", NewRunID: "r2", Actor: "ops"}, spec.CodeNotFound},
		{"another tenant's run", func(w *world) { failRun(w, "r1") }, spec.ReplayRequest{Tenant: "t2", RunID: "r1", NewRunID: "r2", Actor: "ops"}, spec.CodeNotFound},
		{"queued run", nil, spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r2", Actor: "ops"}, spec.CodeFailedPrecondition},
		{"cancelled run", func(w *world) { w.must(spec.CancelRequest{Tenant: "t1", RunID: "r1"}) },
			spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r2", Actor: "ops"}, spec.CodeFailedPrecondition},
		{"replay of a replay past MaxReplays", func(w *world) {
			failRun(w, "r1")
			w.must(spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r2", Actor: "ops"})
			failRun(w, "r2")
		}, spec.ReplayRequest{Tenant: "t1", RunID: "r2", NewRunID: "r3", Actor: "ops"}, spec.CodeReplayLimit},
		{"replayed twice", func(w *world) {
			failRun(w, "r1")
			w.must(spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r2", Actor: "ops"})
		}, spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r3", Actor: "ops"}, spec.CodeAlreadyExists},
		{"new id taken", func(w *world) {
			failRun(w, "r1")
			w.create("t1", "k2", "r2", `{}`)
		}, spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r2", Actor: "ops"}, spec.CodeAlreadyExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.create("t1", "k1", "r1", `{"a":1}`)
			if tc.setup != nil {
				tc.setup(w)
			}
			w.fails(tc.req, tc.code, "")
		})
	}

	t.Run("writes", func(t *testing.T) {
		w := newWorld(t)
		orig := w.at(10).create("t1", "k1", "r1", `{"a":1}`) // deadline 110
		w.claimOne("t1", "w1")
		l := w.at(20).claimOne("t1", "w1")
		w.must(spec.FailRequest{Lease: l, ErrorCode: "fatal"})
		run := w.at(500).must(spec.ReplayRequest{Tenant: "t1", RunID: "r1", NewRunID: "r1-again", Actor: "alice"}).(spec.Run)
		equal(t, "run", run, spec.Run{Tenant: "t1", ID: "r1-again", Operation: "work", State: spec.RunQueued, Version: 1, LastSeq: 1,
			Payload: orig.Payload, Fingerprint: orig.Fingerprint, MaxAttempts: 2, CreatedAt: 500, DeadlineAt: 600, ReplayOf: "r1", ReplayDepth: 1})
		equal(t, "event", w.lastEvent("t1", "r1-again"), spec.Event{Tenant: "t1", RunID: "r1-again", Seq: 1, Kind: spec.EventRunQueued, At: 500,
			Payload: spec.QueuedPayload("r1", "alice", 1)})
		equal(t, "job", w.job("t1", "r1-again"), spec.Job{Tenant: "t1", RunID: "r1-again", Operation: "work", State: spec.JobQueued,
			AvailableAt: 500, Generation: 2, MaxAttempts: 2})
		equal(t, "no idempotency record for the replay", len(w.snapshot().Idempotency), 1)
		equal(t, "the replay's first claim continues the generation", w.claimOne("t1", "w2").Generation, int64(3))
	})
}

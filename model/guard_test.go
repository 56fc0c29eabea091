package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// guardedOps builds each guarded write through a lease ref.
var guardedOps = []struct {
	name string
	req  func(spec.LeaseRef) spec.Request
}{
	{"renew", func(l spec.LeaseRef) spec.Request { return spec.RenewRequest{Lease: l, LeaseMs: 10} }},
	{"complete", func(l spec.LeaseRef) spec.Request { return spec.CompleteRequest{Lease: l} }},
	{"retry", func(l spec.LeaseRef) spec.Request { return spec.RetryRequest{Lease: l, ErrorCode: "busy"} }},
	{"fail", func(l spec.LeaseRef) spec.Request { return spec.FailRequest{Lease: l, ErrorCode: "fatal"} }},
	{"release", func(l spec.LeaseRef) spec.Request { return spec.ReleaseRequest{Lease: l} }},
	{"reserve_effect", func(l spec.LeaseRef) spec.Request {
		return spec.ReserveEffectRequest{Lease: l, Step: "s", Key: "e"}
	}},
	{"record_effect", func(l spec.LeaseRef) spec.Request {
		return spec.RecordEffectRequest{Lease: l, Step: "s", Key: "e", State: spec.EffectSucceeded}
	}},
	{"reconcile_effect", func(l spec.LeaseRef) spec.Request {
		return spec.ReconcileEffectRequest{Lease: l, Step: "s", Key: "e", State: spec.EffectFailed}
	}},
}

// TestGuardedWritesRefuseAnyLeaseButTheCurrentOne runs every guarded write
// through every kind of lease that is not the current one, in SPEC.md's check
// order: validation, not_found, then spec.LeaseError (other generation,
// cancelled, terminal, requeued, other owner, expired).
func TestGuardedWritesRefuseAnyLeaseButTheCurrentOne(t *testing.T) {
	for _, sit := range []struct {
		name  string
		setup func(w *world) spec.LeaseRef // returns the lease presented
		code  spec.Code
		state spec.RunState
	}{
		{"generation 0 is invalid, even for a missing run", func(w *world) spec.LeaseRef {
			return ref("t1", "nope", "w1", 0)
		}, spec.CodeInvalidArgument, ""},
		{"unknown tenant is invalid", func(w *world) spec.LeaseRef {
			return ref("t7", "r1", "w1", 1)
		}, spec.CodeInvalidArgument, ""},
		{"missing run", func(w *world) spec.LeaseRef {
			return ref("t1", "nope", "w1", 1)
		}, spec.CodeNotFound, ""},
		{"another tenant's run is not found", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			l.Tenant = "t2"
			return l
		}, spec.CodeNotFound, ""},
		{"a stale generation after a reclaim", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.at(10).claimOne("t1", "w2")
			return l
		}, spec.CodeLostLease, ""},
		{"a stale generation wins over a cancelled job", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.at(10).claimOne("t1", "w2")
			w.must(spec.CancelRequest{Tenant: "t1", RunID: "r1"})
			return l
		}, spec.CodeLostLease, ""},
		{"a stale generation of the same worker", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.at(10).claimOne("t1", "w1")
			return l
		}, spec.CodeLostLease, ""},
		{"the current generation of a cancelled run", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.must(spec.CancelRequest{Tenant: "t1", RunID: "r1"})
			return l
		}, spec.CodeCancelled, spec.RunCancelled},
		{"the current generation of a completed run", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.must(spec.CompleteRequest{Lease: l})
			return l
		}, spec.CodeAlreadyTerminal, spec.RunCompleted},
		{"the current generation of a failed run", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.must(spec.FailRequest{Lease: l, ErrorCode: "fatal"})
			return l
		}, spec.CodeAlreadyTerminal, spec.RunFailed},
		{"released (requeued)", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.must(spec.ReleaseRequest{Lease: l})
			return l
		}, spec.CodeLostLease, ""},
		{"retried (requeued)", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			w.must(spec.RetryRequest{Lease: l, ErrorCode: "busy"})
			return l
		}, spec.CodeLostLease, ""},
		{"another owner with the current generation", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1")
			l.Owner = "w2"
			return l
		}, spec.CodeLostLease, ""},
		{"expired exactly now", func(w *world) spec.LeaseRef {
			l := w.claimOne("t1", "w1") // expires 10
			w.at(10)
			return l
		}, spec.CodeLostLease, ""},
	} {
		for _, g := range guardedOps {
			t.Run(sit.name+"/"+g.name, func(t *testing.T) {
				w := newWorld(t)
				w.create("t1", "k1", "r1", `{}`)
				l := sit.setup(w)
				w.fails(g.req(l), sit.code, sit.state)
			})
		}
	}
}

func TestRenew(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`) // deadline 100
	l := w.at(5).claimOne("t1", "w1")
	lease := w.at(9).must(spec.RenewRequest{Lease: l, LeaseMs: 20}).(spec.Lease)
	equal(t, "renewed expiry", lease.ExpiresAt, int64(29))
	equal(t, "job expiry", w.job("t1", "r1").LeaseExpiresAt, int64(29))
	equal(t, "attempt renewed_at", w.attempt("t1", "r1", 1).RenewedAt, int64(9))
	equal(t, "run version (renew does not touch the run)", w.run("t1", "r1").Version, int64(2))

	// Up to the deadline exactly, then no further.
	w.at(20).must(spec.RenewRequest{Lease: l, LeaseMs: 80}) // 100 == deadline
	w.at(21).fails(spec.RenewRequest{Lease: l, LeaseMs: 80}, spec.CodeDeadlineExceeded, "")
	equal(t, "expiry kept after deadline_exceeded", w.job("t1", "r1").LeaseExpiresAt, int64(100))
	w.fails(spec.RenewRequest{Lease: l, LeaseMs: 101}, spec.CodeInvalidArgument, "")
}

func TestComplete(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	l := w.claimOne("t1", "w1")
	w.at(3).fails(spec.CompleteRequest{Lease: l, Result: []byte(`{"a":`)}, spec.CodeInvalidArgument, "")
	run := w.must(spec.CompleteRequest{Lease: l, Result: []byte(`{ "z":1, "a":2 }`)}).(spec.Run)
	equal(t, "state", run.State, spec.RunCompleted)
	equal(t, "result", run.Result, `{"a":2,"z":1}`)
	equal(t, "version", run.Version, int64(3))
	equal(t, "last seq", run.LastSeq, int64(2))
	equal(t, "event", w.lastEvent("t1", "r1"), spec.Event{Tenant: "t1", RunID: "r1", Seq: 2, Kind: spec.EventRunCompleted, At: 3, Payload: spec.CompletedPayload(1)})
	equal(t, "job", w.job("t1", "r1"), spec.Job{Tenant: "t1", RunID: "r1", Operation: "work", State: spec.JobCompleted, Generation: 1, Attempts: 1, MaxAttempts: 2})
	a := w.attempt("t1", "r1", 1)
	equal(t, "attempt outcome", a.Outcome, spec.AttemptCompleted)
	equal(t, "attempt finished", a.FinishedAt, int64(3))
}

func TestFail(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	l := w.claimOne("t1", "w1")
	w.at(4).fails(spec.FailRequest{Lease: l, ErrorCode: "Bad-Code"}, spec.CodeInvalidArgument, "")
	run := w.must(spec.FailRequest{Lease: l, ErrorCode: "fatal"}).(spec.Run)
	equal(t, "state", run.State, spec.RunFailed)
	equal(t, "error code", run.ErrorCode, "fatal")
	equal(t, "event", w.lastEvent("t1", "r1"), spec.Event{Tenant: "t1", RunID: "r1", Seq: 2, Kind: spec.EventRunFailed, At: 4, Payload: spec.FailedPayload("fatal", 1)})
	j := w.job("t1", "r1")
	equal(t, "job state", j.State, spec.JobDead)
	equal(t, "job error", j.LastErrorCode, "fatal")
	a := w.attempt("t1", "r1", 1)
	equal(t, "attempt", a, spec.Attempt{Tenant: "t1", RunID: "r1", Generation: 1, Number: 1, Worker: "w1", ClaimedAt: 0, RenewedAt: 0,
		FinishedAt: 4, Outcome: spec.AttemptDead, ErrorCode: "fatal", ErrorClass: spec.ClassTerminal})
}

func TestRetryBelowTheBudgetRequeuesAfterTheBackoff(t *testing.T) {
	for _, tc := range []struct {
		name         string
		retryAfterMs int64
		jitter       int64
		wantAt       int64 // now (100) + delay
	}{
		{"base delay", 0, 0, 110},
		{"plus jitter", 0, 5, 115},
		{"retry-after above the backoff", 25, 0, 125},
		{"retry-after capped", 1000, 0, 130},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.must(spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: "k", RunID: "r1", Payload: []byte(`{}`), TimeoutMs: 1000})
			l := w.at(100).claimOne("t1", "w1")
			res := w.doJitter(retryReq(l, tc.retryAfterMs), tc.jitter)
			if res.Err != nil {
				t.Fatalf("retry: %v", res.Err)
			}
			j := res.Value.(spec.Job)
			equal(t, "state", j.State, spec.JobQueued)
			equal(t, "available at", j.AvailableAt, tc.wantAt)
			equal(t, "generation kept", j.Generation, int64(1))
			equal(t, "attempts kept", j.Attempts, 1)
			equal(t, "error", j.LastErrorCode, "busy")
			equal(t, "lease cleared", j.LeaseOwner, "")
			a := w.attempt("t1", "r1", 1)
			equal(t, "attempt outcome", a.Outcome, spec.AttemptRetried)
			equal(t, "attempt retry_at", a.RetryAt, tc.wantAt)
			equal(t, "attempt class", a.ErrorClass, spec.ClassRetryable)
			equal(t, "run still running", w.run("t1", "r1").State, spec.RunRunning)
			equal(t, "run version", w.run("t1", "r1").Version, int64(2))
		})
	}
}

func TestRetryJitterOutOfRangeIsInvalid(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	l := w.claimOne("t1", "w1")
	res := w.doJitter(retryReq(l, 0), 6) // JitterMs is 5
	if res.Err == nil || res.Err.Code != spec.CodeInvalidArgument {
		t.Fatalf("a jitter draw past JitterMs: want invalid_argument, got %s", res)
	}
}

func TestRetryAtTheBudgetTerminalizes(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	w.claimOne("t1", "w1")
	l := w.at(10).claimOne("t1", "w2") // attempt 2 of 2
	j := w.at(12).must(retryReq(l, 0)).(spec.Job)
	equal(t, "job", j, spec.Job{Tenant: "t1", RunID: "r1", Operation: "work", State: spec.JobDead, AvailableAt: 0,
		Generation: 2, Attempts: 2, MaxAttempts: 2, LastErrorCode: "busy"})
	run := w.run("t1", "r1")
	equal(t, "run state", run.State, spec.RunFailed)
	equal(t, "run error", run.ErrorCode, "busy")
	equal(t, "event", w.lastEvent("t1", "r1"), spec.Event{Tenant: "t1", RunID: "r1", Seq: 2, Kind: spec.EventRunFailed, At: 12, Payload: spec.FailedPayload("busy", 2)})
	a := w.attempt("t1", "r1", 2)
	equal(t, "attempt outcome", a.Outcome, spec.AttemptDead)
	equal(t, "attempt class", a.ErrorClass, spec.ClassRetryable)
}

func TestReleaseRefundsTheAttempt(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	l := w.claimOne("t1", "w1")
	j := w.at(4).must(spec.ReleaseRequest{Lease: l}).(spec.Job)
	equal(t, "job", j, spec.Job{Tenant: "t1", RunID: "r1", Operation: "work", State: spec.JobQueued, AvailableAt: 4,
		Generation: 1, Attempts: 0, MaxAttempts: 2})
	equal(t, "attempt outcome", w.attempt("t1", "r1", 1).Outcome, spec.AttemptReleased)
	equal(t, "run stays running", w.run("t1", "r1").State, spec.RunRunning)
	l2 := w.claimOne("t1", "w2")
	equal(t, "next generation", l2.Generation, int64(2))
	equal(t, "attempts after refund", w.job("t1", "r1").Attempts, 1)
}

func retryReq(l spec.LeaseRef, retryAfterMs int64) spec.RetryRequest {
	return spec.RetryRequest{Lease: l, ErrorCode: "busy", RetryAfterMs: retryAfterMs}
}

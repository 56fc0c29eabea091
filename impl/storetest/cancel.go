package storetest

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Cancellation, and its race with completion decided in each order.

func init() {
	register("CancelQueuedRun", testCancelQueuedRun)
	register("CancelLeasedRun", testCancelLeasedRun)
	register("CancelRetriedAndExpiredRuns", testCancelRetriedAndExpiredRuns)
	register("CancelThenComplete", testCancelThenComplete)
	register("CompleteThenCancel", testCompleteThenCancel)
}

func testCancelQueuedRun(t *testing.T, f Factory) {
	e := newEnv(t, f)
	created := e.newRun("acme", "r1")
	e.set(t0 + 9)
	run := e.cancel("acme", "r1", "") // the default reason
	want := created
	want.State, want.Version, want.LastSeq, want.ErrorCode = spec.RunCancelled, 2, 2, spec.DefaultCancelReason
	mustEqual(t, "cancelled run", run, want)
	mustEqual(t, "events", e.events("acme", "r1"), []spec.Event{
		{Tenant: "acme", RunID: "r1", Seq: 1, Kind: spec.EventRunQueued, At: t0, Payload: "{}"},
		{Tenant: "acme", RunID: "r1", Seq: 2, Kind: spec.EventRunCancelled, At: t0 + 9, Payload: `{"generation":0,"reason":"cancelled"}`},
	})
	mustEqual(t, "cancelled job", e.getJob("acme", "r1"), spec.Job{Tenant: "acme", RunID: "r1", Operation: "work",
		State: spec.JobCancelled, AvailableAt: t0, MaxAttempts: 3})
	mustEqual(t, "attempts", len(e.attempts("acme", "r1")), 0)
	e.claimNone("acme", "w")

	before := e.snap()
	_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1", Reason: "again"})
	mustCodeState(t, "second Cancel", err, spec.CodeCancelled, spec.RunCancelled)
	_, err = e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "ghost"})
	mustCode(t, "Cancel of a missing run", err, spec.CodeNotFound)
	e.unchanged("refused cancels", before)

	// A failed run cannot be cancelled: the failure stands.
	e.failedRun("acme", "r2")
	_, err = e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r2"})
	mustCodeState(t, "Cancel of a failed run", err, spec.CodeAlreadyTerminal, spec.RunFailed)
}

func testCancelLeasedRun(t *testing.T, f Factory) {
	e := newEnv(t, f)
	created := e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w1", 10_000)
	e.set(t0 + 20)
	run := e.cancel("acme", "r1", "operator_stop")
	want := created
	want.State, want.Version, want.LastSeq, want.ErrorCode = spec.RunCancelled, 3, 2, "operator_stop"
	mustEqual(t, "cancelled run", run, want)
	mustEqual(t, "terminal event", e.events("acme", "r1")[1], spec.Event{Tenant: "acme", RunID: "r1", Seq: 2,
		Kind: spec.EventRunCancelled, At: t0 + 20, Payload: spec.CancelledPayload("operator_stop", 1)})
	mustEqual(t, "cancelled job (lease ended, generation kept)", e.getJob("acme", "r1"), spec.Job{Tenant: "acme", RunID: "r1",
		Operation: "work", State: spec.JobCancelled, AvailableAt: t0, Generation: 1, Attempts: 1, MaxAttempts: 3})
	mustEqual(t, "cancelled attempt", e.attempts("acme", "r1"), []spec.Attempt{{Tenant: "acme", RunID: "r1", Generation: 1,
		Number: 1, Worker: "w1", ClaimedAt: t0, RenewedAt: t0, FinishedAt: t0 + 20, Outcome: spec.AttemptCancelled}})
	// The worker still holds its generation, so it is told "cancelled", with
	// the state, by every write it tries.
	allRefused(e, "writes of the cancelled lease", l.Ref(), spec.CodeCancelled, spec.RunCancelled)
}

func testCancelRetriedAndExpiredRuns(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// A job waiting after a retry: queued at generation 1, no running attempt.
	e.newRun("acme", "retried")
	l := e.claimOne("acme", "retried", "w", 10_000)
	e.retry(l, "flaky", 0)
	attemptsBefore := e.attempts("acme", "retried")
	e.set(t0 + 5)
	e.cancel("acme", "retried", "")
	mustEqual(t, "event after cancelling a retried job", e.events("acme", "retried")[1].Payload, spec.CancelledPayload("cancelled", 1))
	mustEqual(t, "attempts of a retried job are not touched by cancel", e.attempts("acme", "retried"), attemptsBefore)
	mustEqual(t, "job", e.getJob("acme", "retried").State, spec.JobCancelled)

	// A leased job whose lease expired unnoticed: its running attempt is
	// closed as cancelled.
	e.newRun("acme", "expired")
	e.claimOne("acme", "expired", "w", 100)
	e.set(t0 + 1000)
	e.cancel("acme", "expired", "")
	mustEqual(t, "attempt of an expired lease after cancel", e.attempts("acme", "expired")[0].Outcome, spec.AttemptCancelled)
	mustEqual(t, "job", e.getJob("acme", "expired"), spec.Job{Tenant: "acme", RunID: "expired", Operation: "work",
		State: spec.JobCancelled, AvailableAt: t0 + 5, Generation: 1, Attempts: 1, MaxAttempts: 3})
}

func testCancelThenComplete(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 10_000)
	cancelled := e.cancel("acme", "r1", "")
	before := e.snap()
	// The cancel won: the completion loses with cancelled and the state.
	_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"late":true}`)})
	mustCodeState(t, "Complete after Cancel", err, spec.CodeCancelled, spec.RunCancelled)
	e.unchanged("Complete after Cancel", before)
	mustEqual(t, "run", e.getRun("acme", "r1"), cancelled)
}

func testCompleteThenCancel(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 10_000)
	done := e.complete(l, `{"ok":1}`)
	before := e.snap()
	// The completion won: the cancel loses with already_terminal and the state.
	_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1", Reason: "too_late"})
	mustCodeState(t, "Cancel after Complete", err, spec.CodeAlreadyTerminal, spec.RunCompleted)
	e.unchanged("Cancel after Complete", before)
	mustEqual(t, "run", e.getRun("acme", "r1"), done)
}

package storetest

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Retries, terminal failures and the attempt budget, and Reap.

func init() {
	register("RetrySchedule", testRetrySchedule)
	register("AttemptBudgetTerminalization", testAttemptBudgetTerminalization)
	register("FailIsTerminal", testFailIsTerminal)
	register("ReapExpiredLeaseWithNoAttemptsLeft", testReapExpiredLeaseWithNoAttemptsLeft)
}

// scheduleBackoff is the policy RetrySchedule runs under: base 1 s doubling
// to a cap of 8 s, jitter in [0, 250] ms, Retry-After honoured up to 300 s.
var scheduleBackoff = spec.Backoff{BaseMs: 1000, CapMs: 8000, JitterMs: 250, RetryAfterCapMs: 300_000}

func testRetrySchedule(t *testing.T, f Factory) {
	e := newEnv(t, f, func(c *spec.Config) { c.Backoff = scheduleBackoff })
	r := req("acme", "r1")
	r.MaxAttempts = 10
	created := e.create(r)

	// Each step: the jitter the Random returns, the caller's Retry-After and
	// the delay it must produce, worked out by hand from
	// max(min(cap, base*2^(attempt-1)) + jitter, min(retryAfter, retryAfterCap)).
	steps := []struct {
		jitter, retryAfter, delay int64
	}{
		{137, 0, 1000 + 137},    // attempt 1: base
		{0, 0, 2000},            // attempt 2: doubled, no jitter
		{250, 0, 4000 + 250},    // attempt 3: the largest jitter
		{42, 0, 8000 + 42},      // attempt 4: base*8 reaches the cap exactly
		{7, 0, 8000 + 7},        // attempt 5: base*16 is capped
		{100, 20_000, 20_000},   // attempt 6: Retry-After above the backoff wins
		{1, 5_000, 8000 + 1},    // attempt 7: Retry-After below the backoff is ignored
		{3, 1_000_000, 300_000}, // attempt 8: Retry-After is capped at RetryAfterCapMs
		{11, 300_000, 300_000},  // attempt 9: Retry-After exactly at the cap
	}
	script := make([]int64, len(steps))
	for i, s := range steps {
		script[i] = s.jitter
	}
	e.rnd.setScript(script...)

	now := int64(t0)
	for i, s := range steps {
		attempt := i + 1
		l := e.claimOne("acme", "r1", "w", 60_000)
		if l.Generation != int64(attempt) || l.Attempt != attempt {
			t.Fatalf("claim %d: want generation and attempt %d, got %+v", attempt, attempt, l)
		}
		claimedAt := now
		now += 10
		e.set(now)
		code := fmt.Sprintf("flaky_%d", attempt)
		job := e.retry(l, code, s.retryAfter)
		available := now + s.delay
		mustEqual(t, fmt.Sprintf("job after retry %d", attempt), job, spec.Job{Tenant: "acme", RunID: "r1", Operation: "work",
			State: spec.JobQueued, AvailableAt: available, Generation: int64(attempt), Attempts: attempt, MaxAttempts: 10, LastErrorCode: code})
		atts := e.attempts("acme", "r1")
		mustEqual(t, fmt.Sprintf("attempt row %d", attempt), atts[len(atts)-1], spec.Attempt{Tenant: "acme", RunID: "r1",
			Generation: int64(attempt), Number: attempt, Worker: "w", ClaimedAt: claimedAt, RenewedAt: claimedAt, FinishedAt: now,
			Outcome: spec.AttemptRetried, ErrorCode: code, ErrorClass: spec.ClassRetryable, RetryAt: available})
		// A retry leaves the run running with no new event.
		run := e.getRun("acme", "r1")
		if run.State != spec.RunRunning || run.LastSeq != 1 || run.Version != 2 || run.ErrorCode != "" {
			t.Fatalf("run after retry %d: want running, version 2, last seq 1, no error code; got %+v", attempt, run)
		}
		// The persisted available_at is the schedule: not a millisecond early.
		e.set(available - 1)
		e.claimNone("acme", "w")
		now = available
		e.set(now)
	}
	// Every retry drew its jitter from [0, JitterMs] through the injected
	// source: Int64N(JitterMs+1), once per retry.
	want := make([]int64, len(steps))
	for i := range want {
		want[i] = scheduleBackoff.JitterBound()
	}
	mustEqual(t, "Random.Int64N bounds", e.rnd.calls(), want)

	// The tenth attempt is the last: its Retry terminalizes and draws no jitter.
	l := e.claimOne("acme", "r1", "w", 60_000)
	e.set(now + 10)
	job := e.retry(l, "flaky_10", 0)
	mustEqual(t, "job at the budget", job, spec.Job{Tenant: "acme", RunID: "r1", Operation: "work", State: spec.JobDead,
		AvailableAt: now, Generation: 10, Attempts: 10, MaxAttempts: 10, LastErrorCode: "flaky_10"})
	mustEqual(t, "Random draws at the budget", len(e.rnd.calls()), len(steps))
	run := e.getRun("acme", "r1")
	want2 := created
	want2.State, want2.Version, want2.LastSeq, want2.ErrorCode = spec.RunFailed, 3, 2, "flaky_10"
	mustEqual(t, "run at the budget", run, want2)
}

func testAttemptBudgetTerminalization(t *testing.T, f Factory) {
	e := newEnv(t, f)
	created := e.newRun("acme", "r1") // max attempts 3
	var l spec.Lease
	for i := 1; i <= 2; i++ {
		l = e.claimOne("acme", "r1", "w", 10_000)
		j := e.retry(l, "flaky", 0)
		e.set(j.AvailableAt)
	}
	l = e.claimOne("acme", "r1", "w", 10_000)
	if l.Attempt != 3 || l.MaxAttempts != 3 || l.Generation != 3 {
		t.Fatalf("third claim: want attempt 3 of 3 at generation 3, got %+v", l)
	}
	availableAt := e.now()
	e.set(availableAt + 7)
	before := e.snap()
	job := e.retry(l, "upstream_down", 30_000)

	// One commit: job dead, run failed, run_failed as the next seq with the
	// error code, the attempt closed as dead (retryable class).
	after := e.snap()
	wantJob := spec.Job{Tenant: "acme", RunID: "r1", Operation: "work", State: spec.JobDead, AvailableAt: availableAt,
		Generation: 3, Attempts: 3, MaxAttempts: 3, LastErrorCode: "upstream_down"}
	mustEqual(t, "Retry's returned job", job, wantJob)
	wantRun := created
	wantRun.State, wantRun.Version, wantRun.LastSeq, wantRun.ErrorCode = spec.RunFailed, 3, 2, "upstream_down"
	want := before
	want.Runs = []spec.Run{wantRun}
	want.Jobs = []spec.Job{wantJob}
	want.Events = append(append([]spec.Event{}, before.Events...), spec.Event{Tenant: "acme", RunID: "r1", Seq: 2,
		Kind: spec.EventRunFailed, At: availableAt + 7, Payload: spec.FailedPayload("upstream_down", 3)})
	want.Attempts = append([]spec.Attempt{}, before.Attempts...)
	last := &want.Attempts[2]
	last.FinishedAt, last.Outcome, last.ErrorCode, last.ErrorClass = availableAt+7, spec.AttemptDead, "upstream_down", spec.ClassRetryable
	mustEqual(t, "snapshot after the budget's last retry", after, want)
	if want.Events[1].Payload != `{"error_code":"upstream_down","generation":3}` {
		t.Fatalf("run_failed payload: want the documented bytes, got %s", want.Events[1].Payload)
	}

	// The dead job is never claimed again; the lease's writes see the failure.
	e.set(availableAt + 1_000_000)
	e.claimNone("acme", "w")
	allRefused(e, "writes after the budget", l.Ref(), spec.CodeAlreadyTerminal, spec.RunFailed)
}

func testFailIsTerminal(t *testing.T, f Factory) {
	e := newEnv(t, f)
	created := e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 10_000)
	e.set(t0 + 3)
	run := e.fail(l, "invalid_input")
	want := created
	want.State, want.Version, want.LastSeq, want.ErrorCode = spec.RunFailed, 3, 2, "invalid_input"
	mustEqual(t, "failed run", run, want)
	mustEqual(t, "dead job", e.getJob("acme", "r1"), spec.Job{Tenant: "acme", RunID: "r1", Operation: "work", State: spec.JobDead,
		AvailableAt: t0, Generation: 1, Attempts: 1, MaxAttempts: 3, LastErrorCode: "invalid_input"})
	mustEqual(t, "events", e.events("acme", "r1")[1], spec.Event{Tenant: "acme", RunID: "r1", Seq: 2, Kind: spec.EventRunFailed,
		At: t0 + 3, Payload: spec.FailedPayload("invalid_input", 1)})
	mustEqual(t, "attempt", e.attempts("acme", "r1"), []spec.Attempt{{Tenant: "acme", RunID: "r1", Generation: 1, Number: 1,
		Worker: "w", ClaimedAt: t0, RenewedAt: t0, FinishedAt: t0 + 3, Outcome: spec.AttemptDead, ErrorCode: "invalid_input",
		ErrorClass: spec.ClassTerminal}})
	// Attempts were left in the budget, but a terminal failure is not retried.
	e.set(t0 + 1_000_000)
	e.claimNone("acme", "w")
	allRefused(e, "writes after Fail", l.Ref(), spec.CodeAlreadyTerminal, spec.RunFailed)
}

func testReapExpiredLeaseWithNoAttemptsLeft(t *testing.T, f Factory) {
	e := newEnv(t, f)
	mk := func(tenant, id string, maxAttempts int, leaseMs int64) spec.Lease {
		r := req(tenant, id)
		r.MaxAttempts = maxAttempts
		e.create(r)
		return e.claimOne(tenant, id, "w", leaseMs)
	}
	mk("acme", "x", 1, 3000)       // expires t0+3000
	mk("acme", "z", 1, 1000)       // expires t0+1000
	ly := mk("acme", "y", 1, 1000) // expires t0+1000
	mk("acme", "w", 2, 500)        // expires first, but has an attempt left
	mk("other", "o", 1, 1000)      // another tenant's

	reap := func(tenant string, limit int) []string {
		t.Helper()
		got, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: tenant, Limit: limit})
		mustOK(t, "Reap", err)
		return got
	}
	e.set(t0 + 999)
	before := e.snap()
	mustEqual(t, "reap before any expiry", len(reap("acme", 10)), 0)
	e.unchanged("reap with nothing to reap", before)

	// At t0+1000 y and z have expired (expires_at <= now); order is
	// (lease_expires_at, run_id), and Limit is honoured.
	e.set(t0 + 1000)
	mustEqual(t, "reap limit 1", reap("acme", 1), []string{"y"})
	mustEqual(t, "reap the rest", reap("acme", 10), []string{"z"})
	mustEqual(t, "reap again", len(reap("acme", 10)), 0)

	created := e.getRun("acme", "y")
	if created.State != spec.RunFailed || created.ErrorCode != spec.ReapErrorCode || created.Version != 3 || created.LastSeq != 2 {
		t.Fatalf("reaped run: want failed with %s, version 3, last seq 2; got %+v", spec.ReapErrorCode, created)
	}
	mustEqual(t, "reaped job", e.getJob("acme", "y"), spec.Job{Tenant: "acme", RunID: "y", Operation: "work", State: spec.JobDead,
		AvailableAt: t0, Generation: 1, Attempts: 1, MaxAttempts: 1, LastErrorCode: spec.ReapErrorCode})
	mustEqual(t, "reaped run's events", e.events("acme", "y"), []spec.Event{
		{Tenant: "acme", RunID: "y", Seq: 1, Kind: spec.EventRunQueued, At: t0, Payload: "{}"},
		{Tenant: "acme", RunID: "y", Seq: 2, Kind: spec.EventRunFailed, At: t0 + 1000, Payload: spec.FailedPayload(spec.ReapErrorCode, 1)},
	})
	mustEqual(t, "reaped attempt", e.attempts("acme", "y"), []spec.Attempt{{Tenant: "acme", RunID: "y", Generation: 1, Number: 1,
		Worker: "w", ClaimedAt: t0, RenewedAt: t0, FinishedAt: t0 + 1000, Outcome: spec.AttemptDead, ErrorCode: spec.ReapErrorCode,
		ErrorClass: spec.ClassExpired}})
	// The reaped lease's holder learns the run failed.
	allRefused(e, "writes after reap", ly.Ref(), spec.CodeAlreadyTerminal, spec.RunFailed)

	// x is still within its lease; w has an attempt left (it is claimed, not
	// reaped); the other tenant's job is not acme's to reap.
	mustEqual(t, "x still leased", e.getJob("acme", "x").State, spec.JobLeased)
	mustEqual(t, "w still leased", e.getJob("acme", "w").State, spec.JobLeased)
	mustEqual(t, "other tenant's job still leased", e.getJob("other", "o").State, spec.JobLeased)
	lw := e.claimOne("acme", "w", "w2", 1000)
	mustEqual(t, "w reclaimed", lw.Generation, int64(2))

	// At t0+3000 x's lease has expired, and so has w's second (last) lease,
	// at t0+2000: w comes first.
	e.set(t0 + 3000)
	mustEqual(t, "reap w and x", reap("acme", 10), []string{"w", "x"})
	mustEqual(t, "reap the other tenant", reap("other", 10), []string{"o"})
}

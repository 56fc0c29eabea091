package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

var errBoom = errors.New("boom")

func TestCompletesAndRenews(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1")
		started := make(chan *worker.Job, 1)
		proceed := make(chan struct{})
		e.start(e.config("w1", e.storeFor(nil), func(ctx context.Context, job *worker.Job) ([]byte, error) {
			started <- job
			<-proceed
			return []byte(`{"ok": true}`), nil
		}))
		job := recv(e, "the handler to start", started)
		if job.RunID != "r1" || job.Generation != 1 || job.Attempt != 1 || job.MaxAttempts != 3 || string(job.Payload) != `{"id":"r1"}` {
			t.Fatalf("handler got job %+v, want run r1, generation 1, attempt 1 of 3, payload {\"id\":\"r1\"}", job)
		}
		// Renewal at a third of the lease, and again a third later.
		e.due(t0+10_000, "the first renewal")
		e.advance(10_000)
		e.due(t0+20_000, "the second renewal, armed once the first returned")
		if got, want := e.job("r1").LeaseExpiresAt, t0+10_000+30_000; got != want {
			t.Fatalf("lease expiry after the renewal at %d: %d, want %d", t0+10_000, got, want)
		}
		close(proceed)
		r := e.result()
		want := worker.Result{Tenant: "acme", RunID: "r1", Operation: "work", Generation: 1, Attempt: 1, Outcome: worker.OutcomeCompleted}
		if r != want {
			t.Fatalf("result %+v, want %+v", r, want)
		}
		if run := e.run("r1"); run.State != spec.RunCompleted || run.Result != `{"ok":true}` {
			t.Fatalf("run after the handler returned: %+v, want completed with result {\"ok\":true}", run)
		}
		e.wantOneTerminal("r1", spec.EventRunCompleted, 1)
	})
}

// constRandom draws v reduced into [0, n) and records the bounds asked for.
type constRandom struct {
	mu     sync.Mutex
	v      int64
	bounds []int64
}

func (r *constRandom) Int64N(n int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bounds = append(r.bounds, n)
	return r.v % n
}

func TestOutcomeClassification(t *testing.T) {
	type want struct {
		outcome worker.Outcome
		code    string // Result.ErrorCode, and the attempt's and run's code
		retryAt int64  // for retried
		run     spec.RunState
		job     spec.JobState
		class   spec.ErrorClass // the attempt's error class
	}
	retried := func(code string, at int64) want {
		return want{worker.OutcomeRetried, code, at, spec.RunRunning, spec.JobQueued, spec.ClassRetryable}
	}
	failed := func(code string, class spec.ErrorClass) want {
		return want{worker.OutcomeFailed, code, 0, spec.RunFailed, spec.JobDead, class}
	}
	cases := []struct {
		name        string
		maxAttempts int
		timeoutMs   int64
		policy      worker.RetryPolicy
		random      spec.Random
		handler     func() ([]byte, error)
		want        want
	}{
		{name: "retryable: the store's backoff", handler: func() ([]byte, error) { return nil, worker.Retryable(errBoom, 0) },
			want: retried(worker.CodeRetryable, t0+1000)},
		{name: "retryable with a code and a Retry-After", want: retried("rate_limited", t0+5000),
			handler: func() ([]byte, error) { return nil, worker.Retryable(errBoom, 5*time.Second).WithCode("rate_limited") }},
		{name: "a Retry-After over the store's cap is capped", want: retried(worker.CodeRetryable, t0+300_000),
			handler: func() ([]byte, error) { return nil, worker.Retryable(errBoom, time.Hour/2) }},
		{name: "unclassified error is retried", handler: func() ([]byte, error) { return nil, errBoom },
			want: retried(worker.CodeHandlerError, t0+1000)},
		{name: "panic is retried", handler: func() ([]byte, error) { panic("handler bug") },
			want: retried(worker.CodeHandlerPanic, t0+1000)},
		{name: "decorrelated jitter", policy: worker.RetryPolicy{Decorrelated: true}, random: &constRandom{v: 700},
			handler: func() ([]byte, error) { return nil, worker.Retryable(errBoom, 0) },
			// base 1000 + 700 drawn from [0, 3*1000-1000]
			want: retried(worker.CodeRetryable, t0+1700)},
		{name: "a result that is not JSON fails the run", handler: func() ([]byte, error) { return []byte(`{"a":`), nil },
			want: failed(worker.CodeInvalidResult, spec.ClassTerminal)},
		{name: "ErrShutdown outside a shutdown is retried, not released", handler: func() ([]byte, error) { return nil, worker.ErrShutdown },
			want: retried(worker.CodeHandlerError, t0+1000)},
		{name: "terminal", handler: func() ([]byte, error) { return nil, worker.Terminal("invalid_input", errBoom) },
			want: failed("invalid_input", spec.ClassTerminal)},
		{name: "terminal with an unsafe code", handler: func() ([]byte, error) { return nil, worker.Terminal("Secret: 42", errBoom) },
			want: failed(worker.CodeTerminal, spec.ClassTerminal)},
		{name: "ambiguous outcome the ledger does not hold is never retried", handler: func() ([]byte, error) { return nil, worker.Ambiguous(errBoom) },
			want: failed(worker.CodeAmbiguous, spec.ClassTerminal)},
		{name: "retryable at the last attempt fails the run (the store's budget)", maxAttempts: 1,
			handler: func() ([]byte, error) { return nil, worker.Retryable(errBoom, 0) },
			want:    failed(worker.CodeRetryable, spec.ClassRetryable)},
		{name: "retryable past the retry deadline fails the run", policy: worker.RetryPolicy{Deadline: 500 * time.Millisecond},
			handler: func() ([]byte, error) { return nil, worker.Retryable(errBoom, 0) },
			want:    failed(worker.CodeRetryable, spec.ClassTerminal)},
		{name: "retryable whose next attempt would start after the run's deadline fails the run", timeoutMs: 900,
			handler: func() ([]byte, error) { return nil, worker.Retryable(errBoom, 0) },
			want:    failed(worker.CodeRetryable, spec.ClassTerminal)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, b backend) {
				e := newEnv(t, b)
				e.create("r1", func(r *spec.CreateRunRequest) { r.MaxAttempts, r.TimeoutMs = c.maxAttempts, c.timeoutMs })
				cfg := e.config("w1", e.storeFor(nil), func(context.Context, *worker.Job) ([]byte, error) { return c.handler() })
				cfg.Retry = c.policy
				if c.random != nil {
					cfg.Random = c.random
				}
				e.start(cfg)
				r := e.result()
				w := c.want
				if r.Outcome != w.outcome || r.ErrorCode != w.code || r.RetryAt != w.retryAt || r.Generation != 1 {
					t.Fatalf("result %+v (err %v), want outcome %s, code %q, retry at %d, generation 1", r, r.Err, w.outcome, w.code, w.retryAt)
				}
				if r.Err == nil {
					t.Errorf("result of a failed attempt carries no error")
				}
				run, job := e.run("r1"), e.job("r1")
				if run.State != w.run || job.State != w.job || job.LastErrorCode != w.code {
					t.Fatalf("after the attempt: run %s (code %q), job %s (code %q); want run %s, job %s, code %q",
						run.State, run.ErrorCode, job.State, job.LastErrorCode, w.run, w.job, w.code)
				}
				if w.run == spec.RunFailed && run.ErrorCode != w.code {
					t.Fatalf("failed run's error code %q, want %q", run.ErrorCode, w.code)
				}
				if w.job == spec.JobQueued && job.AvailableAt != w.retryAt {
					t.Fatalf("requeued job available at %d, want %d", job.AvailableAt, w.retryAt)
				}
				att, err := e.s.Attempts(e.ctx, "acme", "r1")
				if err != nil || len(att) != 1 || att[0].ErrorClass != w.class || att[0].ErrorCode != w.code {
					t.Fatalf("attempts %+v, %v; want one, class %q, code %q", att, err, w.class, w.code)
				}
			})
		})
	}
}

// TestDecorrelatedRetryUsesHistory: the second retry's decorrelated delay
// grows from the delay the store applied before it (read from the attempt
// history), and the store's own exponential delay stays a floor.
func TestDecorrelatedRetryUsesHistory(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1")
		rnd := &constRandom{v: 700}
		cfg := e.config("w1", e.storeFor(nil), func(context.Context, *worker.Job) ([]byte, error) {
			return nil, worker.Retryable(errBoom, 0)
		})
		cfg.Retry, cfg.Random, cfg.IdleJitter = worker.RetryPolicy{Decorrelated: true}, rnd, time.Millisecond
		e.start(cfg)
		first := e.result()
		if first.RetryAt != t0+1700 {
			t.Fatalf("first retry at %d, want %d (base 1000 + draw 700)", first.RetryAt, t0+1700)
		}
		// The first housekeeping round is due at t0+700 too (the constant
		// draw of [0, Every]): wait for both timers.
		e.dueN(t0+1000, 2, "the first housekeeping round and the idle poll after the retry")
		e.advance(1700)
		second := e.result()
		// prev = 1700: the draw is from [0, 3*1700-1000]; 1000+700 = 1700
		// is below the store's exponential 2000 for attempt 2, which wins.
		if second.Attempt != 2 || second.RetryAt != t0+1700+2000 {
			t.Fatalf("second attempt's result %+v, want attempt 2 retried at %d", second, t0+1700+2000)
		}
		rnd.mu.Lock()
		defer rnd.mu.Unlock()
		found := false
		for _, n := range rnd.bounds {
			found = found || n == 3*1700-1000+1
		}
		if !found {
			t.Fatalf("random bounds %v: want one draw from [0, %d] (three times the previous delay, minus the base)", rnd.bounds, 3*1700-1000)
		}
	})
}

// TestPublicationFailures: a publication the store could not run is sent
// again with backoff while the lease lasts; one whose answer was lost is
// resolved by reading the job back.
func TestPublicationFailures(t *testing.T) {
	// With no jitter the waits are half of min(2 s, 100 ms * 2^(n-1)): 50,
	// 100, 200, 400, 800, then 1000 ms. The lease is counted on until
	// t0 + 30 s - 6 s margin: the wait ending at t0 + 23.55 s is the last
	// that ends before it, after 27 waits.
	const everyTimeCalls, gaveUpAt = 28, t0 + 23_550
	cases := []struct {
		name  string
		point spec.HookPoint
		times int // how many Complete calls fail at point
		want  worker.Outcome
		calls int // Complete calls made
		at    int64
	}{
		{"unavailable once, then sent again", spec.BeforeCommit, 1, worker.OutcomeCompleted, 2, t0 + 50},
		{"unavailable every time: sent until the lease runs out, then abandoned to expiry", spec.BeforeCommit, 99, worker.OutcomeAbandoned, everyTimeCalls, gaveUpAt},
		{"answer lost after commit: read back, completed", spec.AfterCommit, 1, worker.OutcomeCompleted, 1, t0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, b backend) {
				e := newEnv(t, b)
				e.create("r1")
				var mu sync.Mutex
				failures := 0
				hook := func(_ context.Context, op spec.Op, p spec.HookPoint) error {
					mu.Lock()
					defer mu.Unlock()
					if op == spec.OpComplete && p == c.point && failures < c.times {
						failures++
						return errBoom
					}
					return nil
				}
				store, log := recorded(e.storeFor(hook))
				cfg := e.config("w1", store, func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
				cfg.SafetyMargin, cfg.StoreRetry = 6*time.Second, worker.StoreRetry{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
				e.start(cfg)
				r := e.driveUntilResult(2_000)
				if r.Outcome != c.want {
					t.Fatalf("result %+v (err %v), want %s", r, r.Err, c.want)
				}
				if got := log.count(spec.OpComplete); got != c.calls {
					t.Fatalf("Complete called %d times, want %d", got, c.calls)
				}
				if now := e.wc.Now(); now != c.at {
					t.Fatalf("the attempt ended at %d, want %d", now, c.at)
				}
				wantJob := spec.JobCompleted
				if c.want == worker.OutcomeAbandoned {
					wantJob = spec.JobLeased
				}
				if j := e.job("r1"); j.State != wantJob {
					t.Fatalf("job %s, want %s", j.State, wantJob)
				}
			})
		})
	}
}

// TestRunDeadlineStopsRenewal: a renewal refused with deadline_exceeded
// cancels the handler's context with ErrRunDeadline; the handler's error
// then fails the run with code deadline_exceeded.
func TestRunDeadlineStopsRenewal(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1", func(r *spec.CreateRunRequest) { r.TimeoutMs = 35_000 })
		causes := make(chan error, 1)
		store, log := recorded(e.storeFor(nil))
		e.start(e.config("w1", store, func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		}))
		e.due(t0+10_000, "the first renewal")
		e.advance(10_000) // renewing to t0+40_000 would pass the deadline t0+35_000
		if cause := recv(e, "the handler's context to end", causes); !errors.Is(cause, worker.ErrRunDeadline) {
			t.Fatalf("handler's context cause %v, want ErrRunDeadline", cause)
		}
		r := e.result()
		if r.Outcome != worker.OutcomeFailed || r.ErrorCode != worker.CodeDeadlineExceeded {
			t.Fatalf("result %+v, want failed with %s", r, worker.CodeDeadlineExceeded)
		}
		if n := log.count(spec.OpRenew); n != 1 {
			t.Fatalf("Renew called %d times, want 1 (no renewal after deadline_exceeded)", n)
		}
		e.wantOneTerminal("r1", spec.EventRunFailed, 1)
	})
}

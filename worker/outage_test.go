package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// outageStore answers the writes in ops with unavailable (nothing written)
// while its clock reads before until: a store outage, measured on the
// test's manual clock. It counts the calls it refused or passed on.
type outageStore struct {
	spec.Store
	clk   *clock.Manual
	until int64
	ops   map[spec.Op]bool
	mu    sync.Mutex
	calls map[spec.Op]int
}

func (o *outageStore) down(op spec.Op) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.calls == nil {
		o.calls = map[spec.Op]int{}
	}
	o.calls[op]++
	if o.ops[op] && o.clk.Now() < o.until {
		return spec.Errorf(spec.CodeUnavailable, "injected outage until %d", o.until)
	}
	return nil
}

func (o *outageStore) count(op spec.Op) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[op]
}

func (o *outageStore) Claim(ctx context.Context, q spec.ClaimRequest) ([]spec.Lease, error) {
	if err := o.down(spec.OpClaim); err != nil {
		return nil, err
	}
	return o.Store.Claim(ctx, q)
}

func (o *outageStore) Complete(ctx context.Context, q spec.CompleteRequest) (spec.Run, error) {
	if err := o.down(spec.OpComplete); err != nil {
		return spec.Run{}, err
	}
	return o.Store.Complete(ctx, q)
}

// outageBatchStore is an outageStore that keeps its store's batched
// completion, refused too during the outage.
type outageBatchStore struct {
	*outageStore
	batches chan<- struct{} // receives once per CompleteBatch call
}

func (o outageBatchStore) CompleteBatch(ctx context.Context, q []spec.CompleteRequest) ([]spec.BatchOutcome, error) {
	o.batches <- struct{}{}
	if err := o.down(spec.OpCompleteBatch); err != nil {
		return nil, err
	}
	return o.Store.(spec.BatchCompleter).CompleteBatch(ctx, q)
}

func (o *outageStore) Retry(ctx context.Context, q spec.RetryRequest) (spec.Job, error) {
	if err := o.down(spec.OpRetry); err != nil {
		return spec.Job{}, err
	}
	return o.Store.Retry(ctx, q)
}

func (o *outageStore) Fail(ctx context.Context, q spec.FailRequest) (spec.Run, error) {
	if err := o.down(spec.OpFail); err != nil {
		return spec.Run{}, err
	}
	return o.Store.Fail(ctx, q)
}

func (o *outageStore) RecordEffect(ctx context.Context, q spec.RecordEffectRequest) (spec.Effect, error) {
	if err := o.down(spec.OpRecordEffect); err != nil {
		return spec.Effect{}, err
	}
	return o.Store.RecordEffect(ctx, q)
}

// TestPublicationRidesOutOutage: a publication or effect-ledger write
// refused as unavailable for longer than a few immediate tries is sent
// again with backoff until the store is back, within the lease, instead of
// being abandoned to expiry.
func TestPublicationRidesOutOutage(t *testing.T) {
	const outage = 5_000 // ms of store time; the lease is 30 s
	cases := []struct {
		name    string
		op      spec.Op
		handler func(p *memProvider) worker.HandlerFunc
		want    worker.Outcome
		run     spec.RunState
	}{
		{"complete", spec.OpComplete, func(*memProvider) worker.HandlerFunc {
			return func(context.Context, *worker.Job) ([]byte, error) { return []byte(`{"ok":true}`), nil }
		}, worker.OutcomeCompleted, spec.RunCompleted},
		{"retry", spec.OpRetry, func(*memProvider) worker.HandlerFunc {
			return func(context.Context, *worker.Job) ([]byte, error) { return nil, worker.Retryable(errBoom, 0) }
		}, worker.OutcomeRetried, spec.RunRunning},
		{"fail", spec.OpFail, func(*memProvider) worker.HandlerFunc {
			return func(context.Context, *worker.Job) ([]byte, error) {
				return nil, worker.Terminal("invalid_input", errBoom)
			}
		}, worker.OutcomeFailed, spec.RunFailed},
		{"record effect", spec.OpRecordEffect, func(p *memProvider) worker.HandlerFunc {
			return func(ctx context.Context, job *worker.Job) ([]byte, error) {
				ref, err := job.Effect(ctx, p.effect("pay-"+job.RunID))
				if err != nil {
					return nil, err
				}
				return json.Marshal(map[string]string{"ref": ref})
			}
		}, worker.OutcomeCompleted, spec.RunCompleted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, b backend) {
				e := newEnv(t, b)
				e.create("r1")
				p := &memProvider{}
				store := &outageStore{Store: e.storeFor(nil), clk: e.sc, until: t0 + outage, ops: map[spec.Op]bool{c.op: true}}
				e.start(e.config("w1", store, c.handler(p)))
				r := e.driveUntilResult(2_000)
				if r.Outcome != c.want || r.Generation != 1 {
					t.Fatalf("result %+v (err %v) after a %d ms outage of %s, want %s at generation 1", r, r.Err, outage, c.op, c.want)
				}
				// With no jitter the waits are 50, 100, 200, 400, 800, then
				// 1000 ms: the tenth try, at t0 + 5.55 s, is the first after
				// the outage, well within the lease.
				if now := e.sc.Now(); now != t0+5_550 {
					t.Fatalf("published at %d, want %d (the first try after the outage ended at %d)", now, t0+5_550, t0+outage)
				}
				if n := store.count(c.op); n != 10 {
					t.Fatalf("%s sent %d times, want 10", c.op, n)
				}
				if run := e.run("r1"); run.State != c.run {
					t.Fatalf("run %s, want %s", run.State, c.run)
				}
				p.mu.Lock()
				defer p.mu.Unlock()
				if c.op == spec.OpRecordEffect && p.calls != 1 {
					t.Fatalf("provider called %d times, want once", p.calls)
				}
			})
		})
	}
}

// TestBatchedCompletionRidesOutOutage: a batch of completions the store
// cannot run is sent again with backoff until the store is back, within
// the lease of its members.
func TestBatchedCompletionRidesOutOutage(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1")
		e.create("r2")
		batches := make(chan struct{}, 100)
		store := &outageStore{Store: e.storeFor(nil), clk: e.sc, until: t0 + 5_000, ops: map[spec.Op]bool{spec.OpCompleteBatch: true}}
		started := make(chan struct{}, 2)
		both := make(chan struct{})
		cfg := e.config("w1", outageBatchStore{store, batches}, func(context.Context, *worker.Job) ([]byte, error) {
			started <- struct{}{}
			<-both
			return nil, nil
		})
		cfg.Concurrency, cfg.Batch = 2, worker.BatchPolicy{Size: 2, Linger: time.Second}
		e.start(cfg)
		recv(e, "the first handler", started)
		recv(e, "the second handler", started)
		close(both)
		// The batch of two is sent (the linger waits for the second member
		// without the clock moving), then the clock is driven.
		recv(e, "the first batch", batches)
		// One batch acknowledges both: the second result needs no more
		// time (moving the clock for its idle polls would only blur when
		// the batch went through).
		first := e.driveUntilResult(2_000)
		at := e.sc.Now()
		for _, r := range []worker.Result{first, e.result()} {
			if r.Outcome != worker.OutcomeCompleted || r.Generation != 1 {
				t.Fatalf("result %+v (err %v), want completed at generation 1", r, r.Err)
			}
		}
		if at != t0+5_550 {
			t.Fatalf("batch completed at %d, want %d (the first try after the outage)", at, t0+5_550)
		}
		if n := store.count(spec.OpCompleteBatch); n != 10 {
			t.Fatalf("CompleteBatch sent %d times, want 10", n)
		}
		e.wantOneTerminal("r1", spec.EventRunCompleted, 1)
		e.wantOneTerminal("r2", spec.EventRunCompleted, 1)
	})
}

// TestFailedClaimRetriedSoon: after a claim the store could not run (a
// database restart), the worker claims again after a short backoff, not
// after its idle interval (here an hour, as for a worker that relies on
// notifications).
func TestFailedClaimRetriedSoon(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1")
		store := &outageStore{Store: e.storeFor(nil), clk: e.sc, until: t0 + 1, ops: map[spec.Op]bool{spec.OpClaim: true}}
		claimsBefore := make(chan int, 1)
		cfg := e.config("w1", store, func(context.Context, *worker.Job) ([]byte, error) {
			claimsBefore <- store.count(spec.OpClaim)
			return nil, nil
		})
		cfg.Idle = time.Hour
		e.start(cfg)
		// Half of the 100 ms base, with no jitter.
		e.due(t0+50, "the claim's backoff")
		e.advance(50)
		if r := e.result(); r.Outcome != worker.OutcomeCompleted || r.Generation != 1 {
			t.Fatalf("result %+v (err %v), want completed at generation 1", r, r.Err)
		}
		if n := recv(e, "the handler", claimsBefore); n != 2 {
			t.Fatalf("%d claims before the handler ran, want 2 (the failed one and the one after the backoff)", n)
		}
	})
}

// driveUntilResult moves the workers' clock to each timer they arm that is
// due within the next `within` ms, until a result is reported, and returns
// it: for a test whose worker waits (backs off) an unknown number of times.
func (e *env) driveUntilResult(within int64) worker.Result {
	e.t.Helper()
	for {
		ctx, cancel := context.WithCancel(e.ctx)
		armed := make(chan error, 1)
		go func() { armed <- e.wc.BlockUntilDue(ctx, e.wc.Now()+within) }()
		select {
		case r := <-e.results:
			cancel()
			return r
		case err := <-armed:
			cancel()
			if err != nil {
				e.t.Fatalf("waiting for a result or a timer within %d ms: %v", within, err)
			}
			// A result comes before the timers armed after it (the next
			// claim's idle wait): return it rather than move past them.
			select {
			case r := <-e.results:
				return r
			default:
			}
			if next, ok := e.wc.NextDeadline(); ok && next > e.wc.Now() {
				e.wc.Set(next)
			}
		}
	}
}

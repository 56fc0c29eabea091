package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// TestRenewalFailureStopsPublishing: once a renewal is refused with
// lost_lease the handler's context is cancelled and the worker publishes
// nothing for that generation, even when the handler ignores the
// cancellation and returns a result.
func TestRenewalFailureStopsPublishing(t *testing.T) {
	cases := []struct {
		name    string
		reclaim bool // another worker claims the expired lease before the renewal
	}{
		{"lease reclaimed by another worker", true},
		{"lease expired, not reclaimed", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, b backend) {
				// The store's clock and the worker's timers move separately:
				// the lease expires (store time) before the renewal is due
				// (worker time), as for a worker paused past its lease.
				e := newEnv(t, b, separateClocks)
				e.create("r1")
				started := make(chan struct{}, 1)
				causes := make(chan error, 1)
				store, log := recorded(e.storeFor(nil))
				e.start(e.config("w1", store, func(ctx context.Context, _ *worker.Job) ([]byte, error) {
					started <- struct{}{}
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return []byte(`{"stale":true}`), nil // ignores the cancellation: must not be published
				}))
				recv(e, "the handler to start", started)
				e.sc.Advance(30_000)
				var successor spec.Lease
				if c.reclaim {
					ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 30_000, Limit: 1})
					if err != nil || len(ls) != 1 || ls[0].Generation != 2 {
						t.Fatalf("reclaim: %+v, %v; want r1 at generation 2", ls, err)
					}
					successor = ls[0]
				}
				e.due(t0+10_000, "the renewal")
				e.advance(10_000)
				if cause := recv(e, "the handler's context to end", causes); !errors.Is(cause, worker.ErrLeaseLost) || spec.CodeOf(cause) != spec.CodeLostLease {
					t.Fatalf("handler's context cause %v, want ErrLeaseLost carrying lost_lease", cause)
				}
				r := e.result()
				if r.Outcome != worker.OutcomeLost || r.Generation != 1 || !errors.Is(r.Err, worker.ErrLeaseLost) {
					t.Fatalf("result %+v, want lost at generation 1 with ErrLeaseLost", r)
				}
				if n := log.count(publications...); n != 0 {
					t.Fatalf("the fenced worker made %d publication calls, want none", n)
				}
				if n := len(e.events("r1")); n != 1 {
					t.Fatalf("r1 has %d events, want only run_queued", n)
				}
				if !c.reclaim {
					return
				}
				if j := e.job("r1"); j.State != spec.JobLeased || j.LeaseOwner != "w2" || j.Generation != 2 {
					t.Fatalf("job %+v, want still leased by w2 at generation 2", j)
				}
				if _, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: successor.Ref()}); err != nil {
					t.Fatalf("the successor's completion: %v", err)
				}
				e.wantOneTerminal("r1", spec.EventRunCompleted, 2)
			})
		})
	}
}

// TestCancelWhileRunning: a cancel from another client reaches the running
// handler (through the renewal, or on PostgreSQL through NOTIFY), and the
// cancel-vs-complete race ends as SPEC.md says, the loser told.
func TestCancelWhileRunning(t *testing.T) {
	cases := []struct {
		name         string
		postgresOnly bool
		notify       bool
		// handlerWaits: the handler blocks until its context ends (else it
		// blocks until the test lets it return a result).
		handlerWaits bool
		// renew: the test fires the renewal after the cancel.
		renew bool
		// cancelFirst: the cancel happens before the handler returns.
		cancelFirst bool
		want        worker.Outcome
		wantCalls   int // publication calls
	}{
		{name: "the renewal reports the cancel", handlerWaits: true, renew: true, cancelFirst: true,
			want: worker.OutcomeCancelled},
		{name: "NOTIFY reports the cancel", postgresOnly: true, notify: true, handlerWaits: true, cancelFirst: true,
			want: worker.OutcomeCancelled},
		{name: "cancel before the handler returns: the completion loses", cancelFirst: true,
			want: worker.OutcomeCancelled, wantCalls: 1},
		{name: "completion before the cancel: the cancel loses",
			want: worker.OutcomeCompleted, wantCalls: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stores := eachStore
			if c.postgresOnly {
				stores = postgresOnly
			}
			stores(t, func(t *testing.T, b backend) {
				e := newEnv(t, b)
				e.create("r1")
				started := make(chan struct{}, 1)
				proceed := make(chan struct{})
				causes := make(chan error, 1)
				store, log := recorded(e.storeFor(nil))
				cfg := e.config("w1", store, func(ctx context.Context, _ *worker.Job) ([]byte, error) {
					started <- struct{}{}
					if c.handlerWaits {
						<-ctx.Done()
						causes <- context.Cause(ctx)
						return nil, ctx.Err()
					}
					<-proceed
					return []byte(`{"done":true}`), nil
				})
				cfg.NoNotify = !c.notify
				e.start(cfg)
				recv(e, "the handler to start", started)

				cancel := func() error {
					_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1", Reason: "operator_stop"})
					return err
				}
				if c.cancelFirst {
					if err := cancel(); err != nil {
						t.Fatalf("cancel: %v", err)
					}
				}
				if c.renew {
					e.due(t0+10_000, "the renewal")
					e.advance(10_000)
				}
				if c.handlerWaits {
					if cause := recv(e, "the handler's context to end", causes); !errors.Is(cause, worker.ErrRunCancelled) {
						t.Fatalf("handler's context cause %v, want ErrRunCancelled", cause)
					}
				} else {
					close(proceed)
				}
				r := e.result()
				if r.Outcome != c.want {
					t.Fatalf("result %+v (err %v), want %s", r, r.Err, c.want)
				}
				if c.want == worker.OutcomeCancelled && (spec.CodeOf(r.Err) != spec.CodeCancelled || !errors.Is(r.Err, worker.ErrRunCancelled)) {
					t.Fatalf("the loser's result error %v, want ErrRunCancelled carrying code cancelled", r.Err)
				}
				if n := log.count(publications...); n != c.wantCalls {
					t.Fatalf("%d publication calls, want %d", n, c.wantCalls)
				}
				if c.notify && log.count(spec.OpRenew) != 0 {
					t.Fatalf("the cancel was learnt from a renewal, not from NOTIFY")
				}
				if !c.cancelFirst {
					err := cancel()
					if spec.CodeOf(err) != spec.CodeAlreadyTerminal || spec.StateOf(err) != spec.RunCompleted {
						t.Fatalf("cancel after the completion: %v, want already_terminal with state completed", err)
					}
					e.wantOneTerminal("r1", spec.EventRunCompleted, 1)
					return
				}
				te := e.terminalEvents("r1")
				if len(te) != 1 || te[0].Kind != spec.EventRunCancelled || te[0].Payload != spec.CancelledPayload("operator_stop", 1) {
					t.Fatalf("terminal events %+v, want one run_cancelled naming generation 1", te)
				}
			})
		})
	}
}

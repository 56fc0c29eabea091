package worker_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// TestMaintenanceReapsDeadWorkersRun: a run with one attempt whose worker
// died (a raw claim that is never renewed nor finished) can never be
// claimed again; another running worker's housekeeping reaps it once the
// lease expired, with no Reap by the test: failed, lease_expired.
func TestMaintenanceReapsDeadWorkersRun(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1", func(r *spec.CreateRunRequest) { r.MaxAttempts = 1 })
		if ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "dead-worker", LeaseMs: 30_000, Limit: 1}); err != nil || len(ls) != 1 {
			t.Fatalf("the dead worker's claim: %+v, %v", ls, err)
		}
		reaps := make(chan struct{}, 100)
		hook := func(_ context.Context, op spec.Op, p spec.HookPoint) error {
			if op == spec.OpReap && p == spec.AfterCommit {
				reaps <- struct{}{}
			}
			return nil
		}
		e.start(e.config("w1", e.storeFor(hook), func(context.Context, *worker.Job) ([]byte, error) {
			t.Error("the handler ran: a run with no attempts left was claimed")
			return nil, nil
		}))
		// The worker idles (nothing is claimable) and has armed its
		// housekeeping timer.
		if err := e.wc.BlockUntil(e.ctx, 2); err != nil {
			t.Fatalf("waiting for the idle wait and the housekeeping timer: %v", err)
		}
		e.advance(30_000) // the dead worker's lease expires; housekeeping is due
		recv(e, "a reap by the running worker", reaps)
		run, job := e.run("r1"), e.job("r1")
		if run.State != spec.RunFailed || run.ErrorCode != spec.ReapErrorCode || job.State != spec.JobDead {
			t.Fatalf("after housekeeping: run %s (%q), job %s; want failed (%s), dead", run.State, run.ErrorCode, job.State, spec.ReapErrorCode)
		}
		e.wantOneTerminal("r1", spec.EventRunFailed, 1)
	})
}

package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// roundsStore reports the end of each housekeeping round: the round's last
// PurgeIdempotency is the one that came back short of its limit. It never
// blocks (the rounds of a worker being stopped go unreported).
type roundsStore struct {
	spec.Store
	done chan<- struct{}
}

func (r roundsStore) PurgeIdempotency(ctx context.Context, q spec.PurgeRequest) (int, error) {
	n, err := r.Store.PurgeIdempotency(ctx, q)
	if err == nil && n < q.Limit {
		select {
		case r.done <- struct{}{}:
		default:
		}
	}
	return n, err
}

// TestMaintenance: runs with one attempt whose worker died (a raw claim
// never renewed nor finished) can never be claimed again, and expired
// idempotency records are never needed again; the running workers'
// housekeeping reaps the first (failed, lease_expired) and purges the
// second, with no Reap or purge by the test, each exactly once when several
// workers do it at the same moment in small batches.
func TestMaintenance(t *testing.T) {
	cases := []struct {
		name    string
		workers int
		runs    int
		batch   int // Maintenance.Batch; 0: the default
	}{
		{"one worker, one dead worker's run", 1, 1, 0},
		{"three workers at once, many batches", 3, 60, 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, b backend) {
				e := newEnv(t, b, withConfig(func(cfg *spec.Config) { cfg.IdempotencyRetentionMs = 10_000 }))
				for i := range c.runs {
					e.create(fmt.Sprintf("r%02d", i), func(r *spec.CreateRunRequest) { r.MaxAttempts = 1 })
				}
				if ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "dead-worker", LeaseMs: 30_000, Limit: c.runs}); err != nil || len(ls) != c.runs {
					t.Fatalf("the dead worker's claim: %d leases, %v; want %d", len(ls), err, c.runs)
				}
				rounds := make(chan struct{}, c.workers)
				var workers []*running
				for i := range c.workers {
					cfg := e.config(fmt.Sprintf("w%d", i), roundsStore{e.storeFor(nil), rounds}, func(context.Context, *worker.Job) ([]byte, error) {
						t.Error("a handler ran: a run with no attempts left was claimed")
						return nil, nil
					})
					cfg.Maintenance.Batch = c.batch
					workers = append(workers, e.start(cfg))
				}
				// Each worker's first round comes at once (the zero random
				// source draws 0 of [0, Every]), before anything expired.
				for range c.workers {
					recv(e, "a first housekeeping round", rounds)
				}
				// Each worker idles (nothing is claimable) and has armed its
				// next housekeeping timer (30 s, no jitter).
				if err := e.wc.BlockUntil(e.ctx, 2*c.workers); err != nil {
					t.Fatalf("waiting for %d idle waits and housekeeping timers: %v", c.workers, err)
				}
				if n := len(rounds); n != 0 {
					t.Fatalf("%d housekeeping rounds before they were due", n)
				}
				// The dead worker's leases and the records have expired;
				// every worker's housekeeping is due at the same moment.
				e.advance(30_000)
				for range c.workers {
					recv(e, "a housekeeping round", rounds)
				}
				// Stats once the workers have stopped: a round counts its
				// last purge after the store returned it.
				var reaped, purged uint64
				for _, w := range workers {
					w.shutdown()
					e.stopped(w)
					s := w.w.Stats()
					reaped, purged = reaped+s.Reaped, purged+s.Purged
				}
				if reaped != uint64(c.runs) || purged != uint64(c.runs) {
					t.Fatalf("the workers reaped %d runs and purged %d records, want %d of each", reaped, purged, c.runs)
				}
				for i := range c.runs {
					id := fmt.Sprintf("r%02d", i)
					run, job := e.run(id), e.job(id)
					if run.State != spec.RunFailed || run.ErrorCode != spec.ReapErrorCode || job.State != spec.JobDead {
						t.Fatalf("%s after housekeeping: run %s (%q), job %s; want failed (%s), dead", id, run.State, run.ErrorCode, job.State, spec.ReapErrorCode)
					}
					e.wantOneTerminal(id, spec.EventRunFailed, 1)
				}
				snap, err := e.s.Snapshot(e.ctx)
				if err != nil || len(snap.Idempotency) != 0 {
					t.Fatalf("idempotency records after housekeeping: %d, %v; want none", len(snap.Idempotency), err)
				}
			})
		})
	}
}

// TestHousekeepingAcrossRestarts: workers restarted more often than
// Maintenance.Every (each lives 10 s of the clock; Every is 30 s) still
// reap the runs whose last attempt's worker died, with no Reap by the test:
// a worker's first round comes within [0, Every] of its start, drawn from
// its injected random source. The mutant
// worker_first_housekeeping_after_interval (the first round a whole Every
// after the start, as before) is caught by this check
// (TestMutantFirstHousekeepingAfterInterval).
func TestHousekeepingAcrossRestarts(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		lives, open := housekeepingAcrossRestarts(t, b, 40)
		if len(open) > 0 {
			t.Fatalf("after %d workers of 10 s each, runs whose last attempt's worker died are still open: %v", lives, open)
		}
		t.Logf("every dead worker's run ended (failed, %s) in the life of worker %d of its restarts", spec.ReapErrorCode, lives)
	})
}

// housekeepingAcrossRestarts leaves five runs leased with no attempts left
// by a worker that died, then starts workers one after another, each living
// 10 s of the clock, until every run is terminal or maxLives lived; it
// returns the lives lived and the runs still open. Every step waits on the
// clock's timers: a life begins when the worker has armed its idle and
// housekeeping timers, and ends when, the clock moved, both are armed again
// (a round that fell due has finished).
func housekeepingAcrossRestarts(t *testing.T, b backend, maxLives int) (int, []string) {
	e := newEnv(t, b)
	const runs = 5
	for i := range runs {
		e.create(fmt.Sprintf("r%d", i), func(r *spec.CreateRunRequest) { r.MaxAttempts = 1 })
	}
	if ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "dead-worker", LeaseMs: 1_000, Limit: runs}); err != nil || len(ls) != runs {
		t.Fatalf("the dead worker's claim: %d leases, %v; want %d", len(ls), err, runs)
	}
	e.advance(2_000) // the dead worker's leases have expired
	var open []string
	for life := 1; life <= maxLives; life++ {
		cfg := e.config(fmt.Sprintf("w%d", life), e.storeFor(nil), func(context.Context, *worker.Job) ([]byte, error) {
			t.Error("a handler ran: a run with no attempts left was claimed")
			return nil, nil
		})
		cfg.Random = rand.New(rand.NewPCG(42, uint64(life)))
		cfg.Maintenance.Every = 30 * time.Second
		w := e.start(cfg)
		armed := func(when string) {
			if err := e.wc.BlockUntil(e.ctx, 2); err != nil {
				t.Fatalf("life %d: waiting for the worker's idle and housekeeping timers %s: %v", life, when, err)
			}
		}
		armed("after its start")
		e.advance(10_000)
		armed("after 10 s")
		w.shutdown()
		e.stopped(w)
		if n := e.wc.Pending(); n != 0 {
			t.Fatalf("life %d: the stopped worker left %d timers pending", life, n)
		}
		open = open[:0]
		for i := range runs {
			id := fmt.Sprintf("r%d", i)
			if run := e.run(id); !run.State.Terminal() {
				open = append(open, id+" "+string(run.State))
			} else if run.State != spec.RunFailed || run.ErrorCode != spec.ReapErrorCode {
				t.Fatalf("%s ended %s (%q); want failed (%s)", id, run.State, run.ErrorCode, spec.ReapErrorCode)
			}
		}
		if len(open) == 0 {
			return life, nil
		}
	}
	return maxLives, open
}

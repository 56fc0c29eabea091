package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/harness/faults"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// TestShutdownUnderLoad: a worker with every slot busy shuts down. Handlers
// that finish within the grace period publish as usual (a completion, or a
// cooperative ErrShutdown that requeues), the ones still running at its end
// are cancelled and their leases released; nothing is lost: a second worker
// then completes every run exactly once, and no generation ever goes back.
func TestShutdownUnderLoad(t *testing.T) {
	const runs = 30
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		for i := range runs {
			e.create(fmt.Sprintf("r%02d", i))
		}
		// By index: even runs complete at once; r01, r09, … finish when the
		// shutdown signal comes; r05, r13, … stop cooperatively with
		// ErrShutdown; r03, r07, … ignore the signal until their context
		// ends.
		blocked := make(chan string, runs)
		causes := make(chan error, runs)
		handler := func(ctx context.Context, job *worker.Job) ([]byte, error) {
			i, _ := strconv.Atoi(strings.TrimPrefix(job.RunID, "r"))
			switch {
			case i%2 == 0:
				return []byte(`{"phase":1}`), nil
			case i%8 == 1:
				blocked <- job.RunID
				<-job.Stopping()
				return []byte(`{"finished_in_grace":true}`), nil
			case i%8 == 5:
				blocked <- job.RunID
				<-job.Stopping()
				return nil, fmt.Errorf("checkpointed: %w", worker.ErrShutdown)
			default:
				blocked <- job.RunID
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return []byte(`{"too":"late"}`), nil
			}
		}
		cfg := e.config("w1", e.storeFor(nil), handler)
		cfg.Concurrency, cfg.ShutdownGrace = 4, 5*time.Second
		w1 := e.start(cfg)
		// Every slot ends up held by a blocking handler: r01, r03, r05, r07.
		got := map[string]bool{}
		for range 4 {
			got[recv(e, "a blocking handler", blocked)] = true
		}
		if want := map[string]bool{"r01": true, "r03": true, "r05": true, "r07": true}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("blocked handlers %v, want %v", got, want)
		}
		outcomes := map[string]worker.Outcome{}
		// collect reads results until every run in ids has one.
		collect := func(ids ...string) {
			t.Helper()
			for {
				missing := false
				for _, id := range ids {
					_, ok := outcomes[id]
					missing = missing || !ok
				}
				if !missing {
					return
				}
				r := e.result()
				if _, dup := outcomes[r.RunID]; dup {
					t.Fatalf("two results for %s", r.RunID)
				}
				outcomes[r.RunID] = r.Outcome
			}
		}
		collect("r00", "r02", "r04", "r06")
		w1.shutdown()
		// The cooperative handlers return within the grace period…
		collect("r01", "r05")
		// … the stubborn ones hold on until it ends.
		e.due(t0+5_000, "the end of the grace period")
		e.advance(5_000)
		for range 2 {
			if cause := recv(e, "a stubborn handler's context to end", causes); !errors.Is(cause, worker.ErrShutdown) {
				t.Fatalf("stubborn handler's context cause %v, want ErrShutdown", cause)
			}
		}
		e.stopped(w1)
		collect("r03", "r07")
		want := map[string]worker.Outcome{
			"r00": worker.OutcomeCompleted, "r02": worker.OutcomeCompleted, "r04": worker.OutcomeCompleted, "r06": worker.OutcomeCompleted,
			"r01": worker.OutcomeCompleted, "r05": worker.OutcomeReleased, "r03": worker.OutcomeReleased, "r07": worker.OutcomeReleased,
		}
		if fmt.Sprint(outcomes) != fmt.Sprint(want) {
			t.Fatalf("outcomes %v, want %v", outcomes, want)
		}
		if s := w1.w.Stats(); s.Claimed != 8 || s.Completed != 5 || s.Released != 3 || s.InFlight != 0 {
			t.Fatalf("stats %+v, want 8 claimed, 5 completed, 3 released, none in flight", s)
		}
		// Nothing is leased any more: the released jobs are queued at once,
		// their attempt refunded, their generation kept.
		// (r05 gave its lease back before the grace period ended, r03 and
		// r07 when it ended.)
		for id, at := range map[string]int64{"r05": t0, "r03": t0 + 5_000, "r07": t0 + 5_000} {
			j := e.job(id)
			if j.State != spec.JobQueued || j.Generation != 1 || j.Attempts != 0 || j.AvailableAt != at {
				t.Fatalf("released job %s: %+v, want queued at %d, generation 1, attempts 0", id, j, at)
			}
		}
		for i := 8; i < runs; i++ {
			if j := e.job(fmt.Sprintf("r%02d", i)); j.State != spec.JobQueued || j.Generation != 0 {
				t.Fatalf("unclaimed job %+v: want queued at generation 0", j)
			}
		}

		// A second worker drains the rest: every run completes exactly once.
		cfg2 := e.config("w2", e.storeFor(nil), func(context.Context, *worker.Job) ([]byte, error) { return []byte(`{"phase":2}`), nil })
		cfg2.Concurrency = 4
		w2 := e.start(cfg2)
		for range runs - 5 {
			if r := e.result(); r.Outcome != worker.OutcomeCompleted {
				t.Fatalf("second worker: result %+v, want completed", r)
			}
		}
		w2.shutdown()
		e.stopped(w2)
		for i := range runs {
			id := fmt.Sprintf("r%02d", i)
			gen := int64(1)
			if i < 8 && want[id] == worker.OutcomeReleased {
				gen = 2 // claimed again after the release: the generation rose, never fell
			}
			e.wantOneTerminal(id, spec.EventRunCompleted, gen)
		}
	})
}

// TestBatchedCompletionWithStaleMember: two completions flushed in one
// batch, one of them stale (its lease expired and another worker reclaimed
// it): the stale one is rejected alone and reported lost, the other
// completes, and both slots stay held until the batch is acknowledged.
func TestBatchedCompletionWithStaleMember(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, separateClocks)
		e.create("r1")
		barriers := faults.NewBarriers()
		store, log := recorded(e.storeFor(barriers.Hook("w1")))
		started := make(chan string, 2)
		finish := map[string]chan struct{}{"r1": make(chan struct{}), "r2": make(chan struct{})}
		cfg := e.config("w1", store, func(_ context.Context, job *worker.Job) ([]byte, error) {
			started <- job.RunID
			<-finish[job.RunID]
			return []byte(`{"by":"w1"}`), nil
		})
		cfg.Concurrency = 2
		cfg.Batch = worker.BatchPolicy{Size: 2, Linger: time.Second}
		w1 := e.start(cfg)

		// r1 is claimed at store time t0 (lease to t0+30s); the claim found
		// less than it had room for, so the worker idles. r2 is created at
		// t0+15s and claimed when the idle wait ends (lease to t0+45s).
		if id := recv(e, "r1's handler", started); id != "r1" {
			t.Fatalf("first handler for %s, want r1", id)
		}
		e.sc.Set(t0 + 15_000)
		e.create("r2")
		e.due(t0+1_000, "the idle wait")
		e.advance(1_000)
		if id := recv(e, "r2's handler", started); id != "r2" {
			t.Fatalf("second handler for %s, want r2", id)
		}
		// r1's lease expires and another worker takes it (generation 2).
		e.sc.Set(t0 + 30_000)
		ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 30_000, Limit: 2})
		if err != nil || len(ls) != 1 || ls[0].RunID != "r1" || ls[0].Generation != 2 {
			t.Fatalf("reclaim: %+v, %v; want only r1, at generation 2", ls, err)
		}

		held := barriers.Arm("w1", spec.OpCompleteBatch, spec.BeforeCommit)
		close(finish["r1"])
		close(finish["r2"])
		if err := held.Wait(e.ctx); err != nil {
			t.Fatal(err)
		}
		// The batch is in its transaction: both completions are waiting
		// for it, so both slots are still held and nothing is reported.
		if s := w1.w.Stats(); s.InFlight != 2 || s.Batches != 1 || s.Batched != 2 {
			t.Fatalf("stats while the batch is held: %+v, want 2 in flight, 1 batch of 2", s)
		}
		if n := len(e.results); n != 0 {
			t.Fatalf("%d results reported before the batch was acknowledged, want 0", n)
		}
		held.Release(nil)
		results := map[string]worker.Result{}
		for range 2 {
			r := e.result()
			results[r.RunID] = r
		}
		if r := results["r1"]; r.Outcome != worker.OutcomeLost || spec.CodeOf(r.Err) != spec.CodeLostLease || !errors.Is(r.Err, worker.ErrLeaseLost) {
			t.Fatalf("stale member r1: %+v, want lost with lost_lease", r)
		}
		if r := results["r2"]; r.Outcome != worker.OutcomeCompleted {
			t.Fatalf("current member r2: %+v (err %v), want completed", r, r.Err)
		}
		if n, single := log.count(spec.OpCompleteBatch), log.count(spec.OpComplete); n != 1 || single != 0 {
			t.Fatalf("CompleteBatch called %d times and Complete %d, want one batch and no single completion", n, single)
		}
		e.wantOneTerminal("r2", spec.EventRunCompleted, 1)
		if j := e.job("r1"); j.State != spec.JobLeased || j.LeaseOwner != "w2" || j.Generation != 2 {
			t.Fatalf("r1 after the stale member was rejected: %+v, want still leased by w2 at generation 2", j)
		}
		if _, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: ls[0].Ref()}); err != nil {
			t.Fatalf("generation 2 completes r1: %v", err)
		}
		e.wantOneTerminal("r1", spec.EventRunCompleted, 2)
	})
}

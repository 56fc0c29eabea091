package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// claimLimits is a store that records the Limit of every Claim it passes on.
type claimLimits struct {
	spec.Store
	mu     sync.Mutex
	limits []int
}

func (c *claimLimits) Claim(ctx context.Context, req spec.ClaimRequest) ([]spec.Lease, error) {
	c.mu.Lock()
	c.limits = append(c.limits, req.Limit)
	c.mu.Unlock()
	return c.Store.Claim(ctx, req)
}

func (c *claimLimits) get() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.limits)
}

// TestClaimGathersFreedSlots: after a round that got every job it asked
// for, the next round takes the slots that free within ClaimGather and
// claims for all of them at once; when the gather's timer fires first, it
// claims for the slots it holds; after a round that got fewer jobs than it
// asked for, it claims at once for the slots free.
func TestClaimGathersFreedSlots(t *testing.T) {
	const gatherMs = 5
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		ids := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"}
		release := map[string]chan struct{}{}
		for _, id := range ids {
			release[id] = make(chan struct{})
		}
		for _, id := range ids[:7] {
			e.create(id)
		}
		started := make(chan string, len(ids))
		store := &claimLimits{Store: e.storeFor(nil)}
		cfg := e.config("w1", store, func(ctx context.Context, job *worker.Job) ([]byte, error) {
			started <- job.RunID
			select {
			case <-release[job.RunID]:
				return []byte(`{}`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		cfg.Concurrency, cfg.ClaimBatch, cfg.ClaimGather = 3, 3, gatherMs*time.Millisecond
		e.start(cfg)
		// wantStarts receives the next handler starts, in any order.
		wantStarts := func(want ...string) {
			t.Helper()
			var got []string
			for range want {
				got = append(got, recv(e, "a handler start", started))
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("handlers started %v, want %v", got, want)
			}
		}
		wantLimits := func(when string, want ...int) {
			t.Helper()
			if got := store.get(); !slices.Equal(got, want) {
				t.Fatalf("%s: claim limits %v, want %v", when, got, want)
			}
		}
		finish := func(id string) {
			t.Helper()
			close(release[id])
			if r := e.result(); r.RunID != id || r.Outcome != worker.OutcomeCompleted {
				t.Fatalf("result %+v, want %s completed", r, id)
			}
		}

		wantStarts("r0", "r1", "r2")
		wantLimits("the first round", 3)

		// A full round: the next one waits for more slots than the first.
		finish("r0")
		e.due(t0+gatherMs, "the gather after a full round")
		wantLimits("one slot free, gathering", 3)
		finish("r1")
		finish("r2")
		wantStarts("r3", "r4", "r5")
		wantLimits("every slot free within the gather", 3, 3)

		// The gather's timer fires with one slot free: it claims for one.
		finish("r3")
		e.due(t0+gatherMs, "the gather after the second full round")
		e.advance(gatherMs)
		wantStarts("r6")
		wantLimits("the gather's timer fired", 3, 3, 1)

		// That round was full too; the next finds the queue empty…
		finish("r4")
		e.due(t0+2*gatherMs, "the gather after the third full round")
		e.advance(gatherMs)
		e.due(t0+2*gatherMs+worker.DefaultIdle.Milliseconds(), "the idle wait after an empty round")
		wantLimits("the empty round", 3, 3, 1, 1)
		// … so the round after its idle wait claims at once for its slot.
		e.create("r7")
		e.advance(worker.DefaultIdle.Milliseconds())
		wantStarts("r7")
		wantLimits("the round after an empty one", 3, 3, 1, 1, 1)
		for _, id := range []string{"r5", "r6", "r7"} {
			finish(id)
		}
		if j := e.job("r7"); j.State != spec.JobCompleted {
			t.Fatalf("r7's job is %s, want completed", j.State)
		}
	})
}

// TestClaimGatherStopsAtConcurrency: with ClaimBatch above Concurrency, a
// round that holds every slot claims at once instead of waiting out its
// gather for slots that cannot exist.
func TestClaimGatherStopsAtConcurrency(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		for _, id := range []string{"r0", "r1", "r2", "r3"} {
			e.create(id)
		}
		started := make(chan string, 4)
		proceed := make(chan struct{})
		store := &claimLimits{Store: e.storeFor(nil)}
		cfg := e.config("w1", store, func(ctx context.Context, job *worker.Job) ([]byte, error) {
			started <- job.RunID
			if job.RunID == "r0" || job.RunID == "r1" {
				<-proceed
			}
			return []byte(`{}`), nil
		})
		cfg.Concurrency, cfg.ClaimBatch, cfg.ClaimGather = 2, 5, 5*time.Millisecond
		e.start(cfg)
		got := []string{recv(e, "a handler start", started), recv(e, "a handler start", started)}
		slices.Sort(got)
		if !slices.Equal(got, []string{"r0", "r1"}) {
			t.Fatalf("first handlers %v, want [r0 r1]", got)
		}
		close(proceed)
		// The clock never moves: the round after the full one must claim
		// as soon as it holds both slots.
		got = []string{recv(e, "a handler start after both slots freed", started), recv(e, "a handler start after both slots freed", started)}
		slices.Sort(got)
		if !slices.Equal(got, []string{"r2", "r3"}) {
			t.Fatalf("second handlers %v, want [r2 r3]", got)
		}
		if limits := store.get(); len(limits) < 2 || !slices.Equal(limits[:2], []int{2, 2}) {
			t.Fatalf("claim limits %v, want [2 2] first", limits)
		}
	})
}

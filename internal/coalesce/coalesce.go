// Package coalesce merges concurrent calls into batches: group commit. A
// call that finds every batch slot busy waits in a queue, and the next free
// slot takes everything waiting (up to a limit) as one batch, so under
// concurrency many calls share one transaction while a lone call runs at
// once, in a batch of its own. Nothing waits for a batch to fill.
package coalesce

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Func runs one batch: one result per request, in order, or one error for
// the whole batch (its results are then ignored).
type Func[Req, Res any] func(ctx context.Context, reqs []Req) ([]Res, error)

// Group merges concurrent Do calls into batches run by one Func. It is safe
// for concurrent use.
type Group[Req, Res any] struct {
	run      Func[Req, Res]
	maxBatch int
	slots    int
	// abandoned is the error of a call whose context ended after its batch
	// started: the batch may still take effect.
	abandoned func(ctxErr error) error

	mu       sync.Mutex
	inFlight int
	queue    []*call[Req, Res]

	calls, batches atomic.Int64
}

type call[Req, Res any] struct {
	ctx   context.Context
	req   Req
	res   Res
	err   error
	taken bool // in a batch (under Group.mu)
	done  chan struct{}
}

// New returns a Group that runs at most slots batches at a time, each of at
// most maxBatch requests (both at least 1). abandoned builds the error of a
// call whose context ended while its batch ran (the batch may still have
// taken effect: for a write, an unknown outcome).
func New[Req, Res any](run Func[Req, Res], maxBatch, slots int, abandoned func(ctxErr error) error) *Group[Req, Res] {
	if maxBatch < 1 || slots < 1 {
		panic(fmt.Sprintf("coalesce: maxBatch %d and slots %d must be at least 1", maxBatch, slots))
	}
	return &Group[Req, Res]{run: run, maxBatch: maxBatch, slots: slots, abandoned: abandoned}
}

// Do runs req in the next batch and returns its result. When ctx ends
// before the call joined a batch, the call is dropped and Do returns
// ctx.Err(); when it ends while the batch runs, Do returns at once with
// the abandoned error. A batch's context keeps the first member's values
// and ends when every member's context has ended.
func (g *Group[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	var zero Res
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &call[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	g.calls.Add(1) // counted once queued, for tests that wait for it
	start := g.inFlight < g.slots
	if start {
		g.inFlight++
	}
	g.mu.Unlock()
	if start {
		go g.serve()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	taken := c.taken
	if !taken {
		g.remove(c)
	}
	g.mu.Unlock()
	if !taken {
		return zero, ctx.Err()
	}
	select {
	case <-c.done: // finished meanwhile: its answer is known
		return c.res, c.err
	default:
		return zero, g.abandoned(ctx.Err())
	}
}

// Stats says how many calls Do queued and how many batches ran them.
func (g *Group[Req, Res]) Stats() (calls, batches int64) {
	return g.calls.Load(), g.batches.Load()
}

// remove drops c from the queue (under g.mu).
func (g *Group[Req, Res]) remove(c *call[Req, Res]) {
	for i, q := range g.queue {
		if q == c {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return
		}
	}
}

// serve holds one slot: it runs batches of what is waiting until nothing
// is, then frees the slot.
func (g *Group[Req, Res]) serve() {
	for {
		g.mu.Lock()
		var batch []*call[Req, Res]
		for len(g.queue) > 0 && len(batch) < g.maxBatch {
			c := g.queue[0]
			g.queue = g.queue[1:]
			if c.ctx.Err() != nil {
				continue // its Do returns ctx.Err()
			}
			c.taken = true
			batch = append(batch, c)
		}
		if len(batch) == 0 {
			g.inFlight--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.runBatch(batch)
	}
}

// runBatch runs one batch under a context that ends when every member's
// has, and hands each member its result.
func (g *Group[Req, Res]) runBatch(batch []*call[Req, Res]) {
	g.batches.Add(1)
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	live := int64(len(batch))
	stops := make([]func() bool, len(batch))
	reqs := make([]Req, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
		stops[i] = context.AfterFunc(c.ctx, func() {
			if atomic.AddInt64(&live, -1) == 0 {
				cancel()
			}
		})
	}
	res, err := g.run(ctx, reqs)
	for _, stop := range stops {
		stop()
	}
	if err == nil && len(res) != len(batch) {
		err = fmt.Errorf("coalesce: a batch of %d requests returned %d results", len(batch), len(res))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		close(c.done)
	}
}

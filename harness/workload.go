package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness/faults"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// Workload describes one concurrent run against a real store. Everything
// random about it — each client's choice of operation and arguments, the
// clock moves, the faults — derives from Seed; only the interleaving is the
// machine's, which is what the linearizability check is for.
type Workload struct {
	Factory storetest.Factory
	Config  spec.Config
	Seed    uint64
	Tenants []string
	Workers int // clients that claim and finish work
	APIs    int // clients that create, cancel, replay, reap and move the clock
	// Ops is the number of operations the clients run in all before the drain.
	Ops int
	// Purge adds idempotency purges; the history can then not be split by
	// tenant.
	Purge bool
	// MaxUnknown bounds the operations made to end with an unknown outcome
	// (an AfterCommit fault; never on a claim or reap). Each is pending to
	// the end of the history, the most expensive thing for the checker.
	MaxUnknown int
	// Aborts is the chance, per writing operation, of a BeforeCommit fault
	// (the transaction rolls back; the caller gets unavailable).
	Aborts float64
}

// client is one connection's worth of workload: a Caller (its own store,
// clock recorder and scripted random source), its fault hook and its PRNG.
type client struct {
	*history.Caller
	w        *Workload
	r        *rand.Rand
	shared   *clock.Manual
	provider *history.Provider
	unknowns *atomic.Int64
	fault    atomic.Value // pending fault for the next operation: error or nil
	held     []spec.Lease // leases this worker believes it holds
	old      []spec.Lease // leases it gave up or lost: stale writes come from here
	runs     *runBook     // runs created or replayed
	active   *runBook     // runs some worker claimed: cancels aim there half the time
	created  int
	quiet    bool // inject no faults (the drain)
	// armed: a lost reply waits for the next operation that commits.
	// Reads and refused writes never reach the commit, and a fault spent
	// on them was lost, which left some runs with no unknown outcome at
	// all (the vacuity guard then failed).
	armed bool
}

// runBook is the runs the API clients know of, shared by them.
type runBook struct {
	mu   sync.Mutex
	refs []runRef
}

func (b *runBook) add(tenant, id string) {
	b.mu.Lock()
	b.refs = append(b.refs, runRef{tenant, id})
	b.mu.Unlock()
}

// pick draws a known run, usually a recent one (more likely still active,
// so that cancels race completions).
func (b *runBook) pick(r *rand.Rand) (runRef, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.refs)
	if n == 0 {
		return runRef{}, false
	}
	if recent := min(n, 6); r.IntN(10) < 7 {
		return b.refs[n-recent+r.IntN(recent)], true
	}
	return b.refs[r.IntN(n)], true
}

// hook injects the client's pending fault at the point it names.
func (c *client) hook(ctx context.Context, op spec.Op, point spec.HookPoint) error {
	f, _ := c.fault.Load().(faults.At)
	if f.Point != point {
		return nil
	}
	c.fault.Store(faults.At{})
	if f.Err == faults.ErrInjectedLostReply {
		c.armed = false
		if c.unknowns.Add(1) > int64(c.w.MaxUnknown) {
			return nil // the history's budget of unknown outcomes is spent
		}
	}
	return f.Err
}

// do injects the client's faults, if any, and runs one operation through
// its Caller. It returns the result as the client saw it.
func (c *client) do(ctx context.Context, op model.Op) (model.Result, error) {
	nondeterministic := faults.Nondeterministic(op.Req)
	switch {
	case c.quiet || !spec.OperationOf(op.Req).Writes:
	case !nondeterministic && c.r.Float64() < c.w.Aborts:
		c.fault.Store(faults.At{Point: spec.BeforeCommit, Err: faults.ErrInjectedAbort})
	case !nondeterministic && c.unknowns.Load() < int64(c.w.MaxUnknown) && (c.armed || c.r.IntN(150) == 0):
		// Not claims and reaps: an unknown claim stays pending to the end
		// with one possible state per eligible subset. Model.Unknown for
		// claims is unit-tested instead. (Histories checked whole get no
		// unknown outcomes at all: see runLinearizable.) The budget is spent
		// in hook, only when the operation did commit; until then the fault
		// stays armed.
		c.armed = true
		c.fault.Store(faults.At{Point: spec.AfterCommit, Err: faults.ErrInjectedLostReply})
	}
	res, err := c.Do(ctx, op)
	c.fault.Store(faults.At{})
	return res, err
}

// Record runs the workload against a fresh store and returns its history:
// the concurrent phase, then a drain (one client, no faults) until every run
// is terminal, then one snapshot operation per tenant.
func (w *Workload) Record(ctx context.Context, t testing.TB) (*history.History, error) {
	shared := clock.NewManual(1_000)
	h := w.Factory(t, storetest.Options{Config: w.Config, Clock: shared, Random: &history.ScriptedRandom{}})
	provider := history.NewProvider()
	rec := history.NewRecorder(provider)
	var unknowns atomic.Int64
	runs, active := &runBook{}, &runBook{}
	newClient := func(name string, stream uint64) *client {
		c := &client{w: w, shared: shared, r: rand.New(rand.NewPCG(w.Seed, stream)), provider: provider,
			unknowns: &unknowns, runs: runs, active: active}
		clk, rnd := &clock.Recorder{Source: shared}, &history.ScriptedRandom{}
		store := h.OpenWith(t, storetest.Options{Config: w.Config, Clock: clk, Random: rnd, Hook: c.hook})
		c.Caller = history.NewCaller(rec, name, store, clk, rnd)
		return c
	}
	var clients []*client
	for i := 0; i < w.APIs; i++ {
		clients = append(clients, newClient(fmt.Sprintf("api-%d", i+1), uint64(100+i)))
	}
	for i := 0; i < w.Workers; i++ {
		clients = append(clients, newClient(fmt.Sprintf("worker-%d", i+1), uint64(200+i)))
	}
	// Each client runs its share of the operations: a shared counter would
	// let whichever client the scheduler favours (SQLite's busy handler
	// sleeps) crowd the others out.
	share := w.Ops / len(clients)
	errs := make(chan error, len(clients))
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func(c *client) {
			defer wg.Done()
			for i := 0; i < share && ctx.Err() == nil; i++ {
				var err error
				switch {
				case c.r.IntN(100) < 3:
					// Every client moves the clock now and then, so that
					// time passes even while one client has the database
					// to itself (SQLite serializes writers).
					err = c.advance()
				case c.Name[:3] == "api":
					err = c.apiStep(ctx)
				default:
					err = c.workerStep(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	drain := newClient("drain", 999)
	drain.quiet = true
	if err := drain.drain(ctx); err != nil {
		return nil, err
	}
	// The final scan: one snapshot of all the rows, checked per tenant
	// when the history is split by tenant.
	snap, err := readSnapshot(ctx, drain.Store)
	if err != nil {
		return nil, fmt.Errorf("final snapshot: %w", err)
	}
	call, ret := rec.Tick(), rec.Tick()
	scopes := w.Tenants
	if w.Purge {
		scopes = []string{""}
	}
	for _, tenant := range scopes {
		rec.Add(history.Entry{Client: drain.ID, Actor: "final-scan", Op: model.Op{Req: spec.SnapshotRequest{Tenant: tenant}},
			Out: history.Observed{Result: model.Result{Value: snap.Of(tenant)}}, Call: call, Return: ret})
	}
	return rec.History(), nil
}

// snapshotter is what readSnapshot reads: any store.
type snapshotter interface {
	Snapshot(ctx context.Context) (spec.Snapshot, error)
}

// readSnapshot reads a snapshot for the harness's own accounting (not part
// of the history), trying again while the store answers unavailable: a read
// may fail that way by the contract (a replicated store losing a member, a
// cut connection), and the accounting must not count that as a violation.
// Any other error (an untyped one too: a broken store), or unavailable for
// longer than about ten seconds, is returned.
func readSnapshot(ctx context.Context, s snapshotter) (spec.Snapshot, error) {
	for try := 0; ; try++ {
		snap, err := s.Snapshot(ctx)
		var se *spec.Error
		if err == nil || !errors.As(err, &se) || se.Code != spec.CodeUnavailable || try == 100 {
			return snap, err
		}
		select {
		case <-ctx.Done():
			return snap, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

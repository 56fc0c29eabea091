package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// pausingStore is one worker's store client that pauses the whole worker
// right after ReserveEffect has returned, as SIGSTOP would: the reservation
// is held until resumeEffect is closed, and every other call the worker
// makes meanwhile (its renewal, its housekeeping) is held until resumeAll
// is closed.
type pausingStore struct {
	spec.Store
	reserved     chan struct{} // receives once, when the reservation is held
	resumeEffect chan struct{}
	resumeAll    chan struct{}
	paused       atomic.Bool
}

func newPausingStore(s spec.Store) *pausingStore {
	return &pausingStore{Store: s, reserved: make(chan struct{}, 1), resumeEffect: make(chan struct{}), resumeAll: make(chan struct{})}
}

func (p *pausingStore) gate() {
	if p.paused.Load() {
		<-p.resumeAll
	}
}

func (p *pausingStore) ReserveEffect(ctx context.Context, q spec.ReserveEffectRequest) (spec.EffectReservation, error) {
	p.gate()
	r, err := p.Store.ReserveEffect(ctx, q)
	if p.paused.CompareAndSwap(false, true) {
		p.reserved <- struct{}{}
		<-p.resumeEffect
	}
	return r, err
}

func (p *pausingStore) Renew(ctx context.Context, q spec.RenewRequest) (spec.Lease, error) {
	p.gate()
	return p.Store.Renew(ctx, q)
}

func (p *pausingStore) Claim(ctx context.Context, q spec.ClaimRequest) ([]spec.Lease, error) {
	p.gate()
	return p.Store.Claim(ctx, q)
}

func (p *pausingStore) Reap(ctx context.Context, q spec.ReapRequest) ([]string, error) {
	p.gate()
	return p.Store.Reap(ctx, q)
}

func (p *pausingStore) PurgeIdempotency(ctx context.Context, q spec.PurgeRequest) (int, error) {
	p.gate()
	return p.Store.PurgeIdempotency(ctx, q)
}

func (p *pausingStore) RecordEffect(ctx context.Context, q spec.RecordEffectRequest) (spec.Effect, error) {
	p.gate()
	return p.Store.RecordEffect(ctx, q)
}

func (p *pausingStore) ReconcileEffect(ctx context.Context, q spec.ReconcileEffectRequest) (spec.Effect, error) {
	p.gate()
	return p.Store.ReconcileEffect(ctx, q)
}

// TestPausedWorkerDoesNotChargeTwice: generation 1 reserves an effect and
// is paused before it calls the provider; the lease expires; generation 2
// reclaims the run, reconciles the reservation (the provider never saw a
// call), charges and completes. When generation 1 wakes its reservation
// says proceed, but its own clock says its lease is gone: it refuses to call
// and publishes nothing. The provider here neither deduplicates nor fences,
// so a second call would charge twice.
func TestPausedWorkerDoesNotChargeTwice(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1")
		p := &memProvider{}
		called := make(chan int64, 2)   // the generation of each provider call
		returned := make(chan int64, 2) // the generation whose Job.Effect returned
		handler := func(ctx context.Context, job *worker.Job) ([]byte, error) {
			eff := p.effect("pay-" + job.RunID)
			call := eff.Call
			eff.Call = func(ctx context.Context, req worker.EffectRequest) (string, error) {
				called <- req.Generation
				return call(ctx, req)
			}
			ref, err := job.Effect(ctx, eff)
			returned <- job.Generation
			if err != nil {
				return nil, err
			}
			return json.Marshal(map[string]string{"ref": ref})
		}
		paused := newPausingStore(e.storeFor(nil))
		store, log := recorded(paused)
		e.start(e.config("w1", store, handler))
		recv(e, "generation 1's reservation", paused.reserved)

		// The pause outlasts the lease (30 s from the claim at t0). The
		// paused worker's renewal (due at t0+10 s) and housekeeping are
		// held by its store, as in a stopped process.
		e.wc.Set(t0 + 30_000)
		e.start(e.config("w2", e.storeFor(nil), handler))
		if g := recv(e, "generation 2's provider call", called); g != 2 {
			t.Fatalf("provider called by generation %d, want 2", g)
		}
		if g := recv(e, "generation 2's effect", returned); g != 2 {
			t.Fatalf("effect returned for generation %d, want 2", g)
		}
		if r := e.result(); r.Outcome != worker.OutcomeCompleted || r.Generation != 2 {
			t.Fatalf("result %+v (err %v), want completed by generation 2", r, r.Err)
		}

		// Generation 1 wakes: its reservation returns "proceed".
		close(paused.resumeEffect)
		select {
		case g := <-called:
			t.Errorf("generation %d called the provider after waking past its lease: charged twice", g)
		case g := <-returned:
			if g != 1 {
				t.Fatalf("effect returned for generation %d, want 1", g)
			}
		case <-e.ctx.Done():
			t.Fatal("generation 1 neither called nor returned")
		}
		close(paused.resumeAll)
		r := e.result()
		if r.Outcome != worker.OutcomeLost || r.Generation != 1 || !errors.Is(r.Err, worker.ErrLeaseLost) || !errors.Is(r.Err, worker.ErrLeaseExpiring) {
			t.Fatalf("generation 1's result %+v, want lost, fenced by its own clock (ErrLeaseLost and ErrLeaseExpiring)", r)
		}
		p.mu.Lock()
		calls, applied := p.calls, len(p.applied)
		p.mu.Unlock()
		if calls != 1 || applied != 1 {
			t.Fatalf("provider: %d calls, %d applied; want exactly one of each (generation 2's)", calls, applied)
		}
		if n := log.count(publications...); n != 0 {
			t.Fatalf("generation 1 made %d publication calls, want none", n)
		}
		e.wantOneTerminal("r1", spec.EventRunCompleted, 2)
		effs, err := e.s.Effects(e.ctx, "acme", "r1")
		if err != nil || len(effs) != 1 || effs[0].State != spec.EffectSucceeded || effs[0].Generation != 2 || effs[0].ProviderRef != "pay_1" {
			t.Fatalf("effects %+v, %v; want one succeeded by generation 2 with pay_1", effs, err)
		}
	})
}

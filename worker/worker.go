package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/spec"
)

// Worker claims jobs from a spec.Store and runs them with a Handler, one
// goroutine per attempt, at most Config.Concurrency at a time. See the
// package documentation for the lifecycle of an attempt and of the worker.
type Worker struct {
	cfg      Config
	log      *slog.Logger
	batcher  spec.BatchCompleter // nil: complete one by one
	notifier spec.Notifier       // nil: poll only

	slots    chan struct{} // one token per attempt holding a slot
	wake     chan struct{} // a notification says there may be work
	stopping chan struct{} // closed when shutdown begins (Job.Stopping)
	hardStop chan struct{} // closed when the grace period ends

	// bg outlives Run's context (it keeps its values, not its
	// cancellation): renewals, publications and releases must go on while
	// the worker shuts down, and handlers' contexts derive from it. It ends
	// when Run returns.
	bg     context.Context
	stopBg context.CancelFunc

	mu       sync.Mutex
	active   map[runKey]*attempt
	attempts sync.WaitGroup

	completer  *completer
	stats      counters
	tel        *telemetry
	started    atomic.Bool
	nextTenant int // only the claim loop touches it
}

type runKey struct{ tenant, runID string }

// New checks cfg, applies its defaults and returns a Worker ready to Run.
func New(cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:      cfg,
		log:      cfg.Logger.With("worker", cfg.ID),
		slots:    make(chan struct{}, cfg.Concurrency),
		wake:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		hardStop: make(chan struct{}),
		active:   map[runKey]*attempt{},
	}
	if w.tel, err = newTelemetry(cfg.Meter, cfg.ID); err != nil {
		return nil, fmt.Errorf("worker: OpenTelemetry instruments: %w", err)
	}
	if b, ok := cfg.Store.(spec.BatchCompleter); ok {
		w.batcher = b
	}
	if n, ok := cfg.Store.(spec.Notifier); ok && !cfg.NoNotify {
		w.notifier = n
	}
	if cfg.Batch.Size > 1 {
		w.completer = newCompleter(w)
	}
	return w, nil
}

// ID returns the worker's lease owner name.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats { return w.stats.snapshot() }

// Run claims and runs jobs until ctx ends, then shuts down gracefully and
// returns nil:
//
//  1. it stops claiming (a claim already in flight finishes, and whatever
//     it returns is released at once);
//  2. it closes Job.Stopping for the running handlers, whose results are
//     still published as usual;
//  3. it waits up to Config.ShutdownGrace for them;
//  4. then it cancels the handlers still running (cause ErrShutdown), and
//     releases each lease it still owns — Store.Release requeues the job
//     and keeps its generation — discarding whatever those handlers return
//     later. A release the store cannot run is sent again while the lease
//     lasts (Config.StoreRetry); a lease it cannot release recovers by
//     expiry.
//
// Run returns once every attempt has been published or released; a handler
// that ignores its context may still be running then, but nothing it does
// is published. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	w.bg, w.stopBg = context.WithCancel(context.WithoutCancel(ctx))
	defer w.stopBg()
	var aux sync.WaitGroup
	if w.notifier != nil {
		aux.Go(func() {
			if err := w.notifier.Listen(w.bg, w.notified); err != nil {
				w.log.Warn("notification listener stopped; polling only", "err", err)
			}
		})
	}
	if w.completer != nil {
		aux.Go(w.completer.run)
	}
	if !w.cfg.Maintenance.Off {
		aux.Go(func() { w.maintainLoop(ctx) })
	}
	w.log.Info("worker started", "tenants", w.cfg.Tenants, "concurrency", w.cfg.Concurrency, "lease", w.cfg.Lease,
		"batch", w.cfg.Batch.Size, "notify", w.notifier != nil, "housekeeping", !w.cfg.Maintenance.Off)

	w.claimLoop(ctx)

	close(w.stopping)
	w.log.Info("shutting down: claiming stopped, waiting for running attempts", "in_flight", w.stats.inFlight.Load(), "grace", w.cfg.ShutdownGrace)
	idle := make(chan struct{})
	go func() {
		w.attempts.Wait()
		close(idle)
	}()
	grace := w.cfg.Timers.NewTimer(ms(w.cfg.ShutdownGrace))
	select {
	case <-idle:
		grace.Stop()
	case <-grace.C():
		w.log.Warn("grace period over: stopping the handlers still running and releasing their leases", "in_flight", w.stats.inFlight.Load())
		close(w.hardStop)
		<-idle
	}
	if w.completer != nil {
		w.completer.stop()
	}
	w.stopBg()
	aux.Wait()
	s := w.Stats()
	w.log.Info("worker stopped", "claimed", s.Claimed, "completed", s.Completed, "retried", s.Retried, "failed", s.Failed,
		"released", s.Released, "lost", s.Lost, "cancelled", s.Cancelled, "abandoned", s.Abandoned, "reaped", s.Reaped, "purged", s.Purged)
	return nil
}

// claimLoop claims while ctx lasts: it takes every free slot (at least one,
// waiting for it; after a round that got all it asked for, also the slots
// that free within ClaimGather), claims up to that many jobs, starts an
// attempt per lease and, when it got fewer than it asked for, waits before
// the next round: Idle after a round that found less work, a StoreRetry
// backoff (at most Idle) after a round whose claims failed, as after a
// database restart.
func (w *Worker) claimLoop(ctx context.Context) {
	failures := 0
	full := false // the last round got every job it asked for
	for {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
		if full && w.cfg.ClaimGather > 0 {
			n = w.gather(ctx)
		}
		for n < w.cfg.ClaimBatch && w.tryAcquire() {
			n++
		}
		if ctx.Err() != nil {
			for range n {
				<-w.slots
			}
			return
		}
		got, failed := w.claimRound(ctx, n)
		for range n - got {
			<-w.slots
		}
		if ctx.Err() != nil {
			return
		}
		full = got == n
		if !failed {
			failures = 0
		}
		switch {
		case got == n:
		case failed:
			failures++
			w.idle(ctx, min(w.storeRetryDelay(failures), w.idleDelay()))
		default:
			w.idle(ctx, w.idleDelay())
		}
	}
}

// gather holds one slot already and takes the slots that free within
// ClaimGather, up to ClaimBatch (and Concurrency: a round never holds more)
// or until ctx ends; it returns how many it holds.
func (w *Worker) gather(ctx context.Context) int {
	n, most := 1, min(w.cfg.ClaimBatch, cap(w.slots))
	if n >= most {
		return n
	}
	t := w.cfg.Timers.NewTimer(ms(w.cfg.ClaimGather))
	defer t.Stop()
	for n < most {
		select {
		case w.slots <- struct{}{}:
			n++
		case <-t.C():
			return n
		case <-ctx.Done():
			return n
		}
	}
	return n
}

// tryAcquire takes a free slot if there is one.
func (w *Worker) tryAcquire() bool {
	select {
	case w.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// claimRound asks the tenants in turn (starting with a different one each
// round) for up to n jobs in all, and starts an attempt for each lease; it
// returns how many it got and whether a claim failed. Each
// claim runs under ClaimTimeout and is not cut short by shutdown: a claim
// abandoned mid-flight could commit leases nobody runs (they would recover
// only by expiry), so it finishes and its leases are released instead.
func (w *Worker) claimRound(ctx context.Context, n int) (got int, failed bool) {
	tenants := w.cfg.Tenants
	start := w.nextTenant
	w.nextTenant = (w.nextTenant + 1) % len(tenants)
	for i := range tenants {
		tenant := tenants[(start+i)%len(tenants)]
		sent := w.cfg.Timers.Monotonic()
		cctx, cancel := context.WithTimeout(w.bg, w.cfg.ClaimTimeout)
		leases, err := w.cfg.Store.Claim(cctx, spec.ClaimRequest{Tenant: tenant, Worker: w.cfg.ID, LeaseMs: ms(w.cfg.Lease), Limit: n - got})
		cancel()
		if err != nil {
			// unknown_outcome: leases may exist that nobody runs; they
			// recover by expiry.
			w.log.Warn("claim failed", "tenant", tenant, "code", spec.CodeOf(err), "err", err)
			failed = true
			continue
		}
		for _, l := range leases {
			w.start(ctx, l, sent)
			got++
		}
		if got == n {
			break
		}
	}
	return got, failed
}

// idleDelay is Idle plus a jitter drawn from [0, IdleJitter], in ms.
func (w *Worker) idleDelay() int64 {
	return ms(w.cfg.Idle) + w.cfg.Random.Int64N(ms(w.cfg.IdleJitter)+1)
}

// idle waits d ms, or until a notification or shutdown.
func (w *Worker) idle(ctx context.Context, d int64) {
	t := w.cfg.Timers.NewTimer(d)
	select {
	case <-t.C():
	case <-w.wake:
		t.Stop()
	case <-ctx.Done():
		t.Stop()
	}
}

// poke ends the current idle wait (or the next one) early.
func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// notified handles a spec.Notification: new work wakes the claim loop; a
// cancel of a generation this worker runs stops that attempt at once. The
// notification is sent only once the cancel has committed, so the attempt
// is certainly fenced.
func (w *Worker) notified(n spec.Notification) {
	switch n.Kind {
	case spec.NotifyRunCreated:
		if slices.Contains(w.cfg.Tenants, n.Tenant) {
			w.poke()
		}
	case spec.NotifyResync:
		w.poke()
		// Notifications sent while the listener was not listening are lost:
		// a cancel among them would go unnoticed until the next renewal.
		go w.recheckActive()
	case spec.NotifyRunCancelled:
		w.mu.Lock()
		a := w.active[runKey{n.Tenant, n.RunID}]
		w.mu.Unlock()
		if a != nil && a.lease.Generation == n.Generation {
			cause := &spec.Error{Code: spec.CodeCancelled, State: spec.RunCancelled,
				Message: fmt.Sprintf("run %s was cancelled at generation %d (announced by the store's notification)", n.RunID, n.Generation)}
			if a.fenceRunning(&fenceError{reason: ErrRunCancelled, cause: cause}) {
				a.log.Warn("run cancelled while its handler runs (notification): handler context cancelled, publishing nothing more")
			}
		}
	}
}

// recheckActive reads the job of every attempt whose handler runs and
// fences those the store no longer leases to them (a cancel whose
// notification was missed). An attempt that is publishing its outcome, or
// has, is left alone: its job may well be finished by its own publication,
// and the store's answer to that decides. Expiry is not judged here: it is
// the store's, by its own clock.
func (w *Worker) recheckActive() {
	w.mu.Lock()
	list := make([]*attempt, 0, len(w.active))
	for _, a := range w.active {
		list = append(list, a)
	}
	w.mu.Unlock()
	for _, a := range list {
		if a.isPublishing() {
			continue
		}
		job, err := a.readBack()
		if err != nil {
			continue
		}
		// An impossible "now" leaves expiry out of LeaseError's verdict.
		if lerr := spec.LeaseError(job, a.lease.Ref(), math.MinInt64); lerr != nil {
			if f := fenceFor(lerr); f != nil && a.fenceRunning(f) {
				a.log.Warn("the store no longer leases this attempt while its handler runs (found after the listener reconnected): handler context cancelled, publishing nothing more", "code", lerr.Code)
			}
		}
	}
}

// start registers an attempt for l, whose claim was sent at the monotonic
// reading sent, and runs it in its own goroutine; the attempt holds one slot
// until it ends. A lease that arrives after shutdown began is released at
// once.
func (w *Worker) start(ctx context.Context, l spec.Lease, sent int64) {
	a := newAttempt(w, l, sent)
	w.stats.claimed.Add(1)
	w.stats.inFlight.Add(1)
	w.tel.claim(l.Tenant)
	w.mu.Lock()
	w.active[runKey{l.Tenant, l.RunID}] = a
	w.mu.Unlock()
	w.attempts.Add(1)
	releaseNow := ctx.Err() != nil
	go a.run(releaseNow)
}

// finished unregisters a and frees its slot.
func (w *Worker) finished(a *attempt) {
	w.mu.Lock()
	if k := (runKey{a.lease.Tenant, a.lease.RunID}); w.active[k] == a {
		delete(w.active, k)
	}
	w.mu.Unlock()
	w.stats.inFlight.Add(-1)
	<-w.slots
	w.attempts.Done()
}

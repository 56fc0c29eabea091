package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// RecordingStore is a spec.Store, a spec.BatchCompleter and a
// spec.BatchCreator (its Store offers only what the recorded store does)
// that runs every call of a program through a pool of Callers and so
// leaves a History the model judges, whatever the program is: the worker
// runtime calling from many goroutines at once, an HTTP handler. Each call takes a free caller
// (its own store on the same database, with its own clock recorder, so the
// time its store read is known exactly), runs, and frees it; a caller's
// operations are sequential, as porcupine requires of a client.
//
// With a Faults plan it also injects what a real deployment suffers between
// the program and its database: rolled-back transactions, lost commit
// replies (the program sees unknown_outcome), and pauses of the program
// after a reply (the reply is held while the clock moves past the lease, as
// when the process is stopped).
type RecordingStore struct {
	actor  string
	free   chan *poolCaller
	faults *Faults
	rnd    *rand.Rand // jitter draws and fault decisions
	rndMu  sync.Mutex
	jitter int64 // the store's jitter draws are in [0, jitter)
	closed atomic.Bool
	notify spec.Notifier
	// batches: the underlying store completes batches (spec.BatchCompleter).
	batches bool
	// bulk: the underlying store admits in bulk (spec.BatchCreator).
	bulk bool
	// pausedFirst holds the PauseFirst operations already held once.
	pausedFirst sync.Map // spec.Op -> struct{}

	mu       sync.Mutex
	breaches []error
}

// Breaches returns the calls that broke the harness's expectations (an
// untyped error from the store, a clock read out of place): findings no
// model can judge, which the program saw as unavailable.
func (s *RecordingStore) Breaches() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.breaches...)
}

// poolCaller is one caller of the pool, with the fault its hook injects.
type poolCaller struct {
	*history.Caller
	fault atomic.Value // At, or the zero At for none
}

func (p *poolCaller) hook(ctx context.Context, op spec.Op, point spec.HookPoint) error {
	f, _ := p.fault.Load().(At)
	if f.Point != point {
		return nil
	}
	p.fault.Store(At{})
	return f.Err
}

// Faults says which faults a RecordingStore injects. Each writing call draws
// once: an abort with probability Aborts, else a lost reply while fewer than
// MaxUnknown have been lost (never for a claim or a reap: their unknown
// outcomes are the checker's most expensive); and, with probability Pauses,
// a pause of the program for the calls Pause or PauseBefore names. A pause
// after a call holds its reply until the clock has moved PauseMs past the
// time the call read (the program stopped right after it got the reply); a
// pause before a call holds the call until the clock has moved PauseMs (the
// program stopped with its write about to go out, which then arrives late).
type Faults struct {
	Aborts     float64
	MaxUnknown int64
	Pauses     float64
	PauseMs    int64
	// Pause lists the operations whose replies may be held.
	Pause []spec.Op
	// PauseBefore lists the operations that may be held before they reach
	// the store.
	PauseBefore []spec.Op
	// PauseFirst lists operations whose first call through each
	// RecordingStore is always held before it goes out, whatever the draw,
	// until a newer generation has leased one of its runs: a fault every run
	// must contain (a zombie's late batch completion).
	PauseFirst []spec.Op
	// Clock is the clock a pause watches.
	Clock clock.Clock
	// Off stops every fault (the liveness phase).
	Off atomic.Bool

	unknowns atomic.Int64
	// Injected counts the faults injected, by kind.
	injected sync.Map // string -> *atomic.Int64
}

// Injected returns how many faults of each kind were injected.
func (f *Faults) Injected() map[string]int64 {
	out := map[string]int64{}
	f.injected.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (f *Faults) count(kind string) {
	v, _ := f.injected.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// NewRecordingStore opens size stores on the database of h, each a caller
// of rec named actor-N, and returns the store that runs calls through them.
// seed decides the jitter of every retry and every fault. The stores close
// when t ends.
func NewRecordingStore(t testing.TB, h storetest.Handle, cfg spec.Config, clk clock.Clock, rec *history.Recorder, actor string,
	size int, seed uint64, faults *Faults) *RecordingStore {
	s := &RecordingStore{actor: actor, free: make(chan *poolCaller, size), faults: faults,
		rnd: rand.New(rand.NewPCG(seed, 0x7265636f7264)), jitter: cfg.Backoff.JitterBound()}
	for i := range size {
		p := &poolCaller{}
		rc, rnd := &clock.Recorder{Source: clk}, &history.ScriptedRandom{}
		store := h.OpenWith(t, storetest.Options{Config: cfg, Clock: rc, Random: rnd, Hook: p.hook})
		p.Caller = history.NewCaller(rec, fmt.Sprintf("%s-%d", actor, i+1), store, rc, rnd)
		s.free <- p
		if n, ok := store.(spec.Notifier); ok && s.notify == nil {
			s.notify = n
		}
		_, s.batches = store.(spec.BatchCompleter)
		_, s.bulk = store.(spec.BatchCreator)
	}
	return s
}

// Store returns the store to give the program: s, with the underlying
// store's Listen when that store notifies (notifications are hints: they are
// not recorded), without CompleteBatch when that store does not complete
// batches (the program then completes one run at a time) and without
// CreateRuns when it does not admit in bulk: a capability the store lacks
// is never offered, so a program's type assertion finds exactly the store's.
func (s *RecordingStore) Store() spec.Store {
	type (
		b = spec.BatchCompleter
		c = spec.BatchCreator
		n = spec.Notifier
	)
	switch {
	case s.batches && s.bulk && s.notify != nil:
		return struct {
			spec.Store
			b
			c
			n
		}{s, s, s, s.notify}
	case s.batches && s.bulk:
		return struct {
			spec.Store
			b
			c
		}{s, s, s}
	case s.batches && s.notify != nil:
		return struct {
			spec.Store
			b
			n
		}{s, s, s.notify}
	case s.bulk && s.notify != nil:
		return struct {
			spec.Store
			c
			n
		}{s, s, s.notify}
	case s.batches:
		return struct {
			spec.Store
			b
		}{s, s}
	case s.bulk:
		return struct {
			spec.Store
			c
		}{s, s}
	case s.notify != nil:
		return struct {
			spec.Store
			n
		}{s, s.notify}
	}
	return struct{ spec.Store }{s}
}

var (
	_ spec.BatchCompleter = (*RecordingStore)(nil)
	_ spec.BatchCreator   = (*RecordingStore)(nil)
)

// do runs one call through a free caller, with the faults the plan draws.
func (s *RecordingStore) do(ctx context.Context, req spec.Request) (any, error) {
	var p *poolCaller
	select {
	case p = <-s.free:
	case <-ctx.Done():
		return nil, &spec.Error{Code: spec.CodeUnavailable, Message: "no free connection before the context ended", Err: ctx.Err()}
	}
	defer func() { s.free <- p }()
	op := model.Op{Req: req}
	if _, isRetry := req.(spec.RetryRequest); isRetry {
		s.rndMu.Lock()
		op.Jitter = s.rnd.Int64N(s.jitter)
		s.rndMu.Unlock()
	}
	pause, pauseBefore, first := s.plan(p, req)
	switch {
	case first:
		s.faults.count("pause_before_" + string(req.Op()))
		s.holdUntilReclaimed(ctx, p, req)
	case pauseBefore:
		s.faults.count("pause_before_" + string(req.Op()))
		s.holdFrom(ctx, s.faults.Clock.Now())
	}
	res, err := p.Do(ctx, op)
	p.fault.Store(At{})
	if err != nil {
		// A breach the model cannot judge (an untyped error, a clock read
		// out of place): kept for Breaches, and unavailable to the program.
		err = fmt.Errorf("%s: %w", s.actor, err)
		s.mu.Lock()
		s.breaches = append(s.breaches, err)
		s.mu.Unlock()
		return nil, &spec.Error{Code: spec.CodeUnavailable, Message: err.Error()}
	}
	if leases, isClaim := res.Value.([]spec.Lease); pause && (!isClaim || len(leases) > 0) && res.Err == nil {
		s.faults.count("pause_after_" + string(req.Op()))
		s.hold(ctx, p.Clock)
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Value, nil
}

// plan arms the caller's fault for req and reports whether to hold its
// reply (if it succeeds, and for a claim if it leased something) and whether
// to hold the call before it goes out.
func (s *RecordingStore) plan(p *poolCaller, req spec.Request) (pause, pauseBefore, first bool) {
	f := s.faults
	if f == nil || f.Off.Load() || !spec.OperationOf(req).Writes {
		return false, false, false
	}
	s.rndMu.Lock()
	draw, pauseDraw := s.rnd.Float64(), s.rnd.Float64()
	s.rndMu.Unlock()
	nondeterministic := Nondeterministic(req)
	switch {
	case !nondeterministic && draw < f.Aborts:
		p.fault.Store(At{Point: spec.BeforeCommit, Err: ErrInjectedAbort})
		f.count("rollback")
	case !nondeterministic && draw < 2*f.Aborts && f.unknowns.Add(1) <= f.MaxUnknown:
		p.fault.Store(At{Point: spec.AfterCommit, Err: ErrInjectedLostReply})
		f.count("lost_reply")
	}
	paused := pauseDraw < f.Pauses
	if slices.Contains(f.PauseFirst, req.Op()) {
		_, held := s.pausedFirst.LoadOrStore(req.Op(), struct{}{})
		first = !held
	}
	return paused && slices.Contains(f.Pause, req.Op()), paused && slices.Contains(f.PauseBefore, req.Op()), first
}

// holdUntilReclaimed holds a write under leases until a newer generation
// has leased one of them — pause, expire, reclaim, then resume: the zombie's
// write arrives while another attempt holds the run — or the clock has moved
// 4×PauseMs (the run may have been reaped or finished meanwhile). The reads
// that watch for the reclaim are not recorded: they change nothing.
func (s *RecordingStore) holdUntilReclaimed(ctx context.Context, p *poolCaller, req spec.Request) {
	until := s.faults.Clock.Now() + 4*s.faults.PauseMs
	for s.faults.Clock.Now() < until && ctx.Err() == nil && !s.faults.Off.Load() {
		for _, l := range req.Leases() {
			j, err := p.Store.GetJob(ctx, l.Tenant, l.RunID)
			if err == nil && j.State == spec.JobLeased && j.Generation > l.Generation {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// hold keeps a reply back until the clock has moved PauseMs past the time
// the call read (or the context ends): the program was stopped after it
// got the reply.
func (s *RecordingStore) hold(ctx context.Context, rc *clock.Recorder) {
	read, _ := rc.Last()
	s.holdFrom(ctx, read)
}

// holdFrom waits until the clock has moved PauseMs past from (or the
// context ends, or the faults stop).
func (s *RecordingStore) holdFrom(ctx context.Context, from int64) {
	until := from + s.faults.PauseMs
	for s.faults.Clock.Now() < until && ctx.Err() == nil && !s.faults.Off.Load() {
		time.Sleep(time.Millisecond)
	}
}

// call runs req and returns its result as T.
func call[T any](s *RecordingStore, ctx context.Context, req spec.Request) (T, error) {
	v, err := s.do(ctx, req)
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

// CreateRun implements spec.Store.
func (s *RecordingStore) CreateRun(ctx context.Context, req spec.CreateRunRequest) (spec.CreateRunResult, error) {
	return call[spec.CreateRunResult](s, ctx, req)
}

// Claim implements spec.Store.
func (s *RecordingStore) Claim(ctx context.Context, req spec.ClaimRequest) ([]spec.Lease, error) {
	return call[[]spec.Lease](s, ctx, req)
}

// Renew implements spec.Store.
func (s *RecordingStore) Renew(ctx context.Context, req spec.RenewRequest) (spec.Lease, error) {
	return call[spec.Lease](s, ctx, req)
}

// Complete implements spec.Store.
func (s *RecordingStore) Complete(ctx context.Context, req spec.CompleteRequest) (spec.Run, error) {
	return call[spec.Run](s, ctx, req)
}

// Retry implements spec.Store.
func (s *RecordingStore) Retry(ctx context.Context, req spec.RetryRequest) (spec.Job, error) {
	return call[spec.Job](s, ctx, req)
}

// Fail implements spec.Store.
func (s *RecordingStore) Fail(ctx context.Context, req spec.FailRequest) (spec.Run, error) {
	return call[spec.Run](s, ctx, req)
}

// Cancel implements spec.Store.
func (s *RecordingStore) Cancel(ctx context.Context, req spec.CancelRequest) (spec.Run, error) {
	return call[spec.Run](s, ctx, req)
}

// Release implements spec.Store.
func (s *RecordingStore) Release(ctx context.Context, req spec.ReleaseRequest) (spec.Job, error) {
	return call[spec.Job](s, ctx, req)
}

// Reap implements spec.Store.
func (s *RecordingStore) Reap(ctx context.Context, req spec.ReapRequest) ([]string, error) {
	return call[[]string](s, ctx, req)
}

// GetRun implements spec.Store.
func (s *RecordingStore) GetRun(ctx context.Context, tenant, runID string) (spec.Run, error) {
	return call[spec.Run](s, ctx, spec.GetRunRequest{Tenant: tenant, RunID: runID})
}

// GetJob implements spec.Store.
func (s *RecordingStore) GetJob(ctx context.Context, tenant, runID string) (spec.Job, error) {
	return call[spec.Job](s, ctx, spec.GetJobRequest{Tenant: tenant, RunID: runID})
}

// Events implements spec.Store.
func (s *RecordingStore) Events(ctx context.Context, tenant, runID string) ([]spec.Event, error) {
	return call[[]spec.Event](s, ctx, spec.EventsRequest{Tenant: tenant, RunID: runID})
}

// Attempts implements spec.Store.
func (s *RecordingStore) Attempts(ctx context.Context, tenant, runID string) ([]spec.Attempt, error) {
	return call[[]spec.Attempt](s, ctx, spec.AttemptsRequest{Tenant: tenant, RunID: runID})
}

// Effects implements spec.Store.
func (s *RecordingStore) Effects(ctx context.Context, tenant, runID string) ([]spec.Effect, error) {
	return call[[]spec.Effect](s, ctx, spec.EffectsRequest{Tenant: tenant, RunID: runID})
}

// PurgeIdempotency implements spec.Store.
func (s *RecordingStore) PurgeIdempotency(ctx context.Context, req spec.PurgeRequest) (int, error) {
	return call[int](s, ctx, req)
}

// PurgeRuns implements spec.Store.
func (s *RecordingStore) PurgeRuns(ctx context.Context, req spec.PurgeRunsRequest) ([]string, error) {
	return call[[]string](s, ctx, req)
}

// Replay implements spec.Store.
func (s *RecordingStore) Replay(ctx context.Context, req spec.ReplayRequest) (spec.Run, error) {
	return call[spec.Run](s, ctx, req)
}

// ReserveEffect implements spec.Store.
func (s *RecordingStore) ReserveEffect(ctx context.Context, req spec.ReserveEffectRequest) (spec.EffectReservation, error) {
	return call[spec.EffectReservation](s, ctx, req)
}

// RecordEffect implements spec.Store.
func (s *RecordingStore) RecordEffect(ctx context.Context, req spec.RecordEffectRequest) (spec.Effect, error) {
	return call[spec.Effect](s, ctx, req)
}

// ReconcileEffect implements spec.Store.
func (s *RecordingStore) ReconcileEffect(ctx context.Context, req spec.ReconcileEffectRequest) (spec.Effect, error) {
	return call[spec.Effect](s, ctx, req)
}

// Snapshot implements spec.Store.
func (s *RecordingStore) Snapshot(ctx context.Context) (spec.Snapshot, error) {
	return call[spec.Snapshot](s, ctx, spec.SnapshotRequest{})
}

// CreateRuns implements spec.BatchCreator.
func (s *RecordingStore) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	return call[[]spec.CreateOutcome](s, ctx, spec.CreateRunsRequest{Requests: reqs})
}

// CompleteBatch implements spec.BatchCompleter.
func (s *RecordingStore) CompleteBatch(ctx context.Context, reqs []spec.CompleteRequest) ([]spec.BatchOutcome, error) {
	return call[[]spec.BatchOutcome](s, ctx, spec.CompleteBatchRequest{Requests: reqs})
}

// Close implements spec.Store: the pool's stores close when the test ends.
func (s *RecordingStore) Close() error {
	s.closed.Store(true)
	return nil
}

// ClaimOutbox implements spec.Store.
func (s *RecordingStore) ClaimOutbox(ctx context.Context, req spec.ClaimOutboxRequest) ([]spec.OutboxMessage, error) {
	return call[[]spec.OutboxMessage](s, ctx, req)
}

// MarkDelivered implements spec.Store.
func (s *RecordingStore) MarkDelivered(ctx context.Context, req spec.MarkDeliveredRequest) (int, error) {
	return call[int](s, ctx, req)
}

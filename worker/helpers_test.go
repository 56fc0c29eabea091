package worker_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// Every test here runs on SQLite and on PostgreSQL. Time is a manual clock
// (clock.Manual): the store reads it and the worker's timers fire only when
// a test moves it, so renewals, idle polls, batch lingering and the shutdown
// grace happen exactly when a test says. Tests wait on channels (a handler
// started, a result was reported, a timer was armed), bounded by a
// generous context so that a bug fails the test instead of hanging it;
// nothing sleeps and nothing asserts on elapsed time.

// TestMain runs the child worker of TestKilledWorkerRecovers when asked to,
// and otherwise the tests (terminating pgtest's container, if one started).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	pgtest.Main(m)
}

// t0 is where every test's clocks start.
const t0 = int64(1_000_000)

// testTimeout bounds every wait of a test: a generous bound on a bug, not a
// timing assumption.
const testTimeout = 60 * time.Second

type backend struct {
	name    string
	factory storetest.Factory
}

var backends = []backend{
	{"sqlite", sqlitetest.Factory},
	{"postgres", pgtest.Factory},
}

// eachStore runs fn as a subtest per backend.
func eachStore(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// postgresOnly runs fn as a subtest on PostgreSQL only (for what only it
// has, such as LISTEN/NOTIFY): no SQLite subtest exists to be skipped.
func postgresOnly(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		if b.name == "postgres" {
			t.Run(b.name, func(t *testing.T) { fn(t, b) })
		}
	}
}

// zeroRandom always draws 0: no idle jitter, no retry jitter.
type zeroRandom struct{}

func (zeroRandom) Int64N(int64) int64 { return 0 }

// env is one test's database: the test's own store client, the clocks, the
// results the workers reported.
type env struct {
	t   *testing.T
	ctx context.Context
	b   backend
	h   storetest.Handle
	s   spec.Store // the test's own client (API calls, other workers' claims, reads)
	cfg spec.Config
	// sc is the store's clock; wc is the workers' timers (the same clock
	// unless a test needs to move one without the other).
	sc, wc  *clock.Manual
	results chan worker.Result
}

type envOption func(*env)

// separateClocks gives the workers their own timer clock.
func separateClocks(e *env) { e.wc = clock.NewManual(t0) }

func withConfig(mod func(*spec.Config)) envOption {
	return func(e *env) { mod(&e.cfg) }
}

func newEnv(t *testing.T, b backend, opts ...envOption) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, b: b, cfg: spec.DefaultConfig(), sc: clock.NewManual(t0), results: make(chan worker.Result, 1000)}
	e.wc = e.sc
	for _, o := range opts {
		o(e)
	}
	e.h = b.factory(t, storetest.Options{Config: e.cfg, Clock: e.sc, Random: zeroRandom{}})
	e.s = e.h.Store
	return e
}

// storeFor opens another client of the database for a worker, with hook
// (nil for none).
func (e *env) storeFor(hook spec.Hook) spec.Store {
	return e.h.OpenWith(e.t, storetest.Options{Config: e.cfg, Clock: e.sc, Random: zeroRandom{}, Hook: hook})
}

// create admits run id with payload {"id": id}.
func (e *env) create(id string, mod ...func(*spec.CreateRunRequest)) spec.Run {
	e.t.Helper()
	req := spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "key-" + id, RunID: id,
		Payload: []byte(fmt.Sprintf(`{"id":%q}`, id))}
	for _, m := range mod {
		m(&req)
	}
	res, err := e.s.CreateRun(e.ctx, req)
	if err != nil || res.Replayed {
		e.t.Fatalf("create %s: want a new run, got %+v, %v", id, res, err)
	}
	return res.Run
}

// config is a worker configuration on store with the test's clocks, no
// jitter, results sent to e.results, and the given handler.
func (e *env) config(id string, store spec.Store, h worker.HandlerFunc) worker.Config {
	// NoNotify: a notification would end an idle wait at a moment the
	// test does not choose; the notification tests turn it back on.
	// ClaimGather off: a round that gathers slots waits for a timer only
	// the test moves; the gather tests (gather_test.go) turn it back on.
	return worker.Config{Store: store, Tenants: []string{"acme"}, Handler: h, ID: id, Lease: 30 * time.Second,
		Timers: e.wc, Random: zeroRandom{}, NoNotify: true, ClaimGather: -1, OnResult: func(r worker.Result) { e.results <- r }}
}

// running is a worker whose Run is in progress.
type running struct {
	w    *worker.Worker
	stop context.CancelFunc
	done chan struct{}
}

// start runs a worker until shutdown or the end of the test.
func (e *env) start(cfg worker.Config) *running {
	e.t.Helper()
	w, err := worker.New(cfg)
	if err != nil {
		e.t.Fatalf("worker.New: %v", err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	r := &running{w: w, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := w.Run(ctx); err != nil {
			e.t.Errorf("worker %s: Run: %v", cfg.ID, err)
		}
	}()
	e.t.Cleanup(func() {
		stop()
		e.drain(r)
	})
	return r
}

// drain waits for a stopping worker to return. A test that failed may have
// left handlers blocked, so that Run waits for its grace period: drain moves
// the workers' clock to each timer they arm until Run returns. A test that
// passed never needs it.
func (e *env) drain(r *running) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		armed := make(chan error, 1)
		go func() { armed <- e.wc.BlockUntil(ctx, 1) }()
		select {
		case <-r.done:
			return
		case err := <-armed:
			if err != nil {
				e.t.Errorf("worker did not stop: %v", err)
				return
			}
			if next, ok := e.wc.NextDeadline(); ok && next > e.wc.Now() {
				e.wc.Set(next)
			}
		}
	}
}

// shutdown begins the worker's graceful shutdown; wait for it with stopped.
func (r *running) shutdown() { r.stop() }

// stopped waits until Run has returned.
func (e *env) stopped(r *running) {
	e.t.Helper()
	select {
	case <-r.done:
	case <-e.ctx.Done():
		e.t.Fatalf("the worker did not stop: %v", e.ctx.Err())
	}
}

// result waits for the next reported result.
func (e *env) result() worker.Result {
	e.t.Helper()
	select {
	case r := <-e.results:
		return r
	case <-e.ctx.Done():
		e.t.Fatalf("no worker result: %v", e.ctx.Err())
		return worker.Result{}
	}
}

// recv waits for a value on ch.
func recv[T any](e *env, what string, ch <-chan T) T {
	e.t.Helper()
	select {
	case v := <-ch:
		return v
	case <-e.ctx.Done():
		e.t.Fatalf("waiting for %s: %v", what, e.ctx.Err())
		var zero T
		return zero
	}
}

// due waits until the workers' clock has a timer due at or before at.
func (e *env) due(at int64, what string) {
	e.t.Helper()
	if err := e.wc.BlockUntilDue(e.ctx, at); err != nil {
		e.t.Fatalf("waiting for %s (a timer due at %d): %v", what, at, err)
	}
}

// dueN waits until the workers' clock has n timers due at or before at.
func (e *env) dueN(at int64, n int, what string) {
	e.t.Helper()
	if err := e.wc.BlockUntilDueN(e.ctx, at, n); err != nil {
		e.t.Fatalf("waiting for %s (%d timers due at %d): %v", what, n, at, err)
	}
}

// advance moves the workers' clock (and the store's, when they are one).
func (e *env) advance(d int64) {
	e.t.Helper()
	if _, err := e.wc.Advance(d); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) job(id string) spec.Job {
	e.t.Helper()
	j, err := e.s.GetJob(e.ctx, "acme", id)
	if err != nil {
		e.t.Fatalf("GetJob(%s): %v", id, err)
	}
	return j
}

func (e *env) run(id string) spec.Run {
	e.t.Helper()
	r, err := e.s.GetRun(e.ctx, "acme", id)
	if err != nil {
		e.t.Fatalf("GetRun(%s): %v", id, err)
	}
	return r
}

func (e *env) events(id string) []spec.Event {
	e.t.Helper()
	ev, err := e.s.Events(e.ctx, "acme", id)
	if err != nil {
		e.t.Fatalf("Events(%s): %v", id, err)
	}
	return ev
}

// terminalEvents returns the run's terminal events.
func (e *env) terminalEvents(id string) []spec.Event {
	e.t.Helper()
	var out []spec.Event
	for _, ev := range e.events(id) {
		if ev.Kind.Terminal() {
			out = append(out, ev)
		}
	}
	return out
}

// wantOneTerminal fails the test unless run id has exactly one terminal
// event, of kind, written by generation gen.
func (e *env) wantOneTerminal(id string, kind spec.EventKind, gen int64) {
	e.t.Helper()
	te := e.terminalEvents(id)
	if len(te) != 1 || te[0].Kind != kind {
		e.t.Fatalf("run %s: want exactly one terminal event %s, got %+v", id, kind, te)
	}
	var wantPayload string
	switch kind {
	case spec.EventRunCompleted:
		wantPayload = spec.CompletedPayload(gen)
	default:
		return
	}
	if te[0].Payload != wantPayload {
		e.t.Fatalf("run %s: terminal event payload %s, want %s (generation %d)", id, te[0].Payload, wantPayload, gen)
	}
}

// callLog counts the writes a worker's store client was asked to make,
// whether or not the store accepted them.
type callLog struct {
	mu    sync.Mutex
	calls map[spec.Op]int
}

func (c *callLog) add(op spec.Op) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[spec.Op]int{}
	}
	c.calls[op]++
}

func (c *callLog) count(ops ...spec.Op) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, op := range ops {
		n += c.calls[op]
	}
	return n
}

// publications are the writes that publish an attempt's outcome.
var publications = []spec.Op{spec.OpComplete, spec.OpCompleteBatch, spec.OpRetry, spec.OpFail, spec.OpRelease}

// recorder wraps a store and logs the worker's write calls. recordBatch and
// recordAll keep the optional interfaces of the store they wrap, so the
// worker sees the same capabilities.
type recorder struct {
	spec.Store
	log *callLog
}

func (r recorder) Renew(ctx context.Context, q spec.RenewRequest) (spec.Lease, error) {
	r.log.add(spec.OpRenew)
	return r.Store.Renew(ctx, q)
}

func (r recorder) Complete(ctx context.Context, q spec.CompleteRequest) (spec.Run, error) {
	r.log.add(spec.OpComplete)
	return r.Store.Complete(ctx, q)
}

func (r recorder) Retry(ctx context.Context, q spec.RetryRequest) (spec.Job, error) {
	r.log.add(spec.OpRetry)
	return r.Store.Retry(ctx, q)
}

func (r recorder) Fail(ctx context.Context, q spec.FailRequest) (spec.Run, error) {
	r.log.add(spec.OpFail)
	return r.Store.Fail(ctx, q)
}

func (r recorder) Release(ctx context.Context, q spec.ReleaseRequest) (spec.Job, error) {
	r.log.add(spec.OpRelease)
	return r.Store.Release(ctx, q)
}

type recordBatch struct{ recorder }

func (r recordBatch) CompleteBatch(ctx context.Context, q []spec.CompleteRequest) ([]spec.BatchOutcome, error) {
	r.log.add(spec.OpCompleteBatch)
	return r.Store.(spec.BatchCompleter).CompleteBatch(ctx, q)
}

type recordAll struct{ recordBatch }

func (r recordAll) Listen(ctx context.Context, fn func(spec.Notification)) error {
	return r.Store.(spec.Notifier).Listen(ctx, fn)
}

// recorded wraps s, keeping its optional interfaces.
func recorded(s spec.Store) (spec.Store, *callLog) {
	log := &callLog{}
	rec := recorder{Store: s, log: log}
	_, batch := s.(spec.BatchCompleter)
	_, notify := s.(spec.Notifier)
	switch {
	case batch && notify:
		return recordAll{recordBatch{rec}}, log
	case batch:
		return recordBatch{rec}, log
	}
	return rec, log
}

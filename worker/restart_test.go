package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/logwatch"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// Faults of a real PostgreSQL server of the test's own (pgtest.Cluster,
// never the shared one): a restart in the middle of a run, the notification
// listener across a restart, and what a worker leaves behind afterwards.
// Real time passes here: the store uses the database clock and the worker
// the system's timers, as in production.

// countingProvider is an external system that neither deduplicates nor
// fences: it applies every call, and counts them per key.
type countingProvider struct {
	mu      sync.Mutex
	applied map[string]int
}

func (p *countingProvider) effect(key string) worker.Effect {
	return worker.Effect{Step: "charge", Key: key,
		Call: func(context.Context, worker.EffectRequest) (string, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.applied == nil {
				p.applied = map[string]int{}
			}
			p.applied[key]++
			return "ref-" + key, nil
		},
		Status: func(context.Context, worker.EffectRequest) (worker.EffectStatus, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.applied[key] > 0 {
				return worker.EffectStatus{State: spec.EffectSucceeded, ProviderRef: "ref-" + key}, nil
			}
			return worker.EffectStatus{State: spec.EffectFailed}, nil
		},
	}
}

// doubles is how many keys were applied more than once.
func (p *countingProvider) doubles() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(0)
	for _, c := range p.applied {
		if c > 1 {
			n++
		}
	}
	return n
}

// accounting checks every run against what the workers reported: lost (not
// completed), duplicated (more than one terminal event or completed
// result), stale accepted (a terminal event by a generation other than the
// job's last).
func accounting(t *testing.T, ctx context.Context, s spec.Store, ids []string, completions map[string]int) (lost, duplicated, stale int64) {
	t.Helper()
	for _, id := range ids {
		run, err := s.GetRun(ctx, "acme", id)
		if err != nil {
			t.Fatalf("GetRun(%s): %v", id, err)
		}
		job, err := s.GetJob(ctx, "acme", id)
		if err != nil {
			t.Fatalf("GetJob(%s): %v", id, err)
		}
		events, err := s.Events(ctx, "acme", id)
		if err != nil {
			t.Fatalf("Events(%s): %v", id, err)
		}
		var terminal []spec.Event
		for _, ev := range events {
			if ev.Kind.Terminal() {
				terminal = append(terminal, ev)
			}
		}
		switch {
		case run.State != spec.RunCompleted:
			lost++
			t.Errorf("run %s is %s after the workers drained, want completed", id, run.State)
		case len(terminal) != 1 || completions[id] != 1:
			duplicated++
			t.Errorf("run %s: %d terminal events and %d completed results, want one of each", id, len(terminal), completions[id])
		case terminal[0].Payload != spec.CompletedPayload(job.Generation):
			stale++
			t.Errorf("run %s completed by %s, but its job is at generation %d", id, terminal[0].Payload, job.Generation)
		}
	}
	return lost, duplicated, stale
}

// TestPostgresRestartMidRun: the server restarts while a worker holds four
// runs; their effect-ledger writes and completions ride out the outage
// (sent again with backoff), the worker resumes claiming, every run
// completes exactly once with its effect applied once, and once the worker
// and its store are closed no goroutine and no connection is left.
func TestPostgresRestartMidRun(t *testing.T) {
	const runs, slots = 12, 4
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := pgtest.NewCluster(t)
	goroutines := runtime.NumGoroutine()
	const app = "leasehold-restart-test"
	store, err := postgres.Open(ctx, c.DSN(), postgres.Options{Config: spec.DefaultConfig(), MaxConns: 4, ApplicationName: app})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			store.Close()
		}
	}()
	var ids []string
	for i := range runs {
		id := fmt.Sprintf("r%02d", i)
		ids = append(ids, id)
		if _, err := store.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id,
			Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}

	p := &countingProvider{}
	gate := make(chan struct{})
	held := make(chan string, runs)
	handler := func(ctx context.Context, job *worker.Job) ([]byte, error) {
		held <- job.RunID
		<-gate
		ref, err := job.Effect(ctx, p.effect("charge-"+job.RunID))
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"ref": ref})
	}
	var mu sync.Mutex
	completions := map[string]int{}
	finishedAt := map[string]time.Time{}
	all := make(chan struct{})
	watch, resending := logwatch.New("sending it again")
	w, err := worker.New(worker.Config{Store: store, Tenants: []string{"acme"}, Handler: worker.HandlerFunc(handler), ID: "restart-worker",
		Concurrency: slots, Idle: 50 * time.Millisecond, IdleJitter: 10 * time.Millisecond,
		Logger: slog.New(watch),
		OnResult: func(r worker.Result) {
			mu.Lock()
			defer mu.Unlock()
			if r.Outcome != worker.OutcomeCompleted {
				t.Errorf("result %+v (err %v), want every attempt completed", r, r.Err)
				return
			}
			completions[r.RunID]++
			finishedAt[r.RunID] = time.Now()
			if len(completions) == runs {
				close(all)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(runCtx) }()
	defer func() { stop(); <-done }()

	inFlight := map[string]bool{}
	for range slots {
		inFlight[recvCtx(t, ctx, "a held handler", held)] = true
	}
	c.Stop(t) // every session is terminated while the worker holds four leases
	close(gate)
	// The held handlers' ledger writes now fail and are sent again.
	recvCtx(t, ctx, "a write sent again during the outage", resending)
	// Recovery is counted from the start command: the moment the server
	// accepts connections again lies somewhere within pg_ctl start.
	up := time.Now()
	c.Start(t)
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("not every run completed after the restart: %d of %d", len(completions), runs)
	}
	var recovery time.Duration
	mu.Lock()
	for id := range inFlight {
		recovery = max(recovery, finishedAt[id].Sub(up))
	}
	mu.Unlock()

	stop()
	<-done
	lost, duplicated, stale := accounting(t, ctx, store, ids, completions)
	doubles := p.doubles()
	if doubles != 0 {
		t.Errorf("%d effects applied more than once", doubles)
	}
	metrics.Report(t, metrics.Line{Check: "fault/pg-restart-mid-run", Store: "postgres", Operations: runs,
		Violations: lost + duplicated + doubles + stale,
		Faults: &metrics.Faults{Injected: 1, Lost: lost, Duplicated: duplicated, DoubleEffects: doubles, StaleAccepted: stale,
			MaxRecoveryMs: recovery.Milliseconds()}})

	// Nothing is left behind: the store's connections (its pool's and the
	// listener's) end, and so does every goroutine the worker and the store
	// started. Both settle asynchronously: wait, bounded.
	store.Close()
	closed = true
	conn := c.Conn(t)
	var left int
	settled := waitFor(ctx, func() bool {
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name IN ($1, $2)`, app, app+"-listen").Scan(&left)
		return err == nil && left == 0
	})
	if !settled {
		t.Errorf("%d connections of the closed store are still open (pg_stat_activity, application_name %s)", left, app)
	}
	if !waitFor(ctx, func() bool { return runtime.NumGoroutine() <= goroutines }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the worker and its store were closed, %d before they started:\n%s",
			runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
	}
}

// TestListenerResyncsAfterRestart: the notification listener of a worker
// reconnects after the server restarted, delivers resync, and hears the
// next run's NOTIFY; the worker, whose idle poll is an hour (only
// notifications wake it), claims and completes that run.
func TestListenerResyncsAfterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := pgtest.NewCluster(t)
	store, err := postgres.Open(ctx, c.DSN(), postgres.Options{Config: spec.DefaultConfig(), MaxConns: 4, ApplicationName: "leasehold-listen-test"})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer store.Close()
	notes := make(chan spec.Notification, 100)
	results := make(chan worker.Result, 10)
	w, err := worker.New(worker.Config{Store: notifySpy{store, notes}, Tenants: []string{"acme"}, ID: "listen-worker",
		Idle: time.Hour, Handler: worker.HandlerFunc(func(context.Context, *worker.Job) ([]byte, error) { return nil, nil }),
		OnResult: func(r worker.Result) { results <- r }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(runCtx) }()
	defer func() { stop(); <-done }()

	note := func(kind spec.NotificationKind, runID string) {
		t.Helper()
		for {
			n := recvCtx(t, ctx, fmt.Sprintf("a %s notification", kind), notes)
			if n.Kind == kind && n.RunID == runID {
				return
			}
		}
	}
	create := func(id string) {
		t.Helper()
		// After the restart the test's own pool holds dead connections
		// too: a client sends an unavailable admission again, as it may.
		for {
			_, err := store.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id,
				Payload: []byte(`{}`)})
			if err == nil {
				break
			}
			if spec.CodeOf(err) != spec.CodeUnavailable || ctx.Err() != nil {
				t.Fatalf("create %s: %v", id, err)
			}
		}
		note(spec.NotifyRunCreated, id)
		if r := recvCtx(t, ctx, "the run's result", results); r.RunID != id || r.Outcome != worker.OutcomeCompleted {
			t.Fatalf("result %+v (err %v), want %s completed", r, r.Err, id)
		}
	}
	note(spec.NotifyResync, "") // the listener is listening
	create("before")
	c.Stop(t)
	up := time.Now() // from the start command, as in TestPostgresRestartMidRun
	c.Start(t)
	note(spec.NotifyResync, "") // it reconnected after the restart
	resynced := time.Since(up)
	create("after")
	metrics.Report(t, metrics.Line{Check: "fault/pg-restart-listener", Store: "postgres", Operations: 2,
		Faults: &metrics.Faults{Injected: 1, MaxRecoveryMs: resynced.Milliseconds()}})
}

// notifySpy passes a store's notifications on to the worker and copies them
// to notes.
type notifySpy struct {
	*postgres.Store
	notes chan<- spec.Notification
}

func (s notifySpy) Listen(ctx context.Context, fn func(spec.Notification)) error {
	return s.Store.Listen(ctx, func(n spec.Notification) {
		fn(n)
		s.notes <- n
	})
}

// recvCtx waits for a value on ch, bounded by ctx.
func recvCtx[T any](t *testing.T, ctx context.Context, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
		var zero T
		return zero
	}
}

// waitFor polls cond until it holds or ctx ends: for what settles
// asynchronously (a server closing backends, goroutines exiting).
func waitFor(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

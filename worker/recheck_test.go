package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

// lockedBuffer is a log sink safe for the worker's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRecheckSparesPublishingAttempts: the recheck after the listener
// reconnects (recheckActive) fences an attempt whose handler still runs
// and whose run was cancelled meanwhile, with its warning; it leaves alone
// an attempt whose completion has committed and is being acknowledged, which
// completes, with no warning that it publishes nothing more (it already
// published). The completion is held after its commit by the store's hook;
// the recheck runs in the test's goroutine, so its verdict is known when
// it returns.
func TestRecheckSparesPublishingAttempts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	committed, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(_ context.Context, op spec.Op, p spec.HookPoint) error {
		if op == spec.OpComplete && p == spec.AfterCommit {
			once.Do(func() { close(committed); <-release })
		}
		return nil
	}
	h := sqlitetest.Factory(t, storetest.Options{Config: spec.DefaultConfig(), Hook: hook})
	for _, id := range []string{"done", "cancelled"} {
		if _, err := h.Store.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id,
			Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	running := make(chan struct{})
	results := make(chan Result, 2)
	var logs lockedBuffer
	w, err := New(Config{Store: h.Store, Tenants: []string{"acme"}, ID: "w1", Concurrency: 2, NoNotify: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnResult: func(r Result) { results <- r },
		Handler: HandlerFunc(func(ctx context.Context, j *Job) ([]byte, error) {
			if j.RunID == "done" {
				return []byte(`{}`), nil
			}
			close(running)
			<-ctx.Done()
			return nil, context.Cause(ctx)
		})})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); w.Run(runCtx) }()
	defer func() { stop(); <-stopped }()
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
	wait("the completion of run done to commit", committed)
	wait("the handler of run cancelled to run", running)
	if _, err := h.Store.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: "cancelled"}); err != nil {
		t.Fatal(err)
	}

	w.recheckActive()
	close(release)
	got := map[string]Outcome{}
	for range 2 {
		select {
		case r := <-results:
			got[r.RunID] = r.Outcome
		case <-ctx.Done():
			t.Fatalf("waiting for the attempts' results (have %v): %v", got, ctx.Err())
		}
	}
	if got["done"] != OutcomeCompleted || got["cancelled"] != OutcomeCancelled {
		t.Fatalf("outcomes %v; want done completed and cancelled cancelled", got)
	}
	var warned []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "publishing nothing more") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "run_id=cancelled") {
		t.Fatalf("warnings that an attempt publishes nothing more: %q; want one, of run cancelled (run done had published)", warned)
	}
}

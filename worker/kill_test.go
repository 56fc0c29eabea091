package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// A worker process killed with SIGKILL in the middle of its handler — after
// its external call took effect, before the effect ledger recorded it — and
// a second process that recovers the job once the lease expired: the run
// ends with exactly one terminal event, and the external call happened once.

// Environment of the child process (the test binary, re-executed).
const (
	childEnv         = "LEASEHOLD_WORKER_CHILD" // "1": run as the child worker, not the tests
	childBackendEnv  = "LEASEHOLD_CHILD_BACKEND"
	childTargetEnv   = "LEASEHOLD_CHILD_TARGET" // SQLite file, or PostgreSQL DSN
	childSchemaEnv   = "LEASEHOLD_CHILD_SCHEMA"
	childProviderEnv = "LEASEHOLD_CHILD_PROVIDER"
	childID          = "child-worker"
)

// fileProvider is an external system shared by processes: a charge appends
// "key ref" to a file (and syncs it) before the call returns; Status reads
// the file. It honours no fencing and does not deduplicate: calling it twice
// for one key charges twice, which the test would see.
type fileProvider struct {
	path string
	mu   sync.Mutex
}

func (p *fileProvider) charge(key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.charges(key)) + 1
	ref := fmt.Sprintf("ch_%s_%d", key, n)
	f, err := os.OpenFile(p.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %s\n", key, ref); err != nil {
		return "", err
	}
	return ref, f.Sync()
}

// charges lists the references charged for key.
func (p *fileProvider) charges(key string) []string {
	b, err := os.ReadFile(p.path)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, ref, ok := strings.Cut(line, " "); ok && k == key {
			out = append(out, ref)
		}
	}
	return out
}

func (p *fileProvider) status(key string) (worker.EffectStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if refs := p.charges(key); len(refs) > 0 {
		return worker.EffectStatus{State: spec.EffectSucceeded, ProviderRef: refs[0]}, nil
	}
	return worker.EffectStatus{State: spec.EffectFailed}, nil
}

// chargeHandler charges once per run through the effect ledger and
// completes with the charge's reference. afterCharge, when set, runs right
// after the provider took the charge, before the ledger records it.
func chargeHandler(p *fileProvider, afterCharge func(*worker.Job)) worker.HandlerFunc {
	return func(ctx context.Context, job *worker.Job) ([]byte, error) {
		key := "charge-" + job.RunID
		ref, err := job.Effect(ctx, worker.Effect{Step: "charge", Key: key,
			Call: func(context.Context, worker.EffectRequest) (string, error) {
				ref, err := p.charge(key)
				if err == nil && afterCharge != nil {
					afterCharge(job)
				}
				return ref, err
			},
			Status: func(context.Context, worker.EffectRequest) (worker.EffectStatus, error) { return p.status(key) },
		})
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"charge": ref})
	}
}

// openTarget opens the store a child and its parent share.
func openTarget(ctx context.Context, backend, target, schema string, clk clock.Clock) (spec.Store, error) {
	switch backend {
	case "sqlite":
		return sqlite.Open(ctx, target, sqlite.Options{Config: spec.DefaultConfig(), Clock: clk})
	case "postgres":
		return postgres.Open(ctx, target, postgres.Options{Config: spec.DefaultConfig(), Clock: clk, Schema: schema, MaxConns: 2})
	}
	return nil, fmt.Errorf("unknown backend %q", backend)
}

// runChild is the child process: a worker whose handler, once the provider
// has taken the charge, prints "charged RUN GENERATION" and blocks until the
// parent kills the process. Its clock never moves, so it never renews.
func runChild() int {
	if os.Getenv(childModeEnv) == "pause" {
		return runPauseChild()
	}
	ctx := context.Background()
	clk := clock.NewManual(t0)
	store, err := openTarget(ctx, os.Getenv(childBackendEnv), os.Getenv(childTargetEnv), os.Getenv(childSchemaEnv), clk)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open store:", err)
		return 2
	}
	p := &fileProvider{path: os.Getenv(childProviderEnv)}
	w, err := worker.New(worker.Config{Store: store, Tenants: []string{"acme"}, ID: childID, Lease: 30 * time.Second,
		Timers: clk, Random: zeroRandom{}, NoNotify: true,
		Handler: chargeHandler(p, func(job *worker.Job) {
			fmt.Printf("charged %s %d\n", job.RunID, job.Generation)
			os.Stdout.Sync()
			select {} // blocked mid-handler until SIGKILL
		})})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: worker:", err)
		return 2
	}
	_ = w.Run(ctx)
	fmt.Fprintln(os.Stderr, "child: Run returned, which it never should before the kill")
	return 3
}

func TestKilledWorkerRecovers(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var target, schema string
		if b.name == "sqlite" {
			target = filepath.Join(t.TempDir(), "leasehold.db")
		} else {
			target, schema = pgtest.Schema(t)
		}
		clk := clock.NewManual(t0)
		store, err := openTarget(ctx, b.name, target, schema, clk)
		if err != nil {
			t.Fatalf("open the shared store: %v", err)
		}
		t.Cleanup(func() { store.Close() })
		if _, err := store.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-1",
			RunID: "r1", Payload: []byte(`{"amount":100}`)}); err != nil {
			t.Fatal(err)
		}
		p := &fileProvider{path: filepath.Join(t.TempDir(), "charges")}

		// The child claims r1 (generation 1), charges, and is killed.
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", childBackendEnv+"="+b.name, childTargetEnv+"="+target,
			childSchemaEnv+"="+schema, childProviderEnv+"="+p.path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the child worker: %v", err)
		}
		lines := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		select {
		case line, ok := <-lines:
			if !ok || line != "charged r1 1" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child said %q (ok %v), want \"charged r1 1\"; its stderr:\n%s", line, ok, stderr.String())
			}
		case <-ctx.Done():
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the child never reached its handler; its stderr:\n%s", stderr.String())
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL the child: %v", err)
		}
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child ended with %v, want killed by SIGKILL", cmd.ProcessState)
		}

		// What the killed worker left: its lease, an effect reserved by its
		// generation and never recorded, one charge at the provider.
		job, err := store.GetJob(ctx, "acme", "r1")
		if err != nil || job.State != spec.JobLeased || job.LeaseOwner != childID || job.Generation != 1 {
			t.Fatalf("job after the kill: %+v, %v; want leased by %s at generation 1", job, err, childID)
		}
		effs, err := store.Effects(ctx, "acme", "r1")
		if err != nil || len(effs) != 1 || effs[0].State != spec.EffectReserved || effs[0].Generation != 1 {
			t.Fatalf("effects after the kill: %+v, %v; want one reserved by generation 1", effs, err)
		}

		// A second process (here, a worker on the parent's own store) takes
		// over once the lease has expired.
		if _, err := clk.Advance(30_000); err != nil {
			t.Fatal(err)
		}
		results := make(chan worker.Result, 1)
		w, err := worker.New(worker.Config{Store: store, Tenants: []string{"acme"}, ID: "recoverer", Lease: 30 * time.Second,
			Timers: clock.NewManual(0), Random: zeroRandom{}, NoNotify: true, Handler: chargeHandler(p, nil),
			OnResult: func(r worker.Result) { results <- r }})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); w.Run(runCtx) }()
		defer func() { stop(); <-done }()
		var r worker.Result
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Fatalf("the recovering worker reported nothing")
		}
		if r.Outcome != worker.OutcomeCompleted || r.Generation != 2 {
			t.Fatalf("recovering worker's result %+v (err %v), want completed at generation 2", r, r.Err)
		}
		if got := p.charges("charge-r1"); len(got) != 1 {
			t.Fatalf("provider charges for r1: %v, want exactly one (the killed worker's, reconciled, never repeated)", got)
		}
		run, err := store.GetRun(ctx, "acme", "r1")
		if err != nil || run.State != spec.RunCompleted || run.Result != `{"charge":"ch_charge-r1_1"}` {
			t.Fatalf("run: %+v, %v; want completed with the first charge's reference", run, err)
		}
		events, err := store.Events(ctx, "acme", "r1")
		if err != nil {
			t.Fatal(err)
		}
		terminal := 0
		for _, ev := range events {
			if ev.Kind.Terminal() {
				terminal++
			}
		}
		if terminal != 1 || events[len(events)-1].Payload != spec.CompletedPayload(2) {
			t.Fatalf("events %+v: want exactly one terminal event, run_completed by generation 2", events)
		}
		att, err := store.Attempts(ctx, "acme", "r1")
		if err != nil || len(att) != 2 || att[0].Outcome != spec.AttemptExpired || att[1].Outcome != spec.AttemptCompleted {
			t.Fatalf("attempts %+v, %v; want generation 1 expired, generation 2 completed", att, err)
		}
		effs, err = store.Effects(ctx, "acme", "r1")
		if err != nil || len(effs) != 1 || effs[0].State != spec.EffectSucceeded || effs[0].Generation != 2 || effs[0].ProviderRef != "ch_charge-r1_1" {
			t.Fatalf("effects %+v, %v; want the charge reconciled as succeeded by generation 2", effs, err)
		}
	})
}

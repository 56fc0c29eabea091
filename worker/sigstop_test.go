package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// A worker process stopped with SIGSTOP between reserving an effect and
// calling the provider, past its lease; another worker reclaims the run,
// reconciles, charges and completes; the stopped process gets SIGCONT and
// must not charge again. Real time passes here (the stop must outlast a
// real lease), so the child's lease is short.

const (
	childModeEnv = "LEASEHOLD_CHILD_MODE" // "pause": runPauseChild
	pauseLease   = 2 * time.Second
)

// reserveThenBlock is the child's store: after the first ReserveEffect has
// returned it prints "reserved RUN GENERATION" and blocks until a byte
// arrives on stdin, so that the parent's SIGSTOP lands exactly between the
// reservation and the provider call. From then on it also holds renewals
// until effectDone is closed (the handler's Job.Effect returned): the
// overdue renewal that would reveal the lost lease after SIGCONT must not
// win the race against the provider call (over a slow network it would
// not), so that only the worker's check before the call stands between the
// wake-up and a second charge.
type reserveThenBlock struct {
	spec.Store
	reserved   atomic.Bool
	effectDone chan struct{}
}

func (s *reserveThenBlock) ReserveEffect(ctx context.Context, q spec.ReserveEffectRequest) (spec.EffectReservation, error) {
	r, err := s.Store.ReserveEffect(ctx, q)
	if s.reserved.CompareAndSwap(false, true) {
		fmt.Printf("reserved %s %d\n", q.Lease.RunID, q.Lease.Generation)
		os.Stdout.Sync()
		var b [1]byte
		if _, rerr := io.ReadFull(os.Stdin, b[:]); rerr != nil {
			fmt.Fprintln(os.Stderr, "child: reading stdin:", rerr)
			os.Exit(4)
		}
	}
	return r, err
}

func (s *reserveThenBlock) Renew(ctx context.Context, q spec.RenewRequest) (spec.Lease, error) {
	if s.reserved.Load() {
		<-s.effectDone
	}
	return s.Store.Renew(ctx, q)
}

// runPauseChild is the child process of TestStoppedWorkerDoesNotChargeTwice:
// a worker on the real clocks (the store's, and Go's monotonic time) with a
// short lease, printing each attempt's result as "result OUTCOME GENERATION".
func runPauseChild() int {
	ctx := context.Background()
	store, err := openTarget(ctx, os.Getenv(childBackendEnv), os.Getenv(childTargetEnv), os.Getenv(childSchemaEnv), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open store:", err)
		return 2
	}
	p := &fileProvider{path: os.Getenv(childProviderEnv)}
	s := &reserveThenBlock{Store: store, effectDone: make(chan struct{})}
	charge := chargeHandler(p, nil)
	var once sync.Once
	w, err := worker.New(worker.Config{Store: s, Tenants: []string{"acme"}, ID: childID, Lease: pauseLease,
		Random: zeroRandom{}, NoNotify: true,
		Handler: worker.HandlerFunc(func(ctx context.Context, job *worker.Job) ([]byte, error) {
			defer once.Do(func() { close(s.effectDone) })
			return charge(ctx, job)
		}),
		OnResult: func(r worker.Result) {
			fmt.Printf("result %s %d\n", r.Outcome, r.Generation)
			os.Stdout.Sync()
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: worker:", err)
		return 2
	}
	_ = w.Run(ctx)
	return 3
}

// waitStopped waits until the child pid has stopped (wait4 with
// WUNTRACED reports a stop without reaping the child).
func waitStopped(pid int) error {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return err
		case !ws.Stopped():
			return fmt.Errorf("the child did not stop: %v", ws)
		}
		return nil
	}
}

func TestStoppedWorkerDoesNotChargeTwice(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var target, schema string
		if b.name == "sqlite" {
			target = filepath.Join(t.TempDir(), "leasehold.db")
		} else {
			target, schema = pgtest.Schema(t)
		}
		// The real clocks: the system clock (SQLite) or the database's.
		store, err := openTarget(ctx, b.name, target, schema, nil)
		if err != nil {
			t.Fatalf("open the shared store: %v", err)
		}
		t.Cleanup(func() { store.Close() })
		if _, err := store.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-1",
			RunID: "r1", Payload: []byte(`{"amount":100}`)}); err != nil {
			t.Fatal(err)
		}
		p := &fileProvider{path: filepath.Join(t.TempDir(), "charges")}

		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", childModeEnv+"=pause", childBackendEnv+"="+b.name, childTargetEnv+"="+target,
			childSchemaEnv+"="+schema, childProviderEnv+"="+p.path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the child worker: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			cmd.Wait()
		})
		lines := make(chan string, 4)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		line := func(what string) string {
			t.Helper()
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child ended before %s; its stderr:\n%s", what, stderr.String())
				}
				return l
			case <-ctx.Done():
				t.Fatalf("the child never reported %s; its stderr:\n%s", what, stderr.String())
			}
			return ""
		}
		if l := line("its reservation"); l != "reserved r1 1" {
			t.Fatalf("child said %q, want \"reserved r1 1\"; its stderr:\n%s", l, stderr.String())
		}
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP the child: %v", err)
		}
		if err := waitStopped(cmd.Process.Pid); err != nil {
			t.Fatalf("waiting for the child to stop: %v", err)
		}
		stopped := time.Now()
		// Unblock the reservation now, so that the child goes straight on
		// to its provider call the moment it continues.
		if _, err := stdin.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}

		// A worker in this process takes the run over once the child's
		// lease has expired by the store's clock.
		results := make(chan worker.Result, 1)
		w, err := worker.New(worker.Config{Store: store, Tenants: []string{"acme"}, ID: "recoverer", Lease: 30 * time.Second,
			Idle: 20 * time.Millisecond, IdleJitter: time.Millisecond, NoNotify: true, Handler: chargeHandler(p, nil),
			OnResult: func(r worker.Result) { results <- r }})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); w.Run(runCtx) }()
		defer func() { stop(); <-done }()
		select {
		case r := <-results:
			if r.Outcome != worker.OutcomeCompleted || r.Generation != 2 {
				t.Fatalf("recovering worker's result %+v (err %v), want completed at generation 2", r, r.Err)
			}
		case <-ctx.Done():
			t.Fatal("the recovering worker reported nothing")
		}
		recovered := time.Since(stopped)
		if got := p.charges("charge-r1"); len(got) != 1 {
			t.Fatalf("charges after the takeover: %v, want exactly one", got)
		}

		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT the child: %v", err)
		}
		l := line("its attempt's result")
		charges := p.charges("charge-r1")
		doubles := int64(0)
		if len(charges) > 1 {
			doubles = 1
		}
		metrics.Report(t, metrics.Line{Check: "fault/sigstop-between-reserve-and-call", Store: b.name, Operations: 1, Violations: doubles,
			Faults: &metrics.Faults{Injected: 1, DoubleEffects: doubles, MaxRecoveryMs: recovered.Milliseconds()}})
		if len(charges) != 1 {
			t.Fatalf("charges after the stopped worker continued: %v, want exactly one (the stopped worker charged again)", charges)
		}
		if !strings.HasPrefix(l, "result lost 1") {
			t.Fatalf("the stopped worker's result %q, want lost at generation 1", l)
		}
		run, err := store.GetRun(ctx, "acme", "r1")
		if err != nil || run.State != spec.RunCompleted || run.Result != `{"charge":"ch_charge-r1_1"}` {
			t.Fatalf("run %+v, %v; want completed with the one charge", run, err)
		}
	})
}

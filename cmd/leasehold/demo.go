package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// demo reproduces the seed's companion example on a fresh SQLite file: one
// request sent twice with different proposed run ids resolves to one run,
// which a worker claims at generation 1 and completes.
func demo(ctx context.Context, out io.Writer, dir string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "leasehold-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	path := filepath.Join(dir, "demo.db")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	// A manual clock, so that the demo decides when a second passes, set
	// to this host's time: the file it leaves is a database like any
	// other, which `leasehold doctor --sqlite` judges healthy (a clock at
	// 1970 left its idempotency record expired for decades).
	clk := clock.NewManual(time.Now().UnixMilli())
	store, err := sqlite.Open(ctx, path, sqlite.Options{Config: spec.DefaultConfig(), Clock: clk})
	if err != nil {
		return err
	}
	defer store.Close()
	fmt.Fprintf(out, "store: sqlite %s\n", path)

	req := spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-42",
		RunID: "run-a", Payload: []byte(`{"prompt": "summarize", "model": "m1"}`)}
	first, err := store.CreateRun(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "create run-a: run=%s replayed=%v\n", first.Run.ID, first.Replayed)

	req.RunID = "run-b"
	req.Payload = []byte(`{"model":"m1","prompt":"summarize"}`) // same request: other key order, no spaces
	second, err := store.CreateRun(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "create run-b: run=%s replayed=%v\n", second.Run.ID, second.Replayed)
	if !second.Replayed || second.Run.ID != first.Run.ID {
		return fmt.Errorf("demo: the second create should have replayed %s, got %+v", first.Run.ID, second)
	}

	req.Payload = []byte(`{"model":"m2","prompt":"summarize"}`)
	_, err = store.CreateRun(ctx, req)
	fmt.Fprintf(out, "create with another payload: %s\n", spec.CodeOf(err))
	if spec.CodeOf(err) != spec.CodeIdempotencyConflict {
		return fmt.Errorf("demo: want idempotency_conflict for a changed payload, got %v", err)
	}

	leases, err := store.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "worker-1", LeaseMs: 30_000, Limit: 1})
	if err != nil {
		return err
	}
	if len(leases) != 1 {
		return fmt.Errorf("demo: claim returned %d leases, want 1", len(leases))
	}
	lease := leases[0]
	fmt.Fprintf(out, "claim: run=%s generation=%d lease=%s\n", lease.RunID, lease.Generation, time.Duration(lease.ExpiresAt-clk.Now())*time.Millisecond)

	clk.Advance(1_000)
	run, err := store.Complete(ctx, spec.CompleteRequest{Lease: lease.Ref(), Result: []byte(`{"summary":"ok"}`)})
	if err != nil {
		return err
	}
	events, err := store.Events(ctx, "acme", run.ID)
	if err != nil {
		return err
	}
	for _, e := range events {
		fmt.Fprintf(out, "event %d: %s %s\n", e.Seq, e.Kind, e.Payload)
	}
	fmt.Fprintf(out, "created + replayed; generation=%d; status=%s; events=%d\n", lease.Generation, run.State, len(events))
	return nil
}

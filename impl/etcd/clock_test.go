package etcd_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/etcd"
	"github.com/leasehold/leasehold/impl/etcd/etcdtest"
	"github.com/leasehold/leasehold/spec"
)

// TestClusterClock: a store opened without a clock takes its time from the
// cluster clock. Before any ticker ran there is no time, and a write is
// refused (invalid_argument, nothing written); once RunClock ticks, every
// write's time comes from it: never behind a reading taken before the
// write, never ahead of the ticker's own clock after it, and never
// falling from one write to the next.
func TestClusterClock(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.Shared(t, members)
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	prefix := fmt.Sprintf("lhc-%d-%d", os.Getpid(), prefixes.Add(1))
	defer dropPrefix(cli, prefix)
	s, err := etcd.Open(cli, prefix, etcd.Options{Config: spec.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	clk := etcd.NewClusterClock(cli, prefix)
	if now := clk.Now(); now != -1 {
		t.Fatalf("the cluster clock reads %d before any ticker ran, want -1", now)
	}
	create := func(id string) (spec.Run, error) {
		res, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: id, RunID: id, Payload: []byte(`{}`)})
		return res.Run, err
	}
	if _, err := create("r0"); spec.CodeOf(err) != spec.CodeInvalidArgument {
		t.Fatalf("a write with no cluster time: want invalid_argument, got %v", err)
	}

	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); etcd.RunClock(tctx, cli, prefix, 10*time.Millisecond, 5) }()
	defer func() { cancel(); <-done }()
	for clk.Now() < 0 { // barrier: the ticker was elected and ticked once
		time.Sleep(5 * time.Millisecond)
	}
	var last int64
	for i := 1; i <= 5; i++ {
		before := clk.Now()
		run, err := create(fmt.Sprintf("r%d", i))
		if err != nil {
			t.Fatalf("create with the cluster clock: %v", err)
		}
		after := time.Now().UnixMilli() // the ticker runs in this process: its wall clock bounds the cluster's
		if run.CreatedAt < before || run.CreatedAt > after || run.CreatedAt < last {
			t.Fatalf("run %s created at %d: want within [%d (cluster clock before), %d (ticker's wall clock after)] and >= the previous write's %d",
				run.ID, run.CreatedAt, before, after, last)
		}
		last = run.CreatedAt
	}
	snap, err := s.Snapshot(ctx)
	if err != nil || len(snap.Runs) != 5 {
		t.Fatalf("snapshot: %d runs (want 5: the refused write wrote nothing), %v", len(snap.Runs), err)
	}
}

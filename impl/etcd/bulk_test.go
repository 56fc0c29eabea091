package etcd_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/impl/etcd"
	"github.com/leasehold/leasehold/impl/etcd/etcdtest"
	"github.com/leasehold/leasehold/spec"
)

// fixedClock is a clock that reads one time.
type fixedClock int64

func (c fixedClock) Now() int64 { return int64(c) }

// TestCreateRunsGuards: a write by another store (no in-process queue
// between them, as in another process) to a key a bulk admission read,
// made after the batch's reads and before its commit, fails the batch's
// compares; the batch is made again from fresh reads, and each member is
// decided on what the other store wrote. Each case's interloper writes
// once, at the batch's first before_commit: the batch commits on its
// second attempt, with the outcome the case names for its second member
// (the first, untouched, is created either way).
func TestCreateRunsGuards(t *testing.T) {
	const now = 1_000_000
	ctx := context.Background()
	mk := func(key, runID string) spec.CreateRunRequest {
		return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: key, RunID: runID, Payload: []byte(`{"n":1}`)}
	}
	for _, c := range []struct {
		name string
		// setup runs before the batch; interlope at its first before_commit.
		setup, interlope func(t *testing.T, other *etcd.Store)
		// want checks the second member's outcome.
		want func(t *testing.T, out spec.CreateOutcome)
	}{
		{
			name: "the member's key admitted meanwhile",
			interlope: func(t *testing.T, other *etcd.Store) {
				mustCreate(t, other, mk("k2", "theirs"))
			},
			want: func(t *testing.T, out spec.CreateOutcome) {
				if out.Err != nil || !out.Result.Replayed || out.Result.Run.ID != "theirs" {
					t.Fatalf("member k2: %+v; want a replay of run theirs, admitted under its key before the batch committed", out)
				}
			},
		},
		{
			name: "the member's run id taken meanwhile",
			interlope: func(t *testing.T, other *etcd.Store) {
				mustCreate(t, other, mk("other-key", "r2"))
			},
			want: func(t *testing.T, out spec.CreateOutcome) {
				if spec.CodeOf(out.Err) != spec.CodeAlreadyExists {
					t.Fatalf("member r2: %+v; want already_exists, its run id taken before the batch committed", out)
				}
			},
		},
		{
			name: "the replayed run cancelled meanwhile",
			setup: func(t *testing.T, other *etcd.Store) {
				mustCreate(t, other, mk("k2", "r2"))
			},
			interlope: func(t *testing.T, other *etcd.Store) {
				if _, err := other.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: "r2"}); err != nil {
					t.Errorf("cancel r2: %v", err)
				}
			},
			want: func(t *testing.T, out spec.CreateOutcome) {
				if out.Err != nil || !out.Result.Replayed || out.Result.Run.State != spec.RunCancelled {
					t.Fatalf("member k2: %+v; want a replay of r2 as it is at the commit, cancelled", out)
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := etcdtest.Shared(t, members)
			prefix := fmt.Sprintf("lhg-%d-%d", os.Getpid(), prefixes.Add(1))
			open := func(hook spec.Hook) *etcd.Store {
				cli, err := cl.Client()
				if err != nil {
					t.Fatalf("etcd client: %v", err)
				}
				t.Cleanup(func() { cli.Close() })
				s, err := etcd.Open(cli, prefix, etcd.Options{Config: spec.DefaultConfig(), Clock: fixedClock(now), Hook: hook})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				return s
			}
			other := open(nil)
			t.Cleanup(func() { dropPrefix(other.Client(), prefix) })
			var attempts atomic.Int64
			batch := open(func(ctx context.Context, op spec.Op, p spec.HookPoint) error {
				if op == spec.OpCreateRuns && p == spec.BeforeCommit && attempts.Add(1) == 1 {
					c.interlope(t, other)
				}
				return nil
			})
			if c.setup != nil {
				c.setup(t, other)
			}
			outs, err := batch.CreateRuns(ctx, []spec.CreateRunRequest{mk("k1", "r1"), mk("k2", "r2")})
			if err != nil {
				t.Fatalf("CreateRuns: %v; want it committed on its second attempt", err)
			}
			if n := attempts.Load(); n != 2 {
				t.Fatalf("CreateRuns reached before_commit %d times; want 2 (the interloper's write failed the first attempt's compares)", n)
			}
			if len(outs) != 2 || outs[0].Err != nil || outs[0].Result.Replayed || outs[0].Result.Run.ID != "r1" {
				t.Fatalf("outcomes %+v; want member r1 created", outs)
			}
			c.want(t, outs[1])
		})
	}
}

// mustCreate admits req through s.
func mustCreate(t *testing.T, s *etcd.Store, req spec.CreateRunRequest) {
	t.Helper()
	if _, err := s.CreateRun(context.Background(), req); err != nil {
		t.Fatalf("CreateRun %s/%s: %v", req.IdempotencyKey, req.RunID, err)
	}
}

// TestCreateRunsTxnLimit: on a member whose --max-txn-ops is etcd's default
// (128), a bulk admission whose one Txn fits commits, and one past it is
// refused before it is proposed: unavailable, naming the limit, nothing
// written. A created member without outbox messages is seven writes (its
// run and its listing entry, its first event, its idempotency record and
// that record's expiry entry, its job and the job's claim-index entry), and a Txn carries one commit marker: 18 members are 127 writes
// and fit, 19 are 134 and do not.
func TestCreateRunsTxnLimit(t *testing.T) {
	cl, err := etcdtest.StartWith(t.TempDir(), 1, "-max-txn-ops", "128")
	if err != nil {
		t.Fatalf("start a member with -max-txn-ops 128: %v", err)
	}
	t.Cleanup(cl.Stop)
	cli, err := cl.Client()
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	s, err := etcd.Open(cli, "lhl", etcd.Options{Config: spec.DefaultConfig(), Clock: fixedClock(1_000_000)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	ctx := context.Background()
	runs := func() int {
		t.Helper()
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		return len(snap.Runs)
	}
	for _, c := range []struct {
		name    string
		members int
		fits    bool
	}{
		{"19 members, past the limit", 19, false},
		{"18 members, within it", 18, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			reqs := make([]spec.CreateRunRequest, c.members)
			for i := range reqs {
				id := fmt.Sprintf("n%d-%02d", c.members, i)
				reqs[i] = spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: id, RunID: id, Payload: []byte(`{}`)}
			}
			before := runs()
			outs, err := s.CreateRuns(ctx, reqs)
			if !c.fits {
				if spec.CodeOf(err) != spec.CodeUnavailable || outs != nil || !strings.Contains(err.Error(), "--max-txn-ops") {
					t.Fatalf("CreateRuns of %d members: %d outcomes, %v; want unavailable naming --max-txn-ops, no outcomes", c.members, len(outs), err)
				}
				if n := runs(); n != before {
					t.Fatalf("runs after the refused batch: %d, want %d (nothing written)", n, before)
				}
				return
			}
			if err != nil || len(outs) != c.members {
				t.Fatalf("CreateRuns of %d members: %d outcomes, %v; want all created", c.members, len(outs), err)
			}
			for i, o := range outs {
				if o.Err != nil || o.Result.Replayed {
					t.Fatalf("member %d: %+v, want created", i, o)
				}
			}
			if n := runs(); n != before+c.members {
				t.Fatalf("runs after the batch: %d, want %d", n, before+c.members)
			}
		})
	}
}

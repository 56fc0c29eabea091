package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/impl/etcd"
	"github.com/leasehold/leasehold/impl/etcd/etcdtest"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/spec"
)

// conns remembers a client's connections so that a fault can cut them all.
type conns struct {
	mu   sync.Mutex
	open []net.Conn
}

func (c *conns) dial(ctx context.Context, addr string) (net.Conn, error) {
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "unix://")
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err == nil {
		c.mu.Lock()
		c.open = append(c.open, conn)
		c.mu.Unlock()
	}
	return conn, err
}

// cut closes every connection the client has: requests in flight fail,
// whether or not the member received them.
func (c *conns) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.open {
		conn.Close()
	}
	c.open = nil
}

// faults counts what the fault test injected.
type faults struct {
	kills, leaderKills, restarts, cuts, lost, commits atomic.Int64
	mu                                                sync.Mutex
	stores                                            []*etcd.Store
}

// resolutions sums the stores' answers to lost commit replies.
func (f *faults) resolutions() (applied, fenced, unresolved int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.stores {
		a, b, c := s.Resolutions()
		applied, fenced, unresolved = applied+a, fenced+b, unresolved+c
	}
	return
}

// costlyUnknown are the operations whose unknown outcome the checker pays
// for the most (pending to the end of a history, it doubles the states
// carried until its effect is overwritten): as the harness's own faults
// never make a claim, a reap or a purge unknown, this test's cuts spare
// them, or a whole history (with purges) can pass the checker's timeout.
var costlyUnknown = map[spec.Op]bool{
	spec.OpClaim: true, spec.OpReap: true, spec.OpPurge: true, spec.OpPurgeRuns: true,
	spec.OpReserveEffect: true, spec.OpRecordEffect: true, spec.OpReconcileEffect: true, spec.OpClaimOutbox: true,
}

// lostEvery: one commit in lostEvery has its answer cut off.
const lostEvery = 600

// faultyFactory opens stores on cluster c, each with its own client whose
// connections are cut, now and then, right after the store's before_commit
// hook: the cut races the commit, so the Txn fails before it was sent, or
// after it reached the leader (its answer lost), or not at all.
func faultyFactory(c *etcdtest.Cluster, f *faults, cutOneIn int) leaseholdtest.Factory {
	return func(t testing.TB, opts leaseholdtest.Options) leaseholdtest.Handle {
		prefix := fmt.Sprintf("lhf-%d-%d", os.Getpid(), prefixes.Add(1))
		open := func(t testing.TB, o leaseholdtest.Options) leaseholdtest.Contract {
			cc := &conns{}
			cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
				DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
				DialOptions: []grpc.DialOption{grpc.WithContextDialer(cc.dial)}})
			if err != nil {
				t.Fatalf("etcd client: %v", err)
			}
			inner := o.Hook
			hook := func(ctx context.Context, op spec.Op, p spec.HookPoint) error {
				if p == spec.BeforeCommit && cutOneIn > 0 && !costlyUnknown[op] && rand.IntN(cutOneIn) == 0 {
					f.cuts.Add(1)
					delay := time.Duration(rand.IntN(1500)) * time.Microsecond
					go func() { time.Sleep(delay); cc.cut() }()
				}
				// Every lostEvery-th commit loses its answer: a few
				// unknown outcomes per history, not so many that the
				// checker's search explodes.
				if p == spec.AfterCommit && cutOneIn > 0 && !costlyUnknown[op] && f.commits.Add(1)%lostEvery == lostEvery/2 {
					// The answer of a commit that applied is lost with the
					// connection: the caller must see unknown_outcome.
					f.lost.Add(1)
					cc.cut()
					return errors.New("the connection was cut after the commit")
				}
				if inner == nil {
					return nil
				}
				return inner(ctx, op, p)
			}
			s, err := etcd.Open(cli, prefix, etcd.Options{Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: hook})
			if err != nil {
				cli.Close()
				t.Fatalf("open etcd store: %v", err)
			}
			t.Cleanup(func() { cli.Close() })
			f.mu.Lock()
			f.stores = append(f.stores, s)
			f.mu.Unlock()
			return s
		}
		s := open(t, opts)
		return leaseholdtest.Handle{
			Store:    s,
			Reopen:   func(t testing.TB) leaseholdtest.Contract { return open(t, opts) },
			OpenWith: func(t testing.TB, o leaseholdtest.Options) leaseholdtest.Contract { return open(t, o) },
			Caps:     leaseholdtest.Caps{Hooks: true},
		}
	}
}

// inject kills members until ctx ends: a follower or the leader by turns,
// SIGKILLed and started again on its data directory once the cluster has
// run on two members for a while. Never two at once, so a quorum stays.
func inject(ctx context.Context, t *testing.T, c *etcdtest.Cluster, f *faults, leader bool) {
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(600 * time.Millisecond):
		}
		victim := rand.IntN(len(c.Members))
		if l := c.Leader(); leader && i%2 == 1 && l >= 0 {
			victim = l
			f.leaderKills.Add(1)
		} else if l == victim {
			victim = (victim + 1) % len(c.Members)
		}
		c.Kill(victim)
		f.kills.Add(1)
		time.Sleep(400 * time.Millisecond)
		if err := c.Restart(victim); err != nil {
			t.Errorf("restart member %d on its data directory: %v", victim, err)
			return
		}
		f.restarts.Add(1)
	}
}

// faultRun runs the linearizability check on a cluster of its own while
// members are killed and restarted (and, with cutOneIn > 0, connections
// cut around commits), then checks that the cluster lost nothing it
// acknowledged: the harness's accounting (every acknowledged run terminal
// after the drain, no effect twice, no stale write) runs on the rows read
// back after the faults.
func faultRun(t *testing.T, leader bool, cutOneIn int) {
	c, err := etcdtest.Start(t.TempDir(), members)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	f := &faults{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inject(ctx, t, c, f, leader) }()
	leaseholdtest.Linearizability(t, leaseholdtest.Store{Name: "etcd-faults", Factory: faultyFactory(c, f, cutOneIn)})
	cancel()
	<-done
	t.Logf("faults: %d members SIGKILLed (%d of them the leader), %d restarted on their data directories, %d connection cuts racing a commit, %d after one (answer lost)",
		f.kills.Load(), f.leaderKills.Load(), f.restarts.Load(), f.cuts.Load(), f.lost.Load())
	applied, fenced, unresolved := f.resolutions()
	t.Logf("commits whose answer was lost: %d found applied, %d fenced (never applied: unavailable), %d unresolved (unknown_outcome)",
		applied, fenced, unresolved)
	if f.kills.Load() == 0 || f.restarts.Load() == 0 {
		t.Errorf("no member was killed and restarted during the run: the fault test tested nothing")
	}
	if leader && f.leaderKills.Load() == 0 {
		t.Errorf("the leader was never killed during the run")
	}
	if cutOneIn > 0 && f.cuts.Load() == 0 {
		t.Errorf("no connection was cut during the run")
	}
}

// TestLinearizableUnderFaults: histories stay linearizable, and nothing
// acknowledged is lost, while members are SIGKILLed and restarted on their
// data directories again and again (every other time the leader), and
// clients' connections are cut around commits (lost answers, resolved by
// the commit markers or reported as unknown outcomes).
func TestLinearizableUnderFaults(t *testing.T) { faultRun(t, true, 15) }

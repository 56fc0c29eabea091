package etcd_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/impl/etcd"
	"github.com/leasehold/leasehold/impl/etcd/etcdtest"
)

// The failover test's ticker settings: ttl is the least lease TTL etcd
// grants with the test members' election timeout, so a ticker that dies
// without revoking its lease is replaced within it.
const (
	failoverInterval = 20 * time.Millisecond
	failoverTTL      = 2 // seconds
	failoverMargin   = 1500 * time.Millisecond
)

// TestRunClockFailover runs three RunClock tickers on one prefix, each on a
// client of its own, and stops the elected one: by cancelling its context,
// by closing its client, or by killing the only member its client talks to
// (a three-member cluster of the test's own, the member a follower so that
// the quorum and the raft leader stay). In each case another ticker is
// elected (the stopped one's election key is gone and one of the two
// waiting tickers' keys leads) and advances the clock within the bound, the
// clock keeps advancing, and no reading of it, sampled every few
// milliseconds throughout, is below the one before. A cancelled ticker
// revokes its lease and hands over at once; one that cannot is replaced
// when its lease expires.
func TestRunClockFailover(t *testing.T) {
	for _, c := range []struct {
		name string
		// own: the case runs on a cluster of its own, each ticker's client
		// on one member, the first ticker's on a follower.
		own bool
		// stop stops the elected ticker a.
		stop func(t *testing.T, a *ticker, cluster *etcdtest.Cluster, member int)
		// within bounds the time from the stop to the new ticker's first
		// advance of the clock.
		within time.Duration
		// returned: RunClock of the stopped ticker has returned, with an
		// error or not; false: it is still running.
		returned, returnsErr bool
	}{
		{name: "cancelled context", stop: func(t *testing.T, a *ticker, _ *etcdtest.Cluster, _ int) { a.cancel() },
			within: time.Second, returned: true},
		{name: "closed client", stop: func(t *testing.T, a *ticker, _ *etcdtest.Cluster, _ int) { a.cli.Close() },
			within: failoverTTL*time.Second + failoverMargin, returned: true, returnsErr: true},
		{name: "killed member", own: true, stop: func(t *testing.T, _ *ticker, cl *etcdtest.Cluster, member int) { cl.Kill(member) },
			within: failoverTTL*time.Second + failoverMargin},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := etcdtest.Shared(t, members)
			if c.own {
				var err error
				if cl, err = etcdtest.Start(t.TempDir(), members); err != nil {
					t.Fatalf("start a %d-member cluster: %v", members, err)
				}
				t.Cleanup(cl.Stop) // after the tickers' cleanups, which need their members
			}
			// Each ticker's client: on one member each (the first on a
			// follower) for a cluster of the case's own, else on all.
			endpoints := make([][]string, 3)
			first := -1
			if c.own {
				leader := cl.Leader()
				if leader < 0 {
					t.Fatal("the cluster has no leader")
				}
				first = (leader + 1) % members
				for i := range endpoints {
					endpoints[i] = []string{cl.Members[(first+i)%members].ClientURL}
				}
			} else {
				for i := range endpoints {
					endpoints[i] = cl.Endpoints()
				}
			}
			// The observer reads through the members the case does not stop.
			observer := newClient(t, cl.Endpoints())
			if c.own {
				observer = newClient(t, endpoints[1], endpoints[2])
			}
			prefix := fmt.Sprintf("lhf-%d-%d", os.Getpid(), prefixes.Add(1))
			t.Cleanup(func() { dropPrefix(observer, prefix) }) // once the tickers have stopped writing
			clk := etcd.NewClusterClock(observer, prefix)
			clk.Timeout = 500 * time.Millisecond

			a := startTicker(t, newClient(t, endpoints[0]), prefix)
			waitAdvance(t, clk, "the only ticker, once elected", 5*time.Second)
			aKey := onlyTickerKey(t, observer, prefix)
			samples := sample(clk)
			startTicker(t, newClient(t, endpoints[1]), prefix)
			startTicker(t, newClient(t, endpoints[2]), prefix)
			waitCandidates(t, observer, prefix, 3, 5*time.Second)
			waitAdvance(t, clk, "the first ticker, with two others waiting", 2*time.Second)

			stopped := time.Now()
			c.stop(t, a, cl, first)
			if c.returned {
				select {
				case <-a.done:
					if (a.err != nil) != c.returnsErr {
						t.Fatalf("RunClock of the stopped ticker returned %v; want an error: %v", a.err, c.returnsErr)
					}
				case <-time.After(time.Second):
					t.Fatal("RunClock of the stopped ticker has not returned a second after its stop; want it returned")
				}
			}
			waitGone(t, observer, aKey, c.within)
			// The stopped ticker's key is gone, so its Txns fail their
			// leader compare: whoever advances the clock now is another.
			advanced := waitAdvance(t, clk, "another ticker, after the elected one stopped", c.within)
			if took := advanced.Sub(stopped); took > c.within {
				t.Fatalf("another ticker advanced the clock %s after the elected one stopped, want within %s", took, c.within)
			} else {
				t.Logf("another ticker advanced the clock %s after the elected one stopped", took)
			}
			keys := tickerKeys(t, observer, prefix)
			if len(keys) != 2 || keys[0] == aKey || keys[1] == aKey {
				t.Fatalf("election keys after the failover: %q, want the two waiting tickers' (not the stopped one's %q)", keys, aKey)
			}
			for range 3 {
				waitAdvance(t, clk, "the new ticker, again", time.Second)
			}
			checkMonotonic(t, samples())

			if !c.returned {
				select {
				case <-a.done:
					t.Fatalf("RunClock of the stopped ticker returned (%v); want it still running, its context and client live", a.err)
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
}

// ticker is one RunClock on a client of its own.
type ticker struct {
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{} // closed when RunClock has returned err
	err    error
}

// startTicker runs RunClock on cli until the test ends.
func startTicker(t *testing.T, cli *clientv3.Client, prefix string) *ticker {
	ctx, cancel := context.WithCancel(context.Background())
	tk := &ticker{cli: cli, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tk.done)
		tk.err = etcd.RunClock(ctx, cli, prefix, failoverInterval, failoverTTL)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-tk.done:
		case <-time.After(5 * time.Second):
			t.Error("RunClock did not return within 5 s of its context's end")
		}
	})
	return tk
}

// newClient connects to the endpoints until the test ends.
func newClient(t *testing.T, endpoints ...[]string) *clientv3.Client {
	var eps []string
	for _, e := range endpoints {
		eps = append(eps, e...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second})
	if err != nil {
		t.Fatalf("etcd client of %v: %v", eps, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// waitAdvance waits until the clock reads above its first reading (a
// reading of -1, no time or no answer, is not one) and returns when it
// did, failing the test after d.
func waitAdvance(t *testing.T, clk *etcd.ClusterClock, who string, d time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	from := clk.Now()
	for time.Now().Before(deadline) {
		if v := clk.Now(); v > from && from >= 0 {
			return time.Now()
		} else if from < 0 {
			from = v
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s: want the cluster clock advanced within %s; it stayed at %d", who, d, from)
	return time.Time{}
}

// tickerKeys are the RunClock candidates' election keys (the package doc's
// clock key + "-ticker", concurrency's "/<lease>"), leader first.
func tickerKeys(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"\x00clock-ticker/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("read the election keys: %v", err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}

// onlyTickerKey is the election key of the one candidate there is.
func onlyTickerKey(t *testing.T, cli *clientv3.Client, prefix string) string {
	t.Helper()
	keys := tickerKeys(t, cli, prefix)
	if len(keys) != 1 {
		t.Fatalf("election keys with one ticker running: %q, want exactly one", keys)
	}
	return keys[0]
}

// waitCandidates waits until n tickers are candidates (each has its key).
func waitCandidates(t *testing.T, cli *clientv3.Client, prefix string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var keys []string
	for time.Now().Before(deadline) {
		if keys = tickerKeys(t, cli, prefix); len(keys) == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("want %d tickers campaigning within %s; election keys %q", n, d, keys)
}

// waitGone waits until key is deleted (its ticker resigned or its lease
// was revoked or expired), failing the test after d.
func waitGone(t *testing.T, cli *clientv3.Client, key string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		resp, err := cli.Get(ctx, key)
		cancel()
		if err == nil && len(resp.Kvs) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("want the stopped ticker's election key %q deleted within %s", key, d)
}

// sample reads the clock every few milliseconds until the returned
// function is called, which returns the readings taken (no answer, -1,
// left out).
func sample(clk *etcd.ClusterClock) func() []int64 {
	var (
		mu  sync.Mutex
		got []int64
	)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			if v := clk.Now(); v >= 0 {
				mu.Lock()
				got = append(got, v)
				mu.Unlock()
			}
		}
	}()
	return func() []int64 {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// checkMonotonic fails the test if a reading is below the one before.
func checkMonotonic(t *testing.T, readings []int64) {
	t.Helper()
	if len(readings) < 10 {
		t.Fatalf("only %d clock readings sampled; want a reading every few milliseconds", len(readings))
	}
	for i := 1; i < len(readings); i++ {
		if readings[i] < readings[i-1] {
			t.Fatalf("the clock went back: reading %d is %d, after %d; want never below the one before", i, readings[i], readings[i-1])
		}
	}
}

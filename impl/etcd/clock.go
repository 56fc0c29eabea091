package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ClusterClock is the production time source: the cluster's own clock, a
// key of the store's prefix that one elected ticker (RunClock) advances,
// so that no worker's wall clock decides a lease's expiry. Now reads it
// with a linearizable read (one round trip through the leader's ReadIndex
// per write attempt); a read that fails returns -1, which every operation
// refuses as an invalid clock reading, writing nothing.
type ClusterClock struct {
	cli     *clientv3.Client
	key     string
	Timeout time.Duration // bounds one read; default 2s
}

// NewClusterClock returns the cluster clock of the store on prefix.
func NewClusterClock(cli *clientv3.Client, prefix string) *ClusterClock {
	return &ClusterClock{cli: cli, key: prefix + string(sep) + famClock, Timeout: 2 * time.Second}
}

// Now returns the cluster time in ms, or -1 if it cannot be read (or no
// ticker has run yet).
func (c *ClusterClock) Now() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.key)
	if err != nil || len(resp.Kvs) == 0 {
		return -1
	}
	v, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// RunClock advances the cluster clock of the store on prefix until ctx
// ends (then it returns nil) or cli is closed (then it returns an error):
// it campaigns for the ticker's role (an etcd election on a lease of ttl
// seconds, so a dead ticker is replaced within ttl) and, while elected,
// every interval sets the clock to max(its value, this process's wall
// clock) in a Txn that holds only while it is still the elected ticker. A
// ticker whose ctx ends revokes its lease, so that a waiting one takes over
// at once. Run it in a few processes: one ticks, the others wait. The clock
// never goes back: a new ticker whose wall clock is behind holds it still
// until its own clock passes it. Its resolution is interval; leases must be
// much longer than interval plus a failover (ttl). A ticker whose client
// reaches no member when ctx ends returns once one answers or cli is
// closed: etcd's Campaign resigns under the client's context.
func RunClock(ctx context.Context, cli *clientv3.Client, prefix string, interval time.Duration, ttl int) error {
	key := prefix + string(sep) + famClock
	caller := ctx
	// A closed client ends the requests in flight at once: the client's own
	// retries of a request on a closed connection go on for seconds.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(cli.Ctx(), cancel)()
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			pause(ctx, interval)
			continue
		}
		el := concurrency.NewElection(sess, prefix+string(sep)+famClock+"-ticker")
		if err := el.Campaign(ctx, "ticker"); err == nil {
			tick(ctx, cli, sess, el, key, interval)
		} else {
			pause(ctx, interval) // not elected: a cluster failing every campaign is not retried in a busy loop
		}
		revoke(cli, sess, ttl)
	}
	if err := cli.Ctx().Err(); err != nil && caller.Err() == nil {
		return fmt.Errorf("etcd: RunClock: the client was closed: %w", err)
	}
	return nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// revoke ends the session by revoking its lease, which deletes the
// election key: a waiting ticker is elected at once rather than when the
// lease expires. Session.Close would revoke under the session's context,
// which has ended when RunClock's ctx has, and so would leave the role to
// the lease's expiry.
func revoke(cli *clientv3.Client, sess *concurrency.Session, ttl int) {
	sess.Orphan()
	if cli.Ctx().Err() != nil {
		return // a closed client reaches no member: the lease expires
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ttl)*time.Second)
	defer cancel()
	cli.Revoke(ctx, sess.Lease())
}

// tick advances the clock while the election is held.
func tick(ctx context.Context, cli *clientv3.Client, sess *concurrency.Session, el *concurrency.Election, key string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			return
		case <-t.C:
		}
		resp, err := cli.Get(ctx, key)
		if err != nil {
			continue
		}
		var cur int64
		var cmp clientv3.Cmp
		if len(resp.Kvs) == 0 {
			cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		} else {
			cur, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
		next := max(cur, time.Now().UnixMilli())
		leader := clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())
		r, err := cli.Txn(ctx).If(cmp, leader).Then(clientv3.OpPut(key, strconv.FormatInt(next, 10))).Commit()
		if err == nil && !r.Succeeded {
			if g, err := cli.Get(ctx, el.Key()); err == nil && len(g.Kvs) == 0 {
				return // no longer elected
			}
		}
		if errors.Is(err, context.Canceled) {
			return
		}
	}
}

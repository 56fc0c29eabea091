package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/spec"
)

// Lock-wait reports (spec.LockWaitReporter). The test is not applicable
// (CapLockWaits, CapHooks) when the store does not report lock waits or does
// not call hooks, which it needs to hold a transaction open.

func init() {
	register("LockWaitsCountsOwnWaiters", testLockWaits)
}

// lockWaitPatience bounds how long the test waits for a store to report a
// call it has made wait on a lock.
const lockWaitPatience = 10 * time.Second

// testLockWaits holds a completion inside its transaction (before_commit) on
// one store, starts a cancel of the same run on a second, and requires the
// second — and only the second — to report one call waiting on a lock until
// the holder commits; the cancel then sees the completion.
func testLockWaits(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.need(CapHooks)
	e.need(CapLockWaits)
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "A", 60_000)
	arrived, release := make(chan struct{}), make(chan struct{})
	var arrive, let sync.Once
	letGo := func() { let.Do(func() { close(release) }) }
	defer letGo() // a failing test must not leave the holder held
	hold := func(ctx context.Context, op spec.Op, point spec.HookPoint) error {
		if op != spec.OpComplete || point != spec.BeforeCommit {
			return nil
		}
		arrive.Do(func() { close(arrived) })
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	holder := e.h.OpenWith(t, Options{Config: e.cfg, Clock: e.rec, Random: e.rnd, Hook: hold})
	waiter := e.h.OpenWith(t, Options{Config: e.cfg, Clock: e.rec, Random: e.rnd})
	bystander := e.h.OpenWith(t, Options{Config: e.cfg, Clock: e.rec, Random: e.rnd})
	waits := func(what string, s spec.Store) int {
		t.Helper()
		n, err := s.(spec.LockWaitReporter).LockWaits(e.ctx)
		mustOK(t, "LockWaits of the "+what, err)
		return n
	}
	if n := waits("waiter, before anything runs", waiter); n != 0 {
		t.Fatalf("LockWaits reports %d calls waiting on a store that has made none", n)
	}
	completed := make(chan error, 1)
	go func() {
		_, err := holder.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{}`)})
		completed <- err
	}()
	select {
	case <-arrived:
	case err := <-completed:
		t.Fatalf("Complete returned (%v) without reaching before_commit", err)
	case <-time.After(lockWaitPatience):
		t.Fatal("Complete never reached before_commit")
	}
	cancelled := make(chan error, 1)
	go func() {
		_, err := waiter.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1", Reason: "user_abort"})
		cancelled <- err
	}()
	giveUp := time.Now().Add(lockWaitPatience)
	for waits("waiter, while its cancel waits for the held completion", waiter) != 1 {
		select {
		case err := <-cancelled:
			t.Fatalf("Cancel returned (%v) while the completion of its run was held inside its transaction", err)
		default:
		}
		if time.Now().After(giveUp) {
			t.Fatalf("LockWaits never reported the cancel waiting for the held completion's lock within %s", lockWaitPatience)
		}
		time.Sleep(time.Millisecond)
	}
	if n := waits("bystander, which has no call in flight", bystander); n != 0 {
		t.Errorf("a store with no call in flight reports %d waiting: it counts another store's waiting call as its own", n)
	}
	if n := waits("holder, held at before_commit", holder); n != 0 {
		t.Errorf("the store whose call holds the lock reports %d waiting: holding is not waiting", n)
	}
	letGo()
	mustOK(t, "the held Complete", <-completed)
	mustCodeState(t, "the Cancel that waited for the completion", <-cancelled, spec.CodeAlreadyTerminal, spec.RunCompleted)
	if n := waits("waiter, after its cancel returned", waiter); n != 0 {
		t.Errorf("LockWaits reports %d waiting after the waiting call returned", n)
	}
}

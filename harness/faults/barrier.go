package faults

import (
	"context"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/spec"
)

// Barriers stop store operations at named points and hold them there until
// the test releases them: the deterministic replacement for sleeps. Each
// client (worker or API caller) opens its own store with Hook(client); a test
// arms a barrier for (client, op, point), waits until the operation has
// arrived, does whatever must happen meanwhile (move the clock, let another
// client claim), and releases it with nil (carry on) or an error (a fault:
// at BeforeCommit the transaction rolls back; at AfterCommit the caller gets
// unknown_outcome).
type Barriers struct {
	mu    sync.Mutex
	armed map[barrierKey]*Barrier
}

type barrierKey struct {
	client string
	op     spec.Op
	point  spec.HookPoint
}

// Barrier is one armed stopping point. It fires once.
type Barrier struct {
	Client  string
	Op      spec.Op
	Point   spec.HookPoint
	arrived chan struct{}
	release chan error
}

// NewBarriers returns an empty set.
func NewBarriers() *Barriers { return &Barriers{armed: map[barrierKey]*Barrier{}} }

// Arm makes the next operation op of client stop at point. Arming the same
// place twice before it fires is a test bug and panics.
func (b *Barriers) Arm(client string, op spec.Op, point spec.HookPoint) *Barrier {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := barrierKey{client, op, point}
	if _, dup := b.armed[k]; dup {
		panic(fmt.Sprintf("harness: barrier %s/%s/%s armed twice", client, op, point))
	}
	x := &Barrier{Client: client, Op: op, Point: point, arrived: make(chan struct{}), release: make(chan error, 1)}
	b.armed[k] = x
	return x
}

// Hook returns the spec.Hook for client's store.
func (b *Barriers) Hook(client string) spec.Hook {
	return func(ctx context.Context, op spec.Op, point spec.HookPoint) error {
		b.mu.Lock()
		x := b.armed[barrierKey{client, op, point}]
		delete(b.armed, barrierKey{client, op, point})
		b.mu.Unlock()
		if x == nil {
			return nil
		}
		close(x.arrived)
		select {
		case err := <-x.release:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Arrived is closed when the operation reaches the barrier.
func (x *Barrier) Arrived() <-chan struct{} { return x.arrived }

// Wait blocks until the operation has arrived or ctx ends.
func (x *Barrier) Wait(ctx context.Context) error {
	select {
	case <-x.arrived:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("harness: %s/%s never reached %s: %w", x.Client, x.Op, x.Point, ctx.Err())
	}
}

// Release lets the held operation continue (err nil) or fails it at that
// point (err non-nil). It may be called before the operation arrives.
func (x *Barrier) Release(err error) { x.release <- err }

// String names the barrier for logs and reports.
func (x *Barrier) String() string { return fmt.Sprintf("%s:%s@%s", x.Client, x.Op, x.Point) }

package clock

import (
	"context"
	"time"
)

// Timer is a one-shot timer made by a Timers source.
type Timer interface {
	// C delivers, once, the source's time (ms) at which the timer fired.
	// The channel is buffered, so a timer fires even if nobody is receiving.
	C() <-chan int64
	// Stop prevents the timer from firing. It reports whether it did so:
	// false means the timer had already fired (its value may be waiting in
	// C) or had been stopped.
	Stop() bool
}

// Timers is a clock that can also wait. Code that must wait for time to pass
// (a worker's renewal interval, an idle poll, a shutdown grace period) takes a
// Timers instead of calling the time package, so that a test holding a Manual
// clock decides when each wait ends, without sleeping.
type Timers interface {
	Clock
	// NewTimer returns a timer that fires once the source's time has moved d
	// milliseconds past the current time. d <= 0 fires at once.
	NewTimer(d int64) Timer
	// Monotonic returns a reading, in milliseconds from an arbitrary origin,
	// of a clock that never goes back and that changes to the wall clock do
	// not move: only the difference of two readings means anything. Code
	// that must know how much time has passed (how much of a lease is left
	// after a pause) uses it rather than Now, which may jump. System reads
	// Go's monotonic clock, which keeps counting while the process is
	// stopped (SIGSTOP); Manual returns Now, so a test moves both at once.
	Monotonic() int64
}

var (
	_ Timers = System{}
	_ Timers = (*Manual)(nil)
)

// NewTimer implements Timers with the runtime's timers.
func (System) NewTimer(d int64) Timer {
	st := &systemTimer{c: make(chan int64, 1)}
	st.t = time.AfterFunc(time.Duration(max(d, 0))*time.Millisecond, func() {
		st.c <- time.Now().UnixMilli()
	})
	return st
}

// monoOrigin carries Go's monotonic clock reading (time.Now keeps one;
// UnixMilli and other wall-clock conversions drop it).
var monoOrigin = time.Now()

// Monotonic implements Timers with Go's monotonic clock.
func (System) Monotonic() int64 { return time.Since(monoOrigin).Milliseconds() }

// Monotonic implements Timers: a Manual clock's monotonic reading is Now
// (it goes back only if a test sets it back).
func (m *Manual) Monotonic() int64 { return m.Now() }

type systemTimer struct {
	t *time.Timer
	c chan int64
}

func (s *systemTimer) C() <-chan int64 { return s.c }
func (s *systemTimer) Stop() bool      { return s.t.Stop() }

// manualTimer is pending in its Manual until it fires or is stopped.
type manualTimer struct {
	m        *Manual
	deadline int64
	c        chan int64
}

func (t *manualTimer) C() <-chan int64 { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	for i, p := range t.m.timers {
		if p == t {
			t.m.timers = append(t.m.timers[:i], t.m.timers[i+1:]...)
			return true
		}
	}
	return false
}

// NewTimer implements Timers: the timer fires when Set or Advance moves the
// clock to now+d or later (at once when d <= 0). An overflowing deadline
// never fires.
func (m *Manual) NewTimer(d int64) Timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now.Load()
	t := &manualTimer{m: m, c: make(chan int64, 1)}
	if d <= 0 {
		t.c <- now
		return t
	}
	deadline, err := Add(max(now, 0), d)
	if err != nil {
		return t // a deadline past the end of time: pending forever, never fired
	}
	t.deadline = deadline
	m.timers = append(m.timers, t)
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
	return t
}

// fireLocked fires and forgets every timer due at now. m.mu is held.
func (m *Manual) fireLocked(now int64) {
	kept := m.timers[:0]
	for _, t := range m.timers {
		if t.deadline <= now {
			t.c <- now
			continue
		}
		kept = append(kept, t)
	}
	clear(m.timers[len(kept):])
	m.timers = kept
}

// Pending returns how many timers are waiting to fire.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// NextDeadline returns the earliest deadline of the pending timers, and
// false when none is pending. A test uses it to advance exactly to the next
// thing the code under test waits for.
func (m *Manual) NextDeadline() (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.timers) == 0 {
		return 0, false
	}
	next := m.timers[0].deadline
	for _, t := range m.timers[1:] {
		next = min(next, t.deadline)
	}
	return next, true
}

// BlockUntil waits until at least n timers are pending, or ctx ends. This is
// how a test knows that the code under test has started a wait (armed its
// renewal timer, entered its idle poll) before it moves the clock: moving it
// earlier would leave the wait to a deadline computed from the new time.
func (m *Manual) BlockUntil(ctx context.Context, n int) error {
	return m.waitFor(ctx, func() bool { return len(m.timers) >= n })
}

// BlockUntilDue waits until some pending timer would fire if the clock were
// moved to at, or ctx ends: a narrower BlockUntil for a test that knows the
// deadline it is waiting for and must not count other waiters' timers.
func (m *Manual) BlockUntilDue(ctx context.Context, at int64) error {
	return m.BlockUntilDueN(ctx, at, 1)
}

// BlockUntilDueN waits until at least n pending timers would fire if the
// clock were moved to at, or ctx ends: for a test that moves the clock once
// for several waiters (each of a worker's renewals).
func (m *Manual) BlockUntilDueN(ctx context.Context, at int64, n int) error {
	return m.waitFor(ctx, func() bool {
		due := 0
		for _, t := range m.timers {
			if t.deadline <= at {
				due++
			}
		}
		return due >= n
	})
}

// waitFor waits until ok (called with m.mu held) holds or ctx ends.
func (m *Manual) waitFor(ctx context.Context, ok func() bool) error {
	for {
		m.mu.Lock()
		if ok() {
			m.mu.Unlock()
			return nil
		}
		if m.changed == nil {
			m.changed = make(chan struct{})
		}
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

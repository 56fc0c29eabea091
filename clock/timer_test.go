package clock

import (
	"context"
	"testing"
	"time"
)

// received returns the value waiting in t's channel, if any, without waiting.
func received(t Timer) (int64, bool) {
	select {
	case v := <-t.C():
		return v, true
	default:
		return 0, false
	}
}

func TestManualTimers(t *testing.T) {
	cases := []struct {
		name      string
		after     int64 // the timer's duration, made at time 100
		moves     []int64
		wantFired bool
		wantAt    int64
	}{
		{"fires when the clock reaches the deadline", 10, []int64{5, 5}, true, 110},
		{"fires when the clock jumps past the deadline", 10, []int64{50}, true, 150},
		{"does not fire before the deadline", 10, []int64{9}, false, 0},
		{"zero duration fires at once", 0, nil, true, 100},
		{"negative duration fires at once", -5, nil, true, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewManual(100)
			tm := m.NewTimer(c.after)
			for _, d := range c.moves {
				if _, err := m.Advance(d); err != nil {
					t.Fatalf("Advance(%d): %v", d, err)
				}
			}
			at, fired := received(tm)
			if fired != c.wantFired || at != c.wantAt {
				t.Fatalf("timer(%d) after moves %v: fired=%v at %d, want fired=%v at %d", c.after, c.moves, fired, at, c.wantFired, c.wantAt)
			}
			if _, again := received(tm); again {
				t.Fatalf("timer delivered twice")
			}
		})
	}
}

func TestManualTimerStopAndSet(t *testing.T) {
	m := NewManual(0)
	a, b := m.NewTimer(10), m.NewTimer(20)
	if got := m.Pending(); got != 2 {
		t.Fatalf("Pending() = %d, want 2", got)
	}
	if next, ok := m.NextDeadline(); !ok || next != 10 {
		t.Fatalf("NextDeadline() = %d, %v; want 10, true", next, ok)
	}
	if !a.Stop() {
		t.Fatalf("Stop of a pending timer returned false, want true")
	}
	if a.Stop() {
		t.Fatalf("a second Stop returned true, want false")
	}
	m.Set(25) // Set fires timers too
	if _, fired := received(a); fired {
		t.Fatalf("a stopped timer fired")
	}
	if at, fired := received(b); !fired || at != 25 {
		t.Fatalf("timer b: fired=%v at %d, want fired at 25", fired, at)
	}
	if b.Stop() {
		t.Fatalf("Stop after firing returned true, want false")
	}
	if got := m.Pending(); got != 0 {
		t.Fatalf("Pending() after everything fired = %d, want 0", got)
	}
}

func TestManualBlockUntil(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := NewManual(0)
	armed := make(chan Timer)
	go func() { armed <- m.NewTimer(30) }()
	if err := m.BlockUntilDue(ctx, 30); err != nil {
		t.Fatalf("BlockUntilDue(30): %v", err)
	}
	if err := m.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("BlockUntil(1): %v", err)
	}
	tm := <-armed
	m.Advance(30)
	if at, fired := received(tm); !fired || at != 30 {
		t.Fatalf("timer: fired=%v at %d, want fired at 30", fired, at)
	}
	short, stop := context.WithCancel(ctx)
	stop()
	if err := m.BlockUntil(short, 1); err == nil {
		t.Fatalf("BlockUntil with nothing pending and a done context returned nil, want the context's error")
	}
}

func TestSystemTimer(t *testing.T) {
	tm := System{}.NewTimer(0)
	select {
	case <-tm.C():
	case <-time.After(10 * time.Second):
		t.Fatalf("a zero-duration system timer did not fire")
	}
	long := System{}.NewTimer(3_600_000)
	if !long.Stop() {
		t.Fatalf("Stop of a pending system timer returned false")
	}
}

// TestMonotonic: a Manual clock's monotonic reading is its Now; the
// system's never goes back and has advanced by at least a timer's duration
// once the timer fired (a lower bound, whatever the machine's load).
func TestMonotonic(t *testing.T) {
	m := NewManual(100)
	if got := m.Monotonic(); got != 100 {
		t.Fatalf("Manual.Monotonic() = %d, want 100 (its Now)", got)
	}
	if _, err := m.Advance(250); err != nil {
		t.Fatal(err)
	}
	if got := m.Monotonic(); got != 350 {
		t.Fatalf("Manual.Monotonic() after Advance(250) = %d, want 350", got)
	}
	var s System
	before := s.Monotonic()
	tm := s.NewTimer(20)
	<-tm.C()
	after := s.Monotonic()
	// Readings are truncated to whole milliseconds: 20 ms elapsed may read 19.
	if after-before < 19 {
		t.Fatalf("System.Monotonic() moved %d ms across a 20 ms timer, want at least 19", after-before)
	}
}

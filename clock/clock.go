// Package clock gives leasehold its notion of time: integer milliseconds since
// the Unix epoch, read from an injected source, with checked arithmetic.
//
// Every store operation reads its clock exactly once, so a test that owns a
// Manual clock decides every lease expiry without sleeping.
package clock

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is a source of the current time in milliseconds since the Unix epoch.
// Implementations must be safe for concurrent use.
type Clock interface {
	Now() int64
}

// ErrOverflow is returned by Add when the sum does not fit in an int64.
var ErrOverflow = errors.New("clock: time arithmetic overflows int64 milliseconds")

// ErrNegative is returned by Add when an operand is negative.
var ErrNegative = errors.New("clock: negative time or duration")

// Add returns t + d. Both must be non-negative; a negative operand returns
// ErrNegative and a sum past math.MaxInt64 returns ErrOverflow (never a wrapped value).
func Add(t, d int64) (int64, error) {
	if t < 0 || d < 0 {
		return 0, fmt.Errorf("%w: %d + %d", ErrNegative, t, d)
	}
	if t > math.MaxInt64-d {
		return 0, fmt.Errorf("%w: %d + %d", ErrOverflow, t, d)
	}
	return t + d, nil
}

// System reads the machine's wall clock.
type System struct{}

// Now returns the wall-clock time in Unix milliseconds.
func (System) Now() int64 { return time.Now().UnixMilli() }

// Manual is a clock that moves only when told to. The zero value reads 0.
// It is safe for concurrent use. It is also a Timers: its timers fire when
// Set or Advance moves the clock to or past their deadline, never by
// themselves (see timer.go).
type Manual struct {
	now atomic.Int64
	// mu orders moves of the clock against timers being made and stopped,
	// so that a timer made concurrently with a move either sees the old
	// time (and is fired by the move) or the new one.
	mu      sync.Mutex
	timers  []*manualTimer
	changed chan struct{} // closed and replaced whenever the pending set grows
}

// NewManual returns a Manual clock reading start.
func NewManual(start int64) *Manual {
	m := &Manual{}
	m.now.Store(start)
	return m
}

// Now returns the time last set.
func (m *Manual) Now() int64 { return m.now.Load() }

// Set moves the clock to t and fires every pending timer whose deadline is
// at or before t. Tests may set any value, including negative or
// near-overflow ones, to exercise the stores' validation.
func (m *Manual) Set(t int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now.Store(t)
	m.fireLocked(t)
}

// Advance moves the clock forward by d milliseconds, fires every pending
// timer whose deadline is at or before the new time, and returns the new
// time. It returns ErrNegative or ErrOverflow, leaving the clock unchanged,
// when the move is invalid.
func (m *Manual) Advance(d int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.now.Load()
	next, err := Add(old, d)
	if err != nil {
		return old, err
	}
	m.now.Store(next)
	m.fireLocked(next)
	return next, nil
}

// Recorder wraps a clock and remembers the last value read. A harness gives each
// client its own Recorder over one shared clock, so that after an operation it
// knows exactly which time the store used (stores read the clock once per
// operation). It is safe for concurrent use.
type Recorder struct {
	Source Clock
	last   atomic.Int64
	reads  atomic.Int64
}

// Now reads the source and records the value.
func (r *Recorder) Now() int64 {
	v := r.Source.Now()
	r.last.Store(v)
	r.reads.Add(1)
	return v
}

// Last returns the most recent value read and how many reads have happened in
// total; a caller compares the count before and after an operation to learn
// whether the operation read the clock at all.
func (r *Recorder) Last() (now int64, reads int64) { return r.last.Load(), r.reads.Load() }

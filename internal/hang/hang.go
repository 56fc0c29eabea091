// Package hang is the checks' one guard against a hang: how long a test
// waits for an event (a barrier reached, a lock wait seen, a reply, a
// process's exit) before it gives up, and what it says then.
//
// No check asserts anything about elapsed time: a test waits for the event
// its verdict needs, however long the machine takes to produce it. The
// guard only keeps a test that would wait forever (the event can no longer
// happen) from hanging the run; it fires after Patience, far beyond what
// any loaded machine needs, and its message says "hung: waiting for" what,
// never that the contract was broken.
package hang

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// EnvPatience overrides DefaultPatience (a Go duration, such as 10m).
const EnvPatience = "LEASEHOLD_HANG_PATIENCE"

// DefaultPatience is how long a test waits for one event before it reports
// itself hung. An event that takes milliseconds on a quiet machine took
// seconds at a load of 28 on 2 cores; this leaves a factor of ten above
// that.
const DefaultPatience = 2 * time.Minute

// Patience is how long a test waits for one event: EnvPatience, else
// DefaultPatience.
func Patience() time.Duration {
	if v := os.Getenv(EnvPatience); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return DefaultPatience
}

// PhasePatience is how long a test waits for one long phase that is made
// of many events (recording a whole history, the linearizability checker
// deciding one): five times Patience.
func PhasePatience() time.Duration { return 5 * Patience() }

// Message is what a guard says when it fires: that the test is hung, what
// it was waiting for, and for how long.
func Message(what string, waited time.Duration) string {
	return fmt.Sprintf("hung: waiting for %s (nothing after %s; %s sets the patience)", what, waited, EnvPatience)
}

// Wait waits for ch to deliver (or close) and returns what it delivered; if
// nothing comes within Patience, it fails t with Message(what).
func Wait[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Patience())
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatal(Message(what, Patience()))
	}
	var zero T
	return zero
}

// Until calls cond every few milliseconds until it returns true; if it has
// not within Patience, it fails t with Message(what). cond may fail t
// itself (a decisive event seen while waiting).
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	giveUp := time.Now().Add(Patience())
	for !cond() {
		if t.Failed() {
			t.FailNow()
		}
		if time.Now().After(giveUp) {
			t.Fatal(Message(what, Patience()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Context returns a context that ends after Patience: the guard of a
// whole test's calls, for a test whose every wait is a call that takes a
// context. Its error, when it fires, is context.DeadlineExceeded; say
// Message when reporting it.
func Context(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, Patience())
}

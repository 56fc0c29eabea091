package hang

import (
	"strings"
	"testing"
	"time"
)

// TestPatience: the environment sets the patience; a value that is not a
// positive duration leaves the default.
func TestPatience(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{{"", DefaultPatience}, {"10m", 10 * time.Minute}, {"soon", DefaultPatience}, {"-1s", DefaultPatience}} {
		t.Setenv(EnvPatience, tc.env)
		if got := Patience(); got != tc.want {
			t.Errorf("%s=%q: Patience() = %s, want %s", EnvPatience, tc.env, got, tc.want)
		}
	}
}

// TestMessage: a guard that fires says it is hung, what it waited for,
// and how to give it more patience.
func TestMessage(t *testing.T) {
	got := Message("the purge to wait for r1's row", 2*time.Minute)
	for _, want := range []string{"hung: waiting for the purge to wait for r1's row", "2m0s", EnvPatience} {
		if !strings.Contains(got, want) {
			t.Errorf("Message = %q, want it to contain %q", got, want)
		}
	}
}

// TestWaitAndUntil: Wait returns what the channel delivers, Until returns
// once its condition holds; neither waits for the patience.
func TestWaitAndUntil(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Wait(t, ch, "seven"); got != 7 {
		t.Errorf("Wait = %d, want 7", got)
	}
	n := 0
	Until(t, "three calls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("Until called its condition %d times, want 3", n)
	}
}

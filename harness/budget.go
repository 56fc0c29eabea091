package harness

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Budget returns the time a test may spend, from LEASEHOLD_BUDGET (set by
// `leasehold verify` to this test's part of its check's budget: the check's
// share of what the fixed-work checks left, divided among the check's
// tests), or def when unset (plain `go test`: a short run).
func Budget(t testing.TB, def time.Duration) time.Duration {
	v := os.Getenv("LEASEHOLD_BUDGET")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("LEASEHOLD_BUDGET=%q: want a positive Go duration such as 90s", v)
	}
	return d
}

// FirstSeed returns the seed of a run's first history: LEASEHOLD_SEED when
// set (pinned: the run replays that one history), else the time; pinned
// says which.
func FirstSeed(t testing.TB) (seed uint64, pinned bool) {
	s := os.Getenv("LEASEHOLD_SEED")
	if s == "" {
		return uint64(time.Now().UnixNano()), false
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("LEASEHOLD_SEED=%q: want an unsigned integer (a seed a report printed)", s)
	}
	return seed, true
}

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

// withSeed is env with LEASEHOLD_SEED set to seed: a replay command's
// environment.
func withSeed(env map[string]string, seed uint64) map[string]string {
	out := map[string]string{"LEASEHOLD_SEED": strconv.FormatUint(seed, 10)}
	for k, v := range env {
		out[k] = v
	}
	return out
}

// rounds paces an exploring test's rounds (a property run's slices of
// sequences, a linearizability or runtime run's histories) and counts how
// deep it went: after each round, next says whether to run another.
type rounds struct {
	budget time.Duration // 0: none (a plain go test, a pinned seed)
	start  time.Time
	done   int // rounds run
	bought int // rounds run because the budget had room for them
}

// newRounds starts pacing rounds under budget; a pinned seed (a replay)
// runs only the rounds it must, whatever the budget.
func newRounds(budget time.Duration, pinned bool) *rounds {
	if pinned {
		budget = 0
	}
	return &rounds{budget: budget, start: time.Now()}
}

// next is called as a round ends; it reports whether to run another: when
// more is forced (the test's minimum, or its vacuity rules: a run that has
// not yet shown what it must), or when the budget has room for another
// round as long as the average so far (one the budget buys). A round longer
// than the budget is never cut short: a budget only decides whether the
// next one starts.
func (r *rounds) next(forced bool) bool {
	r.done++
	room := r.budget > 0 && time.Since(r.start)*time.Duration(r.done+1) <= r.budget*time.Duration(r.done)
	switch {
	case forced:
		return true
	case room:
		r.bought++
		return true
	}
	return false
}

// min is how many of the rounds run the test would have run at any
// budget; done/min is how deep it went (1: its minimum).
func (r *rounds) min() int64 { return int64(r.done - r.bought) }

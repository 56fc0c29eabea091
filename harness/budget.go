package harness

import (
	"os"
	"testing"
	"time"
)

// Budget returns the time a check may spend, from LEASEHOLD_BUDGET (set by
// `leasehold verify` to the check's share of the total), or def when unset
// (plain `go test`: a short run).
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

package harness

import (
	"encoding/json"
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

// Metrics are the figures a check reports to `leasehold verify`.
type Metrics struct {
	Check          string `json:"check"`
	Store          string `json:"store"`
	Operations     int64  `json:"operations"`
	Histories      int64  `json:"histories,omitempty"`
	StatesExplored int64  `json:"states_explored,omitempty"`
	Violations     int64  `json:"violations"`
	Seed           string `json:"seed,omitempty"`
	Replay         string `json:"replay,omitempty"`
}

// MetricsPrefix starts the one log line per check that verify parses.
const MetricsPrefix = "LEASEHOLD_METRICS "

// ReportMetrics logs m on one line that `leasehold verify` folds into
// reports/verify.json.
func ReportMetrics(t testing.TB, m Metrics) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	t.Log(MetricsPrefix + string(b))
}

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
	// Faults are a fault test's figures (a server restart, a stopped
	// process); nil for other checks.
	Faults *FaultMetrics `json:"faults,omitempty"`
}

// FaultMetrics is what a fault test injected and what came of it.
type FaultMetrics struct {
	Injected int64 `json:"injected"` // faults injected
	// Lost: acknowledged runs not terminal after the workers drained.
	Lost int64 `json:"lost"`
	// Duplicated: runs that ended more than once (more than one terminal
	// event, or two completions reported).
	Duplicated int64 `json:"duplicated"`
	// DoubleEffects: effect keys the external system applied more than once.
	DoubleEffects int64 `json:"double_effects"`
	// StaleAccepted: writes accepted from a generation that was no longer
	// the job's.
	StaleAccepted int64 `json:"stale_accepted"`
	// MaxRecoveryMs: the longest time from the end of a fault to the work
	// it held up being done.
	MaxRecoveryMs int64 `json:"max_recovery_ms"`
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

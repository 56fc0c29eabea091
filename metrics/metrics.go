// Package metrics is the one line a check logs to report its figures to
// `leasehold verify`: a prefix and a JSON object, written by Report and read
// back by Parse. Every check's test, in any package, reports through it.
package metrics

import (
	"encoding/json"
	"strings"
	"testing"
)

// Prefix starts the line.
const Prefix = "LEASEHOLD_METRICS "

// Line is what one check reports.
type Line struct {
	Check          string `json:"check"`
	Store          string `json:"store"`
	Operations     int64  `json:"operations"`
	Histories      int64  `json:"histories,omitempty"`
	StatesExplored int64  `json:"states_explored,omitempty"`
	Violations     int64  `json:"violations"`
	Seed           string `json:"seed,omitempty"`
	Replay         string `json:"replay,omitempty"`
}

// Report logs l on one line of t's output.
func Report(t testing.TB, l Line) {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	t.Log(Prefix + string(b))
}

// Parse finds a line in one line of test output (go test prefixes a log
// line with its file and line).
func Parse(output string) (Line, bool) {
	i := strings.Index(output, Prefix)
	if i < 0 {
		return Line{}, false
	}
	var l Line
	if err := json.Unmarshal([]byte(strings.TrimSpace(output[i+len(Prefix):])), &l); err != nil {
		return Line{}, false
	}
	return l, true
}

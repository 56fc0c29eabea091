// Package metrics is how a check hands its figures to `leasehold verify`:
// as data, a test attribute (testing.T.Attr) whose value is a Line in
// JSON, which go test -json delivers as an "attr" event of the test that
// reported it. Report writes it and Decode reads it back; every check's
// test, in any package, reports through them.
package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
)

// Key is the attribute's key.
const Key = "leasehold.metrics"

// Line is what one check reports.
type Line struct {
	Check          string `json:"check"`
	Store          string `json:"store"`
	Operations     int64  `json:"operations"`
	Histories      int64  `json:"histories,omitempty"`
	StatesExplored int64  `json:"states_explored,omitempty"`
	// Sequences is a property run's random operation sequences checked.
	Sequences int64 `json:"sequences,omitempty"`
	// Rounds is an exploring test's depth: the rounds it ran (a property
	// run's slices of sequences, a linearizability or runtime run's
	// histories). MinRounds is how many of them it would have run at any
	// budget: its minimum, and those it ran because it had not yet shown
	// everything its vacuity rules ask for. Rounds/MinRounds is how deep it
	// went; 1 is its minimum.
	Rounds     int64 `json:"rounds,omitempty"`
	MinRounds  int64 `json:"min_rounds,omitempty"`
	Violations int64 `json:"violations"`
	// Seed is the seed a replay of the run starts from.
	Seed   string `json:"seed,omitempty"`
	Replay string `json:"replay,omitempty"`
	// Faults are a fault test's figures (a server restart, a stopped
	// process); nil for other checks.
	Faults *Faults `json:"faults,omitempty"`
}

// Faults is what a fault test injected and what came of it.
type Faults struct {
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
	// CaughtLost: acknowledged writes that the test's deliberately
	// non-durable variant lost and the test caught (a power-loss check must
	// catch some, or it proved nothing); 0 for a test without such a
	// variant.
	CaughtLost int64 `json:"caught_lost,omitempty"`
}

// Report hands l to verify: one attribute of t, Key and l as JSON (one
// line: JSON strings escape their newlines, as Attr requires).
func Report(t testing.TB, l Line) {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	t.Attr(Key, string(b))
}

// Decode reads the value of a Key attribute back. It is strict: a field it
// does not know, or anything after the object, is an error (the reporting
// test and verify disagree about the figures).
func Decode(value string) (Line, error) {
	var l Line
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Line{}, fmt.Errorf("metrics: %q is not a Line: %w", value, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Line{}, fmt.Errorf("metrics: %q has more after the Line", value)
	}
	return l, nil
}

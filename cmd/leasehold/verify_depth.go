package main

import (
	"fmt"
	"strings"
)

// Depth. An exploring check (rapid, linearizability, the runtime run,
// fuzzing, the etcd store's exploring tests) runs rounds until its budget is
// spent, and some rounds whatever its budget: its minimum, and those its
// vacuity rules force while it has not yet shown what it must. Each test
// reports both (metrics.Line's Rounds and MinRounds); a check's depth is
// its shallowest test's Rounds/MinRounds, 1 being the minimum, a plain go
// test's run. A fuzz target's depth is its seconds of fuzzing over
// minTestBudget's one. The run's depth is its shallowest exploring check's.
//
// A run whose exploring checks stayed at their minimum (depth 1) explored no
// more than make test does: its headline and verify.json say it is shallow.
// --min-depth D makes a run whose shallowest check is below D INCOMPLETE,
// never PASS.

// depthOf is the run's depth: the shallowest exploring check's (0 when no
// exploring check ran), with the names of the exploring checks at their
// minimum (shallow) and of those below minDepth (below). An exploring check
// that reported no depth counts as at its minimum: its depth is not known
// to be more.
func depthOf(results []checkResult, minDepth float64) (depth float64, shallow, below []string) {
	first := true
	for _, r := range results {
		if r.BudgetMs == 0 || r.Status == statusSkipped || r.Status == statusNotApplicable {
			continue
		}
		d := max(r.Depth, 1)
		if first || d < depth {
			depth, first = d, false
		}
		name := r.Name + "/" + r.Store
		if d <= 1 {
			shallow = append(shallow, name)
		}
		if d < minDepth {
			below = append(below, name)
		}
	}
	return depth, shallow, below
}

// depthLine says how deep the run went, for the headline: the depth, the
// shallowest check, what --min-depth required, and which checks stayed at
// their minimum or below it.
func depthLine(rep verifyReport) string {
	if rep.Depth == 0 {
		return "No exploring check ran."
	}
	var shallowest checkResult
	for _, c := range rep.Checks {
		if c.BudgetMs > 0 && max(c.Depth, 1) == rep.Depth {
			shallowest = c
			break
		}
	}
	line := fmt.Sprintf("Depth %s: the shallowest exploring check, %s/%s, ran %s its minimum (%s)", depthText(rep.Depth),
		shallowest.Name, shallowest.Store, timesText(rep.Depth), depth(shallowest))
	if rep.MinDepth > 0 {
		line += fmt.Sprintf("; --min-depth required %s", depthText(rep.MinDepth))
	}
	line += "."
	switch {
	case len(rep.BelowMinDepth) > 0:
		line += fmt.Sprintf(" Below the required depth, so the run is INCOMPLETE: %s.", strings.Join(rep.BelowMinDepth, ", "))
	case len(rep.Shallow) > 0:
		line += fmt.Sprintf(" SHALLOW: %s stayed at their minimum, exploring no more than a plain go test does (give verify a larger --budget, or a quieter machine).",
			strings.Join(rep.Shallow, ", "))
	}
	return line
}

func depthText(d float64) string { return fmt.Sprintf("%.1fx", d) }

func timesText(d float64) string {
	if d <= 1 {
		return "only"
	}
	return fmt.Sprintf("%.1f times", d)
}

package model

import "github.com/leasehold/leasehold/spec"

type specOp = spec.Op

// Broken returns a deliberately broken variant of the model, by name, for the
// tests that prove the checks catch it. The names are the keys of
// BrokenVariants.
func Broken(m Model, name string) Model {
	b, found := BrokenVariants[name]
	if !found {
		panic("model: no broken variant " + name)
	}
	m.bug = b
	return m
}

// BrokenVariants names every broken variant (see bug.go for what each does).
var BrokenVariants = map[string]bug{
	"claim keeps generation":          bugClaimKeepsGeneration,
	"retry skips terminal event":      bugRetrySkipsTerminalEvent,
	"complete ignores generation":     bugCompleteIgnoresGeneration,
	"cancel leaves job claimable":     bugCancelLeavesJobClaimable,
	"claim steals live lease":         bugClaimStealsLiveLease,
	"retry resets generation":         bugRetryResetsGeneration,
	"reserve reopens succeeded":       bugReserveReopensSucceeded,
	"replay resets generation":        bugReplayResetsGeneration,
	"purge runs splits lineage":       bugPurgeRunsSplitsLineage,
	"purge runs ignores records":      bugPurgeRunsIgnoresRecords,
	"claim outbox takes claimed":      bugClaimOutboxTakesClaimed,
	"purge runs drops pending outbox": bugPurgeRunsDropsPendingOutbox,
	"replayed create writes outbox":   bugReplayedCreateWritesOutbox,
}

// HasStep reports whether the model has a step for op.
func HasStep(op string) bool {
	_, found := steps[specOp(op)]
	return found
}

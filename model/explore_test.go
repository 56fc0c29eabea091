package model_test

import (
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/model"
)

// scopesFromEnv returns the scopes to explore. By default (seconds):
// model.DefaultScope, model.LifecycleScope and model.OutboxScope. With
// LEASEHOLD_EXPLORE_SCOPE=large (minutes), or a LEASEHOLD_BUDGET of 20
// minutes or more given to this test: model.LargeScopes, e.g.
//
//	LEASEHOLD_EXPLORE_SCOPE=large go test ./model/ -run TestExplore -v -timeout 1h
//	LEASEHOLD_EXPLORE_SCOPE=large make verify BUDGET=30m
//
// (leasehold verify runs explore as fixed work, with no budget of its own.)
func scopesFromEnv() []model.Scope {
	budget, _ := time.ParseDuration(os.Getenv("LEASEHOLD_BUDGET"))
	if os.Getenv("LEASEHOLD_EXPLORE_SCOPE") == "large" || budget >= 20*time.Minute {
		return model.LargeScopes()
	}
	return []model.Scope{model.DefaultScope(), model.LifecycleScope(), model.OutboxScope()}
}

// TestExplore checks every invariant at every state and transition of each
// scope, and prints what it explored.
func TestExplore(t *testing.T) {
	// The explorer allocates many short-lived states: a lazier GC halves its
	// time, and a soft memory limit keeps the large scopes' heap near what
	// they keep alive (a few GB) instead of five times that.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(3 << 30))
	for _, sc := range scopesFromEnv() {
		t.Run(sc.Name, func(t *testing.T) {
			rep := model.Explore(model.Model{Config: sc.Config}, sc)
			t.Log(rep)
			metrics.Report(t, metrics.Line{Check: "explore/" + sc.Name, Store: "model", Operations: int64(rep.Transitions), StatesExplored: int64(rep.States)})
			if rep.Violation != nil {
				t.Fatalf("the correct model violates an invariant:\n%s", rep.Violation)
			}
			if !rep.Complete {
				t.Fatalf("exploration of %s stopped at MaxStates", sc.Name)
			}
		})
	}
}

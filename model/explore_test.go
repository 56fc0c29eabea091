package model_test

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/leasehold/leasehold/model"
)

// scopesFromEnv returns the scopes to explore. By default (seconds):
// model.DefaultScope and model.LifecycleScope. With
// LEASEHOLD_EXPLORE_SCOPE=large (minutes): model.LargeScopes, e.g.
//
//	LEASEHOLD_EXPLORE_SCOPE=large go test ./model/ -run TestExplore -v -timeout 1h
func scopesFromEnv() []model.Scope {
	if os.Getenv("LEASEHOLD_EXPLORE_SCOPE") == "large" {
		return model.LargeScopes()
	}
	return []model.Scope{model.DefaultScope(), model.LifecycleScope()}
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
			if rep.Violation != nil {
				t.Fatalf("the correct model violates an invariant:\n%s", rep.Violation)
			}
			if !rep.Complete {
				t.Fatalf("exploration of %s stopped at MaxStates", sc.Name)
			}
		})
	}
}

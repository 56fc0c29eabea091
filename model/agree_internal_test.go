package model

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/leasehold/leasehold/invariant"
	"github.com/leasehold/leasehold/spec"
)

// TestCheckAgreesWithInvariant holds Check and package invariant's Check
// (what the conformance suite and the doctor judge a store's rows by) to
// the same verdict on every state the explorer reaches: breadth first
// through the scope's actions and outcomes, as Explore walks, with the
// correct model (every state healthy to both) and with every broken variant
// (whose states break invariants, and must be judged broken by both). The
// state is taken to invariant's form by Snapshot. What only one side can
// see is listed below with the reason, as few as it must be: a listed
// variant whose states both judge alike fails too.
// (invariant's TestModelAgreesOnBrokenSnapshots does the same for its broken
// snapshots.)
func TestCheckAgreesWithInvariant(t *testing.T) {
	// States per scope: the correct model's, and each broken variant's
	// (which break within a few hundred).
	const maxStates, maxBroken = 3_000, 1_000
	variants := []string{""}
	for name := range BrokenVariants {
		variants = append(variants, name)
	}
	sort.Strings(variants)
	for _, sc := range []Scope{LifecycleScope(), OutboxScope()} {
		for _, variant := range variants {
			m := Model{Config: sc.Config}
			if variant != "" {
				m = Broken(m, variant)
			}
			x := &explorer{m: m, sc: sc}
			seen := map[digest]bool{}
			type at struct {
				now int64
				s   State
			}
			frontier := []at{{0, m.Init()}}
			states, modelOnly, invariantOnly, broken, atZero := 0, 0, 0, 0, 0
			var exampleModel, exampleInvariant string
			limit := maxStates
			if variant != "" {
				limit = maxBroken
			}
			for len(frontier) > 0 && states < limit {
				st := frontier[0]
				frontier = frontier[1:]
				d := digestOf(st.now, st.s)
				if seen[d] {
					continue
				}
				seen[d] = true
				states++
				mErr := m.Check(st.s)
				iv := invariant.Check(m.Snapshot(st.s))
				if mErr == nil && deliveredAtZero(m.Snapshot(st.s), iv) {
					// The one thing Check cannot be held to: the explorer's
					// clock starts at 0, and a message delivered at 0 has
					// delivered_at 0, which in a store's rows means "not
					// delivered" (a store's clock reads milliseconds since
					// the epoch, never 0), so invariant.Check reads it as
					// delivered without a delivery time.
					atZero++
					iv = nil
				}
				switch {
				case mErr != nil && len(iv) == 0:
					modelOnly++
					exampleModel = mErr.Error()
				case mErr == nil && len(iv) > 0:
					invariantOnly++
					exampleInvariant = fmt.Sprint(iv)
				case mErr != nil:
					broken++
				}
				if mErr != nil || len(iv) > 0 {
					continue // not expanded: the variant has shown its break
				}
				for _, act := range sc.actions(st.now, st.s) {
					if act.advance > 0 {
						frontier = append(frontier, at{st.now + act.advance, st.s})
						continue
					}
					for _, o := range x.outcomes(st.s, act.op) {
						frontier = append(frontier, at{st.now, o.State})
					}
				}
			}
			name := sc.Name + "/" + variant
			if variant == "" {
				name = sc.Name + "/correct"
			}
			t.Logf("%s: %d states, %d broken to both, %d to Check only, %d to invariant.Check only, %d delivered at 0",
				name, states, broken, modelOnly, invariantOnly, atZero)
			if states < 100 {
				t.Errorf("%s: only %d states reached", name, states)
			}
			if invariantOnly > 0 {
				t.Errorf("%s: %d states invariant.Check judges broken and Check healthy, e.g. %s", name, invariantOnly, exampleInvariant)
			}
			if modelOnly > 0 {
				t.Errorf("%s: %d states Check judges broken and invariant.Check healthy, e.g. %s", name, modelOnly, exampleModel)
			}
		}
	}
}

// deliveredAtZero reports violations that are all of invariant 14 in a
// snapshot with a message delivered at time 0.
func deliveredAtZero(snap spec.Snapshot, iv []invariant.Violation) bool {
	if len(iv) == 0 || !slices.ContainsFunc(snap.Outbox, func(m spec.OutboxMessage) bool {
		return m.State == spec.OutboxDelivered && m.DeliveredAt == 0
	}) {
		return false
	}
	for _, v := range iv {
		if v.Invariant != "14" {
			return false
		}
	}
	return true
}

package harness

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

// TestEveryOperationIsGenerated holds rapid's action map and the concurrent
// workload to the operation table: every row of spec.Operations must be
// called by a short property run and by a few short workload histories, found
// from what they ran, not from a list. A row a store may lack is one the
// table marks optional (Operation.Capability): both skip it on a store
// without the capability, and this test runs on SQLite, which has every
// one (checked first), so no row is excused. An operation added to the
// table without an action or a workload step fails here.
func TestEveryOperationIsGenerated(t *testing.T) {
	scope := &scopedTB{TB: t}
	defer scope.close()
	store := sqlitetest.Factory(scope, storetest.Options{Config: TestConfig()}).Store
	for _, o := range spec.Operations() {
		if !o.Supports(store) {
			t.Fatalf("the SQLite store lacks %s's capability %s: this test needs a store with every capability of the table", o.Op, o.Capability)
		}
	}

	// rapid draws its own seed, and a rare read can miss 40 sequences: up
	// to ten runs of 40, until every row is called, so that the verdict is
	// about the action map, not the seed.
	defer setRapidChecks(rapidChecks())
	setRapidChecks(40)
	p := &Property{Factory: sqlitetest.Factory, Config: TestConfig()}
	byRapid := map[spec.Op]bool{}
	for runs := 0; runs < 10 && len(byRapid) < len(spec.Operations()); runs++ {
		rapid.Check(t, p.Check(t))
		for outcome := range p.Counters.Outcomes {
			op, _, _ := strings.Cut(outcome, " ")
			byRapid[spec.Op(op)] = true
		}
	}

	// The workload's histories are concurrent, so what one calls varies
	// (a reconcile needs a lost effect record, then a reclaim): up to four
	// histories, until every row is called.
	byWorkload := map[spec.Op]bool{}
	histories, calls := 0, 0
	for seed := uint64(44); histories < 4 && len(byWorkload) < len(spec.Operations()); seed++ {
		w := Workload{Factory: sqlitetest.Factory, Config: TestConfig(), Seed: seed, Tenants: []string{"t1", "t2"},
			Workers: 2, APIs: 2, Ops: 1000, MaxUnknown: 1, Aborts: 0.05, Purge: true}
		h, err := w.Record(t.Context(), scope)
		if err != nil {
			t.Fatal(err)
		}
		histories++
		calls += len(h.Entries)
		for _, e := range h.Entries {
			byWorkload[e.Op.Kind()] = true
		}
	}

	for _, o := range spec.Operations() {
		if !byRapid[o.Op] {
			t.Errorf("rapid never called %s in %d sequences (%d operations): give it an action (harness/property*.go)", o.Op, p.Counters.Checks, p.Counters.Operations)
		}
		if !byWorkload[o.Op] {
			t.Errorf("the workload never called %s in %d histories (%d operations): give it a step (harness/workload*.go)", o.Op, histories, calls)
		}
	}
}

//go:build leasehold_mutants

package scenarios

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite"
)

// mutantTimeout is the deadlock guard per scenario under a mutant: a broken
// store may leave a scenario waiting for something that never happens.
const mutantTimeout = 5 * time.Second

// catchMutants plays every scenario with each mutant switched on and fails
// when a mutant survives all of them. It logs, per mutant, which scenarios
// caught it and the first mismatch of each.
func catchMutants(t *testing.T, store string, mutants []string, set func(string) func(), opener func(testing.TB) Opener) {
	scenarios := loadAll(t)
	for _, name := range mutants {
		t.Run(name, func(t *testing.T) {
			restore := set(name)
			defer restore()
			var caught []string
			var lines []string
			for _, sc := range scenarios {
				if _, known := knownStoreIssues[store+"/"+sc.Name]; known {
					continue // fails without any mutant: it cannot count as catching one
				}
				var res *Result
				t.Run(sc.Name, func(t *testing.T) {
					res = RunTimeout(context.Background(), sc, opener(t), mutantTimeout)
				})
				if res == nil || res.OK() {
					continue
				}
				caught = append(caught, sc.Name)
				lines = append(lines, "  "+sc.Name+": "+res.Mismatches[0].String())
			}
			if len(caught) == 0 {
				t.Fatalf("mutant %s survived all %d scenarios on %s: no scenario detects it", name, len(scenarios), store)
			}
			harness.ReportMetrics(t, harness.Metrics{Check: "mutant-scenarios/" + name, Store: store, Operations: int64(len(scenarios))})
			t.Logf("mutant %s on %s caught by %d scenario(s): %s\n%s", name, store, len(caught), strings.Join(caught, ", "), strings.Join(lines, "\n"))
		})
	}
}

// TestMutantsScenarios: every deliberately broken SQLite store
// (impl/sqlite/mutants.go) fails at least one scenario.
func TestMutantsScenarios(t *testing.T) {
	catchMutants(t, "sqlite", sqlite.Mutants, sqlite.SetMutant, sqliteOpener)
}

// TestMutantsScenariosPostgres: the same for the PostgreSQL store's mutants
// (impl/postgres/mutants.go, the same names).
func TestMutantsScenariosPostgres(t *testing.T) {
	pgtest.DSN(t)
	catchMutants(t, "postgres", postgres.Mutants, postgres.SetMutant, postgresOpener)
}

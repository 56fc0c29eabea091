//go:build leasehold_mutants

package scenarios

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/metrics"
)

// envEveryScenario, set to 1, plays every scenario under each mutant, to
// list all the scenarios that catch it. By default a mutant's scenarios stop
// at the first that catches it: that one catch is what the test asserts.
const envEveryScenario = "LEASEHOLD_MUTANTS_EVERY_SCENARIO"

// catchMutants plays the scenarios with each mutant switched on and fails
// when a mutant survives all of them. It logs, per mutant, which scenarios
// caught it (the first, or every one under envEveryScenario) and the first
// mismatch of each.
func catchMutants(t *testing.T, store string, opener func(testing.TB) Opener) {
	scenarios := loadAll(t)
	every := os.Getenv(envEveryScenario) == "1"
	for _, name := range mutant.Names {
		t.Run(name, func(t *testing.T) {
			restore := mutant.Set(name)
			defer restore()
			var caught []string
			var lines []string
			played := 0
			for _, sc := range scenarios {
				played++
				var res *Result
				t.Run(sc.Name, func(t *testing.T) {
					// A broken store that leaves a scenario waiting for
					// something that never happens is caught by the
					// deadlock guard, after the patience.
					res = Run(context.Background(), sc, opener(t))
				})
				if res == nil || res.OK() {
					continue
				}
				caught = append(caught, sc.Name)
				lines = append(lines, "  "+sc.Name+": "+res.Mismatches[0].String())
				if !every {
					break
				}
			}
			if len(caught) == 0 {
				t.Fatalf("mutant %s survived all %d scenarios on %s: no scenario detects it", name, len(scenarios), store)
			}
			metrics.Report(t, metrics.Line{Check: "mutant-scenarios/" + name, Store: store, Operations: int64(played)})
			if every {
				t.Logf("mutant %s on %s caught by %d scenario(s): %s\n%s", name, store, len(caught), strings.Join(caught, ", "), strings.Join(lines, "\n"))
			} else {
				t.Logf("mutant %s on %s caught by scenario %d of %d (%s=1 plays every one):\n%s", name, store, played, len(scenarios), envEveryScenario, lines[0])
			}
		})
	}
}

// TestMutantsScenarios: every deliberately broken SQLite store (package
// mutant) fails at least one scenario.
func TestMutantsScenarios(t *testing.T) {
	catchMutants(t, "sqlite", sqliteOpener)
}

// TestMutantsScenariosPostgres: the same for the PostgreSQL store's mutants
// (impl/postgres/mutants.go, the same names).
func TestMutantsScenariosPostgres(t *testing.T) {
	pgtest.DSN(t)
	catchMutants(t, "postgres", postgresOpener)
}

// TestModelJudgesBrokenExpectations: a scenario written to agree with a
// broken store — its stale completion expected to succeed, its final state
// what the broken store leaves — passes its own expectations but fails the
// model judge, so a scenario file cannot bless a store that breaks the
// contract.
func TestModelJudgesBrokenExpectations(t *testing.T) {
	const body = `{"name":"blessed_stale_complete","description":"expectations copied from a store whose completion ignores the generation","config":"default","tenant":"acme","start":1000,
	"steps":[
	 {"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k1","expect":{"ok":true}},
	 {"op":"claim","client":"A","lease_ms":100,"bind":["a1"],"expect":{"ok":[{"generation":1}]}},
	 {"op":"advance","ms":100},
	 {"op":"claim","client":"B","lease_ms":100,"bind":["b1"],"expect":{"ok":[{"generation":2}]}},
	 {"op":"complete","client":"A","lease":"a1","expect":{"ok":{"state":"completed"}}},
	 {"op":"complete","client":"B","lease":"b1","expect":{"error":"already_terminal","error_state":"completed"}}],
	"final":{"runs":{"r1":{"state":"completed","job_state":"completed","generation":2,"attempts":2,
	  "events":["run_queued","run_completed"],"attempt_outcomes":ATTEMPTS,"effects":[]}}}}`
	for _, store := range []struct {
		name   string
		opener func(testing.TB) Opener
		// What each broken store leaves of B's attempt: SQLite closes the
		// attempt of the generation presented (A's, already expired), the
		// PostgreSQL store the job row's latest (B's).
		attempts string
	}{{"sqlite", sqliteOpener, `["expired","running"]`}, {"postgres", postgresOpener, `["expired","completed"]`}} {
		t.Run(store.name, func(t *testing.T) {
			if store.name == "postgres" {
				pgtest.DSN(t)
			}
			sc, err := Parse([]byte(strings.Replace(body, "ATTEMPTS", store.attempts, 1)))
			if err != nil {
				t.Fatal(err)
			}
			defer mutant.Set(mutant.CompleteIgnoresGeneration)()
			res := Run(context.Background(), sc, store.opener(t))
			if res.OK() {
				t.Fatalf("the model judge blessed a stale completion:\n%s", reportOf(res))
			}
			for _, m := range res.Mismatches {
				if m.Step != 0 || !strings.HasPrefix(m.Message, "model judge:") {
					t.Fatalf("the file's own expectations should all hold on the broken store; the judge alone should fail it, got:\n%s", reportOf(res))
				}
			}
			t.Logf("the broken store passed the file and failed the judge:\n%s", reportOf(res))
		})
	}
}

// keptCatches maps each scenario kept from a failing rapid seed of a
// mutant (reports/failfiles, before the action map went back to plain
// verbs) to that mutant: the scenario must still catch it.
var keptCatches = map[string]string{
	"kept_claim_takes_expired_lease":         mutant.ClaimIgnoresExpired,
	"kept_complete_expired_generation":       mutant.CompleteIgnoresGeneration,
	"kept_fingerprint_conflict_while_leased": mutant.IdempotencyIgnoresFingerprint,
	"kept_retry_keeps_generation":            mutant.RetryResetsGeneration,
	"kept_budget_spent_by_retry":             mutant.BudgetNotAtomic,
	"kept_batch_stale_member":                mutant.BatchIgnoresGeneration,
	"kept_bulk_member_conflict":              mutant.BulkIgnoresFingerprint,
}

// keptCatchTheirMutants plays each kept scenario under its mutant: it must
// report a mismatch.
func keptCatchTheirMutants(t *testing.T, opener func(testing.TB) Opener) {
	byName := map[string]*Scenario{}
	for _, sc := range loadAll(t) {
		byName[sc.Name] = sc
	}
	for name, m := range keptCatches {
		t.Run(name, func(t *testing.T) {
			sc, ok := byName[name]
			if !ok {
				t.Fatalf("no scenario %s in testdata", name)
			}
			restore := mutant.Set(m)
			defer restore()
			if res := Run(context.Background(), sc, opener(t)); res.OK() {
				t.Fatalf("scenario %s passes under mutant %s: it no longer reproduces the failure it was kept for", name, m)
			} else {
				t.Logf("%s under %s: %s", name, m, res.Mismatches[0])
			}
		})
	}
}

// TestKeptScenariosCatchTheirMutants: on SQLite.
func TestKeptScenariosCatchTheirMutants(t *testing.T) { keptCatchTheirMutants(t, sqliteOpener) }

// TestKeptScenariosCatchTheirMutantsPostgres: on PostgreSQL.
func TestKeptScenariosCatchTheirMutantsPostgres(t *testing.T) {
	pgtest.DSN(t)
	keptCatchTheirMutants(t, postgresOpener)
}

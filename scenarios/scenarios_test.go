package scenarios

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sqliteOpener opens the scenario's stores on a fresh SQLite file of t.
func sqliteOpener(t testing.TB) Opener {
	return SQLite(filepath.Join(t.TempDir(), "scenario.db"))
}

// postgresOpener opens the scenario's stores on a fresh schema of the test
// server (dropped when t ends). It skips loudly without PostgreSQL, and
// fails instead under CI=true or LEASEHOLD_REQUIRE_PG=1.
func postgresOpener(t testing.TB) Opener {
	dsn, schema := pgtest.Schema(t)
	return Postgres(dsn, schema)
}

// loadAll loads every scenario file; a file that does not load fails t.
func loadAll(t testing.TB) []*Scenario {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenario files under testdata/ (%v)", err)
	}
	var out []*Scenario
	for _, p := range paths {
		sc, err := Load(p)
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		out = append(out, sc)
	}
	return out
}

// play runs sc and fails t with the full report when it does not pass.
func play(t *testing.T, sc *Scenario, open Opener) *Result {
	t.Helper()
	res := Run(context.Background(), sc, open)
	var b bytes.Buffer
	res.Report(&b)
	if !res.OK() {
		t.Errorf("scenario %s (%s) does not pass:\n%s", sc.Name, sc.File, b.String())
	} else {
		t.Logf("%s\n%s", sc.Description, b.String())
	}
	return res
}

func runAll(t *testing.T, store string, opener func(testing.TB) Opener) {
	var ops int64
	var failed int64
	for _, sc := range loadAll(t) {
		t.Run(sc.Name, func(t *testing.T) {
			res := play(t, sc, opener(t))
			ops += int64(len(res.Steps))
			if !res.OK() {
				failed++
			}
		})
	}
	harness.ReportMetrics(t, harness.Metrics{Check: "scenarios", Store: store, Operations: ops, Violations: failed})
}

// TestScenariosSQLite plays every scenario file on the SQLite store.
func TestScenariosSQLite(t *testing.T) { runAll(t, "sqlite", sqliteOpener) }

// TestScenariosPostgres plays every scenario file on the PostgreSQL store.
func TestScenariosPostgres(t *testing.T) {
	pgtest.DSN(t) // skip (or fail under CI) once, loudly, before the subtests
	runAll(t, "postgres", postgresOpener)
}

var _ = strings.Contains

package scenarios_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// TestScenariosSQLite plays every scenario file on the SQLite store.
func TestScenariosSQLite(t *testing.T) {
	leaseholdtest.Scenarios(t, leaseholdtest.Store{Name: "sqlite", Factory: sqlitetest.Factory})
}

// TestScenariosPostgres plays every scenario file on the PostgreSQL store.
func TestScenariosPostgres(t *testing.T) {
	pgtest.DSN(t) // skip (or fail under CI) once, loudly, before the subtests
	leaseholdtest.Scenarios(t, leaseholdtest.Store{Name: "postgres", Factory: pgtest.Factory})
}

package harness_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

func TestLinearizableSQLite(t *testing.T) {
	leaseholdtest.Linearizability(t, leaseholdtest.Store{Name: "sqlite", Factory: sqlitetest.Factory})
}

// TestLinearizablePostgres: concurrent histories on the PostgreSQL store,
// each history's stores on a schema of a pool, reset between histories.
func TestLinearizablePostgres(t *testing.T) {
	pgtest.DSN(t)
	pool := pgtest.NewSchemaPool(t, "")
	leaseholdtest.Linearizability(t, leaseholdtest.Store{Name: "postgres", Factory: pool.Factory(postgres.Options{MaxConns: 4})})
	t.Logf("schema pool: %+v", pool.Stats())
}

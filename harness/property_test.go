package harness_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

func TestPropertySQLite(t *testing.T) {
	leaseholdtest.Property(t, leaseholdtest.Store{Name: "sqlite", Factory: sqlitetest.Factory})
}

// TestPropertyPostgres: the rapid property on the PostgreSQL store, each
// sequence's store on a schema of a pool, reset between sequences (as
// fresh as a new one, and much cheaper).
func TestPropertyPostgres(t *testing.T) {
	pgtest.DSN(t) // skip loudly (or fail under CI) before any rapid machinery runs
	pool := pgtest.NewSchemaPool(t, "")
	leaseholdtest.Property(t, leaseholdtest.Store{Name: "postgres", Factory: pool.Factory(postgres.Options{MaxConns: 4})})
	t.Logf("schema pool: %+v", pool.Stats())
}

package harness_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

func TestPropertySQLite(t *testing.T) {
	leaseholdtest.Property(t, leaseholdtest.Store{Name: "sqlite", Factory: sqlitetest.Factory})
}

func TestPropertyPostgres(t *testing.T) {
	pgtest.DSN(t) // skip loudly (or fail under CI) before any rapid machinery runs
	leaseholdtest.Property(t, leaseholdtest.Store{Name: "postgres", Factory: pgtest.Factory})
}

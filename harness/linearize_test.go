package harness_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

func TestLinearizableSQLite(t *testing.T) {
	leaseholdtest.Linearizability(t, leaseholdtest.Store{Name: "sqlite", Factory: sqlitetest.Factory})
}

func TestLinearizablePostgres(t *testing.T) {
	pgtest.DSN(t)
	leaseholdtest.Linearizability(t, leaseholdtest.Store{Name: "postgres", Factory: pgtest.Factory})
}

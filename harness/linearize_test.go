package harness

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
)

func TestLinearizableSQLite(t *testing.T) { RunLinearizable(t, "sqlite", sqlitetest.Factory) }

func TestLinearizablePostgres(t *testing.T) {
	pgtest.DSN(t)
	RunLinearizable(t, "postgres", pgtest.Factory)
}

package harness

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
)

func TestRuntimeSQLite(t *testing.T) { RunRuntime(t, "sqlite", sqlitetest.Factory) }

func TestRuntimePostgres(t *testing.T) {
	pgtest.DSN(t)
	RunRuntime(t, "postgres", pgtest.Factory)
}

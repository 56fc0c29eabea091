package harness

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
)

func TestPropertySQLite(t *testing.T) { RunProperty(t, "sqlite", sqlitetest.Factory) }

func TestPropertyPostgres(t *testing.T) {
	pgtest.DSN(t) // skip loudly (or fail under CI) before any rapid machinery runs
	RunProperty(t, "postgres", pgtest.Factory)
}

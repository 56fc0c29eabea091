package postgres_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// TestMain stops pgtest's private PostgreSQL cluster, if one was
// started (see pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformance(t *testing.T) {
	pgtest.DSN(t) // skip loudly (or fail under CI) once, before the suite
	// Every capability a check uses is declared, so nothing is left out as
	// not applicable.
	all := []storetest.Capability{storetest.CapHooks, storetest.CapSQL, storetest.CapDatabaseClock,
		storetest.CapCompleteBatch, storetest.CapNotifications, storetest.CapCreateRuns, storetest.CapLockWaits, storetest.CapListRuns, storetest.CapCreateRunTx}
	if missing := storetest.Missing(storetest.Declared(t, pgtest.Factory), all...); len(missing) > 0 {
		t.Errorf("pgtest.Factory does not declare %v", missing)
	}
	// Schemas from a pool, reset between tests: a fresh schema's creation
	// and migrations were most of the suite's time.
	pool := pgtest.NewSchemaPool(t, "")
	// After the suite's parallel subtests, which run once this returns.
	t.Cleanup(func() { t.Logf("schema pool: %+v", pool.Stats()) })
	leaseholdtest.Conformance(t, leaseholdtest.Store{Name: "postgres", Factory: pool.Factory(postgres.Options{MaxConns: 4})})
}

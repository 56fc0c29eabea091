package postgres_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/storetest"
)

// TestMain terminates the shared testcontainers PostgreSQL, if one was
// started (see pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, pgtest.Factory)
}

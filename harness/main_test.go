package harness

import (
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
)

// TestMain provisions PostgreSQL for the package's tests (see pgtest.Main).
func TestMain(m *testing.M) { pgtest.Main(m) }

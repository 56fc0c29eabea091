package sqlite_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

func TestConformance(t *testing.T) {
	leaseholdtest.Conformance(t, leaseholdtest.Store{Name: "sqlite", Factory: sqlitetest.Factory})
}

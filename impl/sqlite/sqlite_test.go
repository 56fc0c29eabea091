package sqlite_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, sqlitetest.Factory)
}

package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
)

// TestSweepStaleSchemas: a test schema older than a run can last is
// dropped; a young one (a test running now), and a schema that is not a
// test's, are kept.
func TestSweepStaleSchemas(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	conn := pgtest.Conn(t, dsn, "")
	now := time.Now()
	stale := "lh_test_" + now.Add(-7*time.Hour).UTC().Format("20060102150405") + "_00112233aabbccdd"
	young := "lh_test_" + now.Add(-time.Minute).UTC().Format("20060102150405") + "_00112233aabbccdd"
	other := "lh_sweep_other_00112233aabbccdd"
	for _, s := range []string{stale, young, other} {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
		})
	}
	dropped, err := pgtest.SweepStaleSchemas(ctx, dsn, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dropped, stale) || slices.Contains(dropped, young) || slices.Contains(dropped, other) {
		t.Fatalf("swept %v; want %s dropped and %s, %s kept", dropped, stale, young, other)
	}
	for s, want := range map[string]bool{stale: false, young: true, other: true} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, s).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != want {
			t.Errorf("schema %s exists = %v after the sweep, want %v", s, exists, want)
		}
	}
}

package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// TestMigrateConcurrentlyAndAgain: several stores opened at the same moment
// on one fresh schema all succeed (the advisory lock serializes them, and
// only the first applies anything); opening once more changes nothing; the
// ledger records each embedded migration once with its checksum.
func TestMigrateConcurrentlyAndAgain(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	const n = 6
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 1})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d of %d concurrent ones: %v", i, n, err)
		}
	}
	openOn(t, dsn, schema, postgres.Options{}) // and once more

	want, err := migrations.For(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t, dsn, schema)
	rows, err := conn.Query(ctx, `SELECT version, name, checksum FROM `+migrations.VersionTable+` ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var v int
		var name, sum string
		if err := rows.Scan(&v, &name, &sum); err != nil {
			t.Fatal(err)
		}
		if i >= len(want) || v != want[i].Version || name != want[i].Name || sum != want[i].Checksum {
			t.Fatalf("ledger row %d = (%d, %s, %.12s), want the embedded migrations %+v", i, v, name, sum, want)
		}
		i++
	}
	if rows.Err() != nil || i != len(want) {
		t.Fatalf("ledger has %d rows (%v), want %d", i, rows.Err(), len(want))
	}
}

// TestMigrateRefusesAnEditedMigration: a recorded checksum that differs from
// the embedded file means an applied migration was edited; Open refuses.
func TestMigrateRefusesAnEditedMigration(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	openOn(t, dsn, schema, postgres.Options{})
	conn := pgtest.Conn(t, dsn, schema)
	if _, err := conn.Exec(ctx, `UPDATE `+migrations.VersionTable+` SET checksum = 'deadbeef' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema})
	if err == nil {
		s.Close()
		t.Fatal("Open accepted a schema whose recorded migration checksum differs from the embedded file")
	}
	if spec.CodeOf(err) != spec.CodeFailedPrecondition || !strings.Contains(err.Error(), "edited") {
		t.Fatalf("Open on an edited migration: %v; want failed_precondition saying the migration was edited", err)
	}
}

// TestSchemasAreIsolated: two stores on two schemas of one database share
// nothing, not even run ids.
func TestSchemasAreIsolated(t *testing.T) {
	ctx := context.Background()
	dsnA, schemaA := pgtest.Schema(t)
	dsnB, schemaB := pgtest.Schema(t)
	a := openOn(t, dsnA, schemaA, postgres.Options{})
	b := openOn(t, dsnB, schemaB, postgres.Options{})
	for i, s := range []*postgres.Store{a, b} {
		payload := []byte(`{"store":` + string(rune('0'+i)) + `}`)
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k", RunID: "r1", Payload: payload}); err != nil {
			t.Fatalf("create r1 in schema %s: %v", s.Schema(), err)
		}
	}
	for i, s := range []*postgres.Store{a, b} {
		run, err := s.GetRun(ctx, "acme", "r1")
		if want := `{"store":` + string(rune('0'+i)) + `}`; err != nil || run.Payload != want {
			t.Fatalf("r1 in schema %s: %q, %v; want its own payload %s", s.Schema(), run.Payload, err, want)
		}
	}
}

// TestOpenRejectsBadOptions: Open validates its options before it touches
// the database.
func TestOpenRejectsBadOptions(t *testing.T) {
	ctx := context.Background()
	good := spec.DefaultConfig()
	cases := []struct {
		name string
		dsn  string
		opts postgres.Options
	}{
		{"upper-case schema", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: "Leasehold"}},
		{"schema with a hyphen", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: "lease-hold"}},
		{"schema starting with a digit", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: "1lease"}},
		{"schema too long", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: strings.Repeat("s", 64)}},
		{"quote in schema", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: `a"b`}},
		{"invalid config", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: spec.Config{}}},
		{"malformed DSN", "postgres://x@127.0.0.1:notaport/x", postgres.Options{Config: good}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, c.dsn, c.opts)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted it")
			}
			if spec.CodeOf(err) != spec.CodeInvalidArgument {
				t.Fatalf("Open: %v; want invalid_argument", err)
			}
		})
	}
}

package postgres_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Factory opens a fresh PostgreSQL store in a schema of its own (see pgtest).
// Exec runs raw SQL in that schema; Reopen opens a second pool on it.
func Factory(t testing.TB, opts storetest.Options) storetest.Handle {
	dsn, schema := pgtest.Schema(t)
	open := func(t testing.TB) *postgres.Store {
		s, err := postgres.Open(context.Background(), dsn, postgres.Options{
			Config: opts.Config, Clock: opts.Clock, Random: opts.Random, Hook: opts.Hook,
			Schema: schema, MaxConns: 4})
		if err != nil {
			t.Fatalf("open postgres store in schema %s: %v", schema, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open(t)
	return storetest.Handle{
		Store: s,
		Exec: func(ctx context.Context, query string) error {
			_, err := s.Pool().Exec(ctx, query)
			return err
		},
		Reopen: func(t testing.TB) spec.Store { return open(t) },
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, Factory)
}

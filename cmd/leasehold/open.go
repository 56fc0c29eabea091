package main

import (
	"context"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/spec"
)

// sqliteOpener returns a scenarios.Opener for the SQLite database file at
// path: each call opens another store (its own connection pool) on that
// file. The file should not exist yet, or be empty, when the scenario starts.
func sqliteOpener(path string) scenarios.Opener {
	return func(ctx context.Context, o scenarios.Options) (spec.Store, error) {
		// Two connections: a client runs one operation at a time, and the
		// runner's reads must not queue behind it.
		s, err := sqlite.Open(ctx, path, sqlite.Options{Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: o.Hook, MaxConns: 2})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// postgresOpener returns a scenarios.Opener for schema in the PostgreSQL
// database at dsn: each call opens another store (its own pool) on that
// schema, which the first call creates and migrates. The schema should not
// exist yet; the caller drops it afterwards.
func postgresOpener(dsn, schema string) scenarios.Opener {
	return func(ctx context.Context, o scenarios.Options) (spec.Store, error) {
		s, err := postgres.Open(ctx, dsn, postgres.Options{Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: o.Hook,
			Schema: schema, MaxConns: 2, ApplicationName: "leasehold-scenario"})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

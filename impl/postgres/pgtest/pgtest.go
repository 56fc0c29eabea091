// Package pgtest provisions PostgreSQL for leasehold's tests. Every
// PostgreSQL test gets its database through it:
//
//  1. LEASEHOLD_PG_DSN, else DATABASE_URL, when set: that server (for a
//     server in Docker, the pgcontainer command of the module
//     impl/postgres/pgcontainer starts one and prints the line to export).
//  2. Otherwise, when the PostgreSQL server binaries are installed (EnvBin,
//     default DefaultBin): a private cluster of the test binary's own, on a
//     free loopback port, stopped and removed by Main.
//  3. Otherwise the test is skipped with a loud reason, except when CI=true or
//     LEASEHOLD_REQUIRE_PG=1 (what `make verify` sets): then a missing
//     database fails the test, so a PostgreSQL suite can never pass by
//     silently skipping.
//
// Each test gets its own freshly named schema (lh_test_<random>), which the
// store under test creates and migrates, and which is dropped when the test
// ends.
//
// The private cluster runs with fsync=off; a test about durability across a
// server crash must not use it.
//
// A fault test that stops or restarts its server uses a Cluster instead
// (NewCluster): a server of its own, started from the PostgreSQL binaries
// in a temporary directory, never the shared server above.
package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgcluster"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// Environment variables read by this package.
const (
	EnvDSN        = "LEASEHOLD_PG_DSN"     // preferred: the server to test against
	EnvDSNAlt     = "DATABASE_URL"         // used when EnvDSN is unset
	EnvRequire    = "LEASEHOLD_REQUIRE_PG" // "1": a missing database fails instead of skipping
	EnvCI         = "CI"                   // "true": as EnvRequire=1
	schemaPrefix  = "lh_test_"
	setupDeadline = 2 * time.Minute
)

// Required reports whether a missing database must fail the test rather than
// skip it.
func Required() bool {
	return os.Getenv(EnvRequire) == "1" || os.Getenv(EnvCI) == "true"
}

var shared struct {
	once    sync.Once
	dsn     string
	cluster *pgcluster.Cluster // the private cluster, when no DSN is configured
	inMain  bool               // Main runs the tests: it stops a private cluster
	err     error              // why no database is available
}

// DSN returns the connection string of the test server, starting the
// private cluster on first use when no DSN is configured. With no database
// it skips t, or fails it when Required.
func DSN(t testing.TB) string {
	t.Helper()
	shared.once.Do(provision)
	if shared.err != nil {
		msg := fmt.Sprintf(storetest.NoPostgreSQLPrefix+"%v. Set %s (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable; "+
			"for a server in Docker: go run ./impl/postgres/pgcontainer) or install the PostgreSQL server binaries.",
			shared.err, EnvDSN)
		if Required() {
			t.Fatalf("%s (%s=1 or %s=true: a PostgreSQL suite may not skip)", msg, EnvRequire, EnvCI)
		}
		t.Skip(msg)
	}
	return shared.dsn
}

func provision() {
	dsn := cmp.Or(os.Getenv(EnvDSN), os.Getenv(EnvDSNAlt))
	if dsn != "" {
		shared.dsn = dsn
		ctx, cancel := hang.Context(context.Background())
		defer cancel()
		if dropped, err := SweepStaleSchemas(ctx, dsn, time.Now()); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: sweeping stale test schemas: %v\n", err)
		} else if len(dropped) > 0 {
			fmt.Fprintf(os.Stderr, "pgtest: dropped %d test schemas left by killed runs\n", len(dropped))
		}
		return
	}
	if !shared.inMain {
		shared.err = fmt.Errorf("%s and %s are unset, and this test binary cannot start a private cluster: its TestMain does not call pgtest.Main, which stops it", EnvDSN, EnvDSNAlt)
		return
	}
	c, err := pgcluster.Start(pgcluster.Options{})
	if err != nil {
		shared.err = fmt.Errorf("%s and %s are unset and no private cluster could start (%v)", EnvDSN, EnvDSNAlt, err)
		return
	}
	shared.cluster, shared.dsn = c, c.DSN()
}

// LockPatience is the checks' patience (hang.Patience) as a PostgreSQL
// lock_timeout: a wait for a lock this long is a hang (a connection that
// still holds one), never a slow server.
func LockPatience() string { return fmt.Sprintf("%dms", hang.Patience().Milliseconds()) }

// Main runs a package's tests and then stops the private cluster if one
// was started. Use it from TestMain: func TestMain(m *testing.M) {
// pgtest.Main(m) }.
func Main(m *testing.M) {
	shared.inMain = true
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.Remove(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the private PostgreSQL cluster: %v\n", err)
		}
	}
	os.Exit(code)
}

// Schema returns the test server's DSN and a fresh schema name for t. The
// schema does not exist yet (the store's migration creates it); it is
// dropped, with everything in it, when t ends. Close the test's stores
// before that (register their Close with t.Cleanup after calling Schema, so
// it runs first).
func Schema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = DSN(t)
	schema, err := newSchemaName(time.Now())
	if err != nil {
		t.Fatalf("random schema name: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := hang.Context(context.Background())
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("pgtest: drop schema %s: connect: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		// A leftover open transaction holding a lock would make the drop
		// wait; fail loudly instead of hanging the run.
		if _, err := conn.Exec(ctx, "SELECT set_config('lock_timeout', $1, false)", LockPatience()); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v (a connection of the test still holds a lock?)", schema, err)
		}
	})
	return dsn, schema
}

// newSchemaName is schemaPrefix, the creation time (UTC, to the second) and
// random hex: lh_test_20261201093000_1a2b3c4d5e6f7a8b. The time lets a later
// run drop the schemas of runs that were killed before their cleanup.
func newSchemaName(now time.Time) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return schemaPrefix + now.UTC().Format(schemaTimeLayout) + "_" + hex.EncodeToString(b[:]), nil
}

// schemaTimeLayout is the time in a test schema's name.
const schemaTimeLayout = "20060102150405"

// staleAfter is the age past which a test schema belongs to a run that was
// killed: no test of this module runs that long.
const staleAfter = 6 * time.Hour

var staleSchema = regexp.MustCompile(`^` + schemaPrefix + `([0-9]{14})_[0-9a-f]{16}$`)

// SweepStaleSchemas drops the test schemas that runs killed before their
// cleanup left behind (older than staleAfter, by the time in their names),
// and returns their names. Schemas of running tests, which are younger, and
// anything that is not a test schema are left alone. Provisioning runs it
// once per process.
func SweepStaleSchemas(ctx context.Context, dsn string, now time.Time) ([]string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname LIKE 'lh\_test\_%'`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, name := range names {
		m := staleSchema.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		created, err := time.Parse(schemaTimeLayout, m[1])
		if err != nil || now.Sub(created) < staleAfter {
			continue
		}
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			return dropped, fmt.Errorf("drop stale schema %s: %w", name, err)
		}
		dropped = append(dropped, name)
	}
	return dropped, nil
}

// Conn opens a plain connection to the test server, outside any store, whose
// search_path is schema (when not empty). It is closed when t ends. Tests use
// it to hold locks, kill backends and inspect plans.
func Conn(t testing.TB, dsn, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: parse DSN: %v", err)
	}
	if schema != "" {
		cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	}
	cfg.RuntimeParams["application_name"] = "leasehold-pgtest"
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Factory opens a fresh PostgreSQL store for one test, in a schema of its own
// (see Schema), with a small pool: the storetest.Factory that the
// conformance suite, the property tests and the linearizability checks use
// for the PostgreSQL store. Handle.Exec runs raw SQL in that schema;
// Handle.Reopen opens another, independent pool on the same schema.
func Factory(t testing.TB, opts storetest.Options) storetest.Handle {
	return FactoryWith(postgres.Options{MaxConns: 4})(t, opts)
}

// FactoryWith is Factory with more store options (pool size, session
// settings, application name). The storetest options (Config, Clock, Random,
// Hook) and the schema override the corresponding fields of base.
func FactoryWith(base postgres.Options) storetest.Factory {
	return func(t testing.TB, opts storetest.Options) storetest.Handle {
		t.Helper()
		dsn, schema := Schema(t)
		return handle(t, dsn, schema, base, opts)
	}
}

// handle opens the store of a Factory on schema and returns its Handle.
func handle(t testing.TB, dsn, schema string, base postgres.Options, opts storetest.Options) storetest.Handle {
	t.Helper()
	open := func(t testing.TB, opts storetest.Options) *postgres.Store {
		o := base
		o.Config, o.Clock, o.Random, o.Hook, o.Schema = opts.Config, opts.Clock, opts.Random, opts.Hook, schema
		s, err := postgres.Open(context.Background(), dsn, o)
		if err != nil {
			t.Fatalf("open postgres store in schema %s: %v", schema, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open(t, opts)
	return storetest.Handle{
		Store: s,
		Exec: func(ctx context.Context, query string) error {
			_, err := s.Pool().Exec(ctx, query)
			return err
		},
		Reopen:   func(t testing.TB) spec.Store { return open(t, opts) },
		OpenWith: func(t testing.TB, o storetest.Options) spec.Store { return open(t, o) },
		Layout:   storetest.LayoutJobRow,
		Caps:     storetest.Caps{Hooks: true, SQL: true, DatabaseClock: true},
	}
}

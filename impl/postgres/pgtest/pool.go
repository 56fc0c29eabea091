package pgtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// SchemaPool hands out migrated schemas for tests that open a fresh store
// many times (a rapid property opens one per sequence), reusing each schema
// once the store on it is closed instead of creating and migrating a new
// one. Before a schema is handed out again it is reset: every table but the
// migration record is emptied with one TRUNCATE ... RESTART IDENTITY
// CASCADE, in a transaction whose ACCESS EXCLUSIVE locks wait out any
// transaction a previous user left running. The reset then compares the
// schema's catalog (relations, columns, defaults, constraints, indexes,
// triggers (a foreign key's internal ones are its constraint), functions, types, sequence positions) and its migration record
// with what they were right after the schema was created; a schema that
// differs (a user ran DDL, advanced a sequence of its own) is dropped and
// replaced by a new one. A schema handed out is therefore, for the store,
// indistinguishable from a fresh one: same tables, same empty contents,
// same migration record. What a reset does not restore is invisible to
// the store: planner statistics and the server's activity counters, the
// order of relation OIDs, and the migration record's applied_at times,
// which differ between any two fresh schemas too.
//
// Session state (LISTEN, session advisory locks, prepared statements) is
// not carried over: each user opens its own store, whose connections are
// new, and closes it before the schema is reset.
//
// Every schema of the pool is dropped when the test that made the pool
// ends. A SchemaPool is safe for concurrent use.
type SchemaPool struct {
	t     testing.TB
	dsn   string
	setup string
	admin *pgx.Conn // resets, creates and drops; guarded by mu

	mu     sync.Mutex
	free   []string
	all    []string
	golden string // the catalog of a schema right after creation and setup
	stats  PoolStats
}

// PoolStats counts what a SchemaPool did.
type PoolStats struct {
	Created int // schemas created and migrated
	Reused  int // schemas reset and handed out again
	Dropped int // schemas that differed from a fresh one after their reset, dropped and replaced
}

// NewSchemaPool returns a pool for t (usually the whole test), whose
// schemas are dropped when t ends. setup, when not empty, is SQL (one or
// more statements) run once on each new schema after its migration, in
// that schema: tables it creates are part of what a fresh schema is, and
// are emptied by resets like the store's. Like DSN, it skips t, or fails it
// when Required, without a database.
func NewSchemaPool(t testing.TB, setup string) *SchemaPool {
	t.Helper()
	dsn := DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: parse DSN: %v", err)
	}
	cfg.RuntimeParams["application_name"] = "leasehold-pgtest-pool"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: schema pool: connect: %v", err)
	}
	// A reset waits for the locks of a transaction a previous user left
	// running; fail loudly rather than hang the run.
	if _, err := admin.Exec(ctx, "SET lock_timeout = '20s'"); err != nil {
		admin.Close(ctx)
		t.Fatalf("pgtest: schema pool: %v", err)
	}
	p := &SchemaPool{t: t, dsn: dsn, setup: setup, admin: admin}
	t.Cleanup(p.close)
	return p
}

// Stats returns what the pool has done so far.
func (p *SchemaPool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Factory is pgtest.Factory on the pool's schemas: each store it opens
// gets a schema of its own, fresh or reset, which goes back to the pool
// when the t the factory was given ends (after the store's Close, which
// the factory registers later). Handle.Exec, Reopen and OpenWith work as
// with FactoryWith.
func (p *SchemaPool) Factory(base postgres.Options) storetest.Factory {
	return func(t testing.TB, opts storetest.Options) storetest.Handle {
		t.Helper()
		schema, err := p.Acquire()
		if err != nil {
			t.Fatalf("pgtest: schema pool: %v", err)
		}
		t.Cleanup(func() { p.Release(schema) })
		return handle(t, p.dsn, schema, base, opts)
	}
}

// Acquire returns a schema no one else holds, migrated (and set up) and
// empty: a reset one when one is free, else a new one. Give it back with
// Release once every store on it is closed.
func (p *SchemaPool) Acquire() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(p.free) > 0 {
		schema := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		same, err := p.reset(ctx, schema)
		if err != nil {
			return "", fmt.Errorf("reset schema %s: %w", schema, err)
		}
		if same {
			p.stats.Reused++
			return schema, nil
		}
		if err := p.drop(ctx, schema); err != nil {
			return "", err
		}
		p.stats.Dropped++
	}
	return p.create(ctx)
}

// Release gives a schema back to the pool. Every store on it must be closed.
func (p *SchemaPool) Release(schema string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, schema)
}

// create makes a new schema, migrated by the store's own migration (an
// Open and Close) and set up, and records its catalog as the golden one
// when it is the first.
func (p *SchemaPool) create(ctx context.Context) (string, error) {
	schema, err := newSchemaName(time.Now())
	if err != nil {
		return "", err
	}
	p.all = append(p.all, schema)
	s, err := postgres.Open(ctx, p.dsn, postgres.Options{Schema: schema, MaxConns: 1, DisableNotify: true, Config: spec.DefaultConfig()})
	if err != nil {
		return "", fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	s.Close()
	if p.setup != "" {
		if _, err := p.admin.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()+"; "+p.setup+"; RESET search_path"); err != nil {
			return "", fmt.Errorf("set up schema %s: %w", schema, err)
		}
	}
	catalog, err := catalogOf(ctx, p.admin, schema)
	if err != nil {
		return "", err
	}
	switch {
	case p.golden == "":
		p.golden = catalog
	case catalog != p.golden:
		return "", fmt.Errorf("schema %s differs from the pool's first schema right after its migration:\n%s", schema, firstDifference(p.golden, catalog))
	}
	p.stats.Created++
	return schema, nil
}

// reset empties schema's tables and reports whether its catalog is then
// the golden one.
func (p *SchemaPool) reset(ctx context.Context, schema string) (bool, error) {
	tx, err := p.admin.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, tablesQuery, schema, migrations.VersionTable)
	if err != nil {
		return false, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, err
	}
	if len(tables) > 0 {
		if _, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")+" RESTART IDENTITY CASCADE"); err != nil {
			return false, err
		}
	}
	catalog, err := catalogOf(ctx, tx, schema)
	if err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return catalog == p.golden, nil
}

// tablesQuery lists the tables of schema $1 but the migration record ($2),
// qualified and quoted.
const tablesQuery = `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND c.relname <> $2 ORDER BY c.relname`

// querier is a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// catalogOf is what catalogQuery and the migration record say of schema.
func catalogOf(ctx context.Context, q querier, schema string) (string, error) {
	var catalog, record string
	if err := q.QueryRow(ctx, catalogQuery, schema).Scan(&catalog); err != nil {
		return "", err
	}
	if err := q.QueryRow(ctx, `SELECT coalesce(string_agg(version || ' ' || name || ' ' || checksum, E'\n' ORDER BY version), '') FROM `+
		pgx.Identifier{schema, migrations.VersionTable}.Sanitize()).Scan(&record); err != nil {
		return "", err
	}
	return catalog + "\nmigrations:\n" + record, nil
}

func (p *SchemaPool) drop(ctx context.Context, schema string) error {
	if _, err := p.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

func (p *SchemaPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, schema := range p.all {
		if err := p.drop(ctx, schema); err != nil {
			p.t.Errorf("pgtest: schema pool: %v (a connection of the test still holds a lock?)", err)
		}
	}
	p.admin.Close(ctx)
}

// catalogQuery describes, one line per object in a fixed order, what of a
// schema ($1) a store can observe besides its rows: relations with their
// options, columns, defaults, constraints, indexes, triggers, functions,
// types and the sequences' positions (migrationQuery adds the migration
// record). Names of the schema itself are written without it, so two
// schemas built alike describe alike.
const catalogQuery = `
WITH s AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1),
lines AS (
	SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '') AS l
	FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM s)
	UNION ALL
	SELECT 'col ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
		|| ' notnull=' || a.attnotnull || ' collation=' || a.attcollation::regcollation::text
		|| ' default=' || replace(coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''), quote_ident($1) || '.', '') || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
	FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
	LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE c.relnamespace = (SELECT oid FROM s) AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'con ' || c.relname || '.' || k.conname || ' ' || replace(pg_catalog.pg_get_constraintdef(k.oid), quote_ident($1) || '.', '')
	FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
	WHERE k.connamespace = (SELECT oid FROM s)
	UNION ALL
	SELECT 'idx ' || replace(pg_catalog.pg_get_indexdef(i.indexrelid), quote_ident($1) || '.', '')
	FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
	WHERE c.relnamespace = (SELECT oid FROM s)
	UNION ALL
	SELECT 'trg ' || c.relname || '.' || g.tgname || ' ' || g.tgenabled::text
	FROM pg_catalog.pg_trigger g JOIN pg_catalog.pg_class c ON c.oid = g.tgrelid
	WHERE c.relnamespace = (SELECT oid FROM s) AND NOT g.tgisinternal
	UNION ALL
	SELECT 'fn ' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ') ' || md5(p.prosrc)
	FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM s)
	UNION ALL
	SELECT 'type ' || t.typname || ' ' || t.typtype::text
	FROM pg_catalog.pg_type t WHERE t.typnamespace = (SELECT oid FROM s)
	UNION ALL
	SELECT 'seq ' || q.sequencename || ' ' || coalesce(q.last_value::text, 'unused')
	FROM pg_catalog.pg_sequences q WHERE q.schemaname = $1
)
SELECT coalesce(string_agg(l, E'\n' ORDER BY l), '') FROM lines`

// firstDifference is the first line where two catalogs differ, for an error.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("  first: %q\n  this:  %q", x, y)
		}
	}
	return "  (no difference)"
}

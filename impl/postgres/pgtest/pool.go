package pgtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// SchemaPool hands out migrated schemas for tests that open a fresh store
// many times (a rapid property opens one per sequence), reusing each schema
// once the store on it is closed instead of creating and migrating a new
// one for each.
//
// Before a schema is handed out again it is reset, in one transaction:
// every table of the schema is locked ACCESS EXCLUSIVE (which waits out any
// transaction a previous user left running and keeps every other session
// out until the reset commits); the schema's stamp (stampQuery: the
// identity and last writer of every catalog row defining one of its
// objects, and of its migration record) is compared with the stamp it had
// when it was created; every table but the migration record is emptied by
// DELETE, referencing tables first; every sequence is set back to its
// start, not yet called. A schema whose stamp changed (a user ran DDL on
// it, edited its migration record) is dropped and replaced by a new one
// instead. A new schema's full definition (catalogQuery) must equal the
// pool's first one's.
//
// A schema handed out is therefore, for the store, indistinguishable from
// a fresh one: the same definition, empty tables, sequences at their start,
// the same migration record. What a reset does not restore is not
// observable through SQL results: the tables' dead row versions until
// VACUUM, planner statistics, the server's activity counters, and the
// migration record's applied_at times, which differ between any two fresh
// schemas too. (A DELETE reset is chosen over TRUNCATE ... RESTART
// IDENTITY, which would also do, because TRUNCATE makes new files for every
// table and index, at a far higher cost per round.)
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

	mu      sync.Mutex
	free    []*pooled
	held    map[string]*pooled
	all     []string
	catalog string // catalogQuery of the pool's first schema, right after its creation and setup
	stats   PoolStats
}

// PoolStats counts what a SchemaPool did.
type PoolStats struct {
	Created int // schemas created and migrated
	Reused  int // schemas reset and handed out again
	Dropped int // schemas changed by their user, dropped and replaced
}

// NewSchemaPool returns a pool for t (usually the whole test), whose
// schemas are dropped when t ends. setup, when not empty, is SQL (one or
// more statements) run once on each new schema after its migration, in
// that schema: what it creates is part of what a fresh schema is, and its
// tables are emptied by resets like the store's. Like DSN, it skips t, or
// fails it when Required, without a database.
func NewSchemaPool(t testing.TB, setup string) *SchemaPool {
	t.Helper()
	dsn := DSN(t)
	ctx, cancel := hang.Context(context.Background())
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
	if _, err := admin.Exec(ctx, "SELECT set_config('lock_timeout', $1, false)", LockPatience()); err != nil {
		admin.Close(ctx)
		t.Fatalf("pgtest: schema pool: %v", err)
	}
	p := &SchemaPool{t: t, dsn: dsn, setup: setup, admin: admin, held: map[string]*pooled{}}
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
// gets a schema of its own, new or reset, which goes back to the pool when
// the t the factory was given ends (after the store's Close, which the
// factory registers later). Handle.Exec, Reopen and OpenWith work as with
// FactoryWith.
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
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	for len(p.free) > 0 {
		ps := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		same, err := p.reset(ctx, ps)
		if err != nil {
			return "", fmt.Errorf("reset schema %s: %w", ps.name, err)
		}
		if same {
			p.stats.Reused++
			p.held[ps.name] = ps
			return ps.name, nil
		}
		if err := p.drop(ctx, ps.name); err != nil {
			return "", err
		}
		p.stats.Dropped++
	}
	ps, err := p.create(ctx)
	if err != nil {
		return "", err
	}
	p.held[ps.name] = ps
	return ps.name, nil
}

// Release gives a schema Acquire returned back to the pool. Every store on
// it must be closed.
func (p *SchemaPool) Release(schema string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps, ok := p.held[schema]; ok {
		delete(p.held, schema)
		p.free = append(p.free, ps)
	}
}

// create makes a new schema, migrated by the store's own migration (an
// Open and Close) and set up, and checks its definition against the
// pool's first schema's.
func (p *SchemaPool) create(ctx context.Context) (*pooled, error) {
	schema, err := newSchemaName(time.Now())
	if err != nil {
		return nil, err
	}
	p.all = append(p.all, schema)
	s, err := postgres.Open(ctx, p.dsn, postgres.Options{Schema: schema, MaxConns: 1, DisableNotify: true, Config: spec.DefaultConfig()})
	if err != nil {
		return nil, fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	s.Close()
	if p.setup != "" {
		if _, err := p.admin.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()+"; "+p.setup+"; RESET search_path"); err != nil {
			return nil, fmt.Errorf("set up schema %s: %w", schema, err)
		}
	}
	catalog, err := catalogOf(ctx, p.admin, schema)
	if err != nil {
		return nil, err
	}
	switch {
	case p.catalog == "":
		p.catalog = catalog
	case catalog != p.catalog:
		return nil, fmt.Errorf("schema %s differs from the pool's first schema right after its migration:\n%s", schema, firstDifference(p.catalog, catalog))
	}
	ps, err := prepare(ctx, p.admin, schema)
	if err != nil {
		return nil, err
	}
	p.stats.Created++
	return ps, nil
}

// reset empties a schema's tables and reports whether its stamp is still
// the one it had when it was created (else the caller drops it).
func (p *SchemaPool) reset(ctx context.Context, ps *pooled) (bool, error) {
	tx, err := p.admin.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	// The locks first: they wait out a transaction a previous user left
	// running, and keep every other session out until the reset commits.
	if _, err := tx.Exec(ctx, ps.lock); err != nil {
		return false, err
	}
	var stamp string
	if err := tx.QueryRow(ctx, stampQuery(ps.name), ps.name).Scan(&stamp); err != nil {
		return false, err
	}
	if stamp != ps.stamp {
		return false, nil
	}
	if _, err := tx.Exec(ctx, ps.empty); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// pooled is one schema of a pool, with the statements that reset it.
type pooled struct {
	name  string
	lock  string // LOCK of every table of the schema
	empty string // DELETE of every table but the migration record, referencing tables first; setval of every sequence to its start
	stamp string // stampQuery's answer right after the schema was created
}

// prepare works out how to reset schema, and refuses what a reset by
// DELETE could not make fresh again: a foreign-key cycle (no order to
// delete in), triggers of the schema's own (a DELETE fires them),
// materialized views (they hold rows a DELETE does not reach).
func prepare(ctx context.Context, q queryer, schema string) (*pooled, error) {
	type rel struct{ Name, Kind string }
	rows, err := q.Query(ctx, `SELECT c.relname::text, c.relkind::text FROM pg_catalog.pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p', 'm') ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	if err != nil {
		return nil, err
	}
	var tables, locked []string
	for _, r := range rels {
		if r.Kind == "m" {
			return nil, fmt.Errorf("schema %s has a materialized view (%s): a reset could not empty it", schema, r.Name)
		}
		locked = append(locked, pgx.Identifier{schema, r.Name}.Sanitize())
		if r.Kind == "r" && r.Name != migrations.VersionTable {
			tables = append(tables, r.Name)
		}
	}
	var triggers int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_trigger g JOIN pg_catalog.pg_class c ON c.oid = g.tgrelid
		WHERE c.relnamespace = $1::regnamespace AND NOT g.tgisinternal`, schema).Scan(&triggers); err != nil {
		return nil, err
	}
	if triggers > 0 {
		return nil, fmt.Errorf("schema %s has %d triggers of its own: a reset by DELETE would fire them", schema, triggers)
	}
	type fk struct{ From, To string }
	rows, err = q.Query(ctx, `SELECT c.relname::text, f.relname::text FROM pg_catalog.pg_constraint k
		JOIN pg_catalog.pg_class c ON c.oid = k.conrelid JOIN pg_catalog.pg_class f ON f.oid = k.confrelid
		WHERE k.contype = 'f' AND k.connamespace = $1::regnamespace AND k.conrelid <> k.confrelid`, schema)
	if err != nil {
		return nil, err
	}
	fks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fk])
	if err != nil {
		return nil, err
	}
	refs := map[string][]string{}
	for _, k := range fks {
		refs[k.From] = append(refs[k.From], k.To)
	}
	order, err := referencingFirst(tables, refs)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", schema, err)
	}
	stmts := []string{}
	for _, table := range order {
		stmts = append(stmts, "DELETE FROM "+pgx.Identifier{schema, table}.Sanitize())
	}
	type seq struct {
		Name  string
		Start int64
	}
	rows, err = q.Query(ctx, `SELECT c.relname::text, s.seqstart FROM pg_catalog.pg_sequence s JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
		WHERE c.relnamespace = $1::regnamespace ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[seq])
	if err != nil {
		return nil, err
	}
	for _, sq := range seqs {
		// is_called false: the next nextval returns the start, as on a
		// new sequence.
		stmts = append(stmts, fmt.Sprintf("SELECT pg_catalog.setval('%s', %d, false)",
			strings.ReplaceAll(pgx.Identifier{schema, sq.Name}.Sanitize(), "'", "''"), sq.Start))
	}
	ps := &pooled{name: schema, lock: "SELECT 1", empty: "SELECT 1"}
	if len(locked) > 0 {
		ps.lock = "LOCK TABLE " + strings.Join(locked, ", ") + " IN ACCESS EXCLUSIVE MODE"
	}
	if len(stmts) > 0 {
		ps.empty = strings.Join(stmts, "; ")
	}
	if err := q.QueryRow(ctx, stampQuery(schema), schema).Scan(&ps.stamp); err != nil {
		return nil, err
	}
	return ps, nil
}

// referencingFirst orders tables so that each comes before every table its
// foreign keys reference (refs, tables outside the list ignored): an order
// to delete their rows in.
func referencingFirst(tables []string, refs map[string][]string) ([]string, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var out []string // referenced tables first; reversed at the end
	var visit func(string) error
	visit = func(t string) error {
		switch state[t] {
		case visiting:
			return fmt.Errorf("a foreign-key cycle through %s: no order to empty the tables in", t)
		case done:
			return nil
		}
		state[t] = visiting
		for _, r := range refs[t] {
			if err := visit(r); err != nil {
				return err
			}
		}
		state[t] = done
		out = append(out, t)
		return nil
	}
	for _, t := range tables {
		if err := visit(t); err != nil {
			return nil, err
		}
	}
	slices.Reverse(out)
	return slices.DeleteFunc(out, func(t string) bool { return !slices.Contains(tables, t) }), nil
}

// stampQuery returns the query ($1: the schema's name) of a schema's
// stamp: every catalog row that defines one of its objects (relations,
// columns, defaults, constraints, indexes, triggers, functions, types,
// sequences) and every row of its migration record, each by its identity
// and the transaction that last wrote it (xmin). A change to any of them
// (DDL, a migration record edited) writes a new row version, with a new
// xmin, or adds or removes a row: the stamp changes. Using the schema
// (DML, VACUUM and ANALYZE, whose pg_class updates are in place) leaves
// it as it was.
func stampQuery(schema string) string {
	return `WITH rels AS (SELECT oid, xmin FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace)
SELECT concat_ws(E'\n',
	(SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) FROM rels),
	(SELECT string_agg(attrelid::text || '.' || attnum::text || ':' || xmin::text, ',' ORDER BY attrelid, attnum)
		FROM pg_catalog.pg_attribute WHERE attrelid IN (SELECT oid FROM rels)),
	(SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_attrdef WHERE adrelid IN (SELECT oid FROM rels)),
	(SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_constraint WHERE connamespace = $1::regnamespace),
	(SELECT string_agg(indexrelid::text || ':' || xmin::text, ',' ORDER BY indexrelid) FROM pg_catalog.pg_index WHERE indrelid IN (SELECT oid FROM rels)),
	(SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_trigger WHERE tgrelid IN (SELECT oid FROM rels)),
	(SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_proc WHERE pronamespace = $1::regnamespace),
	(SELECT string_agg(oid::text || ':' || xmin::text, ',' ORDER BY oid) FROM pg_catalog.pg_type WHERE typnamespace = $1::regnamespace),
	(SELECT string_agg(seqrelid::text || ':' || xmin::text, ',' ORDER BY seqrelid) FROM pg_catalog.pg_sequence WHERE seqrelid IN (SELECT oid FROM rels)),
	(SELECT string_agg(version::text || ':' || xmin::text, ',' ORDER BY version) FROM ` + pgx.Identifier{schema, migrations.VersionTable}.Sanitize() + `))`
}

// queryer is a connection or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// catalogOf is what catalogQuery and the migration record say of schema.
func catalogOf(ctx context.Context, q queryer, schema string) (string, error) {
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
	ctx, cancel := hang.Context(context.Background())
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
// types and the sequences' positions (catalogOf adds the migration
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
	SELECT 'fn ' || p.proname || '(' || replace(pg_catalog.pg_get_function_identity_arguments(p.oid), quote_ident($1) || '.', '') || ') ' || md5(p.prosrc)
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

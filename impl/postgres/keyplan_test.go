package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/spec"
)

// foreignKeyCheck is the query PostgreSQL's foreign-key trigger runs for
// each row inserted into a table referencing runs (jobs, outbox, a replay's
// run), its parameters named: each connection plans it once and keeps the
// plan.
const foreignKeyCheck = `SELECT 1 FROM ONLY runs x WHERE tenant OPERATOR(pg_catalog.=) @tenant AND run_id OPERATOR(pg_catalog.=) @run_id FOR KEY SHARE OF x`

// emptySchema opens a store on a fresh schema, which migrates it and leaves
// its tables empty, and returns a connection to it with the store's planner
// settings.
func emptySchema(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	conn := pgtest.Conn(t, dsn, schema)
	for k, v := range postgres.IndexPlans {
		if _, err := conn.Exec(ctx, fmt.Sprintf("SET %s = %s", k, v)); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// TestKeyLookupsPlannedOnAnEmptyTable: a lookup of runs by key, planned
// while the table is empty and kept (a generic plan, as a prepared
// statement's after five executions and the foreign key's check from the
// start), reads the key's own unique index. runs_created, the listing's
// index, also holds tenant and run_id, and runs_idempotency_expiry, the
// purge's, the whole idempotency scope; as plain indexes (0011, 0008) each
// tied with the key's index on an empty table and won, and every such
// lookup then read all of its tenant's entries, or all records, as the
// table grew (migration 0012, bench/findings.md §34). The last subtest puts
// the plain indexes back and sees the same plans take them.
func TestKeyLookupsPlannedOnAnEmptyTable(t *testing.T) {
	ctx := context.Background()
	conn := emptySchema(t)
	lookups := []struct {
		name, sql string
		args      pgx.NamedArgs
	}{
		{"foreign key check", foreignKeyCheck, pgx.NamedArgs{"tenant": "acme", "run_id": "r1"}},
		{"CreateRun's record lookup", postgres.IdempotencySQL, pgx.NamedArgs{"tenant": "acme", "operation": "work", "key": "k1"}},
		{"bulk admission's lookups", postgres.AdmissionLookupsSQL, pgx.NamedArgs{"tenants": []string{"acme"}, "operations": []string{"work"},
			"keys": []string{"k1"}, "run_ids": []string{"r1"}}},
	}
	// plans returns each lookup's generic plan, printed.
	plans := func(t *testing.T) map[string]string {
		out := map[string]string{}
		for _, l := range lookups {
			var b strings.Builder
			printPlan(&b, genericPlan(t, ctx, conn, l.sql, l.args), 0)
			out[l.name] = b.String()
		}
		return out
	}
	// foreign is the first index a plan reads that is not a key's own.
	foreign := func(plan string) string {
		for _, idx := range []string{"runs_created", "runs_idempotency_expiry"} {
			if strings.Contains(plan, "using "+idx+" ") {
				return idx
			}
		}
		return ""
	}

	t.Run("with the partial indexes", func(t *testing.T) {
		for name, plan := range plans(t) {
			if idx := foreign(plan); idx != "" || !strings.Contains(plan, "using runs_") {
				t.Errorf("%s: the generic plan on an empty table reads %q, not only the key's own index:\n%s", name, idx, plan)
			}
		}
	})
	// The schema is this test's own: the plain indexes replace the partial
	// ones for good.
	t.Run("the check bites on the plain indexes", func(t *testing.T) {
		if _, err := conn.Exec(ctx, `DROP INDEX runs_created; CREATE INDEX runs_created ON runs (tenant, created_at, run_id);
			DROP INDEX runs_idempotency_expiry; CREATE INDEX runs_idempotency_expiry ON runs (idempotency_expires_at, tenant, operation, idempotency_key)
				WHERE idempotency_key IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
		for name, plan := range plans(t) {
			if foreign(plan) == "" {
				t.Errorf("%s: with the plain indexes the generic plan reads neither; the check above would not catch their return:\n%s", name, plan)
			}
			t.Logf("%s, with the plain indexes (the check above refuses it):\n%s", name, plan)
		}
	})
}

// TestPlansOnAnEmptyTable: the statements TestPlansAtDepth checks at depth,
// planned generically on empty tables (the plan a connection keeps when
// its sixth execution came before any ANALYZE, as on a fresh database or a
// server without autovacuum), read the index each reads at depth. A plan
// that took another index there would keep reading it as the tables grow
// (migration 0012).
func TestPlansOnAnEmptyTable(t *testing.T) {
	ctx := context.Background()
	conn := emptySchema(t)
	for _, c := range planCases() {
		if c.wantIndex == "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			plan := genericPlan(t, ctx, conn, c.query, c.args)
			var text strings.Builder
			printPlan(&text, plan, 0)
			if !strings.Contains(text.String(), "using "+c.wantIndex+" ") {
				t.Errorf("the generic plan on empty tables does not read %s, which the plan at depth reads:\n%s", c.wantIndex, text.String())
			}
		})
	}
}

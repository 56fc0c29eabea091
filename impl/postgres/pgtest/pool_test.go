package pgtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// TestMain stops the private PostgreSQL cluster, if one was started (see
// pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

// scoped is a testing.TB whose cleanups run when close is called: one
// round of a test that opens many stores, as the harness's property does.
type scoped struct {
	testing.TB
	cleanups []func()
}

func (s *scoped) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *scoped) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

// round runs f on a store the factory opens for one round, and returns the
// store's schema; the round's cleanups (the store's Close, the schema's
// release) have run when it returns.
func round(t *testing.T, f storetest.Factory, work func(h storetest.Handle)) string {
	t.Helper()
	sc := &scoped{TB: t}
	defer sc.close()
	h := f(sc, storetest.Options{Config: spec.DefaultConfig(), Clock: clock.NewManual(1_000), Random: rand.New(rand.NewPCG(1, 2))})
	if work != nil {
		work(h)
	}
	return h.Store.(*postgres.Store).Schema()
}

// busy writes a little of everything: runs (one replayed by its key),
// events, a claimed job with its attempt, a completion with outbox
// messages, an effect.
func busy(t *testing.T, h storetest.Handle) {
	t.Helper()
	ctx := context.Background()
	s := h.Store
	for i := range 3 {
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: fmt.Sprintf("k%d", i), RunID: fmt.Sprintf("r%d", i), Payload: []byte(`{}`)}); err != nil {
			t.Fatalf("create run: %v", err)
		}
	}
	if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: "k0", RunID: "other", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("replay a create: %v", err)
	}
	leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "t1", Worker: "w", LeaseMs: 5_000, Limit: 2})
	if err != nil || len(leases) != 2 {
		t.Fatalf("claim: %v, %d leases", err, len(leases))
	}
	if _, err := s.ReserveEffect(ctx, spec.ReserveEffectRequest{Lease: leases[1].Ref(), Step: "charge", Key: "c1"}); err != nil {
		t.Fatalf("reserve effect: %v", err)
	}
	if _, err := s.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref(), Result: []byte(`{"ok":true}`),
		Outbox: []spec.Message{{Subject: "done", Payload: []byte(`{}`)}}}); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// contents is every row of every table of schema, as JSON, table by table,
// with the migration record's applied_at left out (it is the time of the
// schema's migration, different for any two schemas).
func contents(t *testing.T, conn *pgx.Conn, schema string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r' ORDER BY relname`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, table := range tables {
		rows, err := conn.Query(ctx, `SELECT (to_jsonb(x) - 'applied_at')::text FROM `+pgx.Identifier{schema, table}.Sanitize()+` x ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out[table], err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func snapshot(t *testing.T, h storetest.Handle) spec.Snapshot {
	t.Helper()
	snap, err := h.Store.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap
}

// TestSchemaPoolResetIsFresh: a schema the pool resets after a round that
// wrote to every table is, for the store, a fresh one: the next round on
// it sees none of the previous round's rows, its tables hold what a fresh
// schema's hold (the migration record and nothing else), and the same
// operations then give the same Snapshot and the same rows as on a fresh
// schema.
func TestSchemaPoolResetIsFresh(t *testing.T) {
	pool := pgtest.NewSchemaPool(t, "")
	pooled, fresh := pool.Factory(postgres.Options{MaxConns: 2}), pgtest.FactoryWith(postgres.Options{MaxConns: 2})
	conn := pgtest.Conn(t, pgtest.DSN(t), "")
	var empty map[string][]string // a fresh schema's rows
	round(t, fresh, func(h storetest.Handle) { empty = contents(t, conn, h.Store.(*postgres.Store).Schema()) })
	if len(empty[migrations.VersionTable]) == 0 {
		t.Fatalf("a fresh schema has no migration record: %v", empty)
	}

	dirty := round(t, pooled, func(h storetest.Handle) {
		busy(t, h)
		got := contents(t, conn, h.Store.(*postgres.Store).Schema())
		for _, table := range []string{"runs", "jobs", "effects", "outbox"} {
			if len(got[table]) == 0 {
				t.Fatalf("the first round wrote no row to %s: the test would not show a reset emptying it", table)
			}
		}
	})
	var reset, clean map[string][]string
	var resetSnap, cleanSnap spec.Snapshot
	again := round(t, pooled, func(h storetest.Handle) {
		schema := h.Store.(*postgres.Store).Schema()
		if snap := snapshot(t, h); len(snap.Runs)+len(snap.Events)+len(snap.Jobs)+len(snap.Attempts)+len(snap.Idempotency)+len(snap.Effects)+len(snap.Outbox) > 0 {
			t.Errorf("the round after a busy one sees its rows: %+v", snap)
		}
		if before := contents(t, conn, schema); !reflect.DeepEqual(before, empty) {
			t.Errorf("a reset schema holds other rows than a fresh one:\nreset: %v\nfresh: %v", before, empty)
		}
		busy(t, h)
		resetSnap, reset = snapshot(t, h), contents(t, conn, schema)
	})
	if again != dirty || pool.Stats().Reused != 1 {
		t.Fatalf("the second round got schema %s after %s (%+v): want the first one, reset", again, dirty, pool.Stats())
	}
	round(t, fresh, func(h storetest.Handle) {
		schema := h.Store.(*postgres.Store).Schema()
		busy(t, h)
		cleanSnap, clean = snapshot(t, h), contents(t, conn, schema)
	})
	if !reflect.DeepEqual(resetSnap, cleanSnap) {
		t.Errorf("the same operations give another Snapshot on a reset schema than on a fresh one:\nreset: %+v\nfresh: %+v", resetSnap, cleanSnap)
	}
	if !reflect.DeepEqual(reset, clean) {
		t.Errorf("the same operations leave other rows on a reset schema than on a fresh one:\nreset: %v\nfresh: %v", reset, clean)
	}
}

// TestSchemaPoolReplacesAChangedSchema: a round that changed its schema's
// definition (DDL, a sequence of its own advanced) does not hand that
// schema on: the next round gets a new schema, as fresh as the first.
func TestSchemaPoolReplacesAChangedSchema(t *testing.T) {
	for _, tc := range []struct {
		name string
		ddl  string
	}{
		{"table added", `CREATE TABLE extra (x int)`},
		{"constraint dropped", `ALTER TABLE outbox DROP CONSTRAINT outbox_pkey`},
		{"index added", `CREATE INDEX extra_idx ON runs (created_at)`},
		{"column default", `ALTER TABLE runs ALTER COLUMN created_at SET DEFAULT 7`},
		{"sequence advanced", `CREATE SEQUENCE s; SELECT nextval('s')`},
		{"migration record edited", `UPDATE ` + migrations.VersionTable + ` SET checksum = 'x' WHERE version = 1`},
		{"function added", `CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtest.NewSchemaPool(t, "")
			pooled := pool.Factory(postgres.Options{MaxConns: 2})
			first := round(t, pooled, func(h storetest.Handle) {
				if err := h.Exec(context.Background(), tc.ddl); err != nil {
					t.Fatalf("%s: %v", tc.ddl, err)
				}
			})
			second := round(t, pooled, nil)
			if st := pool.Stats(); second == first || st.Dropped != 1 || st.Created != 2 || st.Reused != 0 {
				t.Fatalf("after %q the next round got schema %s (the first: %s), pool %+v; want a new schema, the first dropped", tc.ddl, second, first, st)
			}
			third := round(t, pooled, nil)
			if st := pool.Stats(); third != second || st.Reused != 1 {
				t.Fatalf("a round that changed nothing: the next round got %s after %s, pool %+v; want the same schema, reset", third, second, st)
			}
		})
	}
}

// TestSchemaPoolSetup: the setup SQL is part of a fresh schema; its
// tables are emptied by a reset like the store's, and their identity
// columns start again from the start.
func TestSchemaPoolSetup(t *testing.T) {
	pool := pgtest.NewSchemaPool(t, `CREATE TABLE app_writes (id bigint GENERATED ALWAYS AS IDENTITY, k text PRIMARY KEY)`)
	pooled := pool.Factory(postgres.Options{MaxConns: 2})
	count := func(h storetest.Handle) (n int) {
		if err := h.Store.(*postgres.Store).Pool().QueryRow(context.Background(), `SELECT count(*) FROM app_writes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 3 {
		round(t, pooled, func(h storetest.Handle) {
			if n := count(h); n != 0 {
				t.Fatalf("round %d: app_writes holds %d rows of an earlier round", i, n)
			}
			var id int64
			if err := h.Store.(*postgres.Store).Pool().QueryRow(context.Background(), `WITH w AS (INSERT INTO app_writes (k) VALUES ('a'), ('b') RETURNING id) SELECT min(id) FROM w`).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if id != 1 {
				t.Fatalf("round %d: the identity column starts at %d, not at 1 as in a fresh schema", i, id)
			}
		})
	}
	if st := pool.Stats(); st.Created != 1 || st.Reused != 2 {
		t.Fatalf("pool %+v: want one schema, reset twice", st)
	}
}

// TestSchemaPoolDropsItsSchemas: the pool's schemas are gone when its test
// ends.
func TestSchemaPoolDropsItsSchemas(t *testing.T) {
	dsn := pgtest.DSN(t) // without a server, skip here: the subtest's skip would leave no names
	var names []string
	t.Run("pool", func(t *testing.T) {
		pooled := pgtest.NewSchemaPool(t, "").Factory(postgres.Options{MaxConns: 2})
		// Two at once: the pool makes a second schema while the first is held.
		sc := &scoped{TB: t}
		for range 2 {
			h := pooled(sc, storetest.Options{Config: spec.DefaultConfig()})
			names = append(names, h.Store.(*postgres.Store).Schema())
		}
		sc.close()
	})
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("two stores held at once got schemas %v: want two", names)
	}
	rows, err := pgtest.Conn(t, dsn, "").Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname = ANY($1)`, names)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(left) > 0 {
		t.Fatalf("schemas left after the pool's test ended: %v (%v)", left, err)
	}
}

// BenchmarkRoundStore is the cost of one round's store, opened, used for a
// single write and closed: on a fresh schema (created, migrated, dropped)
// and on the pool's (reset).
func BenchmarkRoundStore(b *testing.B) {
	for _, tc := range []struct {
		name    string
		factory func(b *testing.B) storetest.Factory
	}{
		{"fresh", func(*testing.B) storetest.Factory { return pgtest.FactoryWith(postgres.Options{MaxConns: 4}) }},
		{"pool", func(b *testing.B) storetest.Factory {
			return pgtest.NewSchemaPool(b, "").Factory(postgres.Options{MaxConns: 4})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := tc.factory(b)
			for i := 0; b.Loop(); i++ {
				sc := &scoped{TB: b}
				h := f(sc, storetest.Options{Config: spec.DefaultConfig(), Clock: clock.NewManual(1_000)})
				if _, err := h.Store.CreateRun(context.Background(), spec.CreateRunRequest{Tenant: "t", Operation: "work", IdempotencyKey: "k", RunID: "r", Payload: []byte(`{}`)}); err != nil {
					b.Fatal(err)
				}
				sc.close()
			}
		})
	}
}

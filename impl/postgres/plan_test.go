package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/spec"
)

// The depth at which the plans are checked. The brief asks for 100k queued
// jobs at least; the table also holds what a long-lived queue holds besides:
// another tenant's backlog, leases in flight, expired final attempts and a
// larger pile of finished jobs.
const (
	depthQueued    = 100_000 // tenant acme, queued, due over [1000, 1000+depthQueued) ms
	depthOther     = 20_000  // tenant other, queued
	depthLeased    = 10_000  // acme, leased, unexpired, budget left
	depthLastTry   = 10_000  // acme, leased on their last attempt, expired: reapable
	depthCompleted = 30_000  // acme, completed
	depthExpired   = 5_000   // tenant beta, leased, expired, budget left: reclaimable
	depthBeta      = 5_000   // tenant beta, queued, due after the expired leases
	depthNow       = 51_000  // the claim's "now": half of the backlog is due
)

// loadDepth fills the store's schema with generate_series in a few INSERT …
// SELECT statements (seconds, not the minutes the API would take), then
// ANALYZEs, as autovacuum would on a real table.
func loadDepth(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	total := depthQueued + depthOther + depthLeased + depthLastTry + depthCompleted + depthExpired + depthBeta
	// Row g's role is decided by its range; ids are zero-padded so that their
	// order is their number.
	bounds := []int{depthQueued, depthOther, depthLeased, depthLastTry, depthCompleted, depthExpired}
	names := []string{"queued", "other", "leased", "lasttry", "completed", "expired"}
	role, upTo := "CASE", 0
	for i, n := range bounds {
		upTo += n
		role += fmt.Sprintf(" WHEN g <= %d THEN '%s'", upTo, names[i])
	}
	role += " ELSE 'beta' END"
	tenant := `CASE role WHEN 'other' THEN 'other' WHEN 'expired' THEN 'beta' WHEN 'beta' THEN 'beta' ELSE 'acme' END`
	stmts := []string{
		`CREATE TEMP TABLE depth AS SELECT g, 'r' || lpad(g::text, 7, '0') AS run_id, ` + role + ` AS role
			FROM generate_series(1, ` + fmt.Sprint(total) + `) AS g`,
		`INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at,
			idempotency_key, idempotency_expires_at)
		SELECT ` + tenant + `, run_id, 'work', '{}', 'fp1:x', 3, 0, 100000000, 'key-' || g, 1 + g FROM depth`,
		`INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_owner, lease_expires_at,
			lease_generation, attempts, max_attempts, run_state, run_version, run_last_seq, run_finished_at, run_event_payload,
			attempt_generation, attempt_number, attempt_worker, attempt_claimed_at, attempt_renewed_at, attempt_outcome)
		SELECT ` + tenant + `, run_id, 'work', state, available_at, owner, expires_at, gen, gen, 3,
			CASE state WHEN 'queued' THEN 'queued' WHEN 'completed' THEN 'completed' ELSE 'running' END,
			CASE state WHEN 'queued' THEN 1 WHEN 'completed' THEN 3 ELSE 2 END,
			CASE state WHEN 'completed' THEN 2 ELSE 1 END,
			CASE state WHEN 'completed' THEN 0 END, CASE state WHEN 'completed' THEN '{}' END,
			CASE state WHEN 'leased' THEN gen END, CASE state WHEN 'leased' THEN gen END, CASE state WHEN 'leased' THEN 'w' END,
			CASE state WHEN 'leased' THEN 0 END, CASE state WHEN 'leased' THEN 0 END, CASE state WHEN 'leased' THEN 'running' END
		FROM (SELECT g, run_id, role,
			CASE WHEN role IN ('queued', 'other', 'beta') THEN 'queued' WHEN role = 'completed' THEN 'completed' ELSE 'leased' END AS state,
			CASE WHEN role IN ('queued', 'beta') THEN 1000 + g - 1 ELSE g % 1000 END AS available_at,
			CASE WHEN role IN ('leased', 'lasttry', 'expired') THEN 'w' END AS owner,
			CASE role WHEN 'leased' THEN 10000000 WHEN 'lasttry' THEN 1000 WHEN 'expired' THEN 1000 + g % 500 END AS expires_at,
			CASE WHEN role IN ('queued', 'other', 'beta') THEN 0 WHEN role = 'lasttry' THEN 3 ELSE 1 END AS gen
			FROM depth) AS d`,
		`ANALYZE runs, jobs, attempts`,
	}
	start := time.Now()
	// Skip the per-row foreign-key triggers while loading (the rows are
	// consistent by construction); this needs a superuser, which the local
	// server and the test container give. Without one the load is slower.
	if _, err := conn.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		t.Logf("loading with foreign-key checks on (slower): %v", err)
	} else {
		defer conn.Exec(ctx, "SET session_replication_role = DEFAULT")
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("load depth: %v\n%s", err, q)
		}
	}
	t.Logf("loaded %d runs and jobs (%d queued for acme, due %d of them at now=%d) in %v",
		total, depthQueued, depthNow-999, depthNow, time.Since(start).Round(time.Millisecond))
}

// planNode is the part of EXPLAIN (FORMAT JSON) the checks read.
type planNode struct {
	NodeType      string     `json:"Node Type"`
	RelationName  string     `json:"Relation Name"`
	IndexName     string     `json:"Index Name"`
	ActualRows    float64    `json:"Actual Rows"`
	ActualLoops   float64    `json:"Actual Loops"`
	SharedHit     int64      `json:"Shared Hit Blocks"`
	SharedRead    int64      `json:"Shared Read Blocks"`
	RowsRemovedBy float64    `json:"Rows Removed by Filter"`
	Plans         []planNode `json:"Plans"`
}

type explained struct {
	Plan          planNode `json:"Plan"`
	ExecutionTime float64  `json:"Execution Time"`
}

// walk calls f on every node of the plan.
func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// explain runs EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of query with the
// store's own parameters, inside a transaction that is rolled back (the
// claim's CTEs really run, and are undone), and returns the parsed plan and
// its text form.
func explain(t *testing.T, ctx context.Context, conn *pgx.Conn, query string, a pgx.NamedArgs) explained {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, a).Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, query)
	}
	var out []explained
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN JSON: %v\n%s", err, raw)
	}
	return out[0]
}

// planCase is one statement of the store with arguments for the depth
// load, and what its plan must read.
type planCase struct {
	name      string
	query     string
	args      pgx.NamedArgs
	wantIndex string  // must appear in the plan; "": the plan reads no table at all
	wantRows  float64 // rows the statement's top node returns
	// indexRows, when set, bounds the rows the wantIndex scan reads: a
	// branch that stops at the limit, rather than reading every match
	// and sorting it.
	indexRows float64
	// generic: the store runs the statement's generic plan
	// (genericPlans), so that plan is the one run and checked here.
	generic bool
}

// planCases are the statements whose plans TestPlansAtDepth checks at depth
// and TestPlansOnAnEmptyTable checks planned on empty tables.
func planCases() []planCase {
	return []planCase{
		{"claim 1", postgres.ClaimSQL, pgx.NamedArgs{"tenant": "acme", "worker": "w2", "now": depthNow, "lease_ms": 30_000, "latest": int64(math.MaxInt64 - 30_000), "limit": 1},
			"jobs_due", 2, 1, true}, // the lease and the clock row
		{"claim batch of 100", postgres.ClaimSQL, pgx.NamedArgs{"tenant": "acme", "worker": "w2", "now": depthNow, "lease_ms": 30_000, "latest": int64(math.MaxInt64 - 30_000), "limit": 100},
			"jobs_due", 101, 100, true},
		{"claim batch of 100 reclaiming expired leases", postgres.ClaimSQL, pgx.NamedArgs{"tenant": "beta", "worker": "w2", "now": depthNow, "lease_ms": 30_000, "latest": int64(math.MaxInt64 - 30_000), "limit": 100},
			"jobs_expired", 101, 100, true},
		{"reap", postgres.ReapSQL, pgx.NamedArgs{"tenant": "acme", "now": depthNow, "limit": 100}, "jobs_reap", 100, 0, false},
		{"idempotency lookup", postgres.IdempotencySQL, pgx.NamedArgs{"tenant": "acme", "operation": "work", "key": "key-4242"},
			"runs_idempotency", 1, 0, false},
		{"fresh admission", postgres.FreshSQL, pgx.NamedArgs{"scope": "fresh-scope", "now": depthNow, "latest": int64(math.MaxInt64 / 2),
			"tenant": "acme", "run_id": "fresh-1", "operation": "work", "key": "fresh-key-1", "payload": "{}", "fingerprint": "f",
			"max_attempts": 3, "deadline_in": 60_000, "expires_in": 86_400_000, "available_in": 0},
			"", 1, 0, false}, // its inserts meet a taken key in their unique indexes
		{"purge", postgres.PurgeSQL, pgx.NamedArgs{"now": depthNow, "limit": 100}, "runs_idempotency_expiry", 0, 0, false},
		// The completed runs finished at 0 and their records have expired by
		// 1+depthTotal: a purge of runs reads the first 100 in finishing order.
		{"purge runs", postgres.RetiredSQL, pgx.NamedArgs{"tenant": "acme", "retired_by": depthNow, "now": 1_000_000,
			"after_at": int64(-1), "after_id": "", "limit": 100}, "jobs_finished", 100, 100, false},
		// Listing (every loaded run was created at 0: one tie of 150,000
		// runs of acme, which the row comparison enters at the cursor). A
		// page of 100 reads 101 runs (the 101st says whether a page
		// follows), and each run's job by its key.
		{"list runs", postgres.ListRunsSQL, listing("acme", "", math.MaxInt64, ""), "runs_created", 101, 101, false},
		{"list runs after a cursor inside a tie", postgres.ListRunsSQL, listing("acme", "", 0, "r0050000"), "runs_created", 101, 101, false},
		// acme's newest runs are its 30,000 completed ones: the first page
		// of them is read as the first page of all.
		{"list completed runs", postgres.ListRunsSQL, listing("acme", "completed", math.MaxInt64, ""), "runs_created", 101, 101, false},
		// Its queued runs come after its completed and leased ones: a
		// filter is applied to the runs read in order, so the first page
		// of them reads the 50,000 runs listed before them too (through the
		// index still, no sort).
		{"list queued runs", postgres.ListRunsSQL, listing("acme", "queued", math.MaxInt64, ""), "runs_created", 101, 0, false},
	}
}

// TestPlansAtDepth loads a deep queue and checks, on the exact statements the
// store runs and with its parameters, that claim (including expiry
// reclaim), reap, admission's idempotency lookup and purge are index scans,
// and that the fresh admission reads no table: no Seq Scan on any table, in
// the plan for these parameters (run with EXPLAIN ANALYZE in a rolled-back
// transaction, and logged) and in the generic plan a prepared statement may
// cache; and the intended index used.
func TestPlansAtDepth(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	conn := pgtest.Conn(t, dsn, schema)
	loadDepth(t, ctx, conn)

	cases := planCases()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := explain(t, ctx, conn, c.query, c.args)
			if c.generic {
				plan = genericAnalyze(t, ctx, conn, c.query, c.args)
			}
			var seq, scans []string
			var buffers int64
			usesIndex := false
			plan.Plan.walk(func(n planNode) {
				if n.NodeType == "Seq Scan" {
					seq = append(seq, n.RelationName)
				}
				if n.RelationName != "" && strings.HasSuffix(n.NodeType, "Scan") {
					scans = append(scans, n.NodeType+" on "+n.RelationName)
				}
				if n.IndexName == c.wantIndex {
					usesIndex = true
					if c.indexRows > 0 && n.ActualRows > c.indexRows {
						t.Errorf("the %s scan read %v rows, want at most %v: the branch must stop at the limit, not sort every match",
							c.wantIndex, n.ActualRows, c.indexRows)
					}
				}
				buffers += n.SharedHit + n.SharedRead
			})
			var text strings.Builder
			printPlan(&text, plan.Plan, 0)
			t.Logf("plan at depth (execution %.3f ms, %d buffers in scan nodes):\n%s", plan.ExecutionTime, plan.Plan.SharedHit+plan.Plan.SharedRead, text.String())
			if len(seq) > 0 {
				t.Errorf("plan has a Seq Scan on %v; want index scans only at depth\n%s", seq, text.String())
			}
			switch {
			case c.wantIndex == "" && len(scans) > 0:
				t.Errorf("plan reads tables (%v); want none\n%s", scans, text.String())
			case c.wantIndex != "" && !usesIndex:
				t.Errorf("plan does not use index %s\n%s", c.wantIndex, text.String())
			}
			var genericSeq []string
			genericPlan(t, ctx, conn, c.query, c.args).walk(func(n planNode) {
				if n.NodeType == "Seq Scan" {
					genericSeq = append(genericSeq, n.RelationName)
				}
			})
			if len(genericSeq) > 0 {
				t.Errorf("the generic (cached) plan has a Seq Scan on %v", genericSeq)
			}
			if c.name != "purge" && plan.Plan.ActualRows != c.wantRows {
				t.Errorf("statement returned %v rows, want %v (the load is not what the test assumes)", plan.Plan.ActualRows, c.wantRows)
			}
		})
	}
	// The listing's check bites: without runs_created the same statement
	// sorts the tenant's runs (dropped in a transaction rolled back).
	t.Run("list runs without its index", func(t *testing.T) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "DROP INDEX runs_created"); err != nil {
			t.Fatal(err)
		}
		var raw []byte
		if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+postgres.ListRunsSQL, listing("acme", "", math.MaxInt64, "")).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var out []explained
		if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
			t.Fatalf("EXPLAIN JSON: %v\n%s", err, raw)
		}
		var text strings.Builder
		printPlan(&text, out[0].Plan, 0)
		uses := false
		out[0].Plan.walk(func(n planNode) { uses = uses || n.IndexName == "runs_created" })
		if uses || !strings.Contains(text.String(), "Sort") {
			t.Errorf("without runs_created the listing's plan should sort what another scan read, which the check above refuses; it is:\n%s", text.String())
		}
		t.Logf("the listing's plan without runs_created (the check above refuses it):\n%s", text.String())
	})
}

// listing is listRuns' parameters for a first page of 100 runs of tenant
// (then the 101st) in state ("" for any), below (belowAt, belowID).
func listing(tenant, state string, belowAt int64, belowID string) pgx.NamedArgs {
	return pgx.NamedArgs{"tenant": tenant, "below_at": belowAt, "below_id": belowID, "from": 0, "state": state,
		"operation": "", "limit": 101}
}

// genericPlan returns the plan PostgreSQL would cache for query as a
// prepared statement with a generic plan (one that cannot see the parameter
// values: the LIMIT, "now"). pgx prepares every statement, and PostgreSQL
// may switch a prepared statement to its generic plan after five executions,
// so that plan must be good too.
func genericPlan(t *testing.T, ctx context.Context, conn *pgx.Conn, query string, a pgx.NamedArgs) planNode {
	t.Helper()
	sql, list, err := a.RewriteQuery(ctx, conn, query, nil)
	if err != nil {
		t.Fatal(err)
	}
	lits := make([]string, len(list))
	for i, v := range list {
		switch v := v.(type) {
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case []string: // plain names only: no quoting inside the array
			lits[i] = "'{" + strings.Join(v, ",") + "}'"
		default:
			lits[i] = fmt.Sprint(v)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE lh_generic AS " + sql} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	defer tx.Exec(ctx, "DEALLOCATE lh_generic") // PREPARE outlives a rollback
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE lh_generic("+strings.Join(lits, ", ")+")").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out []explained
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN JSON: %v", err)
	}
	return out[0].Plan
}

// printPlan writes an indented one-line-per-node summary of a plan.
func printPlan(b *strings.Builder, n planNode, depth int) {
	fmt.Fprintf(b, "%s%s", strings.Repeat("  ", depth), n.NodeType)
	if n.RelationName != "" {
		fmt.Fprintf(b, " on %s", n.RelationName)
	}
	if n.IndexName != "" {
		fmt.Fprintf(b, " using %s", n.IndexName)
	}
	fmt.Fprintf(b, " (rows %v, buffers hit %d read %d", n.ActualRows, n.SharedHit, n.SharedRead)
	if n.RowsRemovedBy > 0 {
		fmt.Fprintf(b, ", removed by filter %v", n.RowsRemovedBy)
	}
	b.WriteString(")\n")
	for _, c := range n.Plans {
		printPlan(b, c, depth+1)
	}
}

// TestBatchPlansAfterGrowth: the claim (first claims and reclaims) and
// CompleteBatch stay lookups of the rows they touch after the tables have
// grown far past the sizes they had when the plans were made. pgx prepares
// statements, and from its sixth execution on a connection a prepared
// statement may run a generic plan made with the tables' sizes at that
// moment and keep it until the next ANALYZE. Made on small tables, such
// plans scanned them: superseded attempts by a bitmap scan of the tenant
// (12 ms a claim at 40,000 attempts in the benchmark), a batch's jobs by a
// scan of jobs, the claim's due jobs by a bitmap scan and a sort. Here the
// store's one connection claims, completes and reclaims a batch six times
// on small tables; another connection then adds queued and finished jobs
// and finished attempts, and each later call must read a number of pages of
// each table bounded by its batch, not by the table, whichever plans the
// calls run.
//
// The small tables are of two kinds: loaded and ANALYZEd (the benchmark's
// drain), or empty and never analyzed, the store claiming before its first
// jobs arrive and then a round's jobs at a time (a worker started on a new
// schema, the benchmark's latency phase). A generic claim plan cached on
// empty tables joined the picked jobs to a scan of the tenant's jobs and
// runs (bench/findings.md §20).
func TestBatchPlansAfterGrowth(t *testing.T) {
	for _, start := range []struct {
		name     string
		analyzed bool
	}{
		{"analyzed", true},
		{"empty_never_analyzed", false},
	} {
		t.Run(start.name, func(t *testing.T) { batchPlansAfterGrowth(t, start.analyzed) })
	}
}

func batchPlansAfterGrowth(t *testing.T, analyzed bool) {
	const (
		batch  = 20
		early  = 6 // rounds before the table grows: past pgx's five custom plans
		rounds = early + 4
		grown  = 40_000 // finished runs per tenant; their attempts are added after round early
		// Heap pages of one table that one call for batch jobs may read
		// once the tables have grown: a few per job (a lookup, a lock, an
		// update, a foreign-key check each read a page), plus the dead
		// versions of beta's jobs, one more per job and round, which the
		// reclaim visits while other tests' transactions keep them from
		// being pruned (measured up to 322 under make test, 178 alone). A
		// scan of attempts then reads over 2,000 pages, of jobs over 1,000.
		maxPages = 25 * batch
		leaseMs  = 1_000
	)
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(1_000_000)
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 1, Clock: clk})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	conn := pgtest.Conn(t, dsn, schema)
	// exec runs the loading statements without the per-row foreign-key
	// checks (superuser only; slower without), then publishes this
	// connection's counters so they do not land in a round's figures.
	exec := func(stmts ...string) {
		t.Helper()
		if _, err := conn.Exec(ctx, "SET session_replication_role = replica"); err != nil {
			t.Logf("loading with foreign-key checks on (slower): %v", err)
		} else {
			defer conn.Exec(ctx, "SET session_replication_role = DEFAULT")
		}
		for _, q := range append(stmts, `SELECT pg_stat_force_next_flush()`) {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("load: %v\n%s", err, q)
			}
		}
	}
	// runs adds runs [from, to] of tenant and their jobs, queued or
	// completed; budget is each job's max_attempts.
	runs := func(tenant string, from, to int, state string, budget int) string {
		done := state == "completed"
		return fmt.Sprintf(`WITH r AS (
			INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at)
			SELECT '%s', 'r' || lpad(g::text, 7, '0'), 'work', '{}', 'fp1:x', %d, 0, 100000000000000
			FROM generate_series(%d, %d) AS g
			RETURNING tenant, run_id, max_attempts)
		INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts,
			run_state, run_version, run_last_seq, run_finished_at, run_event_payload)
		SELECT tenant, run_id, 'work', '%[5]s', 0, %[6]d, %[6]d, max_attempts, '%[5]s', 1 + 2 * %[6]d, 1 + %[6]d,
			%[7]s, %[8]s FROM r`,
			tenant, budget, from, to, state, map[bool]int{false: 0, true: 1}[done],
			map[bool]string{false: "NULL", true: "0"}[done], map[bool]string{false: "NULL", true: "'{}'"}[done])
	}
	if analyzed {
		// The benchmark's starting point: a loaded queue whose tables were
		// ANALYZEd, beside an attempts table analyzed while still empty (as
		// a server with autovacuum off keeps it).
		exec(runs("acme", 1, batch*rounds, "queued", 3),
			// beta's jobs are claimed with short leases and reclaimed every round.
			runs("beta", 1, batch, "queued", 100),
			`ANALYZE runs, jobs, attempts`)
	}
	// pagesRead returns the heap pages of each hot-path table read so far
	// (buffer accesses). pg_stat_force_next_flush makes the store's one
	// backend publish its counters when the statement ends, so the figures
	// are exact.
	pagesRead := func() map[string]int64 {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, `SELECT relname, heap_blks_read + heap_blks_hit FROM pg_statio_user_tables
			WHERE schemaname = $1 AND relname IN ('jobs', 'runs', 'attempts')`, schema)
		if err != nil {
			t.Fatal(err)
		}
		pages := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			pages[name] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return pages
	}
	claim := func(round int, tenant string) []spec.Lease {
		t.Helper()
		leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "w", LeaseMs: leaseMs, Limit: batch})
		if err != nil || len(leases) != batch {
			t.Fatalf("round %d: claimed %d jobs of %s, %v; want %d", round, len(leases), tenant, err, batch)
		}
		return leases
	}
	// check holds one call's reads to the bound, table by table.
	check := func(round int, call string, before, after map[string]int64) {
		t.Helper()
		var line []string
		for _, table := range []string{"jobs", "runs", "attempts"} {
			n := after[table] - before[table]
			line = append(line, fmt.Sprintf("%s %d", table, n))
			if round > early && n > maxPages {
				t.Errorf("round %d: %s of %d jobs read %d %s pages, want at most %d: a plan scans the table instead of looking up its rows",
					round, call, batch, n, table, maxPages)
			}
		}
		t.Logf("round %d: %s read %s pages", round, call, strings.Join(line, ", "))
	}
	if !analyzed {
		// Claims of empty tables, more than pgx's five custom plans.
		for i := 0; i < early; i++ {
			if leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: leaseMs, Limit: batch}); err != nil || len(leases) != 0 {
				t.Fatalf("claim of empty tables: %d leases, %v; want none", len(leases), err)
			}
		}
		exec(runs("beta", 1, batch, "queued", 100))
	}
	for round := 1; round <= rounds; round++ {
		if !analyzed && round <= early {
			exec(runs("acme", (round-1)*batch+1, round*batch, "queued", 3))
		}
		if round == early+1 {
			// The finished runs' attempts: the table grows past its plans.
			exec(runs("acme", batch*rounds+1, batch*rounds+grown, "completed", 3),
				runs("acme", batch*rounds+grown+1, batch*rounds+2*grown, "queued", 3),
				runs("beta", batch+1, batch+grown, "completed", 3),
				`INSERT INTO attempts (tenant, run_id, generation, number, worker, claimed_at, renewed_at, finished_at, outcome)
				SELECT tenant, run_id, 1, 1, 'w', 0, 0, 0, 'completed' FROM jobs
				WHERE state = 'completed' AND attempt_generation IS NULL`)
		}
		// Every lease of the round before has expired.
		if _, err := clk.Advance(leaseMs); err != nil {
			t.Fatal(err)
		}
		p0 := pagesRead()
		leases := claim(round, "acme")
		p1 := pagesRead()
		check(round, "the claim", p0, p1)
		reqs := make([]spec.CompleteRequest, len(leases))
		for i, l := range leases {
			reqs[i] = spec.CompleteRequest{Lease: l.Ref()}
		}
		out, err := s.CompleteBatch(ctx, reqs)
		if err != nil {
			t.Fatalf("round %d: CompleteBatch: %v", round, err)
		}
		for i, o := range out {
			if o.Err != nil || o.Run.State != spec.RunCompleted {
				t.Fatalf("round %d: member %d: %+v, want a completed run", round, i, o)
			}
		}
		p2 := pagesRead()
		check(round, "CompleteBatch", p1, p2)
		reclaimed := claim(round, "beta")
		if round > 1 && reclaimed[0].Generation != int64(round) {
			t.Fatalf("round %d: beta's lease has generation %d, want %d (a reclaim)", round, reclaimed[0].Generation, round)
		}
		check(round, "the reclaim", p2, pagesRead())
	}
	// The claim and the batch's lock and write run their generic plans
	// (they leave the planner nothing to order, so the page bounds above
	// hold for a plan made on any of the tables' sizes).
	for _, c := range []struct{ name, like string }{
		{"the claim", "%branch0%"},
		{"CompleteBatch's write", "%ctid = ANY%"},
		{"CompleteBatch's lock", "%FOR NO KEY UPDATE) AS x"},
	} {
		var generic, custom int64
		if err := s.Pool().QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
			WHERE statement LIKE $1`, c.like).Scan(&generic, &custom); err != nil {
			t.Fatalf("%s's prepared statement: %v", c.name, err)
		}
		t.Logf("%s ran %d generic and %d custom plans", c.name, generic, custom)
		if custom != 0 || generic == 0 {
			t.Errorf("%s ran %d generic and %d custom plans, want only its generic plan", c.name, generic, custom)
		}
	}
}

// TestBulkAdmissionPlans: bulk admission's lookups and locks read one row
// per member (an index lookup each, nothing filtered out, no sequential
// scan) in their generic plan, on tables that were never analyzed — where
// a join of the members to the tables, ordered from default statistics,
// read every job of the tenant for each lookup. The members are a run
// whose live record is replayed, one whose record is conflicted with, a
// run id taken, a run whose expired record is replaced, and a run id that
// is free.
func TestBulkAdmissionPlans(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 2, DisableNotify: true})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	const runs = 1000
	for i := 0; i < runs; i += spec.MaxBatch / 4 {
		reqs := make([]spec.CreateRunRequest, spec.MaxBatch/4)
		for j := range reqs {
			id := fmt.Sprintf("r%04d", i+j)
			reqs[j] = spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id, Payload: []byte(`{}`)}
		}
		if _, err := s.CreateRuns(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	conn := pgtest.Conn(t, dsn, schema)
	tenants, ids := []string{"acme", "acme", "acme", "acme", "acme"}, []string{"r0007", "r0100", "r0500", "r0900", "none"}
	keys := []string{"k-r0007", "k-r0100", "k-r0500", "k-r0900", "k-none"}
	ops := []string{"work", "work", "work", "work", "work"}
	modes := []int32{3, 1, 0, 2, 0} // lockReplayed, lockRecord, lockTaken, lockExpired, lockTaken
	expires := make([]int64, len(ids))
	for i, id := range ids[:4] {
		if err := conn.QueryRow(ctx, `SELECT idempotency_expires_at FROM runs WHERE tenant = 'acme' AND run_id = $1`, id).Scan(&expires[i]); err != nil {
			t.Fatalf("the record of %s: %v", id, err)
		}
	}
	expired := expires[3] // r0900's record has expired by now; so have the others', which the statements do not ask about
	lookups := pgx.NamedArgs{"tenants": tenants, "operations": ops, "keys": keys, "run_ids": ids, "expires": expires, "modes": modes, "now": expired}
	for _, c := range []struct {
		name  string
		query string
		rows  float64 // the rows the statement returns, counts (lockDecidedRuns) or updates (deleteExpiredRecords)
	}{
		{"records and taken run ids", postgres.AdmissionLookupsSQL, 8},
		{"runs decided from, read", postgres.DecidedRunsReadSQL, 4},
		{"expired records", postgres.ExpiredRecordsSQL, 4},
		{"locks of the runs decided from", postgres.DecidedRunsSQL, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := genericAnalyze(t, ctx, conn, c.query, lookups).Plan
			var text strings.Builder
			printPlan(&text, plan, 0)
			top := plan
			if top.NodeType == "Aggregate" || top.NodeType == "ModifyTable" {
				top = top.Plans[0] // what it counts, or updates
			}
			if top.ActualRows != c.rows {
				t.Errorf("the statement's %s node has %v rows, want %v (the members are not what the test assumes):\n%s", top.NodeType, top.ActualRows, c.rows, text.String())
			}
			plan.walk(func(n planNode) {
				if n.RelationName == "" {
					return
				}
				if n.NodeType == "Seq Scan" || n.ActualRows*n.ActualLoops > float64(len(ids)) || n.RowsRemovedBy > 0 {
					t.Errorf("the generic plan's %s of %s returned %v rows and filtered out %v over %v loops for %d members, want an index lookup per member:\n%s",
						n.NodeType, n.RelationName, n.ActualRows*n.ActualLoops, n.RowsRemovedBy*n.ActualLoops, n.ActualLoops, len(ids), text.String())
				}
			})
		})
	}
}

// genericAnalyze runs query as a prepared statement with its generic plan,
// under EXPLAIN ANALYZE, in a transaction it rolls back, and returns the
// plan with its actual rows and buffers.
func genericAnalyze(t *testing.T, ctx context.Context, conn *pgx.Conn, query string, a pgx.NamedArgs) explained {
	t.Helper()
	sql, list, err := a.RewriteQuery(ctx, conn, query, nil)
	if err != nil {
		t.Fatal(err)
	}
	lits := make([]string, len(list))
	for i, v := range list {
		switch v := v.(type) {
		case []string:
			q := make([]string, len(v))
			for j, s := range v {
				q[j] = "'" + strings.ReplaceAll(s, "'", "''") + "'"
			}
			lits[i] = "ARRAY[" + strings.Join(q, ", ") + "]"
		case []int32:
			lits[i] = "ARRAY" + strings.ReplaceAll(fmt.Sprint(v), " ", ", ")
		case []int64:
			lits[i] = "ARRAY" + strings.ReplaceAll(fmt.Sprint(v), " ", ", ")
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		default:
			lits[i] = fmt.Sprint(v)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tx.Rollback(ctx)
		conn.Exec(ctx, "DEALLOCATE lh_generic_analyze") // PREPARE outlives a rollback; an aborted transaction refuses DEALLOCATE
	}()
	for _, q := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE lh_generic_analyze AS " + sql} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE lh_generic_analyze("+strings.Join(lits, ", ")+")").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out []explained
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN JSON: %v", err)
	}
	return out[0]
}

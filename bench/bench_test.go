package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// These tests keep the benchmark's code paths working; none of them times
// anything or asserts on a figure.

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestReportRendering renders a report with every section and checks that
// the goals and ratios come first, with their spreads.
func TestReportRendering(t *testing.T) {
	r := roundsReport()
	r.PeerSettings = map[string]string{"MaxWorkers": "100"}
	r.Postgres = PostgresInfo{Version: "PostgreSQL 15.0 on x", Settings: map[string]string{"synchronous_commit": "on", "shared_buffers": "128MB", "fsync": "on"}}
	var md strings.Builder
	r.Markdown(&md)
	text := md.String()
	goals, ratios, raw := strings.Index(text, "## Goals"), strings.Index(text, "## Ratios"), strings.Index(text, "## Throughput")
	if goals < 0 || ratios < 0 || raw < 0 || goals > ratios || ratios > raw {
		t.Errorf("the goals, then the ratios, must come before the raw figures:\n%s", text)
	}
	for _, s := range []string{"synchronous_commit", "shared_buffers", "fsync", "Commit `abc`", "load average 1.00/2.00/3.00 at the start, 4.00/5.00/6.00 at the end",
		"| leasehold / River vX (PostgreSQL drain) | 1.65 (1.50–1.80, 3 rounds) | higher |",
		"| leasehold / River vX (riversqlite) (SQLite drain, synchronous NORMAL) | noisy: not readable (median 2.00, 1.00–3.00, 3 rounds, spread 100 % > 20 %) | higher |",
		"| leasehold CreateRuns / River vX InsertMany of unique jobs (PostgreSQL, bulk, per job) ≥ 1.0 | **not measured** | not measured: store lacks CreateRuns |",
		"| leasehold | postgres | CreateRuns (bulk) | 1 | not measured: store lacks CreateRuns |",
		"| leasehold | postgres | single claim, Complete per job | unpinned | once | 33 |",
		"## Latency at a steady arrival rate", "Limit", "## Findings"} {
		if !strings.Contains(text, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bench.md", "bench.html"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Ratios) != len(r.Ratios) || back.Ratios[0].Spread == nil || back.Ratios[0].Spread.Median != r.Ratios[0].Spread.Median {
		t.Errorf("bench.json does not round-trip: %+v", back.Ratios)
	}
}

// TestRunSQLiteTiny runs the whole program path on SQLite alone with N=20:
// the other variant once, then three rounds of drain, CreateRun and
// CreateRuns (not measured while the store lacks it).
func TestRunSQLiteTiny(t *testing.T) {
	r, err := Run(context.Background(), Options{N: 20, SQLiteN: 20, InsertN: 20, BulkN: 30, Rounds: 3, Workers: 4, Conns: 2, ClaimBatch: 5, CompleteBatch: 7, SQLiteDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Inserts) != 2*3 || len(r.Drains) != len(sqliteVariants)-1+3 {
		t.Fatalf("want 6 inserts and %d drains, got %+v", len(sqliteVariants)+2, r)
	}
	for _, in := range r.Inserts {
		if in.Method == methodBulk && !(in.NotMeasured == notMeasuredCreateRuns && in.JobsPerSec == 0 || in.NotMeasured == "" && in.JobsPerSec > 0) {
			t.Errorf("bulk admission must have a figure or say the store lacks CreateRuns: %+v", in)
		}
		if in.Method == methodBulk && in.Jobs != 30 {
			t.Errorf("bulk admission of %d jobs, want BulkN = 30: %+v", in.Jobs, in)
		}
		if in.Method == methodOne && (in.NotMeasured != "" || in.JobsPerSec <= 0 || in.Jobs != 20) {
			t.Errorf("admission %+v", in)
		}
	}
	for _, d := range r.Drains {
		if d.NotMeasured != "" || d.Jobs != 20 || d.JobsPerSec <= 0 {
			t.Errorf("drain %s: %+v", d.Variant, d)
		}
	}
	if err := r.Write(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresPaths checks, on PostgreSQL, that the bulk loader writes the
// rows CreateRun writes, that expireSQL leaves leases the claim reclaims as
// the contract says, and that every drain variant completes every job.
func TestPostgresPaths(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: config(), Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	// Loader = CreateRun, row for row (times and names aside).
	if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: tenant, Operation: operation, IdempotencyKey: keyOf(1),
		RunID: runIDOf(1), Payload: []byte(`{"n": 1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := loadQueued(ctx, s.Pool(), 2, 2); err != nil {
		t.Fatal(err)
	}
	if err := checkLoaderFingerprint(ctx, s.Pool(), 2); err != nil {
		t.Error(err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Runs) != 2 || len(snap.Events) != 2 || len(snap.Jobs) != 2 || len(snap.Idempotency) != 2 {
		t.Fatalf("snapshot after one CreateRun and one loaded run: %+v", snap)
	}
	api, loaded := snap.Runs[0], snap.Runs[1]
	if loaded.Fingerprint == api.Fingerprint {
		t.Errorf("the loaded run's fingerprint should be that of its own payload")
	}
	loaded.ID, loaded.Payload, loaded.Fingerprint = api.ID, api.Payload, api.Fingerprint
	loaded.DeadlineAt += api.CreatedAt - loaded.CreatedAt
	loaded.CreatedAt = api.CreatedAt
	if loaded != api {
		t.Errorf("loaded run\n%+v\nwant (as CreateRun)\n%+v", snap.Runs[1], snap.Runs[0])
	}
	ev0, ev1 := snap.Events[0], snap.Events[1]
	ev1.RunID, ev1.At = ev0.RunID, ev0.At
	if ev0 != ev1 {
		t.Errorf("loaded event %+v, want %+v", snap.Events[1], snap.Events[0])
	}
	j0, j1 := snap.Jobs[0], snap.Jobs[1]
	j1.RunID, j1.AvailableAt = j0.RunID, j0.AvailableAt
	if j0 != j1 {
		t.Errorf("loaded job %+v, want %+v", snap.Jobs[1], snap.Jobs[0])
	}
	i0, i1 := snap.Idempotency[0], snap.Idempotency[1]
	if i1.Key != keyOf(2) || i1.RunID != runIDOf(2) || i1.Fingerprint != snap.Runs[1].Fingerprint || i1.ExpiresAt-i1.CreatedAt != i0.ExpiresAt-i0.CreatedAt {
		t.Errorf("loaded idempotency record %+v, want like %+v", i1, i0)
	}

	// Expired leases: the claim reclaims them first, at generation 2, and
	// closes their running attempts as expired.
	if _, err := s.Pool().Exec(ctx, `TRUNCATE runs, jobs, attempts, effects, outbox`); err != nil {
		t.Fatal(err)
	}
	if err := loadQueued(ctx, s.Pool(), 1, 5); err != nil {
		t.Fatal(err)
	}
	if err := expireLeases(ctx, s.Pool(), 2); err != nil {
		t.Fatal(err)
	}
	ls, err := s.Claim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "w", LeaseMs: leaseMs, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 5 || ls[0].Generation != 2 || ls[1].Generation != 2 || ls[2].Generation != 1 {
		t.Fatalf("claim after two expired leases: %+v", ls)
	}
	at, err := s.Attempts(ctx, tenant, ls[0].RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(at) != 2 || at[0].Outcome != spec.AttemptExpired || at[1].Outcome != spec.AttemptRunning {
		t.Errorf("attempts of a reclaimed job: %+v", at)
	}
	if plan, err := s.ExplainClaim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "w", LeaseMs: leaseMs, Limit: 1}); err != nil || !strings.Contains(plan, "Execution Time") {
		t.Errorf("ExplainClaim: %v\n%s", err, plan)
	}

	// Every drain variant works 20 jobs to completion.
	o := Options{N: 20, Workers: 4, Conns: 4, ClaimBatch: 5, CompleteBatch: 7, Completers: 2}.Defaults()
	for _, v := range pgVariants {
		if _, err := s.Pool().Exec(ctx, `TRUNCATE runs, jobs, attempts, effects, outbox`); err != nil {
			t.Fatal(err)
		}
		if err := loadQueued(ctx, s.Pool(), 1, 20); err != nil {
			t.Fatal(err)
		}
		if err := drain(ctx, s, 20, o, v, &drainStats{}); err != nil {
			t.Errorf("%s: %v", v.key, err)
			continue
		}
		snap, err := s.Snapshot(ctx)
		completed := 0
		for _, r := range snap.Runs {
			if r.State == spec.RunCompleted {
				completed++
			}
		}
		if err != nil || completed != 20 {
			t.Errorf("%s: %d runs completed (%v), want 20", v.key, completed, err)
		}
	}
}

// loopCreator is a spec.BatchCreator made of CreateRun calls: enough to
// exercise the benchmark's bulk path (not a store's implementation).
type loopCreator struct{ spec.Store }

func (l loopCreator) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	var outs []spec.CreateOutcome
	for _, r := range reqs {
		res, err := l.CreateRun(ctx, r)
		outs = append(outs, spec.CreateOutcome{Result: res, Err: err})
	}
	return outs, nil
}

// plainStore is a spec.Store and nothing more: its capabilities hidden.
type plainStore struct{ spec.Store }

// TestInsertBulkAPI: without spec.BatchCreator the bulk path reports the
// store as lacking it; with one it admits every run in batches, and a
// replayed member is an error.
func TestInsertBulkAPI(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "b.db"), sqlite.Options{Config: config()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := insertBulkAPI(ctx, plainStore{s}, 10, 3); err != errNoBatchCreator {
		t.Fatalf("a store without CreateRuns: err = %v, want errNoBatchCreator", err)
	}
	if err := insertBulkAPI(ctx, loopCreator{s}, 10, 3); err != nil {
		t.Fatal(err)
	}
	own, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "own.db"), sqlite.Options{Config: config()})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if err := insertBulkAPI(ctx, own, 10, 4); err != nil {
		t.Fatalf("the SQLite store's own CreateRuns: %v", err)
	}
	for i := int64(1); i <= 10; i++ {
		if _, err := s.GetRun(ctx, tenant, runIDOf(i)); err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
	if err := insertBulkAPI(ctx, loopCreator{s}, 2, 3); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Errorf("admitting the same runs again: err = %v, want a replay error", err)
	}
}

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
	"github.com/leasehold/leasehold/spec"
)

// These tests keep the benchmark's code paths working; none of them times
// anything or asserts on a figure.

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestReportRendering renders a report with every section and checks that
// the ratios come first and are computed from the figures.
func TestReportRendering(t *testing.T) {
	r := &Report{Mode: "quick", Commit: "abc", PeerName: "River vX", PeerSettings: map[string]string{"MaxWorkers": "100"},
		Postgres: PostgresInfo{Version: "PostgreSQL 15.0 on x", Settings: map[string]string{"synchronous_commit": "on", "shared_buffers": "128MB", "fsync": "on"}},
		Settings: Settings{N: 10, Workers: 2, Conns: 2, Depths: []int{1_000, 1_000_000}},
		Drains: []DrainResult{
			{System: "leasehold", Store: "postgres", Variant: "single", Name: "single claim", Jobs: 10, JobsPerSec: 100},
			{System: "leasehold", Store: "postgres", Variant: "batch_batchcomplete", Name: "batch claim, CompleteBatch", Jobs: 10, JobsPerSec: 300},
			{System: "leasehold", Store: "postgres", Variant: "batch", Name: "batch claim", NotMeasured: "no"},
			{System: "River vX", Store: "postgres", Variant: "peer", Name: "River vX", Jobs: 10, JobsPerSec: 200},
		},
		Inserts: []InsertResult{{System: "leasehold", Store: "postgres", Method: "CreateRun, one", JobsPerSec: 50},
			{System: "River vX", Store: "postgres", Method: "Insert, one", JobsPerSec: 100}},
		Ceiling: []CeilingResult{{CommitsPerSec: 500}, {CommitsPerSec: 700}},
		Depth: []DepthResult{
			{Depth: 1_000, Phases: []PhaseResult{{Phase: phaseClaim, P50Ms: 2, P99Ms: 4}}},
			{Depth: 1_000_000, Phases: []PhaseResult{{Phase: phaseClaim, P50Ms: 3, P99Ms: 4, Plan: "Limit (actual time=1..2)"}}},
		},
	}
	r.computeRatios()
	want := map[string]float64{
		"leasehold / River vX (throughput, best variant)":          1.5,
		"leasehold / ceiling (best variant)":                       0.5,
		"River vX / ceiling":                                       200.0 / 600,
		"leasehold CreateRun / River vX Insert (one job per call)": 0.5,
		"depth 1M / 1k, claim p50":                                 1.5,
		"depth 1M / 1k, claim p99":                                 1,
		"leasehold [batch claim] / River vX":                       0,
	}
	got := map[string]float64{}
	for _, x := range r.Ratios {
		got[x.Name] = x.Value
	}
	for name, v := range want {
		g, ok := got[name]
		if !ok || g < v-1e-9 || g > v+1e-9 {
			t.Errorf("ratio %q = %v (present %v), want %v", name, g, ok, v)
		}
	}
	var md strings.Builder
	r.Markdown(&md)
	text := md.String()
	ratios, raw := strings.Index(text, "## Ratios"), strings.Index(text, "## Throughput")
	if ratios < 0 || raw < 0 || ratios > raw {
		t.Errorf("the ratios must come before the raw figures:\n%s", text)
	}
	for _, s := range []string{"synchronous_commit", "shared_buffers", "fsync", "Commit `abc`", "not measured: no", "Limit (actual time=1..2)", "## Findings"} {
		if !strings.Contains(text, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Ratios) != len(r.Ratios) || back.Drains[1].JobsPerSec != 300 {
		t.Errorf("bench.json does not round-trip: %+v", back)
	}
}

// TestRunSQLiteTiny runs the whole program path on SQLite alone with N=20.
func TestRunSQLiteTiny(t *testing.T) {
	r, err := Run(context.Background(), Options{N: 20, Workers: 4, Conns: 2, ClaimBatch: 5, CompleteBatch: 7, SQLiteDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Inserts) != 1 || len(r.Drains) != len(sqliteVariants) {
		t.Fatalf("want one insert and %d drains, got %+v", len(sqliteVariants), r)
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
	if _, err := s.Pool().Exec(ctx, `TRUNCATE runs, run_events, jobs, idempotency_keys, attempts, effects, outbox`); err != nil {
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
		if _, err := s.Pool().Exec(ctx, `TRUNCATE runs, run_events, jobs, idempotency_keys, attempts, effects, outbox`); err != nil {
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

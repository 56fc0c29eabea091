package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/spec"
)

// TestBulkAdmissionsOutgrowTheLockTable: bulk admissions of new keys hold
// no lock per member, so they do not fill PostgreSQL's shared lock table
// (about max_locks_per_transaction × max_connections entries). On a server
// of its own with max_locks_per_transaction = 10 (about 700 entries), four
// concurrent bulk admissions of 1,000 new keys each, then the same four
// again (all replays), must all succeed; with one advisory lock per member
// held to the commit, the first one alone fails with "out of shared
// memory".
func TestBulkAdmissionsOutgrowTheLockTable(t *testing.T) {
	c := pgtest.NewCluster(t)
	ctx := context.Background()
	if _, err := c.Conn(t).Exec(ctx, `ALTER SYSTEM SET max_locks_per_transaction = 10`); err != nil {
		t.Fatal(err)
	}
	c.Restart(t)
	s, err := postgres.Open(ctx, c.DSN(), postgres.Options{Config: spec.DefaultConfig(), MaxConns: 4, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, pass := range []struct {
		name     string
		replayed bool
	}{{"new keys", false}, {"the same keys again", true}} {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := range 4 {
			wg.Go(func() {
				reqs := make([]spec.CreateRunRequest, spec.MaxBatch)
				for i := range reqs {
					id := fmt.Sprintf("g%d-%04d", g, i)
					reqs[i] = spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: id, RunID: id, Payload: []byte(`{}`)}
				}
				outs, err := s.CreateRuns(ctx, reqs)
				if err != nil {
					errs <- fmt.Errorf("%s, batch %d: %w", pass.name, g, err)
					return
				}
				for i, o := range outs {
					if o.Err != nil || o.Result.Replayed != pass.replayed {
						errs <- fmt.Errorf("%s, batch %d, member %d: %+v, want replayed=%v", pass.name, g, i, o, pass.replayed)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

// TestPurgeRunsOutgrowsNoLockTable: a purge of runs takes a row lock per
// job (kept in the rows, not the lock table) and no admission lock, so on a
// server with max_locks_per_transaction = 10 (about 700 entries) four
// concurrent purges of a thousand runs each, every run named by its expired
// idempotency record, delete them all. With an admission lock per purged
// record held to the commit, they fail with "out of shared memory".
func TestPurgeRunsOutgrowsNoLockTable(t *testing.T) {
	c := pgtest.NewCluster(t)
	ctx := context.Background()
	if _, err := c.Conn(t).Exec(ctx, `ALTER SYSTEM SET max_locks_per_transaction = 10`); err != nil {
		t.Fatal(err)
	}
	c.Restart(t)
	cfg := spec.DefaultConfig()
	cfg.RunRetentionMs, cfg.IdempotencyRetentionMs = 10_000, 5_000
	clk := clock.NewManual(t0)
	s, err := postgres.Open(ctx, c.DSN(), postgres.Options{Config: cfg, Clock: clk, MaxConns: 4, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const tenants = 4
	for g := range tenants {
		tenant := fmt.Sprintf("t%d", g)
		reqs := make([]spec.CreateRunRequest, spec.MaxBatch)
		for i := range reqs {
			id := fmt.Sprintf("r%04d", i)
			reqs[i] = spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: id, RunID: id, Payload: []byte(`{}`)}
		}
		if _, err := s.CreateRuns(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "w1", LeaseMs: 60_000, Limit: spec.MaxBatch})
		if err != nil || len(leases) != spec.MaxBatch {
			t.Fatalf("claim %s: %d leases, %v; want %d", tenant, len(leases), err, spec.MaxBatch)
		}
		done := make([]spec.CompleteRequest, len(leases))
		for i, l := range leases {
			done[i] = spec.CompleteRequest{Lease: l.Ref()}
		}
		outs, err := s.CompleteBatch(ctx, done)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if o.Err != nil {
				t.Fatalf("complete %s member %d: %v", tenant, i, o.Err)
			}
		}
	}
	clk.Set(t0 + 20_000)
	var wg sync.WaitGroup
	errs := make(chan error, tenants)
	for g := range tenants {
		wg.Go(func() {
			ids, err := s.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: fmt.Sprintf("t%d", g), Limit: spec.MaxBatch})
			if err != nil || len(ids) != spec.MaxBatch {
				errs <- fmt.Errorf("purge of t%d: %d runs, %v; want all %d", g, len(ids), err, spec.MaxBatch)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

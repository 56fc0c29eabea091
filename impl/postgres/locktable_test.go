package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

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

package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestStatementCacheOneConnection runs operations on a pool of one
// connection: a statement prepared on the pool from inside a transaction
// would wait for that connection forever. Once the preparations in flight
// are done, the operations' statements are in the cache, prepared, and the
// next operations run them.
func TestStatementCacheOneConnection(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "stmts.db"), Options{Config: spec.DefaultConfig(), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	round := func(i int) {
		t.Helper()
		id := fmt.Sprintf("r%d", i)
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "t", Operation: "work", IdempotencyKey: id, RunID: id, Payload: []byte(`{}`)}); err != nil {
			t.Fatalf("round %d: CreateRun: %v", i, err)
		}
		leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "t", Worker: "w", LeaseMs: 60_000, Limit: 1})
		if err != nil || len(leases) != 1 {
			t.Fatalf("round %d: Claim: %d leases, %v; want 1", i, len(leases), err)
		}
		if _, err := s.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref()}); err != nil {
			t.Fatalf("round %d: Complete: %v", i, err)
		}
	}
	round(0)
	s.stmts.pending.Wait()
	for _, q := range []string{admissionTexts[1][1], admissionTexts[1][2], claimCandidates, claimJob, finishJob, finishRun} {
		s.stmts.mu.Lock()
		st := s.stmts.stmts[q]
		s.stmts.mu.Unlock()
		if st == nil {
			t.Errorf("after one round the cache holds no prepared statement for %.40q…", q)
		}
	}
	round(1)
}

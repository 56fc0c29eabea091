package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestClaimPlanUsesIndex holds the claim to the partial index jobs_claim,
// read in claim order: a plan that scans the tenant's jobs and sorts them
// ("USE TEMP B-TREE FOR ORDER BY") makes every claim cost grow with depth.
// Reap and purge are held to their indexes too.
func TestClaimPlanUsesIndex(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "plan.db"), Options{Config: spec.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cases := []struct {
		name, query, want string
	}{
		{"claim", claimJobs, "INDEX jobs_claim"},
		{"reap", selectReapable, "INDEX jobs_reap"},
		{"purge", purgeIdempotency, "INDEX idempotency_keys_expiry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, err := s.DB().Query("EXPLAIN QUERY PLAN "+c.query, leaseArgs(spec.LeaseRef{}, 0).with(args{
				"worker": "w", "expires_at": 1, "limit": 1, "operation": "o", "key": "k"}).list()...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, c.want) || strings.Contains(text, "TEMP B-TREE") {
				t.Fatalf("the %s plan should use %s with no sort step; it is:\n%s", c.name, c.want, text)
			}
			t.Logf("%s plan:\n%s", c.name, text)
		})
	}
}

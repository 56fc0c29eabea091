package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestClaimPlanUsesIndex holds each branch of the claim to its partial
// index, read in the branch's order: a plan that scans the tenant's jobs
// and sorts them makes every claim cost grow with depth. Only the claim's
// final merge of the two branches' (at most 2×limit) rows may sort. Reap
// and the purges are held to their indexes too, the reads and deletes of
// the idempotency records on the run rows to runs_idempotency, and the
// event reads, which merge the run rows' run_queued events with
// run_events, to their keys' order.
// admissionLookupPlan is the plan of an admission's lookup: each branch
// searches by its index, one probe per member.
var admissionLookupPlan = []string{
	"SEARCH runs USING INDEX runs_idempotency (tenant=? AND operation=? AND idempotency_key=?)",
	"SEARCH runs USING PRIMARY KEY (tenant=? AND run_id=?)",
}

// strings5 is the parameters of an admission lookup of n members.
func strings5(n int) []any {
	a := make([]any, 5*n)
	for i := range a {
		a[i] = fmt.Sprint("p", i)
	}
	return a
}

func TestClaimPlanUsesIndex(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "plan.db"), Options{Config: spec.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cases := []struct {
		name, query string
		want        []string
		sorts       int   // "USE TEMP B-TREE" steps allowed
		positional  []any // the query's ?N parameters, if it takes no named ones
	}{
		{"claim", claimCandidates, []string{"INDEX jobs_due", "INDEX jobs_reap"}, 1, nil},
		{"reap", selectReapable, []string{"INDEX jobs_reap"}, 0, nil},
		{"admission lookup of one", admissionTexts[1][0], admissionLookupPlan, 0, strings5(1)},
		{"admission lookup of a piece", admissionTexts[pieceMax][0], admissionLookupPlan, 0, strings5(pieceMax)},
		{"expired record replaced", deleteIdempotency, []string{"SEARCH runs USING INDEX runs_idempotency (tenant=? AND operation=? AND idempotency_key=?)"}, 0, nil},
		{"purge", purgeIdempotency, []string{"SEARCH runs USING COVERING INDEX runs_idempotency_expiry (idempotency_expires_at<?)", "SEARCH runs USING PRIMARY KEY"}, 0, nil},
		{"purge runs", selectRetiredLeaves, []string{"INDEX run_events_finished", "SEARCH r USING PRIMARY KEY"}, 0, nil},
		{"retired run", selectRetiredRun, []string{"SEARCH e USING INDEX run_events_one_terminal", "SEARCH r USING PRIMARY KEY"}, 0, nil},
		{"snapshot records", selectAllIdempotency, []string{"SCAN runs USING INDEX runs_idempotency"}, 0, []any{}},
		{"events of a run", selectRunEvents, []string{"SEARCH runs USING PRIMARY KEY", "SEARCH run_events USING PRIMARY KEY"}, 0, []any{"t", "r"}},
		{"snapshot events", selectAllEvents, []string{"MERGE (UNION ALL)"}, 0, []any{}},
		{"list runs", listRuns, []string{"SEARCH runs USING INDEX runs_created (tenant=? AND created_at>? AND (created_at,run_id)<(?,?))"}, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := leaseArgs(spec.LeaseRef{}, 0).with(args{
				"worker": "w", "expires_at": 1, "limit": 1, "operation": "o", "key": "k",
				"retired_by": 0, "after_at": 0, "after_id": "", "below_at": 5, "below_id": "r", "from": 0, "state": ""}).list()
			if c.positional != nil {
				a = c.positional
			}
			rows, err := s.DB().Query("EXPLAIN QUERY PLAN "+c.query, a...)
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
			for _, index := range c.want {
				if !strings.Contains(text, index) {
					t.Fatalf("the %s plan should use %s; it is:\n%s", c.name, index, text)
				}
			}
			if n := strings.Count(text, "TEMP B-TREE"); n > c.sorts {
				t.Fatalf("the %s plan has %d sort steps, want at most %d; it is:\n%s", c.name, n, c.sorts, text)
			}
			t.Logf("%s plan:\n%s", c.name, text)
		})
	}
}

// TestListRunsPlanNeedsItsIndex: the listing's case above bites. Without
// runs_created the same statement reads the tenant's runs by the primary
// key and sorts them, a plan the case refuses.
func TestListRunsPlanNeedsItsIndex(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "plan.db"), Options{Config: spec.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB().Exec("DROP INDEX runs_created"); err != nil {
		t.Fatal(err)
	}
	rows, err := s.DB().Query("EXPLAIN QUERY PLAN "+listRuns, args{"tenant": "t", "below_at": 5, "below_id": "r", "from": 0,
		"state": "", "operation": "", "limit": 2}.list()...)
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
	if strings.Contains(text, "runs_created") || !strings.Contains(text, "TEMP B-TREE") {
		t.Fatalf("without runs_created the listing should sort the tenant's runs; its plan is:\n%s", text)
	}
	t.Logf("the listing's plan without runs_created (TestClaimPlanUsesIndex refuses it):\n%s", text)
}

package model_test

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestListRuns: a tenant's runs newest first, ties by run id descending,
// each filter, pages that meet where a tie splits them, and validation; a
// read that changes nothing.
func TestListRuns(t *testing.T) {
	w := newWorld(t)
	w.at(10).create("t1", "k1", "a", `{}`)
	w.at(10).create("t1", "k2", "c", `{}`)
	w.at(10).create("t1", "k3", "b", `{}`)
	w.at(20).create("t1", "k4", "d", `{}`)
	w.at(20).create("t2", "k1", "e", `{}`) // another tenant's, at a time t1 has runs too
	w.at(30).claimOne("t1", "w1")          // takes a (claim order: available_at, run id)
	w.at(30).create("t1", "k5", "f", `{}`)
	w.at(31).must(spec.CancelRequest{Tenant: "t1", RunID: "f"})
	before := w.s.Key()
	list := func(req spec.ListRunsRequest) ([]string, string) {
		t.Helper()
		p := w.must(req).(spec.RunPage)
		ids := []string{}
		for _, r := range p.Runs {
			ids = append(ids, r.ID)
			equal(t, "listed run "+r.ID, r, w.run(r.Tenant, r.ID))
		}
		return ids, p.Next
	}
	all := spec.ListRunsRequest{Tenant: "t1", Limit: 10}
	ids, next := list(all)
	sameIDs(t, "every run of t1", ids, []string{"f", "d", "c", "b", "a"})
	equal(t, "no next page", next, "")

	// Pages of two: the second starts inside the tie at 10.
	page := all
	page.Limit = 2
	var got []string
	for i := 0; ; i++ {
		ids, next := list(page)
		got = append(got, ids...)
		if next == "" {
			break
		}
		page.Cursor = next
		if i > 5 {
			t.Fatal("paging does not end")
		}
	}
	sameIDs(t, "paged by two", got, []string{"f", "d", "c", "b", "a"})
	page.Cursor = spec.RunPosition{CreatedAt: 10, RunID: "c"}.Cursor()
	ids, next = list(page)
	sameIDs(t, "after (10, c)", ids, []string{"b", "a"})
	equal(t, "after (10, c): the last page", next, "")

	for _, tc := range []struct {
		name string
		mod  func(*spec.ListRunsRequest)
		want []string
	}{
		{"running", func(r *spec.ListRunsRequest) { r.State = spec.RunRunning }, []string{"a"}},
		{"queued", func(r *spec.ListRunsRequest) { r.State = spec.RunQueued }, []string{"d", "c", "b"}},
		{"cancelled", func(r *spec.ListRunsRequest) { r.State = spec.RunCancelled }, []string{"f"}},
		{"failed", func(r *spec.ListRunsRequest) { r.State = spec.RunFailed }, []string{}},
		{"operation work", func(r *spec.ListRunsRequest) { r.Operation = "work" }, []string{"f", "d", "c", "b", "a"}},
		{"another operation", func(r *spec.ListRunsRequest) { r.Operation = "play" }, []string{}},
		{"created from 20", func(r *spec.ListRunsRequest) { r.CreatedFrom = 20 }, []string{"f", "d"}},
		{"created before 30", func(r *spec.ListRunsRequest) { r.CreatedBefore = 30 }, []string{"d", "c", "b", "a"}},
		{"created in [11, 30)", func(r *spec.ListRunsRequest) { r.CreatedFrom, r.CreatedBefore = 11, 30 }, []string{"d"}},
		{"queued before 20, after (10, c)", func(r *spec.ListRunsRequest) {
			r.State, r.CreatedBefore, r.Cursor = spec.RunQueued, 20, spec.RunPosition{CreatedAt: 10, RunID: "c"}.Cursor()
		}, []string{"b"}},
		{"t2", func(r *spec.ListRunsRequest) { r.Tenant = "t2" }, []string{"e"}},
	} {
		r := all
		tc.mod(&r)
		ids, _ := list(r)
		sameIDs(t, tc.name, ids, tc.want)
	}
	w.fails(spec.ListRunsRequest{Tenant: "t1", Limit: spec.MaxBatch + 1}, spec.CodeInvalidArgument, "")
	w.fails(spec.ListRunsRequest{Tenant: "t3", Limit: 1}, spec.CodeInvalidArgument, "")
	w.fails(spec.ListRunsRequest{Tenant: "t1", Limit: 1, Cursor: "nope"}, spec.CodeInvalidArgument, "")
	if w.s.Key() != before {
		t.Fatal("listing changed the state")
	}
}

func sameIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

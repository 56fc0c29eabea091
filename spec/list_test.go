package spec

import (
	"encoding/base64"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestCursorRoundTrip: a position's cursor parses back to it, and nothing
// that is not a cursor parses.
func TestCursorRoundTrip(t *testing.T) {
	for _, p := range []RunPosition{{0, "r"}, {1_000_000, "a.b:c-d_e"}, {math.MaxInt64 - 1, "Z"}} {
		got, err := ParseCursor(p.Cursor())
		if err != nil || got != p {
			t.Errorf("cursor of %+v parses to %+v, %v", p, got, err)
		}
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{"", "!", enc("c1/5"), enc("c2/5/r"), enc("c1/-5/r"), enc("c1/05/r"), enc("c1/5/"),
		enc("c1/5/r/1"), enc("c1/x/r"), enc("c1/99999999999999999999/r"), RunPosition{5, "r"}.Cursor() + "="} {
		if _, err := ParseCursor(bad); CodeOf(err) != CodeInvalidArgument {
			t.Errorf("ParseCursor(%q) = %v, want invalid_argument", bad, err)
		}
	}
}

// TestListingOrder: newest first, ties broken by run id descending, and a
// bound with no run id after every run of its time.
func TestListingOrder(t *testing.T) {
	order := []RunPosition{{9, "b"}, {9, "a"}, {9, ""}, {8, "z"}, {8, "Z"}, {8, ""}, {7, "a"}}
	for i, p := range order {
		for j, q := range order {
			if got, want := p.Before(q), i < j; got != want {
				t.Errorf("%+v.Before(%+v) = %v, want %v", p, q, got, want)
			}
		}
	}
	sorted := slices.Clone(order)
	slices.Reverse(sorted)
	slices.SortFunc(sorted, func(a, b RunPosition) int {
		switch {
		case a.Before(b):
			return -1
		case b.Before(a):
			return 1
		}
		return 0
	})
	if !slices.Equal(sorted, order) {
		t.Errorf("sorted by Before: %v, want %v", sorted, order)
	}
}

// TestCheckListRuns: each check in its order, and the bound the cursor and
// CreatedBefore resolve to.
func TestCheckListRuns(t *testing.T) {
	c := DefaultConfig()
	ok := ListRunsRequest{Tenant: "t1", Limit: 10}
	for _, tc := range []struct {
		name string
		mod  func(*ListRunsRequest)
	}{
		{"bad tenant", func(r *ListRunsRequest) { r.Tenant = "T1"; r.State = "nope" }},
		{"bad state", func(r *ListRunsRequest) { r.State = "dead"; r.Operation = "A" }},
		{"bad operation", func(r *ListRunsRequest) { r.Operation = "Work"; r.CreatedFrom = -1 }},
		{"negative from", func(r *ListRunsRequest) { r.CreatedFrom = -1; r.Limit = 0 }},
		{"negative before", func(r *ListRunsRequest) { r.CreatedBefore = -1 }},
		{"empty range", func(r *ListRunsRequest) { r.CreatedFrom, r.CreatedBefore = 5, 5 }},
		{"zero limit", func(r *ListRunsRequest) { r.Limit = 0; r.Cursor = "x" }},
		{"limit past MaxBatch", func(r *ListRunsRequest) { r.Limit = MaxBatch + 1 }},
		{"bad cursor", func(r *ListRunsRequest) { r.Cursor = "x" }},
	} {
		r := ok
		tc.mod(&r)
		if _, err := c.CheckListRuns(r); CodeOf(err) != CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", tc.name, err)
		}
	}
	// The first failing check decides the message.
	r := ok
	r.State, r.Limit = "dead", 0
	if _, err := c.CheckListRuns(r); err == nil || !strings.Contains(err.Error(), "state") {
		t.Errorf("state and limit both bad: %v, want the state's error", err)
	}
	for _, tc := range []struct {
		before int64
		cursor RunPosition
		want   RunPosition
	}{
		{0, RunPosition{}, RunPosition{math.MaxInt64, ""}},
		{50, RunPosition{}, RunPosition{50, ""}},
		{0, RunPosition{40, "r"}, RunPosition{40, "r"}},
		{50, RunPosition{40, "r"}, RunPosition{40, "r"}},
		{50, RunPosition{60, "r"}, RunPosition{50, ""}},
		{50, RunPosition{50, "r"}, RunPosition{50, ""}},
	} {
		r := ok
		r.CreatedBefore = tc.before
		if tc.cursor.RunID != "" {
			r.Cursor = tc.cursor.Cursor()
		}
		l, err := c.CheckListRuns(r)
		if err != nil || l.Below != tc.want {
			t.Errorf("before %d, cursor %+v: bound %+v, %v; want %+v", tc.before, tc.cursor, l.Below, err, tc.want)
		}
	}
	// A configured tenant list holds.
	c.Tenants = []string{"t2"}
	if _, err := c.CheckListRuns(ok); CodeOf(err) != CodeInvalidArgument {
		t.Errorf("tenant not configured: %v", err)
	}
}

// TestListingPage: a page of Limit runs has the last one's cursor when a
// run follows, none otherwise, and is never nil.
func TestListingPage(t *testing.T) {
	runs := []Run{{ID: "c", CreatedAt: 5}, {ID: "b", CreatedAt: 5}, {ID: "a", CreatedAt: 4}}
	l := RunListing{Limit: 2}
	if p := l.Page(runs); len(p.Runs) != 2 || p.Next != (RunPosition{5, "b"}).Cursor() {
		t.Errorf("three runs, limit 2: %+v", p)
	}
	if p := l.Page(runs[:2]); len(p.Runs) != 2 || p.Next != "" {
		t.Errorf("two runs, limit 2: %+v", p)
	}
	if p := l.Page(nil); p.Runs == nil || p.Next != "" {
		t.Errorf("no runs: %+v", p)
	}
	m := RunListing{Tenant: "t1", State: RunQueued, Operation: "work", From: 4, Below: RunPosition{5, "c"}, Limit: 2}
	for _, tc := range []struct {
		run  Run
		want bool
	}{
		{Run{Tenant: "t1", ID: "b", State: RunQueued, Operation: "work", CreatedAt: 5}, true},
		{Run{Tenant: "t1", ID: "c", State: RunQueued, Operation: "work", CreatedAt: 5}, false}, // the cursor's own run
		{Run{Tenant: "t1", ID: "d", State: RunQueued, Operation: "work", CreatedAt: 5}, false},
		{Run{Tenant: "t1", ID: "z", State: RunQueued, Operation: "work", CreatedAt: 4}, true},
		{Run{Tenant: "t1", ID: "z", State: RunQueued, Operation: "work", CreatedAt: 3}, false},
		{Run{Tenant: "t2", ID: "b", State: RunQueued, Operation: "work", CreatedAt: 5}, false},
		{Run{Tenant: "t1", ID: "b", State: RunRunning, Operation: "work", CreatedAt: 5}, false},
		{Run{Tenant: "t1", ID: "b", State: RunQueued, Operation: "play", CreatedAt: 5}, false},
	} {
		if got := m.Matches(tc.run); got != tc.want {
			t.Errorf("Matches(%+v) = %v, want %v", tc.run, got, tc.want)
		}
	}
}

package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestTestBudget: an exploring check gets its share of what is left among
// the exploring checks not yet run, divided equally among its tests (or fuzz
// targets), and never less than minTestBudget per test.
func TestTestBudget(t *testing.T) {
	one := check{Tests: []string{"TestA"}, Share: 0.14}
	two := check{Tests: []string{"TestA", "TestB"}, Share: 0.14}
	fuzz := check{Fuzz: []string{"FuzzA", "FuzzB", "FuzzC"}, Share: 0.06}
	for _, tc := range []struct {
		name string
		c    check
		left time.Duration
		rest float64
		want time.Duration
	}{
		{"the last check takes what is left", one, 100 * time.Second, 0.14, 100 * time.Second},
		{"two tests take half each", two, 100 * time.Second, 0.14, 50 * time.Second},
		{"a share of what is left", one, 100 * time.Second, 0.28, 50 * time.Second},
		{"two tests halve the share", two, 100 * time.Second, 0.28, 25 * time.Second},
		{"fuzz targets divide it", fuzz, 90 * time.Second, 0.12, 15 * time.Second},
		{"nothing left: one round", two, 0, 0.14, minTestBudget},
		{"overrun: one round", one, -30 * time.Second, 0.14, minTestBudget},
		{"less than the floor per test", two, 1500 * time.Millisecond, 0.14, minTestBudget},
	} {
		if got := testBudget(tc.c, tc.left, tc.rest); got != tc.want {
			t.Errorf("%s: testBudget(%d tests, share %g, left %s, rest %g) = %s, want %s",
				tc.name, budgetUnits(tc.c), tc.c.Share, tc.left, tc.rest, got, tc.want)
		}
	}
}

// TestBudgetDivision walks verify's check lists as verify does, with the
// fixed-work checks having spent a part of the budget and every exploring
// test spending exactly its budget: the exploring checks together spend what
// the fixed-work ones left, each in proportion to its share, and every
// fixed-work check runs before every exploring one.
func TestBudgetDivision(t *testing.T) {
	for _, tc := range []struct {
		name         string
		list         []check
		budget, used time.Duration // used: by the fixed-work checks
	}{
		{"default", checks, 5 * time.Minute, 3 * time.Minute},
		{"deeper", checks, 30 * time.Minute, 3 * time.Minute},
		{"store command", storeCmdChecks, 2 * time.Minute, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ordered := runOrder(tc.list)
			if len(ordered) != len(tc.list) {
				t.Fatalf("runOrder returned %d checks of %d", len(ordered), len(tc.list))
			}
			rest := 0.0
			for _, c := range ordered {
				rest += c.Share
			}
			total := rest
			left := tc.budget - tc.used
			spent, exploring := time.Duration(0), false
			for _, c := range ordered {
				if c.Share == 0 {
					if exploring {
						t.Fatalf("fixed-work check %s/%s runs after an exploring one", c.Name, c.Store)
					}
					continue
				}
				exploring = true
				per := testBudget(c, left, rest)
				rest -= c.Share
				got := per * time.Duration(budgetUnits(c))
				want := time.Duration(float64(tc.budget-tc.used) * c.Share / total)
				if d := got - want; d < -10*time.Millisecond || d > 10*time.Millisecond {
					t.Errorf("%s/%s: budget %s (%s for each of %d), want its share %s", c.Name, c.Store, got, per, budgetUnits(c), want)
				}
				left -= got
				spent += got
			}
			if d := spent - (tc.budget - tc.used); d < -50*time.Millisecond || d > 50*time.Millisecond {
				t.Errorf("the exploring checks spend %s, want what the fixed-work ones left: %s", spent, tc.budget-tc.used)
			}
		})
	}
}

// TestRunCheckFailsATestThatDoesNotRun: a listed test the package does not
// have fails its check, and a check whose tests ran and passed passes.
func TestRunCheckFailsATestThatDoesNotRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	for _, tc := range []struct {
		tests  []string
		status string
		note   string
	}{
		{[]string{"TestParse"}, statusPass, ""},
		{[]string{"TestParse", "TestNoSuchTest"}, statusFail, "TestNoSuchTest did not run"},
	} {
		r := runCheck(context.Background(), check{Name: "t", Store: "any", Package: "github.com/leasehold/leasehold/metrics", Tests: tc.tests},
			0, verifyOptions{reports: t.TempDir(), out: &streams{out: io.Discard, err: io.Discard}})
		if r.Status != tc.status || !strings.Contains(r.Note, tc.note) || (tc.status == statusFail && r.Violations == 0) {
			t.Errorf("tests %v: status %s, %d violations, note %q; want %s with a note containing %q", tc.tests, r.Status, r.Violations, r.Note, tc.status, tc.note)
		}
	}
}

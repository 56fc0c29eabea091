package main

import (
	"strings"
	"testing"
)

// TestTestStore: a test counts for the store of its package, else for the
// store its name names, else for none.
func TestTestStore(t *testing.T) {
	for _, tc := range []struct{ pkg, test, want string }{
		{"github.com/leasehold/leasehold/impl/postgres", "TestConformance", "postgres"},
		{"github.com/leasehold/leasehold/impl/sqlite", "TestConformance", "sqlite"},
		{"github.com/leasehold/leasehold/impl/etcd", "TestConformance", "etcd"},
		{"github.com/leasehold/leasehold/harness", "TestPropertyPostgres", "postgres"},
		{"github.com/leasehold/leasehold/harness", "TestLinearizableSQLite", "sqlite"},
		{"github.com/leasehold/leasehold/impl/etcd", "TestMutantsEtcd", "etcd"},
		{"github.com/leasehold/leasehold/model", "TestExplore", "store-independent"},
	} {
		if got := testStore(tc.pkg, tc.test); got != tc.want {
			t.Errorf("testStore(%s, %s) = %q, want %q", tc.pkg, tc.test, got, tc.want)
		}
	}
}

// TestTestsumPerStore: the summary has a line per store, in order, with the
// counts of its tests.
func TestTestsumPerStore(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"pass","Package":"github.com/leasehold/leasehold/impl/etcd","Test":"TestConformance"}`,
		`{"Action":"skip","Package":"github.com/leasehold/leasehold/impl/etcd","Test":"TestScenarios"}`,
		`{"Action":"pass","Package":"github.com/leasehold/leasehold/impl/sqlite","Test":"TestConformance"}`,
		`{"Action":"pass","Package":"github.com/leasehold/leasehold/impl/etcd"}`,
		`{"Action":"pass","Package":"github.com/leasehold/leasehold/impl/sqlite"}`,
	}, "\n") + "\n"
	var out strings.Builder
	if err := testsum(strings.NewReader(in), &out); err != nil {
		t.Fatalf("testsum: %v\n%s", err, out.String())
	}
	for _, line := range []string{
		"sqlite: 1 passed, 0 failed, 0 skipped",
		"postgres: 0 passed, 0 failed, 0 skipped",
		"etcd: 1 passed, 0 failed, 1 skipped",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("summary lacks %q:\n%s", line, out.String())
		}
	}
}

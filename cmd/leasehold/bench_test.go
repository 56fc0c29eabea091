package main

import (
	"path/filepath"
	"reflect"
	"testing"
)

// TestAbsReports: --reports and --render are made absolute against the
// caller's directory (the benchmark program runs in another one), and
// --reports defaults to ./reports.
func TestAbsReports(t *testing.T) {
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, tc := range []struct {
		args, want []string
	}{
		{nil, []string{"--reports", abs("reports")}},
		{[]string{"--reports=out"}, []string{"--reports=" + abs("out")}},
		{[]string{"-reports", "out", "--quick"}, []string{"-reports", abs("out"), "--quick"}},
		{[]string{"--render=r"}, []string{"--render=" + abs("r"), "--reports", abs("reports")}},
		{[]string{"--render", "r", "--reports=/x"}, []string{"--render", abs("r"), "--reports=/x"}},
	} {
		got, err := absReports(tc.args)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("absReports(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
	if _, err := absReports([]string{"--render"}); err == nil || err.Error() != "bench: --render needs a directory" {
		t.Errorf("a bare --render: err = %v", err)
	}
}

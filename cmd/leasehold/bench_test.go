package main

import (
	"flag"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/bench"
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

// TestBenchArgsKeepWhatWasSet: `leasehold bench` passes the flags it was
// given to the benchmark program as given, --etcd included both ways in
// both modes, and refuses what the program would refuse.
func TestBenchArgsKeepWhatWasSet(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		quick bool
		etcd  bool
	}{
		{nil, false, true},
		{[]string{"--etcd=false"}, false, false},
		{[]string{"--quick"}, true, false},
		{[]string{"--quick", "--etcd"}, true, true},
	} {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		benchCommand.flags(fs, &streams{io.Discard, io.Discard})
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		pass, err := benchArgs(fs, "reports/latest")
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		c := bench.NewCommandLine("unused")
		if err := c.Parse(pass); err != nil {
			t.Fatalf("%q passed as %q: %v", tc.args, pass, err)
		}
		if c.Options.Quick != tc.quick || c.Options.Etcd != tc.etcd || c.Reports != "reports/latest" {
			t.Errorf("%q passed as %q: quick %v, etcd %v, reports %s; want quick %v, etcd %v, reports/latest",
				tc.args, pass, c.Options.Quick, c.Options.Etcd, c.Reports, tc.quick, tc.etcd)
		}
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	benchCommand.flags(fs, &streams{io.Discard, io.Discard})
	if err := fs.Parse([]string{"--rounds", "2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := benchArgs(fs, "reports/latest"); err == nil || !strings.Contains(err.Error(), "at least 3 rounds") {
		t.Errorf("--rounds 2: %v; want the program's refusal", err)
	}
}

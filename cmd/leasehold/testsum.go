package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

var testsumCommand = &command{
	name:    "testsum",
	summary: "summarize `go test -json` on stdin: the usual output, then passed / failed / skipped per store",
	usage:   "testsum < go-test-json",
	help: `Reads the output of go test -json on standard input, prints it as go test would, and ends with
one line per store and a total, each "STORE: N passed, N failed, N skipped" (subtests counted),
so that tests skipped for a missing database are visible without -v. make test pipes into it.
The exit status is 1 when a test or a package failed (a build error included).`,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		return func(_ context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			return testsum(os.Stdin, o.out)
		}
	},
}

// testStores are the stores a summary line is kept for, in print order.
var testStores = []string{"sqlite", "postgres", "etcd", "store-independent"}

// testStore says which store a test exercises: its package's, or the one
// its name names.
func testStore(pkg, test string) string {
	switch {
	case strings.HasSuffix(pkg, "/impl/postgres"), strings.Contains(test, "Postgres"):
		return "postgres"
	case strings.HasSuffix(pkg, "/impl/sqlite"), strings.Contains(test, "SQLite"):
		return "sqlite"
	case strings.Contains(pkg, "/impl/etcd"), strings.Contains(test, "Etcd"):
		return "etcd"
	}
	return "store-independent"
}

type tally struct{ passed, failed, skipped int }

func (t tally) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", t.passed, t.failed, t.skipped)
}

func testsum(in io.Reader, out io.Writer) error {
	sums := map[string]*tally{}
	for _, s := range testStores {
		sums[s] = &tally{}
	}
	var total tally
	var failedPkgs []string
	top := map[string]string{} // package/test -> store of its top-level test
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Action, Package, Test, Output, ImportPath string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			fmt.Fprintln(out, sc.Text()) // not JSON: go's own message
			continue
		}
		switch ev.Action {
		case "output", "build-output":
			fmt.Fprint(out, ev.Output)
		case "build-fail":
			failedPkgs = append(failedPkgs, ev.ImportPath+" (build failed)")
		case "pass", "fail", "skip":
			if ev.Test == "" {
				if ev.Action == "fail" {
					failedPkgs = append(failedPkgs, ev.Package)
				}
				continue
			}
			name, _, _ := strings.Cut(ev.Test, "/")
			store, seen := top[ev.Package+"/"+name]
			if !seen {
				store = testStore(ev.Package, name)
				top[ev.Package+"/"+name] = store
			}
			t := sums[store]
			switch ev.Action {
			case "pass":
				t.passed++
				total.passed++
			case "fail":
				t.failed++
				total.failed++
			case "skip":
				t.skipped++
				total.skipped++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, s := range testStores {
		fmt.Fprintf(out, "%s: %s\n", s, sums[s])
	}
	fmt.Fprintf(out, "total: %s\n", total)
	if len(failedPkgs) > 0 || total.failed > 0 {
		return fmt.Errorf("%d tests failed; failed packages: %s", total.failed, strings.Join(failedPkgs, ", "))
	}
	if total.passed == 0 {
		return errors.New("no test ran")
	}
	return nil
}

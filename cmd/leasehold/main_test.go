package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCommandLines holds the CLI to Go's conventions: exit status 2 for a
// usage error, 0 for -h and help, no work done to print help, and errors
// that say what is wrong.
func TestCommandLines(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`{}`), 0o644)
	misspelled := filepath.Join(dir, "misspelled.json")
	os.WriteFile(misspelled, []byte(`{"entrys":[]}`), 0o644)
	for _, tc := range []struct {
		args   []string
		status int
		want   string // in stdout+stderr
	}{
		{nil, 2, "usage: leasehold <command>"},
		{[]string{"help"}, 0, "LEASEHOLD_PG_DSN"},
		{[]string{"help", "demo"}, 0, "usage: leasehold demo"},
		{[]string{"help", "nope"}, 2, `unknown command "nope"`},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"demo", "extra", "args"}, 2, `unexpected arguments ["extra" "args"]`},
		{[]string{"demo", "-h"}, 0, "-dir"},
		{[]string{"verify", "-h"}, 0, "LEASEHOLD_REQUIRE_PG"},
		{[]string{"verify", "--only", "typo"}, 2, `--only "typo" names no check`},
		{[]string{"verify", "--store", "mysql"}, 2, `--store "mysql"`},
		{[]string{"verify", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"verify", "--min-depth", "-1"}, 2, "--min-depth -1: want 0"},
		{[]string{"verify", "--oversubscribe", "-2"}, 2, "--oversubscribe -2: want 0 or more"},
		{[]string{"verify", "--same-verdicts-as", filepath.Join(dir, "missing.json")}, 2, "--same-verdicts-as"},
		{[]string{"verify", "--same-verdicts-as", empty}, 2, "no verdict or no checks"},
		{[]string{"scenario"}, 2, "the only subcommand is run"},
		{[]string{"scenario", "-h"}, 0, "--store"},
		{[]string{"scenario", "run"}, 2, "give at least one scenario file"},
		{[]string{"bench", "-h"}, 0, "-quick"},
		{[]string{"replay", "--reports", filepath.Join(dir, "reprots")}, 2, "there is no " + filepath.Join(dir, "reprots", "failfiles") + " directory"},
		{[]string{"replay", "--reports", dir}, 2, "there is no " + filepath.Join(dir, "failfiles") + " directory"},
		{[]string{"relay", "-h"}, 0, "-subject-prefix"},
		{[]string{"relay"}, 2, "give exactly one store"},
		{[]string{"relay", "--sqlite", "a.db", "--dsn", "postgres://x"}, 2, "give exactly one store"},
		{[]string{"relay", "--sqlite", "a.db", "--batch", "0"}, 2, "--batch 0"},
		{[]string{"relay", "--sqlite", "a.db", "--nats", "nats://127.0.0.1:1", "--subject-prefix", "bad prefix"}, 2, `--subject-prefix "bad prefix"`},
		{[]string{"relay", "--sqlite", "a.db", "--claim", "20m"}, 2, "duplicate window longer"},
		{[]string{"relay", "--sqlite", "a.db", "stray"}, 2, "unexpected arguments"},
		{[]string{"bench", "--depths", "1,2"}, 2, "--depths"},
		{[]string{"bench", "stray"}, 2, "unexpected arguments"},
		{[]string{"bench", "--rounds", "2"}, 2, "at least 3 rounds"},
		{[]string{"bench", "--bulk-batch", "5000"}, 2, "exceeds spec.MaxBatch"},
		{[]string{"bench", "-h"}, 0, "-latency-seconds"},
		{[]string{"lincheck"}, 2, "give exactly one history file"},
		{[]string{"lincheck", empty}, 1, "the history has no entries"},
		{[]string{"lincheck", misspelled}, 1, `unknown field "entrys"`},
		{[]string{"replay", filepath.Join(dir, "missing.fail.json")}, 1, "no sidecar"},
		{[]string{"doctor", "-h"}, 0, "--release-owner"},
		{[]string{"doctor"}, 2, "give exactly one of --sqlite FILE and --dsn DSN"},
		{[]string{"doctor", "--sqlite", "a.db", "--dsn", "x"}, 2, "give exactly one of"},
		{[]string{"doctor", "--sqlite", "a.db", "--schema", "s"}, 2, "--schema is for --dsn"},
		{[]string{"doctor", "--sqlite", "a.db", "--json", "--md"}, 2, "at most one of --json and --md"},
		{[]string{"doctor", "--sqlite", "a.db", "--repair"}, 2, "--repair needs --actor"},
		{[]string{"doctor", "--sqlite", "a.db", "--actor", "me"}, 2, "--actor is only used with --repair"},
		{[]string{"doctor", "--sqlite", "a.db", "--older-than", "soon"}, 2, `"soon": want a duration`},
		{[]string{"doctor", "--sqlite", "a.db", "--older-than", "5m,lease=1m"}, 2, `unknown kind "lease"`},
		{[]string{"doctor", "--sqlite", "a.db", "--max-runs", "0"}, 2, "--max-runs 0"},
		{[]string{"doctor", "--sqlite", filepath.Join(dir, "missing.db")}, 1, "never creates one"},
		{[]string{"ui", "-h"}, 0, "LEASEHOLD_UI_TOKEN"},
		{[]string{"ui"}, 2, "give exactly one of --sqlite FILE and --dsn DSN"},
		{[]string{"ui", "--sqlite", filepath.Join(dir, "missing.db")}, 1, "never creates one"},
		{[]string{"ui", "--sqlite", filepath.Join(dir, "missing.db"), "--listen", "0.0.0.0:0"}, 1, "token_required: refusing to listen on 0.0.0.0:0 without an access token"},
	} {
		var out bytes.Buffer
		status := run(context.Background(), tc.args, &out, &out)
		if status != tc.status || !strings.Contains(out.String(), tc.want) {
			t.Errorf("leasehold %s: exit status %d and output\n%s\nwant status %d and output containing %q",
				strings.Join(tc.args, " "), status, out.String(), tc.status, tc.want)
		}
	}
}

// TestVerifyCoversStoreTests: every test a check names exists, every check
// that runs the rest of its package (check.Rest) finds tests to run, and
// every test of the doctor's package and of a module of its own
// (powerloss, which has nothing but checks) runs under some check. A
// store's package is run whole by its Rest check: a test added to it runs
// under verify with no list to keep.
func TestVerifyCoversStoreTests(t *testing.T) {
	type pkgKey struct{ module, pkg, tags string }
	listed := map[pkgKey][]string{}
	var rests []check
	inPackage := map[string][]string{} // whatever the tags
	for _, c := range append(slices.Clone(checks), storeCmdChecks...) {
		if len(c.Fuzz) > 0 {
			continue
		}
		k := pkgKey{c.Module, c.Package, c.Tags}
		listed[k] = append(listed[k], c.Tests...)
		inPackage[c.Module+" "+c.Package] = append(inPackage[c.Module+" "+c.Package], c.Tests...)
		if c.Rest {
			rests = append(rests, c)
		}
	}
	for k, tests := range listed {
		have, err := listTests(context.Background(), filepath.Join("..", "..", k.module), k.pkg, k.tags)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range tests {
			if !slices.Contains(have, name) {
				t.Errorf("verify runs %s in %s, which has no such test", name, k.pkg)
			}
		}
		for _, c := range rests {
			if (pkgKey{c.Module, c.Package, c.Tags}) == k && len(restOf(have, c, checks)) == 0 {
				t.Errorf("%s/%s runs the rest of %s, which has no test that another check does not name", c.Name, c.Store, c.Package)
			}
		}
		if k.module == "" && k.pkg != "./doctor" {
			continue
		}
		for _, c := range rests {
			if (pkgKey{c.Module, c.Package, c.Tags}) == k {
				inPackage[k.module+" "+k.pkg] = append(inPackage[k.module+" "+k.pkg], restOf(have, c, checks)...)
			}
		}
		for _, name := range have {
			if strings.HasPrefix(name, "Test") && !slices.Contains(inPackage[k.module+" "+k.pkg], name) {
				t.Errorf("%s in %s runs under make test but under no check of verify: add it to a check", name, k.pkg)
			}
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db?password=secret":             "postgres://u@h/db?password=xxxxx",
		"host=h user=u password=secret dbname=db":       "host=h user=u password=xxxxx dbname=db",
		"host=h password='se cret' dbname=db":           "host=h password=xxxxx dbname=db",
		"postgres://postgres@127.0.0.1:5432/test":       "postgres://postgres@127.0.0.1:5432/test",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

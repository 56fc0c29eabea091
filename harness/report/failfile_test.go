package report

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKeepFailfileWhere: a failfile of this repository's stores joins the
// regression corpus (reports/failfiles, copied: rapid replays its testdata
// copy too); a transient store's is moved into the run's reports directory,
// where make replay does not hold this repository to it, even when the run
// reports into reports/ or names its directory relative to the package.
func TestKeepFailfileWhere(t *testing.T) {
	for _, c := range []struct {
		name      string
		transient bool
		reports   string // LEASEHOLD_REPORTS, relative to the package directory
		wantDir   string // relative to the repository root
		wantLeft  bool   // rapid's copy left in testdata
	}{
		{"regression", false, "../reports/run", "reports/failfiles/TestX", true},
		{"transient", true, "../reports/run", "reports/run/failfiles/TestX", false},
		{"transient reporting into reports/", true, "../reports", "reports/latest/failfiles/TestX", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			pkg := filepath.Join(root, "pkg")
			rapidFile := filepath.Join(pkg, "testdata", "rapid", "TestX", "TestX-20261205-1.fail")
			writeFile(t, filepath.Join(root, "go.mod"), "module example.com/x\n")
			writeFile(t, rapidFile, "# rapid failfile\nv0.4.8#1234\n")
			t.Chdir(pkg)
			t.Setenv("LEASEHOLD_REPORTS", c.reports)

			k, err := KeepFailfile("TestX", time.Now().Add(-time.Minute), Kept{Test: "TestX", Expect: "pass", Transient: c.transient})
			if err != nil {
				t.Fatalf("KeepFailfile: %v", err)
			}
			want := filepath.Join(c.wantDir, "TestX-20261205-1.fail")
			if k.File != want || k.Seed != "1234" || k.Package != "./pkg" {
				t.Fatalf("kept %+v; want File %s, Seed 1234, Package ./pkg", k, want)
			}
			for _, f := range []string{want, want + ".json"} {
				if _, err := os.Stat(filepath.Join(root, f)); err != nil {
					t.Errorf("want %s kept: %v", f, err)
				}
			}
			for _, dir := range []string{"reports/failfiles/TestX", "reports/run/failfiles/TestX", "reports/latest/failfiles/TestX"} {
				if _, err := os.Stat(filepath.Join(root, dir)); dir != c.wantDir && !os.IsNotExist(err) {
					t.Errorf("want nothing under %s, got %v", dir, err)
				}
			}
			if _, err := os.Stat(rapidFile); (err == nil) != c.wantLeft {
				t.Errorf("rapid's copy in testdata: left %v, want left %v", err == nil, c.wantLeft)
			}
		})
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRepoRootOfAWorkspace: in a repository split into modules, the root is
// the go.work's directory, so that a nested module's test prints a replay
// command (and keeps its reports) from the root the checks run from; with
// GOWORK=off it is the nearest go.mod's.
func TestRepoRootOfAWorkspace(t *testing.T) {
	root := t.TempDir()
	pkg := filepath.Join(root, "impl", "x", "pkg")
	writeFile(t, filepath.Join(root, "go.work"), "go 1.26.0\n\nuse (\n\t.\n\t./impl/x\n)\n")
	writeFile(t, filepath.Join(root, "go.mod"), "module example.com/root\n")
	writeFile(t, filepath.Join(root, "impl", "x", "go.mod"), "module example.com/root/impl/x\n")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(pkg)
	for _, c := range []struct{ gowork, root, pkg string }{
		{"", root, "./impl/x/pkg"},
		{"off", filepath.Join(root, "impl", "x"), "./pkg"},
	} {
		t.Setenv("GOWORK", c.gowork)
		got, err := RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		if r1, _ := filepath.EvalSymlinks(got); r1 != mustEval(t, c.root) {
			t.Errorf("GOWORK=%q: RepoRoot %s, want %s", c.gowork, got, c.root)
		}
		if p := packagePath(); p != c.pkg {
			t.Errorf("GOWORK=%q: package %s, want %s", c.gowork, p, c.pkg)
		}
	}
}

func mustEval(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

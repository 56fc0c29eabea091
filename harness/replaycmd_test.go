package harness

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/report"
)

// TestMutantHistoryReplaysAsPrinted: the replay command a mutant's history
// carries (the runtime run's report of complete_ignores_generation, caught)
// works exactly as printed: run by a shell from the repository root it
// builds with the mutants tag, runs that test on that seed, and catches the
// mutant again. (Printed without -tags leasehold_mutants it ran no test.)
func TestMutantHistoryReplaysAsPrinted(t *testing.T) {
	root, err := report.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const name = "TestMutantsRuntime/complete_ignores_generation"
	first := t.TempDir()
	cmd := exec.Command("go", "test", "-tags", "leasehold_mutants", "./harness", "-count=1", "-v", "-run", report.RunPattern(name))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "LEASEHOLD_REPORTS="+first, "LEASEHOLD_SEED=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, lastLinesOf(string(out), 30))
	}
	f := onlyHistory(t, first)
	t.Logf("the history of seed %d says: replay: %s", f.Seed, f.Replay)

	again := t.TempDir()
	sh := exec.Command("sh", "-c", f.Replay)
	sh.Dir = root
	sh.Env = append(os.Environ(), "LEASEHOLD_REPORTS="+again)
	out, err := sh.CombinedOutput()
	if err != nil || strings.Contains(string(out), "no tests to run") {
		t.Fatalf("the printed replay command %q (exit %v) did not run %s:\n%s", f.Replay, err, name, lastLinesOf(string(out), 30))
	}
	// A runtime run writes a history only when it found a violation: the
	// replay caught the mutant again, on the printed seed.
	if g := onlyHistory(t, again); g.Seed != f.Seed || g.Replay != f.Replay {
		t.Fatalf("the replay recorded seed %d with replay %q; want seed %d, %q", g.Seed, g.Replay, f.Seed, f.Replay)
	}
}

// onlyHistory reads the one history.json under dir.
func onlyHistory(t *testing.T, dir string) history.File {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "history.json" {
			found = append(found, path)
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("want one history.json under %s, found %v", dir, found)
	}
	data, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	var f history.File
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", found[0], err)
	}
	return f
}

func lastLinesOf(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// A rapid property test that fails writes a failfile (the exact choices of
// the failing case) under its package's testdata/rapid. The harness keeps a
// copy under reports/failfiles/<test>/ with a sidecar <file>.json saying how
// to replay it, and prints the seed and a one-line command. `make replay`
// (leasehold replay) replays every kept failfile.

// Kept describes one kept failfile; it is the sidecar's content.
type Kept struct {
	File    string            `json:"file"`            // path relative to the repository root
	Package string            `json:"package"`         // for go test, e.g. ./harness
	Test    string            `json:"test"`            // top-level test name
	Store   string            `json:"store,omitempty"` // the store it ran on: a postgres failfile needs a server to replay
	Tags    string            `json:"tags,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Seed    string            `json:"seed"`
	// Expect is "pass" for a regression (the bug was fixed: replay must pass)
	// or "fail" for a failfile that demonstrates a deliberately broken store
	// (replay must still fail).
	Expect  string `json:"expect"`
	Command string `json:"command"`
	// Actions is the property's action map the failfile was drawn against
	// (harness.ActionsVersion; the caller of KeepFailfile sets it): under
	// another, its choices drive another sequence,
	// so a replay refuses it (StaleFailfile).
	Actions string `json:"actions"`
	// Transient: the store came from outside the repository (Target.Transient),
	// so rapid's copy under testdata/ was moved out, not copied, into the
	// run's reports directory rather than reports/failfiles.
	Transient bool `json:"transient,omitempty"`
}

// RepoRoot returns the repository's root, searching up from the working
// directory (a test's working directory is its package): the directory of
// the go.work the go command uses there (the root of a repository split into
// modules, whose commands run from it), else of the nearest go.mod (a port
// in a repository of its own, or GOWORK=off).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	switch w := os.Getenv("GOWORK"); {
	case w == "off":
	case w != "":
		return filepath.Dir(w), nil
	default:
		if root, ok := above(dir, "go.work"); ok {
			return root, nil
		}
	}
	if root, ok := above(dir, "go.mod"); ok {
		return root, nil
	}
	return "", errors.New("harness: no go.mod above the working directory")
}

// above is the nearest of dir and its parents that holds a file named name.
func above(dir, name string) (string, bool) {
	for {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// ReportsDir is where a run writes what it found (a failing history's
// report): LEASEHOLD_REPORTS (leasehold verify sets it), else
// <repo>/reports/latest, which is not committed.
func ReportsDir() (string, error) {
	if d := os.Getenv("LEASEHOLD_REPORTS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "reports", "latest"), nil
}

// FailfilesDir is where failing seeds are kept: <repo>/reports/failfiles,
// committed with the rest of the evidence, so that every clone replays them
// (make replay).
func FailfilesDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "reports", "failfiles"), nil
}

// keptIn is where KeepFailfile keeps a failfile: FailfilesDir, the
// repository's regression corpus, for a store of this repository; the
// run's ReportsDir for a transient one, whose failures are the port's, not
// regressions of this repository for make replay to hold it to (and
// reports/latest when the run reports into reports/ itself).
func keptIn(transient bool) (string, error) {
	corpus, err := FailfilesDir()
	if err != nil || !transient {
		return corpus, err
	}
	reports, err := ReportsDir()
	if err != nil {
		return "", err
	}
	// LEASEHOLD_REPORTS may be relative to where go test was started.
	if reports, err = filepath.Abs(reports); err != nil {
		return "", err
	}
	dir := filepath.Join(reports, "failfiles")
	if dir == corpus {
		dir = filepath.Join(reports, "latest", "failfiles")
	}
	return dir, nil
}

// KeepFailfile finds the newest failfile rapid wrote for testName since
// `since` in the working directory's testdata/rapid, keeps it with its
// sidecar where keptIn says, and returns the sidecar. A regression
// (k.Expect "pass") is copied: rapid also replays the testdata copy on every
// run of the test. A demonstration (k.Expect "fail", a mutant's bug) is moved
// out of testdata, so the mutant test starts from scratch each time and its
// figures stay honest; it is kept only if none is kept for that test yet, so
// that runs do not churn the repository (delete the directory to renew it,
// for example when `leasehold replay` says it no longer reproduces). A
// transient store's failfile (k.Transient) is moved out too, and always
// kept, in the run's reports directory (keptIn).
func KeepFailfile(testName string, since time.Time, k Kept) (Kept, error) {
	move := k.Expect == "fail" || k.Transient
	safe := SafeName(testName)
	matches, _ := filepath.Glob(filepath.Join("testdata", "rapid", safe, safe+"-*.fail"))
	var newest string
	var newestTime time.Time
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && !st.ModTime().Before(since.Add(-time.Second)) && st.ModTime().After(newestTime) {
			newest, newestTime = m, st.ModTime()
		}
	}
	if newest == "" {
		return k, fmt.Errorf("harness: rapid wrote no failfile for %s", testName)
	}
	body, err := os.ReadFile(newest)
	if err != nil {
		return k, err
	}
	root, err := RepoRoot()
	if err != nil {
		return k, err
	}
	failfiles, err := keptIn(k.Transient)
	if err != nil {
		return k, err
	}
	dir := filepath.Join(failfiles, safe)
	if move {
		os.Remove(newest)
		// testdata/rapid/<test>, testdata/rapid, testdata: each only if empty.
		for d := filepath.Dir(newest); d != "." && d != ""; d = filepath.Dir(d) {
			if os.Remove(d) != nil {
				break
			}
		}
		if kept, _ := filepath.Glob(filepath.Join(dir, "*.fail.json")); len(kept) > 0 && !k.Transient {
			return ReadKept(kept[0])
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return k, err
	}
	dst := filepath.Join(dir, filepath.Base(newest))
	if err := os.WriteFile(dst, body, 0o644); err != nil {
		return k, err
	}
	// Relative to the repository root when it is inside it (replay commands
	// run from there), else absolute (reports written elsewhere).
	if rel, err := filepath.Rel(root, dst); err == nil && filepath.IsLocal(rel) {
		k.File = rel
	} else {
		k.File = dst
	}
	if k.Package == "" {
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(root, wd); err == nil {
				k.Package = "./" + filepath.ToSlash(rel)
			}
		}
	}
	k.Seed = failfileSeed(string(body))
	k.Command = ReplayCommand(k)
	sidecar, _ := json.MarshalIndent(k, "", "  ")
	return k, os.WriteFile(dst+".json", append(sidecar, '\n'), 0o644)
}

// ReplayCommand is the one-line shell command, run from the repository root,
// that replays a kept failfile.
func ReplayCommand(k Kept) string {
	cmd := envPrefix(k.Env) + "go test"
	if tags := buildTags(k.Tags); tags != "" {
		cmd += " -tags " + tags
	}
	file := `"$PWD/` + k.File + `"`
	if filepath.IsAbs(k.File) {
		file = ShellQuote(k.File)
	}
	return fmt.Sprintf(`%s %s -count=1 -run %s -rapid.failfile=%s`, cmd, k.Package, ShellQuote(RunPattern(k.Test)), file)
}

// failfileSeed reads the seed from a rapid failfile ("<version>#<seed>").
func failfileSeed(body string) string {
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, seed, ok := strings.Cut(line, "#"); ok {
			return seed
		}
	}
	return ""
}

// SafeName is a test name as rapid names its files: every character but
// a letter, a digit, '-' and '_' becomes '_'.
func SafeName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteRune('_')
		}
	}
	return b.String()
}

// KeptFailfiles lists every sidecar under reports/failfiles.
func KeptFailfiles(reports string) ([]Kept, error) {
	var out []Kept
	err := filepath.WalkDir(filepath.Join(reports, "failfiles"), func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".fail.json") {
			return err
		}
		k, err := ReadKept(path)
		if err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	return out, err
}

// ReadKept reads one sidecar (a kept failfile's <file>.json).
func ReadKept(path string) (Kept, error) {
	var k Kept
	body, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(body, &k)
	}
	if err != nil {
		return k, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

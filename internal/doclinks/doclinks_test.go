package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestRepositoryLinksResolve holds every Markdown file of the repository
// (README.md, docs/, SPEC.md, the reports, ...; not node_modules) to its
// relative links: each names a file that exists and, with a #fragment, a
// heading of it.
func TestRepositoryLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "node_modules" || d.Name() == "latest" || strings.HasPrefix(d.Name(), ".")) && path != root:
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".md"):
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "README.md") || !slices.Contains(files, "docs/VERIFY.md") {
		t.Fatalf("found only %v: is the repository's root %s?", files, root)
	}
	broken, err := Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Errorf("broken link: %s", b)
	}
	t.Logf("checked the links of %d files", len(files))
}

// TestCheckFindsBrokenLinks shows the check failing: a missing file, a
// missing heading, and a repeated heading's second anchor taken for granted
// are each reported; what is not a relative link is not.
func TestCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/A.md", "# A title\n\n## Outbox and relay\n\n## `make verify`: the [main](x) job\n\n## Notes\n\n## Notes\n\n<a id=\"kept\"></a>\n")
	write("README.md", strings.Join([]string{
		"[ok](docs/A.md) [ok](docs/A.md#outbox-and-relay) [ok](docs/A.md#make-verify-the-main-job)",
		"[ok](docs/A.md#notes-1) [ok](docs/A.md#kept) [ok](docs/) [ok](#here) [ok](https://example.com/x.md#nope)",
		"[gone](docs/B.md) [no heading](docs/A.md#outbox) `[code](docs/C.md)` [third](docs/A.md#notes-2)",
		"```",
		"[fenced](docs/D.md)",
		"```",
		"[ref]: docs/E.md",
		"## Here",
		"[self](#there)",
	}, "\n"))
	broken, err := Check(dir, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Broken{
		{File: "README.md", Line: 3, Target: "docs/B.md", Why: "no such file or directory"},
		{File: "README.md", Line: 3, Target: "docs/A.md#outbox", Why: "no heading or anchor #outbox in A.md"},
		{File: "README.md", Line: 3, Target: "docs/A.md#notes-2", Why: "no heading or anchor #notes-2 in A.md"},
		{File: "README.md", Line: 7, Target: "docs/E.md", Why: "no such file or directory"},
		{File: "README.md", Line: 9, Target: "#there", Why: "no heading or anchor #there in README.md"},
	}
	if !reflect.DeepEqual(broken, want) {
		t.Fatalf("broken links:\n got %v\nwant %v", broken, want)
	}
}

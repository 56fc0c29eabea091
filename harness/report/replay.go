package report

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/impl/mutant"
)

// RunPattern is the go test -run pattern that selects exactly the test (or
// subtest) named name: each level anchored on its own.
func RunPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + p + "$"
	}
	return strings.Join(parts, "/")
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// envPrefix renders env as sorted NAME=value words, quoted for a shell,
// followed by a space ("" for none).
func envPrefix(env map[string]string) string {
	var words []string
	for name, v := range env {
		words = append(words, name+"="+ShellQuote(v))
	}
	sort.Strings(words)
	if len(words) == 0 {
		return ""
	}
	return strings.Join(words, " ") + " "
}

// TestCommand is the one-line shell command, run from the repository root,
// that runs the test named name of the working directory's package again,
// with env and tags.
func TestCommand(env map[string]string, tags, name string) string {
	cmd := envPrefix(env) + "go test"
	if tags = buildTags(tags); tags != "" {
		cmd += " -tags " + tags
	}
	return fmt.Sprintf("%s %s -count=1 -run %s", cmd, packagePath(), ShellQuote(RunPattern(name)))
}

// buildTags is tags with leasehold_mutants added when this binary was built
// with it: a test of a mutants build (TestMutantsRuntime, the mutant
// scenarios) does not exist, or is not the same, without the tag.
func buildTags(tags string) string {
	if !mutant.Built || slices.Contains(strings.Split(tags, ","), "leasehold_mutants") {
		return tags
	}
	if tags == "" {
		return "leasehold_mutants"
	}
	return tags + ",leasehold_mutants"
}

// packagePath is the working directory (a test's package) relative to the
// repository root, as go test names it ("./harness").
func packagePath() string {
	root, err := RepoRoot()
	if err != nil {
		return "."
	}
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	rel, err := filepath.Rel(root, wd)
	if err != nil || rel == "." {
		return "."
	}
	return "./" + filepath.ToSlash(rel)
}

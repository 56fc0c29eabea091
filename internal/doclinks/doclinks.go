// Package doclinks checks that the relative links of Markdown files
// resolve: every link to a file or directory names one that exists, and
// every #fragment names a heading (or an explicit anchor) of the Markdown
// file it points into. Links with a scheme (https:, mailto:) are not
// followed; links inside code spans and fenced code blocks are not links.
//
// The repository's own test (TestRepositoryLinksResolve) runs it on every
// Markdown file of the repository, so a section moved out of the README
// cannot leave a dangling link behind.
package doclinks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Broken is one link that does not resolve.
type Broken struct {
	File   string // the Markdown file holding the link, as given to Check
	Line   int    // 1-based
	Target string // the link's target as written
	Why    string // what is missing
}

func (b Broken) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", b.File, b.Line, b.Target, b.Why)
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)
	scheme     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	heading    = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// Check reads each file (a path relative to root) and returns every link
// of theirs that does not resolve, in file and line order. An error is a
// file that cannot be read.
func Check(root string, files []string) ([]Broken, error) {
	anchors := map[string]map[string]bool{} // absolute path of a Markdown file -> its anchors
	var broken []Broken
	for _, f := range files {
		path := filepath.Join(root, f)
		lines, err := readLines(path)
		if err != nil {
			return nil, err
		}
		for i, line := range lines {
			for _, target := range linkTargets(line) {
				if why := resolve(root, path, target, anchors); why != "" {
					broken = append(broken, Broken{File: f, Line: i + 1, Target: target, Why: why})
				}
			}
		}
	}
	return broken, nil
}

// readLines returns the file's lines with fenced code blocks blanked, so
// that their line numbers still count.
func readLines(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(raw), "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines, nil
}

// linkTargets returns the targets of the inline links and reference
// definitions on line, code spans left out.
func linkTargets(line string) []string {
	line = stripCode(line)
	var out []string
	for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
		out = append(out, m[1])
	}
	if m := refDef.FindStringSubmatch(line); m != nil {
		out = append(out, m[1])
	}
	return out
}

// stripCode removes code spans (a run of backticks to the next run of the
// same length).
func stripCode(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		ticks := line[i : i+n]
		end := strings.Index(line[i+n:], ticks)
		if end < 0 {
			b.WriteString(ticks)
			i += n
			continue
		}
		i += n + end + n
	}
	return b.String()
}

// resolve returns why target, a link in the file at path, does not
// resolve, or "" when it does.
func resolve(root, path, target string, anchors map[string]map[string]bool) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	file, fragment, _ := strings.Cut(target, "#")
	if i := strings.IndexByte(file, '?'); i >= 0 {
		file = file[:i]
	}
	dest := path
	switch {
	case file == "":
	case strings.HasPrefix(file, "/"):
		dest = filepath.Join(root, filepath.FromSlash(file))
	default:
		dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
	}
	info, err := os.Stat(dest)
	if err != nil {
		return "no such file or directory"
	}
	if fragment == "" || info.IsDir() || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if anchors[dest] == nil {
		a, err := fileAnchors(dest)
		if err != nil {
			return err.Error()
		}
		anchors[dest] = a
	}
	if !anchors[dest][strings.ToLower(fragment)] {
		return fmt.Sprintf("no heading or anchor #%s in %s", fragment, filepath.Base(dest))
	}
	return ""
}

// fileAnchors returns the anchors of a Markdown file: each heading's slug as
// GitHub makes it (a repeated one suffixed -1, -2, ...) and every <a name>
// or <a id>.
func fileAnchors(path string) (map[string]bool, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range lines {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[strings.ToLower(m[1])] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := Slug(m[1])
		if n := seen[s]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors, nil
}

// Slug is the anchor GitHub gives a heading's text: links reduced to their
// text, lower case, every character but letters, digits, spaces, hyphens and
// underscores removed, each space a hyphen.
func Slug(text string) string {
	text = htmlAnchor.ReplaceAllString(text, "")
	text = linkText.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

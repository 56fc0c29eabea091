package harness

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/spec"
)

// TestMappingNamesRealCode holds docs/MAPPING.md to the code: every
// operation of the table has a row, every file it names exists, and every
// name it gives for the model, the guard and each store is declared in that
// package.
func TestMappingNamesRealCode(t *testing.T) {
	root, err := report.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "MAPPING.md"))
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]map[string]bool{}
	for _, dir := range []string{"spec", "model", "impl/sqlite", "impl/postgres"} {
		declared[dir] = declarations(t, filepath.Join(root, dir))
	}
	// Columns after the operation: model, guard, SQLite, PostgreSQL.
	columns := []string{"model", "spec", "impl/sqlite", "impl/postgres"}
	rows := map[spec.Op]bool{}
	tick := regexp.MustCompile("`([^`]+)`")
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		op := spec.Op(strings.Trim(strings.TrimSpace(cells[0]), "`"))
		if _, known := spec.Lookup(op); !known {
			t.Errorf("MAPPING.md has a row for %q, which is not an operation of spec.Operations", op)
			continue
		}
		rows[op] = true
		for i, cell := range cells[1:] {
			pkg := columns[i]
			for _, m := range tick.FindAllStringSubmatch(cell, -1) {
				name := m[1]
				switch {
				case strings.Contains(name, "/"):
					if _, err := os.Stat(filepath.Join(root, name)); err != nil {
						t.Errorf("MAPPING.md, %s: file %s does not exist", op, name)
					}
				case !ident.MatchString(name):
					// SQL, not a name.
				case i == 1 && !strings.HasPrefix(name, "Guard"):
					if !declared["model"][name] {
						t.Errorf("MAPPING.md, %s: the guard's model function %s is not declared in model", op, name)
					}
				case !declared[pkg][name]:
					t.Errorf("MAPPING.md, %s: %s is not declared in %s", op, name, pkg)
				}
			}
		}
	}
	for _, o := range spec.Operations() {
		if !rows[o.Op] {
			t.Errorf("MAPPING.md has no row for operation %s (%s)", o.Op, o.Method)
		}
	}
}

// declarations returns every top-level name (function, method, constant,
// variable, type) of the Go package in dir, tests excluded.
func declarations(t *testing.T, dir string) map[string]bool {
	names := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				names[d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					}
				}
			}
		}
	}
	return names
}

package outside_test

import (
	"context"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// factory opens a fresh SQLite store per call, its own way: a file in a
// temporary directory of the test, every option passed through, and more
// stores on the same file for Reopen and OpenWith. It declares what the
// store offers: hooks, and SQL on leasehold's table-per-record schema.
func factory(t testing.TB, opts leaseholdtest.Options) leaseholdtest.Handle {
	path := filepath.Join(t.TempDir(), "outside.db")
	open := func(t testing.TB, o leaseholdtest.Options) *sqlite.Store {
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: o.Hook})
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open(t, opts)
	return leaseholdtest.Handle{
		Store:    s,
		Reopen:   func(t testing.TB) leaseholdtest.Contract { return open(t, opts) },
		OpenWith: func(t testing.TB, o leaseholdtest.Options) leaseholdtest.Contract { return open(t, o) },
		Exec: func(ctx context.Context, q string) error {
			_, err := s.DB().ExecContext(ctx, q)
			return err
		},
		Layout: leaseholdtest.LayoutTablePerRecord,
		Caps:   leaseholdtest.Caps{Hooks: true, SQL: true},
	}
}

// TestSQLiteThroughThePortingAPI runs every check — conformance, rapid,
// linearizability, scenarios, the worker runtime — on the store, from
// outside the leasehold module.
func TestSQLiteThroughThePortingAPI(t *testing.T) {
	leaseholdtest.All(t, leaseholdtest.Store{Name: "outside-sqlite", Factory: factory})
}

// TestOnlyThePortingAPI holds this module to its point: of leasehold's
// packages, its code imports only the porting API and the store it checks.
func TestOnlyThePortingAPI(t *testing.T) {
	allowed := map[string]bool{
		"github.com/leasehold/leasehold/leaseholdtest": true,
		"github.com/leasehold/leasehold/impl/sqlite":   true,
	}
	files, _ := filepath.Glob("*.go")
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/leasehold/") && !allowed[path] {
				t.Errorf("%s imports %s: an outside module uses leasehold only through leaseholdtest (and the store it checks)", name, path)
			}
		}
	}
}

// Package sqlitetest opens throwaway SQLite stores for tests: the
// storetest.Factory that the conformance suite, the property tests and the
// linearizability checks use for the SQLite store.
package sqlitetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

// Factory opens a fresh SQLite store in a new temporary directory of t.
func Factory(t testing.TB, opts storetest.Options) storetest.Handle {
	path := filepath.Join(t.TempDir(), "leasehold.db")
	open := func(t testing.TB, opts storetest.Options) *sqlite.Store {
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{
			Config: opts.Config, Clock: opts.Clock, Random: opts.Random, Hook: opts.Hook})
		if err != nil {
			t.Fatalf("open sqlite store at %s: %v", path, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open(t, opts)
	return storetest.Handle{
		Store: s,
		Exec: func(ctx context.Context, query string) error {
			_, err := s.DB().ExecContext(ctx, query)
			return err
		},
		Reopen:   func(t testing.TB) spec.Store { return open(t, opts) },
		OpenWith: func(t testing.TB, o storetest.Options) spec.Store { return open(t, o) },
		Layout:   storetest.LayoutTablePerRecord,
		Caps:     storetest.Caps{Hooks: true, SQL: true},
	}
}

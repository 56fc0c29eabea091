// Package migrations embeds leasehold's schema, one ordered set per SQL
// dialect. Files are named NNNN_name.sql; a store applies each version once,
// in order, inside a transaction, and records it in leasehold_schema_migrations
// with the file's SHA-256, so re-running is safe and an edited, already
// applied file is reported instead of silently diverging.
package migrations

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Dialect names a migration set.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// VersionTable is the table that records applied migrations. Its columns are
// version (integer primary key), name, checksum and applied_at (ms).
const VersionTable = "leasehold_schema_migrations"

// Migration is one versioned schema change.
type Migration struct {
	Version  int
	Name     string
	SQL      string
	Checksum string // hex SHA-256 of SQL
}

// For returns the dialect's migrations in version order. Versions must be
// 1, 2, 3, … with no gaps.
func For(d Dialect) ([]Migration, error) {
	entries, err := fs.ReadDir(files, string(d))
	if err != nil {
		return nil, fmt.Errorf("migrations: unknown dialect %q: %w", d, err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migrations: %s/%s: want NNNN_name.sql", d, name)
		}
		body, err := fs.ReadFile(files, string(d)+"/"+name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{Version: v, Name: rest, SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: %s: version %d found where %d was expected (versions must be contiguous from 1)", d, m.Version, i+1)
		}
	}
	return out, nil
}

// CheckApplied compares a migration with the checksum recorded for its
// version when it was applied.
func (m Migration) CheckApplied(recorded string) error {
	if recorded != m.Checksum {
		return fmt.Errorf("migrations: version %d (%s) was applied with checksum %s but the embedded file is %s: an applied migration was edited; add a new version instead",
			m.Version, m.Name, short(recorded), short(m.Checksum))
	}
	return nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"

	"github.com/jackc/pgx/v5"
	moderncsqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// Target is one live leasehold database: its store, through which every
// repair goes, and read access to its tables for the findings the contract
// has no operation for.
type Target struct {
	store spec.Store
	kind  string // "sqlite" or "postgres"
	name  string
	db    rawDB
	sq    *sqlite.Store
	pg    *postgres.Store
	owned bool // opened by OpenSQLite or OpenPostgres: Close closes the store
}

// New makes a Target of a store the caller opened (a *sqlite.Store or a
// *postgres.Store; anything else is invalid_argument). name is how the
// report names the database. Close does not close the store.
func New(s spec.Store, name string) (*Target, error) {
	switch st := s.(type) {
	case *sqlite.Store:
		return &Target{store: s, kind: "sqlite", name: name, db: sqliteDB{st.DB()}, sq: st}, nil
	case *postgres.Store:
		return &Target{store: s, kind: "postgres", name: name, db: pgDB{st}, pg: st}, nil
	}
	return nil, spec.Errorf(spec.CodeInvalidArgument, "doctor: %T is not a store the doctor can read (SQLite or PostgreSQL)", s)
}

// Close closes the store if OpenSQLite or OpenPostgres opened it.
func (t *Target) Close() error {
	if t.owned {
		return t.store.Close()
	}
	return nil
}

// OpenSQLite opens the leasehold database in the existing file at path. It
// never creates or migrates a database: a missing file, a file without
// leasehold's tables, or a schema at another version than this leasehold's
// is an error (failed_precondition) that says so, and nothing is written.
func OpenSQLite(ctx context.Context, path string) (*Target, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, spec.Errorf(spec.CodeFailedPrecondition, "doctor: %v (the doctor opens an existing database and never creates one)", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, spec.Errorf(spec.CodeFailedPrecondition, "doctor: %s is not a file", path)
	}
	ro, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	defer ro.Close()
	var version sql.NullInt64
	err = ro.QueryRowContext(ctx, `SELECT max(version) FROM `+migrations.VersionTable).Scan(&version)
	if err != nil {
		if damage := sqliteDamage(ctx, path, ro, err); damage != nil {
			return nil, damage
		}
		return nil, spec.Errorf(spec.CodeFailedPrecondition, "doctor: %s is not a leasehold database (reading %s: %v)", path, migrations.VersionTable, err)
	}
	if err := checkVersion(migrations.SQLite, version.Int64, path); err != nil {
		return nil, err
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{Config: spec.DefaultConfig(), MaxConns: 2})
	if err != nil {
		if damage := sqliteDamage(ctx, path, ro, err); damage != nil {
			return nil, damage
		}
		return nil, err
	}
	t, _ := New(s, "sqlite "+path)
	t.owned = true
	return t, nil
}

// sqliteDamage tells a damaged SQLite file from one that is not a
// leasehold database, after err: a corrupt file (err says so, or
// PRAGMA quick_check finds problems) is failed_precondition saying
// "corrupt"; nil when quick_check finds nothing wrong.
func sqliteDamage(ctx context.Context, path string, ro *sql.DB, err error) error {
	why := ""
	switch {
	case sqliteCode(err) == sqlite3.SQLITE_NOTADB:
		why = "its header is not a SQLite database's: the file is not one, or its first page is damaged: " + err.Error()
	case isCorrupt(err):
		why = err.Error()
	default:
		problems, qerr := quickCheck(ctx, sqliteDB{ro})
		switch {
		case isCorrupt(qerr):
			why = "PRAGMA quick_check: " + qerr.Error()
		default:
			damage := slices.DeleteFunc(problems, constraintProblem)
			if len(damage) == 0 {
				return nil
			}
			why = fmt.Sprintf("PRAGMA quick_check found %s, the first: %s", plural(len(damage), "problem"), damage[0])
		}
	}
	return spec.Errorf(spec.CodeFailedPrecondition, "doctor: %s is corrupt (%s). Stop writing to it; restore it from a backup, or salvage what is left with the sqlite3 shell's .recover", path, why)
}

// quickCheck runs PRAGMA quick_check and returns its problems (none when
// it says ok).
func quickCheck(ctx context.Context, db rawDB) ([]string, error) {
	var out []string
	err := db.query(ctx, quickCheckSQL, nil, func(scan func(...any) error) error {
		var line string
		if err := scan(&line); err != nil {
			return err
		}
		if line != "ok" {
			out = append(out, line)
		}
		return nil
	})
	return out, err
}

// sqliteCode is the primary result code of a SQLite error, 0 for another.
func sqliteCode(err error) int {
	var se *moderncsqlite.Error
	if !errors.As(err, &se) {
		return 0
	}
	return se.Code() & 0xff
}

// isCorrupt reports whether err is SQLite's "database disk image is
// malformed" (SQLITE_CORRUPT) or "file is not a database" (SQLITE_NOTADB).
func isCorrupt(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB
}

// OpenPostgres opens the leasehold schema in the PostgreSQL database at
// dsn, with the database clock. Like OpenSQLite it never creates or
// migrates: a schema without leasehold's tables (a mistyped --schema) or at
// another version is failed_precondition, and nothing is written. The
// target's name has the server, database and user, never a password.
func OpenPostgres(ctx context.Context, dsn, schema string) (*Target, error) {
	if schema == "" {
		schema = postgres.DefaultSchema
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "doctor: bad connection string: %v", err)
	}
	name := fmt.Sprintf("postgres %s, schema %s", (&url.URL{Scheme: "postgres", User: url.User(cfg.User),
		Host: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), Path: "/" + cfg.Database}).String(), schema)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, &spec.Error{Code: spec.CodeUnavailable, Message: "doctor: cannot connect to " + name, Err: err}
	}
	var version *int64
	table := pgx.Identifier{schema, migrations.VersionTable}.Sanitize()
	var exists bool
	err = conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists)
	if err == nil && exists {
		err = conn.QueryRow(ctx, `SELECT max(version) FROM `+table).Scan(&version)
	}
	conn.Close(ctx)
	switch {
	case err != nil:
		return nil, &spec.Error{Code: spec.CodeUnavailable, Message: "doctor: reading " + table, Err: err}
	case !exists:
		return nil, spec.Errorf(spec.CodeFailedPrecondition, "doctor: %s has no leasehold tables (no %s): wrong --schema? (the store's default is %s)",
			name, migrations.VersionTable, postgres.DefaultSchema)
	}
	var v int64
	if version != nil {
		v = *version
	}
	if err := checkVersion(migrations.Postgres, v, name); err != nil {
		return nil, err
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 2,
		ApplicationName: "leasehold-doctor"})
	if err != nil {
		return nil, err
	}
	t, _ := New(s, name)
	t.owned = true
	return t, nil
}

// checkVersion holds a database to exactly the schema version this build
// knows: an older one would be migrated by opening the store (the doctor
// does not write before --repair), a newer one has tables this doctor does
// not understand.
func checkVersion(d migrations.Dialect, version int64, name string) error {
	list, err := migrations.For(d)
	if err != nil {
		return err
	}
	switch want := int64(len(list)); {
	case version < want:
		return spec.Errorf(spec.CodeFailedPrecondition, "doctor: %s is at schema version %d and this leasehold's is %d: the doctor does not migrate; upgrade the service that owns it first",
			name, version, want)
	case version > want:
		return spec.Errorf(spec.CodeFailedPrecondition, "doctor: %s is at schema version %d, newer than this leasehold's %d: run the doctor of the leasehold version that migrated it",
			name, version, want)
	}
	return nil
}

// args are a query's named parameters (@name in the SQL, which both SQLite
// and pgx bind by name).
type args map[string]any

// rawDB runs the doctor's own SQL: reads of the store's tables, and writes
// of its audit table only.
type rawDB interface {
	// query runs q and calls each for every row with the row's Scan.
	query(ctx context.Context, q string, a args, each func(scan func(dest ...any) error) error) error
	exec(ctx context.Context, q string, a args) error
}

type sqliteDB struct{ db *sql.DB }

func (d sqliteDB) list(a args) []any {
	out := make([]any, 0, len(a))
	for k, v := range a {
		out = append(out, sql.Named(k, v))
	}
	return out
}

func (d sqliteDB) query(ctx context.Context, q string, a args, each func(scan func(dest ...any) error) error) error {
	rows, err := d.db.QueryContext(ctx, q, d.list(a)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (d sqliteDB) exec(ctx context.Context, q string, a args) error {
	_, err := d.db.ExecContext(ctx, q, d.list(a)...)
	return err
}

type pgDB struct{ s *postgres.Store }

func (d pgDB) query(ctx context.Context, q string, a args, each func(scan func(dest ...any) error) error) error {
	rows, err := d.s.Pool().Query(ctx, q, pgx.NamedArgs(a))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (d pgDB) exec(ctx context.Context, q string, a args) error {
	_, err := d.s.Pool().Exec(ctx, q, pgx.NamedArgs(a))
	return err
}

// one runs a query that returns one row.
func one(ctx context.Context, db rawDB, q string, a args, dest ...any) error {
	found := false
	err := db.query(ctx, q, a, func(scan func(...any) error) error {
		found = true
		return scan(dest...)
	})
	if err == nil && !found {
		err = errors.New("doctor: the query returned no row")
	}
	return err
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/scenarios"
)

var scenarioCommand = &command{
	name:    "scenario",
	summary: "play race scenario files (scenarios/testdata) against a store",
	usage:   "scenario run FILE|DIR... [--store sqlite|postgres] [--dsn DSN] [--timeout D]",
	help: `Plays each scenario file (a directory: every *.json in it) on a fresh database:
  sqlite    a new temporary database file, removed afterwards (the default)
  postgres  a new schema in the database at --dsn, dropped afterwards
Prints every step's outcome, the model's verdict on the run's history and a PASS or FAIL line per
scenario; exits 1 if any scenario does not run as its file says or the model rejects it.
scenarios/FORMAT.md describes the files. Flags may come before, between or after the files.`,
	env: pgEnv,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		store := fs.String("store", "sqlite", "the store to play the scenarios on: sqlite or postgres")
		dsn := fs.String("dsn", "", "PostgreSQL connection string (default: LEASEHOLD_PG_DSN, else DATABASE_URL)")
		timeout := fs.Duration("timeout", hang.DefaultPatience, "deadlock guard per scenario: a scenario that goes no further for this long is reported hung")
		return func(ctx context.Context, args []string) error {
			if len(args) == 0 || args[0] != "run" {
				return usagef("the only subcommand is run: leasehold scenario run FILE|DIR...")
			}
			var paths []string
			for rest := args[1:]; ; {
				if err := fs.Parse(rest); err != nil {
					return usagef("%v", err)
				}
				if rest = fs.Args(); len(rest) == 0 {
					break
				}
				paths, rest = append(paths, rest[0]), rest[1:]
			}
			if len(paths) == 0 {
				return usagef("give at least one scenario file or directory")
			}
			return scenarioRun(ctx, o.out, paths, *store, *dsn, *timeout)
		}
	},
}

// scenarioRun implements leasehold scenario run.
func scenarioRun(ctx context.Context, out io.Writer, paths []string, store, dsn string, timeout time.Duration) error {
	var fresh func(sc *scenarios.Scenario) (scenarios.Opener, func(), error)
	switch store {
	case "sqlite":
		fresh = freshSQLite
	case "postgres":
		if dsn == "" {
			dsn = pgDSN()
		}
		if dsn == "" {
			return usagef("--store postgres: give --dsn or set LEASEHOLD_PG_DSN (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
		}
		fresh = freshPostgres(ctx, dsn)
	default:
		return usagef("--store %q: want sqlite or postgres", store)
	}
	files, err := scenarioFiles(paths)
	if err != nil {
		return err
	}
	// Load everything first: a malformed file fails the command before any
	// scenario runs.
	var list []*scenarios.Scenario
	for _, f := range files {
		sc, err := scenarios.Load(f)
		if err != nil {
			return err
		}
		list = append(list, sc)
	}
	var failed, na []string
	for _, sc := range list {
		fmt.Fprintf(out, "scenario %s (%s) on %s\n  %s\n", sc.Name, sc.File, store, sc.Description)
		open, cleanup, err := fresh(sc)
		if err != nil {
			return fmt.Errorf("scenario %s: a fresh %s database: %w", sc.Name, store, err)
		}
		res := scenarios.RunTimeout(ctx, sc, open, timeout)
		cleanup()
		res.Report(out)
		fmt.Fprintln(out)
		switch {
		case res.NotApplicable != "" && len(res.Mismatches) == 0:
			na = append(na, sc.Name) // neither passed nor failed
		case !res.OK():
			failed = append(failed, sc.Name)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(out, "FAIL: %d of %d scenarios on %s: %s\n", len(failed), len(list), store, strings.Join(failed, ", "))
		return fmt.Errorf("%d scenario(s) did not run as their files say", len(failed))
	}
	if len(na) > 0 {
		fmt.Fprintf(out, "PASS: %d scenarios on %s; %d not applicable (not passed): %s\n", len(list)-len(na), store, len(na), strings.Join(na, ", "))
		return nil
	}
	fmt.Fprintf(out, "PASS: %d scenarios on %s\n", len(list), store)
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// scenarioFiles expands directories to their *.json files, in name order.
func scenarioFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(p, "*.json"))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("%s: no *.json scenario files", p)
		}
		files = append(files, matches...)
	}
	return files, nil
}

// freshSQLite gives a scenario a new database file in a temporary
// directory, removed by cleanup.
func freshSQLite(*scenarios.Scenario) (scenarios.Opener, func(), error) {
	dir, err := os.MkdirTemp("", "leasehold-scenario-")
	if err != nil {
		return nil, nil, err
	}
	return sqliteOpener(filepath.Join(dir, "scenario.db")), func() { os.RemoveAll(dir) }, nil
}

// freshPostgres gives each scenario a new schema (lh_scenario_<random>) in
// the database at dsn; the first store the runner opens creates and
// migrates it, and cleanup drops it once the runner has closed its stores.
func freshPostgres(ctx context.Context, dsn string) func(*scenarios.Scenario) (scenarios.Opener, func(), error) {
	return func(*scenarios.Scenario) (scenarios.Opener, func(), error) {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, nil, err
		}
		schema := "lh_scenario_" + hex.EncodeToString(b[:])
		cleanup := func() {
			// Not ctx: the schema must be dropped even after an interrupt.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(dctx, dsn)
			if err != nil {
				fmt.Fprintf(os.Stderr, "leasehold: drop schema %s: %v\n", schema, err)
				return
			}
			defer conn.Close(dctx)
			if _, err := conn.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
				fmt.Fprintf(os.Stderr, "leasehold: drop schema %s: %v\n", schema, err)
			}
		}
		return postgresOpener(dsn, schema), cleanup, nil
	}
}

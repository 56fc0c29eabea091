package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/doctor"
	"github.com/leasehold/leasehold/impl/postgres"
)

var doctorCommand = &command{
	name:    "doctor",
	summary: "diagnose a live database (invariants, stuck leases, clock, plans, blockers); --repair what the contract can",
	usage:   "doctor (--sqlite FILE | --dsn DSN [--schema S]) [--tenant T] [--json | --md] [--reports DIR] [--older-than D] [--now-skew D] [--dead-tuples N] [--max-runs N] [--release-owner W]... [--repair --actor NAME]",
	help: `Reads a live leasehold database and reports: every contract invariant that fails (the list the
conformance suite checks, on one snapshot of every row, up to --max-runs runs); leases expired and
not reclaimed, per tenant, with their age; jobs leased with no attempts left (reapable: no claim
can take them); the distribution of lease expiries and who holds them; the database clock against
this host's (PostgreSQL); idempotency records past retention; outbox messages pending too long
(when the database has an outbox table, else "not applicable"); the claim statement's plan; on
SQLite, the file's integrity (PRAGMA quick_check: a damaged file is reported corrupt); and, on
PostgreSQL, sessions holding locks on the jobs table (idle in transaction), sessions pinning the
MVCC horizon (a snapshot held longer than horizon=, 5m) and dead rows piling up in the store's
tables (more than --dead-tuples plus a fifth of the live ones). It never creates
or migrates a database, and without --repair it writes nothing: the report ends with the repairs
it would make (a dry run).

--repair (with --actor, who is repairing) applies only invariant-preserving repairs, each through
the store's own guarded operation and recorded with the actor in the leasehold_doctor_audit
table: Store.Reap of the jobs that can never be claimed (their runs fail with lease_expired; a
run's last attempt may have called an external system before its worker died: its effect rows
say reserved or unknown), and
Store.Release of the unexpired leases of each --release-owner, a worker you know is dead (the job
is queued now, its attempt refunded, its generation kept; a live owner would be fenced but may
already have called external systems). It never edits rows or rewrites history, and it repairs
nothing in a database whose invariants fail, with --tenant or without (those rows need a
person). The report then shows the state after the repairs.

The report is Markdown on stdout (--json: JSON); --reports DIR also writes doctor.md and
doctor.json there. Findings are measured against the database clock (PostgreSQL) or this host's
(SQLite, whose store reads its process's clock). The DSN is never read from the environment:
name the database you mean.

Exit status: 0 healthy; 1 a check failed, a check could not run (incomplete), a repair was
refused or failed, or the database could not be opened; 2 a usage error.`,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		sqlitePath := fs.String("sqlite", "", "the SQLite database `FILE` (must exist)")
		dsn := fs.String("dsn", "", "the PostgreSQL database, e.g. postgres://user@host:5432/db?sslmode=disable")
		schema := fs.String("schema", postgres.DefaultSchema, "the PostgreSQL schema holding leasehold's tables (with --dsn)")
		tenant := fs.String("tenant", "", "report on this tenant only (the invariants still read every row, and --repair is refused while any tenant's rows break them)")
		asJSON := fs.Bool("json", false, "write the report as JSON on stdout")
		asMD := fs.Bool("md", false, "write the report as Markdown on stdout (the default)")
		reports := fs.String("reports", "", "also write doctor.md and doctor.json in `DIR`")
		def := doctor.DefaultThresholds()
		older := thresholdsFlag(def)
		fs.Var(&older, "older-than", "age past which a finding fails: one `duration` for all (5m), or kind=duration pairs, comma-separated, "+
			"kinds leases, idempotency, outbox, idle, horizon (e.g. 10m,idle=30s)")
		skew := fs.Duration("now-skew", def.Skew, "how far the database clock may be from this host's")
		deadTuples := fs.Int64("dead-tuples", def.DeadTuples, "dead rows a table (PostgreSQL) may have beyond a fifth of its live ones")
		maxRuns := fs.Int("max-runs", doctor.DefaultMaxRuns, "check the invariants only up to this many runs (they read every row in one snapshot)")
		var owners []string
		fs.Func("release-owner", "a lease owner (`worker`) known to be dead: plan (and with --repair, make) the release of its unexpired leases; repeatable",
			func(s string) error { owners = append(owners, s); return nil })
		repair := fs.Bool("repair", false, "apply the planned repairs (needs --actor)")
		actor := fs.String("actor", "", "who is repairing, recorded in the audit trail (required with --repair)")
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			switch {
			case (*sqlitePath == "") == (*dsn == ""):
				return usagef("give exactly one of --sqlite FILE and --dsn DSN")
			case set["schema"] && *sqlitePath != "":
				return usagef("--schema is for --dsn; a SQLite file has no schemas")
			case *asJSON && *asMD:
				return usagef("give at most one of --json and --md (--reports DIR writes both)")
			case *repair && *actor == "":
				return usagef("--repair needs --actor NAME: who is repairing, for the audit trail")
			case *actor != "" && !*repair:
				return usagef("--actor is only used with --repair")
			case *maxRuns < 1:
				return usagef("--max-runs %d: want at least 1", *maxRuns)
			case *skew < 0:
				return usagef("--now-skew %s: want a duration >= 0", *skew)
			case *deadTuples < 0:
				return usagef("--dead-tuples %d: want a count >= 0", *deadTuples)
			}
			th := doctor.Thresholds(older)
			th.Skew, th.DeadTuples = *skew, *deadTuples
			opts := doctor.Options{Tenant: *tenant, Thresholds: &th, MaxRuns: *maxRuns, ReleaseOwners: owners}
			return runDoctor(ctx, o, *sqlitePath, *dsn, *schema, opts, *repair, *actor, *asJSON, *reports)
		}
	},
}

func runDoctor(ctx context.Context, o *streams, sqlitePath, dsn, schema string, opts doctor.Options, repair bool, actor string, asJSON bool, reports string) error {
	var t *doctor.Target
	var err error
	if sqlitePath != "" {
		t, err = doctor.OpenSQLite(ctx, sqlitePath)
	} else {
		t, err = doctor.OpenPostgres(ctx, dsn, schema)
	}
	if err != nil {
		return err
	}
	defer t.Close()
	var r *doctor.Report
	var repairErr error
	if repair {
		r, repairErr = doctor.Repair(ctx, t, opts, actor)
	} else {
		r, err = doctor.Diagnose(ctx, t, opts)
	}
	if r == nil {
		return errors.Join(repairErr, err)
	}
	if asJSON {
		err = r.WriteJSON(o.out)
	} else {
		err = r.WriteMarkdown(o.out)
	}
	if err != nil {
		return err
	}
	if reports != "" {
		if err := writeDoctorReports(reports, r); err != nil {
			return err
		}
	}
	switch {
	case repairErr != nil:
		return repairErr
	case r.RepairFailed():
		return errors.New("a repair was refused or failed (see the report's repairs); nothing else was changed by it")
	case r.Verdict == doctor.VerdictUnhealthy:
		return fmt.Errorf("unhealthy: %s failed", strings.Join(r.Failed(), ", "))
	case r.Verdict == doctor.VerdictIncomplete:
		return fmt.Errorf("incomplete: %s could not run (a check that did not run is not a pass)", strings.Join(r.NotChecked(), ", "))
	}
	return nil
}

func writeDoctorReports(dir string, r *doctor.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, write := range map[string]func(f *os.File) error{
		"doctor.md":   func(f *os.File) error { return r.WriteMarkdown(f) },
		"doctor.json": func(f *os.File) error { return r.WriteJSON(f) },
	} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// thresholdsFlag is --older-than: one duration for every kind, or
// kind=duration pairs, or both ("10m,idle=30s").
type thresholdsFlag doctor.Thresholds

func (f *thresholdsFlag) String() string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("leases=%s,idempotency=%s,outbox=%s,idle=%s,horizon=%s", f.Leases, f.Idempotency, f.Outbox, f.Idle, f.Horizon)
}

func (f *thresholdsFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		kind, value, pair := strings.Cut(strings.TrimSpace(part), "=")
		if !pair {
			kind, value = "", kind
		}
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 {
			return fmt.Errorf("%q: want a duration >= 0 such as 5m, or kind=duration with kind leases, idempotency, outbox, idle or horizon", part)
		}
		switch kind {
		case "":
			f.Leases, f.Idempotency, f.Outbox, f.Idle, f.Horizon = d, d, d, d, d
		case "leases":
			f.Leases = d
		case "idempotency":
			f.Idempotency = d
		case "outbox":
			f.Outbox = d
		case "idle":
			f.Idle = d
		case "horizon":
			f.Horizon = d
		default:
			return fmt.Errorf("%q: unknown kind %q (want leases, idempotency, outbox, idle or horizon)", part, kind)
		}
	}
	return nil
}

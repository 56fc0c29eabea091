// Command leasehold runs leasehold's demo, checks and tools.
//
//	leasehold demo [--dir DIR]     the companion example on a fresh SQLite file
//	leasehold verify [--budget D]  every check on SQLite (and PostgreSQL when configured)
//	leasehold verify --store-cmd CMD  the checks on a store in any language, through the store protocol
//	leasehold replay [FILE...]     replay kept failing seeds (reports/failfiles)
//	leasehold lincheck FILE        re-check a recorded history (reports/lin/.../history.json)
//	leasehold scenario run FILE... play race scenarios against a store
//	leasehold bench [--quick]      leasehold vs River vs the commit ceiling
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/leasehold/leasehold/harness"
)

const usage = `usage: leasehold <command> [flags]

commands:
  demo      run the durable-job example on a fresh SQLite file
  verify    run every check (conformance, model exploration, property, linearizability,
            scenarios, mutants) on SQLite, and on PostgreSQL when LEASEHOLD_PG_DSN is set;
            writes reports/verify.json and reports/verify.md. --store-cmd 'CMD' checks a store
            written in any language instead, through the store protocol (docs/PROTOCOL.md)
  replay    replay every kept failfile under reports/failfiles (or the files given)
  lincheck  re-check a recorded history.json with the linearizability and accounting checks
  scenario  run FILE... --store sqlite|postgres: play race scenarios (scenarios/testdata)
  bench     [--quick] leasehold against River and the database's commit ceiling (needs PostgreSQL:
            LEASEHOLD_PG_DSN or --dsn); writes reports/bench.json and reports/bench.md
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ExitOnError)
		dir := fs.String("dir", "", "directory for demo.db (default: a temporary directory, removed afterwards)")
		fs.Parse(args)
		err = demo(ctx, os.Stdout, *dir)
	case "verify":
		fs := flag.NewFlagSet("verify", flag.ExitOnError)
		budget := fs.Duration("budget", 5*time.Minute, "total time budget, shared among the checks (deeper runs: 30m)")
		reports := fs.String("reports", "reports", "directory for verify.json and verify.md")
		only := fs.String("only", "", "run only the checks whose name/store contains this (several: comma-separated)")
		storeCmd := fs.String("store-cmd", "", "check this store command (run with sh -c from here) through the store protocol "+
			"(docs/PROTOCOL.md) instead of leasehold's own stores: conformance, rapid, linearizability, scenarios")
		keep := fs.Bool("keep-histories", false, "keep every linearizability history under REPORTS/lin/, the passing ones too ("+
			harness.EnvKeepHistory+"=1)")
		fs.Parse(args)
		if *keep {
			os.Setenv(harness.EnvKeepHistory, "1")
		}
		err = verify(ctx, verifyOptions{budget: *budget, reports: *reports, only: *only, storeCmd: *storeCmd,
			requirePG: os.Getenv("LEASEHOLD_REQUIRE_PG") == "1" || os.Getenv("CI") == "true", out: os.Stdout})
	case "lincheck":
		fs := flag.NewFlagSet("lincheck", flag.ExitOnError)
		timeout := fs.Duration("timeout", 5*time.Minute, "checker time limit (a timeout is a failure)")
		fs.Parse(args)
		if fs.NArg() != 1 {
			fmt.Fprintln(os.Stderr, "usage: leasehold lincheck [--timeout D] history.json (the format: docs/HISTORY.md)")
			os.Exit(2)
		}
		err = lincheck(os.Stdout, fs.Arg(0), *timeout)
	case "replay":
		fs := flag.NewFlagSet("replay", flag.ExitOnError)
		reports := fs.String("reports", "reports", "directory holding failfiles/")
		fs.Parse(args)
		err = replay(ctx, os.Stdout, *reports, fs.Args())
	case "scenario":
		err = scenarioCmd(ctx, os.Stdout, args)
	case "bench":
		err = benchCmd(ctx, os.Stdout, os.Stderr, args)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "leasehold: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasehold:", err)
		os.Exit(1)
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/probe"
	"github.com/leasehold/leasehold/probe/control"
	"github.com/leasehold/leasehold/queueproto"
)

func init() {
	commands = append(commands, probeCommand, probeAdapterCommand)
}

var probeCommand = &command{
	name:    "probe",
	summary: "probe job queues' promises through adapters: reports/latest/peers.{md,json,html}",
	usage:   "probe [--system NAME,...] [--probe NAME,...] [--runs 3] [--adapter CMD] [--broken VARIANT] [--reports DIR]",
	help: `Runs the probes (an acknowledged job is not lost when its worker is SIGKILLed or the database
restarts; a stale worker cannot complete a newer attempt; starts per job stay within the queue's
stated delivery; a dead worker's job ends on its own; the retry budget is exact; cancel against
complete has one winner; a key admits one job; a transaction that rolls back leaves no job and no
completion) on each system, each cell --runs times on fresh namespaces, and writes the matrix
probe × system with every violation's steps, the rows it left and a replay command
(docs/ADAPTERS.md).

The systems are leasehold's control rows (leasehold-sqlite, leasehold-postgres: leasehold's own
stores behind the protocol) and every peers/*/probe.json (River, pg-boss, graphile-worker, BullMQ);
--adapter CMD probes one queue of your own. --broken VARIANT runs the control rows as a
deliberately broken variant instead (each probe must fail on its variant). A violation is
reported only when every run shows it (at least 3); one that does not is intermittent, with its
rate. Exit status 1 when a control row does not hold a probe, or an adapter failed.`,
	env: append(pgEnv,
		"LEASEHOLD_REDIS_URL the Redis server for Redis-based queues, e.g. redis://127.0.0.1:6379",
		"LEASEHOLD_ADAPTER_TIMEOUT  how long an adapter may stay silent (default 60s)",
		"LEASEHOLD_PG_BIN   the directory of initdb and pg_ctl for db-restart's private server",
		"CI                 under CI=true a missing database is a failure, not a not-applicable cell"),
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		systems := fs.String("system", "", "comma-separated systems (default: every control row and every peers/*/probe.json)")
		probes := fs.String("probe", "", "comma-separated probes (default: all: "+strings.Join(probe.ProbeNames(), ", ")+")")
		runs := fs.Int("runs", probe.MinRuns, "exercised runs per cell (a violation needs every one, and at least 3)")
		jobs := fs.Int("jobs", 1, "systems probed at once (each system's cells one after another)")
		adapter := fs.String("adapter", "", "probe the queue behind this adapter command (sh -c) instead")
		broken := fs.String("broken", "", "run the control rows as this broken variant: "+strings.Join(control.VariantNames(), ", "))
		reports := fs.String("reports", "reports/latest", "directory for peers.{md,json,html}")
		noBuild := fs.Bool("no-build", false, "skip the peers' build commands")
		wire := fs.String("wire", "", "write every line between the runner and the adapters to DIR/<system>/<probe>.log")
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if *runs < 1 {
				return usagef("--runs %d: want at least 1 (%d to report a violation)", *runs, probe.MinRuns)
			}
			var names []string
			if *probes != "" {
				names = strings.Split(*probes, ",")
				for _, n := range names {
					if probe.FindProbe(n) == nil {
						return usagef("--probe %q: no such probe (the probes: %s)", n, strings.Join(probe.ProbeNames(), ", "))
					}
				}
			}
			list, err := probeSystems(*systems, *adapter, *broken)
			if err != nil {
				return err
			}
			cfg := probe.Config{Systems: list, Probes: names, Runs: *runs, Jobs: *jobs, NoBuild: *noBuild, Progress: o.err,
				Env: probe.Env{PostgresDSN: firstEnv("LEASEHOLD_PG_DSN", "DATABASE_URL"), RedisURL: os.Getenv("LEASEHOLD_REDIS_URL")}}
			if os.Getenv("CI") == "true" {
				if err := requireDatabases(ctx, list, cfg.Env); err != nil {
					return err
				}
			}
			if *wire != "" {
				cfg.Env.Wire = wireLog(*wire)
			}
			rep, err := probe.ProbeAll(ctx, cfg)
			if rep != nil {
				rep.Commit = gitCommit()
				if werr := rep.Write(*reports); werr != nil {
					return werr
				}
				fmt.Fprintf(o.out, "wrote %s\n", filepath.Join(*reports, "peers.md"))
				printMatrix(o, rep)
			}
			if err != nil {
				return err
			}
			return judge(rep, *broken)
		}
	},
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// controlSystems are leasehold's own rows, run by this binary.
func controlSystems(broken string) ([]probe.System, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out []probe.System
	for _, store := range []string{control.SQLite, control.Postgres} {
		q, err := control.New(control.Options{Store: store, Broken: broken})
		if err != nil {
			return nil, usagef("%v", err)
		}
		run := fmt.Sprintf("'%s' probe-adapter --store %s", exe, store)
		flagStr := "--system leasehold-" + store
		if broken != "" {
			run += " --broken " + broken
			flagStr += " --broken " + broken
		}
		out = append(out, probe.System{Name: q.System(), Run: run, Flag: flagStr})
	}
	return out, nil
}

// probeSystems resolves --system, --adapter and --broken to the rows.
func probeSystems(names, adapter, broken string) ([]probe.System, error) {
	if adapter != "" {
		if names != "" || broken != "" {
			return nil, usagef("--adapter probes one queue: drop --system and --broken")
		}
		h, err := probe.HelloOf(context.Background(), probe.System{Name: "?", Run: adapter})
		if h.System == "" {
			return nil, fmt.Errorf("the adapter %q did not say hello: %v", adapter, err)
		}
		return []probe.System{{Name: h.System, Run: adapter, Flag: fmt.Sprintf("--adapter '%s'", adapter)}}, nil
	}
	all, err := controlSystems(broken)
	if err != nil {
		return nil, err
	}
	if broken == "" {
		peers, err := probe.Peers(".")
		if err != nil {
			return nil, err
		}
		all = append(all, peers...)
	}
	if names == "" {
		return all, nil
	}
	var out []probe.System
	for _, n := range strings.Split(names, ",") {
		i := slices.IndexFunc(all, func(s probe.System) bool {
			base, _, _ := strings.Cut(s.Name, "-broken-")
			return base == n || base == "leasehold-"+n
		})
		if i < 0 {
			var known []string
			for _, s := range all {
				known = append(known, s.Name)
			}
			return nil, usagef("no system %q (the systems here: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// requireDatabases fails, under CI, when a system needs a database the
// environment does not name.
func requireDatabases(ctx context.Context, systems []probe.System, env probe.Env) error {
	for _, s := range systems {
		h, err := probe.HelloOf(ctx, s)
		if err != nil {
			continue // reported in its row
		}
		switch {
		case h.Needs == queueproto.NeedPostgres && env.PostgresDSN == "":
			return fmt.Errorf("%s needs PostgreSQL and LEASEHOLD_PG_DSN is unset (CI=true: a missing database is a failure)", s.Name)
		case h.Needs == queueproto.NeedRedis && env.RedisURL == "":
			return fmt.Errorf("%s needs Redis and LEASEHOLD_REDIS_URL is unset (CI=true: a missing database is a failure)", s.Name)
		}
	}
	return nil
}

func wireLog(dir string) func(cell, process, direction, line string) {
	var mu sync.Mutex
	files := map[string]*os.File{}
	return func(cell, process, direction, line string) {
		mu.Lock()
		defer mu.Unlock()
		f, ok := files[cell]
		if !ok {
			path := filepath.Join(dir, cell+".log")
			os.MkdirAll(filepath.Dir(path), 0o755)
			var err error
			if f, err = os.Create(path); err != nil {
				return
			}
			files[cell] = f
		}
		fmt.Fprintf(f, "%s%s %s\n", process, direction, line)
	}
}

func printMatrix(o *streams, rep *probe.Report) {
	for _, row := range rep.Systems {
		var cells []string
		for _, c := range row.Cells {
			cells = append(cells, fmt.Sprintf("%s=%s", c.Probe, c.Outcome))
		}
		fmt.Fprintf(o.out, "%s: %s\n", row.System.Name, strings.Join(cells, " "))
	}
}

// judge is the exit status: the control rows must hold every applicable
// probe (a broken variant must not), and no adapter may fail.
func judge(rep *probe.Report, broken string) error {
	var bad []string
	for _, row := range rep.Systems {
		for _, c := range row.Cells {
			control := strings.HasPrefix(row.System.Name, "leasehold-")
			switch {
			case c.Outcome == probe.AdapterError:
				bad = append(bad, fmt.Sprintf("%s %s: adapter error: %s", c.System, c.Probe, firstLine(c.Why)))
			case control && broken == "" && c.Outcome != probe.Holds && c.Outcome != probe.NotApplicable:
				bad = append(bad, fmt.Sprintf("%s %s: the control row must hold, and it is %s: %s", c.System, c.Probe, c.Outcome, firstLine(c.Why)))
			}
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

var probeAdapterCommand = &command{
	name:    "probe-adapter",
	summary: "serve leasehold's own store as a queue adapter (the probes' control row)",
	usage:   "probe-adapter --store sqlite|postgres [--broken VARIANT]",
	help: `Speaks the queue-adapter protocol (docs/ADAPTERS.md) on stdin and stdout for leasehold's
own SQLite or PostgreSQL store with its worker runtime: the control row of leasehold probe.
--broken runs a deliberately broken variant: ` + strings.Join(control.VariantNames(), ", ") + `.`,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		store := fs.String("store", "", "sqlite or postgres")
		broken := fs.String("broken", "", "a broken variant")
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			q, err := control.New(control.Options{Store: *store, Broken: *broken})
			if err != nil {
				return usagef("%v", err)
			}
			return queueproto.Serve(context.WithoutCancel(ctx), os.Stdin, os.Stdout, q)
		}
	},
}

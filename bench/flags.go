package bench

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/impl/postgres/pgcluster"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// CommandLine is the benchmark's command line: its flags, parsed into
// Options. `leasehold bench` parses it itself (usage errors and -h need no
// benchmark program) before it runs the program in bench/river, which parses
// the same flags again.
type CommandLine struct {
	Flags   *flag.FlagSet
	Options Options
	// Reports is the directory for bench.json and bench.md.
	Reports string
	// NoPeer leaves River out.
	NoPeer bool
	// Render, when set, measures nothing: it re-renders bench.md and
	// bench.html in that directory from its bench.json (after the findings
	// changed, say).
	Render   string
	smoke    bool
	depths   string
	variants string
}

// NewCommandLine defines the flags. defaultReports is the --reports default.
func NewCommandLine(defaultReports string) *CommandLine {
	c := &CommandLine{Flags: flag.NewFlagSet("bench", flag.ContinueOnError)}
	fs, o := c.Flags, &c.Options
	defaultDSN := os.Getenv("LEASEHOLD_PG_DSN")
	if defaultDSN == "" {
		defaultDSN = os.Getenv("DATABASE_URL")
	}
	if defaultDSN == "" {
		defaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	fs.StringVar(&c.Reports, "reports", defaultReports, "directory for bench.json, bench.md and bench.html")
	fs.StringVar(&o.DSN, "dsn", defaultDSN, "PostgreSQL server (the benchmark creates and drops its databases "+DBLeasehold+" and "+DBPeer+" there; default LEASEHOLD_PG_DSN, else DATABASE_URL)")
	fs.BoolVar(&o.PrivateServer, "private-server", false, "measure on a PostgreSQL server of the run's own instead of --dsn: started from the local server binaries ("+pgcluster.EnvBin+", default "+pgcluster.DefaultBin+") with PostgreSQL's defaults (autovacuum on, fsync on) and removed at the end; for a soak whose server runs without autovacuum")
	fs.BoolVar(&o.Quick, "quick", false, "quick mode: under 3 minutes on 2 cores, every ratio measured (3 rounds; noisy ratios flagged)")
	fs.IntVar(&o.N, "n", 0, "jobs per PostgreSQL drain (default: quick 10000, full 100000)")
	fs.IntVar(&o.InsertN, "insert-n", 0, "jobs per admission run one per call, both stores (default: quick 2000, full 20000)")
	fs.IntVar(&o.BulkN, "bulk-n", 0, "jobs per bulk admission run (CreateRuns, InsertMany), both stores (default: quick 20000, full 100000)")
	fs.IntVar(&o.SQLiteN, "sqlite-n", 0, "jobs per SQLite drain and per etcd admission and drain (default: quick 3000, full 20000)")
	fs.IntVar(&o.BulkBatch, "bulk-batch", 0, "requests per CreateRuns call and jobs per InsertMany call (default 1000, at most spec.MaxBatch)")
	fs.IntVar(&o.Rounds, "rounds", 0, "alternating rounds (leasehold, River, …) each peer ratio is the median of (default: quick 3, full 5; at least 3)")
	fs.Float64Var(&o.LatencySeconds, "latency-seconds", 0, "seconds of steady arrivals per latency round (default: quick 2, full 5)")
	fs.Float64Var(&o.LatencyLoad, "latency-load", 0, "the latency runs' arrival rate, the same for both systems, as a fraction of the slower one's drain or admission rate one per call (default 0.25; at most 1)")
	fs.IntVar(&o.Workers, "workers", 0, "W: handler goroutines (leasehold workers, River MaxWorkers) (default 100)")
	fs.IntVar(&o.Conns, "conns", 0, "C: connections per client (default 16)")
	fs.IntVar(&o.Coalesce, "coalesce", 0, "postgres.Options.CoalesceCreateRun of the coalesced admission run (default 2)")
	fs.IntVar(&o.ClaimBatch, "claim-batch", 0, "most jobs per batch claim (default 100)")
	fs.DurationVar(&o.ClaimGather, "claim-gather", 0, "after a full claim, how long a producer waits for more slots to free, in whole milliseconds as the worker counts it (default worker.DefaultClaimGather, 1ms; negative: never)")
	fs.IntVar(&o.Producers, "producers", 0, "goroutines making batch claims (default 1, River's one producer per queue)")
	fs.IntVar(&o.CompleteBatch, "complete-batch", 0, "most completions per CompleteBatch (default 1000)")
	fs.IntVar(&o.Completers, "completers", 0, "goroutines sending batched completions (default 1, River's one batch completer)")
	fs.StringVar(&c.depths, "depths", "", "comma-separated queue depths (default 1000,100000,1000000; quick 1000,50000)")
	fs.IntVar(&o.DepthSamples, "samples", 0, "timed claims per depth phase (default: quick 300, full 2000)")
	fs.StringVar(&o.ProfileDir, "profile", "", "write a CPU profile of each leasehold drain to this directory")
	fs.BoolVar(&o.SkipSQLite, "no-sqlite", false, "leave the SQLite store out")
	fs.Func("sqlite-sync", "synchronous setting of leasehold's SQLite store and of River on SQLite alike: full (the store's default) or normal", func(v string) error {
		switch strings.ToLower(v) {
		case "full":
			o.SQLiteSync = sqlite.SyncFull
		case "normal":
			o.SQLiteSync = sqlite.SyncNormal
		default:
			return fmt.Errorf("want full or normal")
		}
		return nil
	})
	fs.BoolVar(&o.Etcd, "etcd", false, "the etcd store (one-member and three-member clusters it starts); default: on in full mode, off in quick mode")
	fs.StringVar(&c.variants, "variants", "", "only these PostgreSQL drains (comma-separated keys: single,single_batchcomplete,batch,batch_batchcomplete)")
	fs.BoolVar(&o.SkipDepth, "no-depth", false, "leave the depth measurement out")
	fs.BoolVar(&o.SkipPin, "no-pin", false, "leave out the drains under a pinned MVCC horizon")
	fs.DurationVar(&o.Soak, "soak", 0, "each system's soak: steady arrivals for this long, the horizon pinned in the middle (default: full "+DefaultSoak.String()+", quick off; 0: off)")
	fs.DurationVar(&o.SoakPin, "soak-pin", 0, "how long the soak's horizon is pinned, in its middle (default "+DefaultSoakPin.String()+")")
	fs.DurationVar(&o.SoakInterval, "soak-interval", 0, "how often the soak is sampled (default "+DefaultSoakInterval.String()+")")
	fs.Float64Var(&o.SoakRate, "soak-rate", 0, fmt.Sprintf("the soak's arrival rate, jobs/s, the same for both systems (default %g)", DefaultSoakRate))
	fs.BoolVar(&o.SoakOnly, "soak-only", false, "measure the soak and nothing else")
	fs.BoolVar(&c.smoke, "soak-smoke", false, "a short soak and nothing else, to see it work: --soak-only with --soak "+SmokeSoak.String()+", --soak-pin "+SmokeSoakPin.String()+", --soak-interval "+SmokeSoakInterval.String()+" unless given")
	fs.BoolVar(&c.NoPeer, "no-peer", false, "leave River out, on both stores (its ratios stay empty)")
	fs.StringVar(&o.RepoDir, "repo", "../..", "the leasehold repository, for the commit in the report")
	fs.StringVar(&c.Render, "render", "", "measure nothing: re-render bench.md and bench.html of this directory from its bench.json (with the current findings)")
	return c
}

// Parse parses args into the options; an error is a usage error (or
// flag.ErrHelp for -h).
func (c *CommandLine) Parse(args []string) error {
	if err := c.Flags.Parse(args); err != nil {
		return err
	}
	if c.Flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (the benchmark takes flags only)", c.Flags.Args())
	}
	set := map[string]bool{}
	c.Flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["etcd"] {
		c.Options.Etcd = !c.Options.Quick
	}
	o := &c.Options
	if c.smoke {
		o.SoakOnly, o.SoakSmoke = true, true
		for _, d := range []struct {
			name string
			p    *time.Duration
			v    time.Duration
		}{{"soak", &o.Soak, SmokeSoak}, {"soak-pin", &o.SoakPin, SmokeSoakPin}, {"soak-interval", &o.SoakInterval, SmokeSoakInterval}} {
			if !set[d.name] {
				*d.p = d.v
			}
		}
	}
	if !set["soak"] && !c.smoke && (!o.Quick || o.SoakOnly) {
		o.Soak = DefaultSoak
	}
	if o.Soak < 0 || o.SoakPin < 0 || o.SoakInterval < 0 || o.SoakRate < 0 {
		return fmt.Errorf("--soak, --soak-pin, --soak-interval and --soak-rate want positive values")
	}
	if o.Soak > 0 && o.SoakPin >= o.Soak {
		return fmt.Errorf("--soak-pin %v: the pin must be shorter than the soak (%v)", o.SoakPin, o.Soak)
	}
	if o.SoakOnly && o.Soak == 0 {
		return fmt.Errorf("--soak-only with --soak 0: nothing to measure")
	}
	if c.Options.Rounds != 0 && c.Options.Rounds < 3 {
		return fmt.Errorf("--rounds %d: a ratio needs at least 3 rounds to show its spread", c.Options.Rounds)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"n", c.Options.N}, {"insert-n", c.Options.InsertN}, {"bulk-n", c.Options.BulkN}, {"sqlite-n", c.Options.SQLiteN}, {"bulk-batch", c.Options.BulkBatch}} {
		if f.v < 0 {
			return fmt.Errorf("--%s %d: want a positive count", f.name, f.v)
		}
	}
	if c.Options.BulkBatch > spec.MaxBatch {
		return fmt.Errorf("--bulk-batch %d exceeds spec.MaxBatch (%d)", c.Options.BulkBatch, spec.MaxBatch)
	}
	if c.Options.LatencySeconds < 0 {
		return fmt.Errorf("--latency-seconds %v: want a positive duration", c.Options.LatencySeconds)
	}
	if l := c.Options.LatencyLoad; !(l >= 0 && l <= 1) { // NaN too; 0 is the default
		return fmt.Errorf("--latency-load %v: want a fraction in (0, 1]", l)
	}
	c.Options.Depths = nil
	if c.depths != "" {
		for _, f := range strings.Split(c.depths, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 100 {
				return fmt.Errorf("--depths: %q is not a depth of at least 100", f)
			}
			c.Options.Depths = append(c.Options.Depths, n)
		}
	}
	c.Options.Variants = nil
	if c.variants != "" {
		c.Options.Variants = strings.Split(c.variants, ",")
	}
	return nil
}

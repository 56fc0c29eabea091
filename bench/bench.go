// Package bench measures leasehold's stores against a peer queue (River) and
// against the database's own commit ceiling, in one run, on one machine and
// one PostgreSQL server, and writes reports/bench.json and reports/bench.md.
//
// Only ratios measured in the same run mean anything (the machines this runs
// on are shared and noisy), so Run measures everything back to back and the
// report leads with the ratios: leasehold / River, leasehold / ceiling and
// claim latency at 1M queued jobs / at 1k.
//
// # Why the peer is an interface
//
// This package is part of leasehold's main module and must not import River
// (leasehold's own dependency graph must not grow). The peer is plugged in
// through Peer by the program in bench/river, a separate Go module that
// imports both River and this package (with a replace to the main module).
// `leasehold bench` (cmd/leasehold) runs that program with `go run`; the
// benchmark code itself lives here so that `go test ./...` of the main module
// exercises it (bench_test.go) and it cannot rot unnoticed.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// partial names what a run left out, for the report's mode.
func partial(o Options) string {
	if len(o.Variants) > 0 || o.SkipDepth || o.SkipSQLite || o.Peer == nil || o.DSN == "" {
		return ", partial"
	}
	return ""
}

// Options configures one benchmark run. Zero fields take the defaults of
// the mode (see Defaults).
type Options struct {
	// DSN reaches the PostgreSQL server (any database on it: the benchmark
	// creates and drops its own databases beside it, DBLeasehold and
	// DBPeer). Empty: no PostgreSQL figures.
	DSN string
	// Quick is the CI and reviewer mode: smaller N, fewer depth samples, and
	// the 1M depth point measured with a smaller sample (see Defaults).
	Quick bool
	// N is the number of jobs of each throughput run.
	N int
	// Workers (W) is the handler concurrency: leasehold's worker goroutines
	// and River's MaxWorkers.
	Workers int
	// Conns (C) is the connection pool size of every PostgreSQL client
	// (leasehold's store, River's pool, the ceiling loop).
	Conns int
	// ClaimBatch is the most jobs one batch claim asks for (River's producer
	// fetches up to MaxWorkers minus the jobs in flight; so does ours, capped
	// here).
	ClaimBatch int
	// Producers is the number of goroutines making batch claims (each
	// claim is one transaction). The default, 1, is River's shape: one
	// producer per queue.
	Producers int
	// CompleteBatch is the most completions one CompleteBatch call carries.
	CompleteBatch int
	// Completers is the number of goroutines flushing batched completions.
	// The default, 1, is River's shape: one batch completer per client.
	Completers int
	// Depths are the queue depths of the claim-latency measurement.
	Depths []int
	// DepthSamples is the number of timed claims at each depth.
	DepthSamples int
	// Variants, when set, limits the PostgreSQL drains to these keys
	// (single, single_batchcomplete, batch, batch_batchcomplete); for
	// profiling one shape. SkipDepth leaves the depth measurement out.
	// A report made with either is incomplete and says so in its mode.
	Variants  []string
	SkipDepth bool
	// SQLiteDir holds the SQLite benchmark's file ("" = a temporary
	// directory, removed afterwards). SkipSQLite leaves SQLite out.
	SQLiteDir  string
	SkipSQLite bool
	// Etcd adds the etcd store, on a one-member and a three-member cluster
	// the benchmark starts (bench/etcd.go).
	Etcd bool
	// ProfileDir, when set, receives a CPU profile (pprof) of the benchmark
	// program during each leasehold drain: profile-<variant>.pprof.
	ProfileDir string
	// Peer is the queue compared against (River); nil leaves the peer's
	// figures empty and the report says so.
	Peer Peer
	// Commit is the code's commit, for the report ("" = ask git in RepoDir).
	Commit  string
	RepoDir string
	// Log receives progress lines.
	Log io.Writer
}

// Database names the benchmark creates (and drops and recreates) on the
// server given by Options.DSN.
const (
	DBLeasehold = "leasehold_bench"
	DBPeer      = "river_bench"
)

// Defaults fills the zero fields of o for its mode.
func (o Options) Defaults() Options {
	set := func(p *int, quick, full int) {
		if *p == 0 {
			*p = full
			if o.Quick {
				*p = quick
			}
		}
	}
	set(&o.N, 5_000, 100_000)
	set(&o.Workers, 100, 100)
	set(&o.Conns, 16, 16)
	set(&o.ClaimBatch, 100, 100)
	set(&o.Producers, 1, 1)
	set(&o.CompleteBatch, 1000, 1000)
	set(&o.Completers, 1, 1)
	set(&o.DepthSamples, 300, 2000)
	if o.Depths == nil {
		o.Depths = []int{1_000, 100_000, 1_000_000}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// Peer is a queue measured beside leasehold with the same N, W, C and no-op
// handler, on its own database of the same server. The benchmark times each
// call and reads the database's counters around it; a method returns when
// its work is committed.
type Peer interface {
	// Name identifies the peer and its version for the report.
	Name() string
	// Open connects to the database at dsn with a pool of conns
	// connections and migrates its schema.
	Open(ctx context.Context, dsn string, conns int) error
	// Reset empties the peer's job table.
	Reset(ctx context.Context) error
	// InsertOne inserts n jobs one per call (the peer's ordinary insert),
	// from workers goroutines.
	InsertOne(ctx context.Context, n, workers int) error
	// InsertBulk inserts n jobs with the peer's bulk insert.
	InsertBulk(ctx context.Context, n int) error
	// Drain works n queued jobs with a no-op handler and workers handler
	// goroutines, and returns when all n are completed (committed).
	Drain(ctx context.Context, n, workers int) error
	// Completed counts the peer's completed jobs (a check on Drain).
	Completed(ctx context.Context) (int, error)
	// Settings describes the peer's configuration for the report.
	Settings() map[string]string
	Close() error
}

// Run measures everything Options asks for and returns the report. It fails
// on the first error: a report with a figure missing is not written.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.Defaults()
	start := time.Now()
	r := &Report{
		Mode:      map[bool]string{true: "quick", false: "full"}[o.Quick] + partial(o),
		StartedAt: start.UTC().Format(time.RFC3339),
		Settings: Settings{N: o.N, Workers: o.Workers, Conns: o.Conns, ClaimBatch: o.ClaimBatch,
			Producers: o.Producers, CompleteBatch: o.CompleteBatch, Completers: o.Completers, Depths: o.Depths, DepthSamples: o.DepthSamples,
			LeaseMs: leaseMs},
	}
	r.Commit = o.Commit
	if r.Commit == "" {
		r.Commit = gitCommit(o.RepoDir)
	}
	r.Host = hostInfo()
	logf := func(format string, a ...any) { fmt.Fprintf(o.Log, "bench: "+format+"\n", a...) }

	if o.DSN != "" {
		pg, err := openServer(ctx, o.DSN)
		if err != nil {
			return nil, err
		}
		defer pg.close()
		r.Postgres = pg.info
		logf("PostgreSQL %s (synchronous_commit=%s, fsync=%s, shared_buffers=%s)", pg.info.Version,
			pg.info.Settings["synchronous_commit"], pg.info.Settings["fsync"], pg.info.Settings["shared_buffers"])
		if err := pg.recreate(ctx, DBLeasehold); err != nil {
			return nil, err
		}
		defer pg.drop(context.WithoutCancel(ctx), DBLeasehold)
		lhDSN, err := withDatabase(o.DSN, DBLeasehold)
		if err != nil {
			return nil, err
		}

		// The ceiling first and last: the database's own commit rate,
		// measured twice to show how much the machine drifted in between.
		c, err := ceiling(ctx, pg, lhDSN, o, logf)
		if err != nil {
			return nil, fmt.Errorf("ceiling: %w", err)
		}
		r.Ceiling = append(r.Ceiling, c)

		ins, err := insertLeaseholdPG(ctx, pg, lhDSN, o, logf)
		if err != nil {
			return nil, fmt.Errorf("leasehold insert: %w", err)
		}
		r.Inserts = append(r.Inserts, ins...)
		for _, v := range pgVariants {
			if len(o.Variants) > 0 && !slices.Contains(o.Variants, v.key) {
				continue
			}
			d, err := drainLeaseholdPG(ctx, pg, lhDSN, o, v, logf)
			if err != nil {
				return nil, fmt.Errorf("leasehold %s: %w", v.name, err)
			}
			r.Drains = append(r.Drains, d)
		}

		if o.Peer != nil {
			ins, d, err := runPeer(ctx, pg, o, logf)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", o.Peer.Name(), err)
			}
			r.Inserts = append(r.Inserts, ins...)
			r.Drains = append(r.Drains, d)
			r.PeerName = o.Peer.Name()
			r.PeerSettings = o.Peer.Settings()
		}

		c, err = ceiling(ctx, pg, lhDSN, o, logf)
		if err != nil {
			return nil, fmt.Errorf("ceiling: %w", err)
		}
		r.Ceiling = append(r.Ceiling, c)

		for _, depth := range o.Depths {
			if o.SkipDepth {
				break
			}
			d, err := measureDepth(ctx, pg, lhDSN, o, depth, logf)
			if err != nil {
				return nil, fmt.Errorf("depth %d: %w", depth, err)
			}
			r.Depth = append(r.Depth, d)
		}
	}
	if !o.SkipSQLite {
		ins, ds, err := runSQLite(ctx, o, logf)
		if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		r.Inserts = append(r.Inserts, ins)
		r.Drains = append(r.Drains, ds...)
	}
	if o.Etcd {
		ins, ds, err := runEtcd(ctx, o, logf)
		if err != nil {
			return nil, fmt.Errorf("etcd: %w", err)
		}
		r.Inserts = append(r.Inserts, ins...)
		r.Drains = append(r.Drains, ds...)
	}
	r.computeRatios()
	r.ElapsedSec = time.Since(start).Seconds()
	return r, nil
}

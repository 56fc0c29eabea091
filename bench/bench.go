// Package bench measures leasehold's stores against a peer queue (River, on
// PostgreSQL and on SQLite) and against the database's own commit ceiling,
// in one run, on one machine and one PostgreSQL server, and writes
// reports/bench.json, reports/bench.md and reports/bench.html.
//
// Only ratios measured in the same run mean anything (the machines this runs
// on are shared and noisy), so every leasehold / peer ratio is the median of
// Options.Rounds alternating rounds (leasehold, peer, leasehold, peer, …)
// with its min–max, and a ratio whose rounds spread wider than NoisyAbove of
// its median is reported as not readable. The report leads with the goals
// of issue 16 and the ratios: drain, admission one per call and in bulk,
// latency at a steady rate, server CPU per job, leasehold / ceiling and
// claim latency at depth.
//
// # Adding a store or a peer
//
// A PostgreSQL drain shape is a row of pgVariants, a SQLite one of
// sqliteVariants; bestPG and sqliteBest name the shape measured in every
// round. Another store (an etcd store, say) follows runSQLite: its own
// run function appending DrainResults and InsertResults with its Store
// name, Round set, and the methods methodOne and methodBulk, plus its
// ratios in computeRatios (the rounds helper pairs them by round). A peer
// is a Peer (SteadyPeer for the latency runs) plugged in by bench/river.
//
// # Why the peer is an interface
//
// This package is part of leasehold's main module and must not import River
// (leasehold's own dependency graph must not grow). The peer is plugged in
// through Peer by the program in bench/river, a separate Go module that
// imports both River and this package (with replaces to this repository).
// `leasehold bench` (cmd/leasehold) runs that program with `go run`; the
// benchmark code itself lives here, in a module of its own (it requires the
// etcd store), so that make test exercises it (bench_test.go) and it cannot
// rot unnoticed.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/leasehold/leasehold/impl/postgres/pgcluster"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// privateServer is the server of Options.PrivateServer: PostgreSQL's
// defaults (fsync, full_page_writes and autovacuum on), with the
// connections the benchmark's clients need; privateServerText says so in
// the report.
var privateServer = pgcluster.Options{Durable: true, MaxConnections: 100}

const privateServerText = "a private server the run started and removed, --private-server: PostgreSQL's defaults, fsync and autovacuum on, max_connections 100"

// partial names what a run left out, for the report's mode.
func partial(o Options) string {
	if o.SoakOnly {
		return ""
	}
	if len(o.Variants) > 0 || (!o.Quick && o.Soak == 0) || o.SkipDepth || o.SkipPin || o.SkipSQLite || o.Peer == nil || o.SQLitePeer == nil || o.DSN == "" {
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
	// PrivateServer starts a PostgreSQL server of the run's own from the
	// local server binaries (pgcluster) and measures on it instead of DSN:
	// for a run that needs autovacuum on (the soak's bounded-size goal) when
	// the shared server runs without it. It is removed when the run ends.
	PrivateServer bool
	// Quick is the CI and reviewer mode: smaller N, fewer depth samples, and
	// the 1M depth point measured with a smaller sample (see Defaults).
	Quick bool
	// N is the number of jobs of each PostgreSQL throughput run (drain).
	N int
	// InsertN is the number of jobs of each admission run one per call
	// (CreateRun, the peer's Insert), on both stores.
	InsertN int
	// BulkN is the number of jobs of each bulk admission run (CreateRuns,
	// the peer's InsertMany), on both stores: larger than InsertN, because
	// a bulk admission is many times faster and a phase of InsertN jobs was
	// too short to read a ratio from (bench/findings.md §28).
	BulkN int
	// SQLiteN is the number of jobs of each SQLite drain (leasehold's and the
	// SQLite peer's), and of each etcd admission and drain (the stores of a
	// few thousand jobs per second).
	SQLiteN int
	// BulkBatch is the batch of bulk admission: requests per CreateRuns
	// call and jobs per InsertMany call (at most spec.MaxBatch).
	BulkBatch int
	// Rounds is the number of alternating rounds (leasehold, peer,
	// leasehold, peer, …) every leasehold / peer ratio is the median of.
	Rounds int
	// LatencySeconds is how long each steady-rate latency run admits for.
	LatencySeconds float64
	// LatencyLoad is the arrival rate of the latency runs, the same for
	// leasehold and the peer, as a fraction of the lower of the two
	// systems' capacities (each its median drain rate or its median
	// admission rate one per call, whichever is lower); in (0, 1], default
	// DefaultLatencyLoad.
	LatencyLoad float64
	// Workers (W) is the handler concurrency: leasehold's worker goroutines
	// and River's MaxWorkers.
	Workers int
	// Conns (C) is the connection pool size of every PostgreSQL client
	// (leasehold's store, River's pool, the ceiling loop).
	Conns int
	// Coalesce is postgres.Options.CoalesceCreateRun of the coalesced
	// admission run (the most shared admission transactions at a time).
	Coalesce int
	// ClaimBatch is the most jobs one batch claim asks for (River's producer
	// fetches up to MaxWorkers minus the jobs in flight; so does ours, capped
	// here).
	ClaimBatch int
	// ClaimGather is how long a producer whose last claim was full waits
	// for more slots to free before it claims again (worker.Config's
	// ClaimGather; River's counterpart is FetchCooldown). Default
	// worker.DefaultClaimGather; negative: never wait.
	ClaimGather time.Duration
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
	// SkipPin leaves out the drains under a pinned MVCC horizon (pinMode);
	// a report made without them is incomplete and says so.
	SkipPin bool
	// Soak is how long each system's soak admits for (soak.go); 0: no
	// soak. SoakPin is how long its horizon is pinned, in the middle of it
	// (default DefaultSoakPin); SoakInterval how often it is sampled
	// (default DefaultSoakInterval); SoakRate the arrival rate of both
	// systems, jobs/s (default DefaultSoakRate). SoakOnly measures the soak
	// and nothing else.
	Soak         time.Duration
	SoakPin      time.Duration
	SoakInterval time.Duration
	SoakRate     float64
	SoakOnly     bool
	// SoakSmoke marks a soak-only run as a smoke (--soak-smoke): its report
	// says so in its mode.
	SoakSmoke bool
	// SQLiteDir holds the SQLite benchmark's file ("" = a temporary
	// directory, removed afterwards). SkipSQLite leaves SQLite out.
	SQLiteDir  string
	SkipSQLite bool
	// SQLiteSync is the synchronous setting of leasehold's SQLite store and
	// of the SQLite peer alike: SyncFull (the default, the store's: every
	// commit flushed) or SyncNormal (flushed at checkpoints: faster, but
	// acknowledged writes can roll back after a power loss).
	SQLiteSync sqlite.Sync
	// Etcd adds the etcd store, on a one-member and a three-member cluster
	// the benchmark starts (bench/etcd.go).
	Etcd bool
	// ProfileDir, when set, receives a CPU profile (pprof) of the benchmark
	// program during each leasehold drain: profile-<variant>.pprof.
	ProfileDir string
	// Peer is the queue compared against (River) on PostgreSQL; nil leaves
	// the peer's figures empty and the report says so.
	Peer Peer
	// SQLitePeer is the queue compared against leasehold's SQLite store
	// (River on riversqlite); its Open takes a file path for dsn.
	SQLitePeer Peer
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

// DefaultLatencyLoad is Options.LatencyLoad's default: a quarter of the
// slower system's capacity.
const DefaultLatencyLoad = 0.25

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
	set(&o.N, 10_000, 100_000)
	set(&o.InsertN, 2_000, 20_000)
	set(&o.BulkN, 20_000, 100_000)
	set(&o.SQLiteN, 3_000, 20_000)
	set(&o.BulkBatch, 1_000, 1_000)
	set(&o.Rounds, 3, 5)
	if o.LatencySeconds == 0 {
		o.LatencySeconds = 5
		if o.Quick {
			o.LatencySeconds = 2
		}
	}
	if o.LatencyLoad == 0 {
		o.LatencyLoad = DefaultLatencyLoad
	}
	set(&o.Workers, 100, 100)
	set(&o.Conns, 16, 16)
	set(&o.Coalesce, 2, 2)
	set(&o.ClaimBatch, 100, 100)
	set(&o.Producers, 1, 1)
	if o.ClaimGather == 0 {
		o.ClaimGather = worker.DefaultClaimGather
	}
	if o.ClaimGather > 0 { // as the worker counts it: whole milliseconds, at least one
		o.ClaimGather = max(o.ClaimGather.Truncate(time.Millisecond), time.Millisecond)
	}
	set(&o.CompleteBatch, 1000, 1000)
	set(&o.Completers, 1, 1)
	set(&o.DepthSamples, 300, 2000)
	if o.Depths == nil {
		o.Depths = []int{1_000, 100_000, 1_000_000}
		if o.Quick {
			o.Depths = []int{1_000, 50_000}
		}
	}
	if o.Soak > 0 {
		if o.SoakPin == 0 {
			o.SoakPin = DefaultSoakPin
		}
		if o.SoakInterval == 0 {
			o.SoakInterval = DefaultSoakInterval
		}
		if o.SoakRate == 0 {
			o.SoakRate = DefaultSoakRate
		}
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
	// InsertBulk inserts n jobs with the peer's bulk insert, batch jobs per
	// call, one call after another.
	InsertBulk(ctx context.Context, n, batch int) error
	// Drain works n queued jobs with a no-op handler and workers handler
	// goroutines, and returns when all n are completed (committed).
	Drain(ctx context.Context, n, workers int) error
	// Completed counts the peer's completed jobs (a check on Drain).
	Completed(ctx context.Context) (int, error)
	// Settings describes the peer's configuration for the report.
	Settings() map[string]string
	// Close closes what Open opened; the benchmark opens and closes the
	// peer around each phase (so that its backends exit and publish their
	// commit counts).
	Close() error
}

// UniquePeer is a Peer whose inserts can also check every job for a
// duplicate, the nearest a queue without idempotency records comes to an
// idempotent admission (River: UniqueOpts{ByArgs: true}). leasehold's
// admission goals are set against these (issue 43): CreateRun against
// InsertOneUnique, CreateRuns against InsertBulkUnique; the plain inserts
// are measured beside them, for scale.
type UniquePeer interface {
	Peer
	// InsertOneUnique is InsertOne with the peer's duplicate check on every
	// job; no two of the n jobs are alike, so all are inserted (a job
	// skipped as a duplicate fails the run).
	InsertOneUnique(ctx context.Context, n, workers int) error
	// InsertBulkUnique is InsertBulk with the same check.
	InsertBulkUnique(ctx context.Context, n, batch int) error
}

// PinnablePeer is a Peer whose drain can be measured under a pinned MVCC
// horizon: the benchmark holds a snapshot open on its database (from the
// start, or from the drain's midpoint, which it learns from DrainObserved)
// and reads the statistics of the indexes its claims scan.
type PinnablePeer interface {
	Peer
	// DrainObserved is Drain, telling done the number of jobs completed so
	// far after each completion it observes (from one goroutine).
	DrainObserved(ctx context.Context, n, workers int, done func(completed int)) error
	// ClaimTarget names the peer's job table and the indexes its claims
	// scan, in its database (schema "" is public).
	ClaimTarget() ClaimTarget
}

// ClaimTarget names where a system's claims read: its schema, its job
// table and the indexes its claims scan.
type ClaimTarget struct {
	Schema, Table string
	Indexes       []string
}

// SteadyPeer is a Peer that can also run the latency measurement.
type SteadyPeer interface {
	Peer
	// Steady starts the peer's workers (workers slots, notifications on),
	// admits jobs 0..n-1 (n = len(tl.Admit): tl.Warmup warm-up jobs, then
	// the measured ones) one per call through Pace at rate per second,
	// which marks each admission and its return, marks each job's start
	// (handler entry) and completion (acknowledged) in tl, and returns
	// when all n completed. A job without all four marks fails the run.
	Steady(ctx context.Context, n, workers int, rate float64, tl *Timeline) error
}

// admissionN is the number of jobs of one admission run: o.BulkN for a
// bulk admission, else o.InsertN.
func (o Options) admissionN(bulk bool) int {
	if bulk {
		return o.BulkN
	}
	return o.InsertN
}

// warmupN is the size of the peer's warm-up drain and admission.
const warmupN = 2_000

// discard is a logf that drops its lines.
func discard(string, ...any) {}

// onceN and quickOnceN bound N for the drains measured once (the slowest
// runs at a tenth of the best, and at 100,000 jobs took minutes on a
// loaded machine).
const (
	onceN      = 20_000
	quickOnceN = 2_000
)

// bestPG is the PostgreSQL drain that is measured in every round against
// the peer; the other variants are measured once, for scale.
const bestPG = "batch_batchcomplete"

// Run measures everything Options asks for and returns the report. It fails
// on the first error: a report with a figure missing is not written.
//
// Every leasehold / peer ratio is the median of o.Rounds alternating rounds:
// each round measures leasehold and then the peer, for the drain, the
// admission one per call and the bulk admission, so that the machine's
// drift over the run falls on both sides alike.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.Defaults()
	if o.BulkBatch > spec.MaxBatch {
		return nil, fmt.Errorf("bench: bulk batch %d exceeds spec.MaxBatch (%d)", o.BulkBatch, spec.MaxBatch)
	}
	if !(o.LatencyLoad > 0 && o.LatencyLoad <= 1) {
		return nil, fmt.Errorf("bench: latency load %v is not a fraction in (0, 1]", o.LatencyLoad)
	}
	if o.Soak > 0 && !(o.SoakPin > 0 && o.SoakPin < o.Soak && o.SoakInterval > 0 && o.SoakRate > 0) {
		return nil, fmt.Errorf("bench: soak of %v pinned for %v, sampled every %v at %v jobs/s: want a pin shorter than the soak and a positive interval and rate", o.Soak, o.SoakPin, o.SoakInterval, o.SoakRate)
	}
	if o.SoakOnly && (o.Soak <= 0 || o.DSN == "") {
		return nil, fmt.Errorf("bench: a soak-only run needs a soak duration and a PostgreSQL server")
	}
	if o.PrivateServer {
		c, err := pgcluster.Start(privateServer)
		if err != nil {
			return nil, fmt.Errorf("bench: the private PostgreSQL server (--private-server): %w", err)
		}
		defer c.Remove()
		o.DSN = c.DSN()
	}
	start := time.Now()
	mode := map[bool]string{true: "quick", false: "full"}[o.Quick] + partial(o)
	if o.SoakOnly {
		mode = "soak"
		if o.SoakSmoke {
			mode = "soak smoke"
		}
	}
	r := &Report{
		Mode:      mode,
		StartedAt: start.UTC().Format(time.RFC3339),
		Settings: Settings{N: o.N, InsertN: o.InsertN, BulkN: o.BulkN, SQLiteN: o.SQLiteN, BulkBatch: o.BulkBatch, Rounds: o.Rounds,
			LatencySeconds: o.LatencySeconds, LatencyLoad: o.LatencyLoad, Workers: o.Workers, Conns: o.Conns, Coalesce: o.Coalesce, ClaimBatch: o.ClaimBatch,
			ClaimGatherMs: float64(max(o.ClaimGather, 0)) / float64(time.Millisecond), Producers: o.Producers, CompleteBatch: o.CompleteBatch, Completers: o.Completers, Depths: o.Depths, DepthSamples: o.DepthSamples,
			LeaseMs: leaseMs, SQLiteSync: o.SQLiteSync.String()},
		LoadBefore: loadAverage(),
	}
	r.Commit = o.Commit
	if r.Commit == "" {
		r.Commit = gitCommit(o.RepoDir)
	}
	r.Host = hostInfo()
	logf := func(format string, a ...any) {
		fmt.Fprintf(o.Log, "bench [%5.1fs]: "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
	}

	if o.DSN != "" {
		if err := runPostgres(ctx, o, r, logf); err != nil {
			return nil, err
		}
	}
	if !o.SkipSQLite && !o.SoakOnly {
		if err := runSQLite(ctx, o, r, logf); err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
	}
	if o.Etcd && !o.SoakOnly {
		ins, ds, err := runEtcd(ctx, o, logf)
		if err != nil {
			return nil, fmt.Errorf("etcd: %w", err)
		}
		r.Inserts = append(r.Inserts, ins...)
		r.Drains = append(r.Drains, ds...)
	}
	r.LoadAfter = loadAverage()
	r.ElapsedSec = time.Since(start).Seconds()
	r.computeRatios()
	return r, nil
}

// runPostgres measures the PostgreSQL part: the ceiling, the drain variants
// once, the alternating rounds, the ceiling again, latency and depth.
func runPostgres(ctx context.Context, o Options, r *Report, logf func(string, ...any)) error {
	pg, err := openServer(ctx, o.DSN)
	if err != nil {
		return err
	}
	defer pg.close()
	r.Postgres = pg.info
	r.Postgres.Private = o.PrivateServer
	logf("PostgreSQL %s (synchronous_commit=%s, fsync=%s, shared_buffers=%s)", pg.info.Version,
		pg.info.Settings["synchronous_commit"], pg.info.Settings["fsync"], pg.info.Settings["shared_buffers"])
	if err := pg.recreate(ctx, DBLeasehold); err != nil {
		return err
	}
	defer pg.drop(context.WithoutCancel(ctx), DBLeasehold)
	lhDSN, err := withDatabase(o.DSN, DBLeasehold)
	if err != nil {
		return err
	}
	if o.SoakOnly {
		var peer *peerPG
		if o.Peer != nil {
			if peer, err = openPeerPG(ctx, pg, o); err != nil {
				return fmt.Errorf("%s: %w", o.Peer.Name(), err)
			}
			defer pg.drop(context.WithoutCancel(ctx), DBPeer)
			r.PeerName, r.PeerSettings = o.Peer.Name(), o.Peer.Settings()
		}
		return runSoak(ctx, pg, lhDSN, peer, o, r, logf)
	}

	// The ceiling first and last: the database's own commit rate,
	// measured twice to show how much the machine drifted in between.
	c, err := ceiling(ctx, pg, lhDSN, o, logf)
	if err != nil {
		return fmt.Errorf("ceiling: %w", err)
	}
	r.Ceiling = append(r.Ceiling, c)

	variants := func(keep func(drainMode) bool) []drainMode {
		var out []drainMode
		for _, v := range pgVariants {
			if (len(o.Variants) == 0 || slices.Contains(o.Variants, v.key)) && keep(v) {
				out = append(out, v)
			}
		}
		return out
	}
	// The variants measured once are there for scale, with fewer jobs.
	once := o
	once.N = min(o.N, onceN)
	if o.Quick {
		once.N = min(o.N, quickOnceN)
	}
	for _, v := range variants(func(v drainMode) bool { return v.key != bestPG }) {
		d, err := drainLeaseholdPG(ctx, pg, lhDSN, once, v, pinNone, 0, logf)
		if err != nil {
			return fmt.Errorf("leasehold %s: %w", v.name, err)
		}
		r.Drains = append(r.Drains, d)
	}
	best := variants(func(v drainMode) bool { return v.key == bestPG })
	warm := o
	warm.N, warm.InsertN = min(o.N, warmupN), min(o.InsertN, warmupN)
	for _, v := range best {
		if _, err := drainLeaseholdPG(ctx, pg, lhDSN, warm, v, pinNone, -1, discard); err != nil {
			return fmt.Errorf("leasehold warm-up: %w", err)
		}
	}

	var peer *peerPG
	if o.Peer != nil {
		if peer, err = openPeerPG(ctx, pg, o); err != nil {
			return fmt.Errorf("%s: %w", o.Peer.Name(), err)
		}
		defer pg.drop(context.WithoutCancel(ctx), DBPeer)
		r.PeerName = o.Peer.Name()
		r.PeerSettings = o.Peer.Settings()
		// A warm-up drain and admission of each side, not reported: the
		// first drain of a run was often at half the rate of the later ones.
		if _, err := peer.drain(ctx, pg, warm, pinNone, -1, discard); err != nil {
			return fmt.Errorf("%s warm-up: %w", r.PeerName, err)
		}
		if _, err := peer.insert(ctx, pg, warm, methodOne, -1, discard); err != nil {
			return fmt.Errorf("%s warm-up: %w", r.PeerName, err)
		}
	}
	// Each round: the drain unpinned, then under a pinned horizon in each
	// pinMode, leasehold then the peer each time, so that a system's pinned
	// and unpinned drains are minutes apart at most.
	pins := []pinMode{pinNone}
	if !o.SkipPin {
		pins = append(pins, pinModes...)
	}
	for round := 1; round <= o.Rounds; round++ {
		for _, pm := range pins {
			for _, v := range best {
				d, err := drainLeaseholdPG(ctx, pg, lhDSN, o, v, pm, round, logf)
				if err != nil {
					return fmt.Errorf("leasehold %s, %s: %w", v.name, pm.text(), err)
				}
				r.Drains = append(r.Drains, d)
			}
			if peer != nil {
				d, err := peer.drain(ctx, pg, o, pm, round, logf)
				if err != nil {
					return fmt.Errorf("%s drain, %s: %w", r.PeerName, pm.text(), err)
				}
				r.Drains = append(r.Drains, d)
			}
		}
		for _, bulk := range []bool{false, true} {
			methods := []string{methodOne, methodCoalesced}
			if bulk {
				methods = []string{methodBulk}
			}
			for _, m := range methods {
				in, err := insertLeaseholdPG(ctx, pg, lhDSN, o, m, round, logf)
				if err != nil {
					return fmt.Errorf("leasehold insert: %w", err)
				}
				r.Inserts = append(r.Inserts, in)
			}
			if peer != nil {
				for _, m := range peer.methods(bulk) {
					in, err := peer.insert(ctx, pg, o, m, round, logf)
					if err != nil {
						return fmt.Errorf("%s insert: %w", r.PeerName, err)
					}
					r.Inserts = append(r.Inserts, in)
				}
			}
		}
	}

	c, err = ceiling(ctx, pg, lhDSN, o, logf)
	if err != nil {
		return fmt.Errorf("ceiling: %w", err)
	}
	r.Ceiling = append(r.Ceiling, c)

	if err := runLatency(ctx, pg, lhDSN, peer, o, r, logf); err != nil {
		return fmt.Errorf("latency: %w", err)
	}

	for _, depth := range o.Depths {
		if o.SkipDepth {
			break
		}
		d, err := measureDepth(ctx, pg, lhDSN, o, depth, logf)
		if err != nil {
			return fmt.Errorf("depth %d: %w", depth, err)
		}
		r.Depth = append(r.Depth, d)
	}
	if o.Soak > 0 {
		if err := runSoak(ctx, pg, lhDSN, peer, o, r, logf); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	return nil
}

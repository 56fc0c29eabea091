// Command river is the program behind `leasehold bench` and `make bench`:
// leasehold's benchmark (package github.com/leasehold/leasehold/bench) with
// River plugged in as the peer.
//
// It is a separate Go module so that River and its dependencies never enter
// leasehold's own module graph: this module requires leasehold through a
// replace to the repository root (../..) and River from the module proxy,
// with its go.sum committed. The leasehold CLI does not import it; it runs
// it with `go run .` in this directory (see cmd/leasehold/bench.go), so a
// clean clone needs only Go, the module proxy and a PostgreSQL server.
//
//	go run . [--quick] [--reports DIR] [--dsn DSN] [--profile DIR] ...
//
// Flags as for `leasehold bench`; --help lists them.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasehold/leasehold/bench"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, as leasehold's store
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	c := bench.NewCommandLine("reports")
	if err := c.Parse(args); err != nil {
		return err
	}
	if c.Render != "" {
		return bench.Rerender(c.Render)
	}
	o := c.Options
	if !c.NoPeer {
		o.Peer = &riverPeer{}
		o.SQLitePeer = &riverSQLitePeer{synchronous: o.SQLiteSync.String()}
	}
	o.Log = os.Stderr
	r, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := r.Write(c.Reports); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s/bench.json, bench.md and bench.html in %.0f s\n", c.Reports, r.ElapsedSec)
	for _, x := range r.Ratios {
		text := x.Text()
		if x.Note != "" {
			text += " — " + x.Note
		}
		fmt.Printf("%-80s %s\n", x.Name, text)
	}
	for _, g := range r.Goals {
		fmt.Printf("goal: %-74s %s — %s\n", g.Goal, g.Status, g.Detail)
	}
	return nil
}

// River's benchmark settings (riverbench in River's CLI): they matter more
// than anything else for its throughput, and these are the ones its authors
// found best.
const (
	fetchCooldown     = 2 * time.Millisecond
	fetchPollInterval = 20 * time.Millisecond
)

// riverPeer is River with the pgx v5 driver, on its own database.
type riverPeer struct {
	pool    *pgxpool.Pool
	conns   int
	workers int
}

// NoopArgs is the benchmark job: a number, like the leasehold payload.
type NoopArgs struct {
	N int `json:"n"`
}

// Kind implements river.JobArgs.
func (NoopArgs) Kind() string { return "bench_noop" }

// noopWorker is the no-op handler; start, when set, is told each job's
// argument as its Work begins (the latency run's start mark).
type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
	start func(n int)
}

// Work does nothing.
func (w *noopWorker) Work(_ context.Context, j *river.Job[NoopArgs]) error {
	if w.start != nil {
		w.start(j.Args.N)
	}
	return nil
}

func (p *riverPeer) Name() string { return "River " + riverVersion() }

func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

func (p *riverPeer) Settings() map[string]string {
	return map[string]string{
		"driver":            "riverpgxv5",
		"MaxWorkers":        strconv.Itoa(p.workers),
		"pool MaxConns":     strconv.Itoa(p.conns),
		"FetchCooldown":     fetchCooldown.String(),
		"FetchPollInterval": fetchPollInterval.String(),
		"completer":         "its default (batch completer)",
		"notifications":     "on (LISTEN/NOTIFY, its default with riverpgxv5)",
	}
}

func (p *riverPeer) Open(ctx context.Context, dsn string, conns int) error {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	pc.MaxConns, pc.MinConns = int32(conns), int32(conns)
	p.conns = conns
	if p.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(p.pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func (p *riverPeer) Close() error {
	if p.pool != nil {
		p.pool.Close()
	}
	return nil
}

func (p *riverPeer) Reset(ctx context.Context) error {
	_, err := p.pool.Exec(ctx, `TRUNCATE river_job`)
	return err
}

func (p *riverPeer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (p *riverPeer) InsertOne(ctx context.Context, n, workers int) error {
	return insertOne(ctx, riverpgxv5.New(p.pool), p.logger(), n, workers, nil)
}

// unique is the insert option of River's unique jobs in the benchmark:
// unique by their arguments (River's unique_key column and its unique
// index, with the default unique states), its documented way to keep a
// job from being inserted twice.
var unique = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}

// InsertOneUnique implements bench.UniquePeer: Insert with every job unique
// by its arguments.
func (p *riverPeer) InsertOneUnique(ctx context.Context, n, workers int) error {
	return insertOne(ctx, riverpgxv5.New(p.pool), p.logger(), n, workers, unique)
}

func (p *riverPeer) InsertBulk(ctx context.Context, n, size int) error {
	return insertBulk(ctx, riverpgxv5.New(p.pool), p.logger(), n, size, nil)
}

// InsertBulkUnique implements bench.UniquePeer: InsertMany with every job
// unique by its arguments.
func (p *riverPeer) InsertBulkUnique(ctx context.Context, n, size int) error {
	return insertBulk(ctx, riverpgxv5.New(p.pool), p.logger(), n, size, unique)
}

// Drain starts a client with one queue of MaxWorkers = workers and River's
// benchmark fetch settings, and returns when n completion events arrived
// (River sends them after its completer committed the batch).
func (p *riverPeer) Drain(ctx context.Context, n, workers int) error {
	p.workers = workers
	return drain(ctx, riverpgxv5.New(p.pool), p.logger(), n, workers, nil)
}

// DrainObserved implements bench.PinnablePeer: Drain, telling done the
// count of completion events so far after each.
func (p *riverPeer) DrainObserved(ctx context.Context, n, workers int, done func(completed int)) error {
	p.workers = workers
	return drain(ctx, riverpgxv5.New(p.pool), p.logger(), n, workers, done)
}

// ClaimTarget implements bench.PinnablePeer: River's producer fetches
// through river_job_prioritized_fetching_index (state, queue, priority,
// scheduled_at, id), its JobGetAvailable query's index.
func (p *riverPeer) ClaimTarget() bench.ClaimTarget {
	return bench.ClaimTarget{Table: "river_job", Indexes: []string{"river_job_prioritized_fetching_index"}}
}

// Steady runs the same client while jobs arrive one Insert at a time.
func (p *riverPeer) Steady(ctx context.Context, n, workers int, rate float64, tl *bench.Timeline) error {
	return steady(ctx, riverpgxv5.New(p.pool), p.logger(), n, workers, rate, tl)
}

func (p *riverPeer) Completed(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n)
	return n, err
}

// riverSQLitePeer is River with its SQLite driver (riversqlite, on the
// modernc.org/sqlite driver like leasehold's SQLite store), on its own file
// with the pragmas leasehold's store uses (WAL, the benchmark's synchronous
// setting, a busy timeout) and one connection: River's driver documentation
// asks for SetMaxOpenConns(1), since its concurrent internal operations
// otherwise fail with SQLITE_BUSY.
type riverSQLitePeer struct {
	db          *sql.DB
	workers     int
	synchronous string // FULL or NORMAL, as leasehold's store in the same run
}

func (p *riverSQLitePeer) Name() string { return "River " + riverVersion() }

func (p *riverSQLitePeer) Settings() map[string]string {
	return map[string]string{
		"driver":            "riversqlite (modernc.org/sqlite)",
		"MaxWorkers":        strconv.Itoa(p.workers),
		"MaxOpenConns":      "1 (River's documented setting for SQLite)",
		"pragmas":           "journal_mode=WAL, synchronous=" + p.synchronous + ", busy_timeout=5000 (as leasehold's store)",
		"FetchCooldown":     fetchCooldown.String(),
		"FetchPollInterval": fetchPollInterval.String(),
		"completer":         "its default (batch completer; riversqlite completes one row per statement)",
	}
}

func (p *riverSQLitePeer) Open(ctx context.Context, path string, conns int) error {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+p.synchronous+")")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	p.db = db
	m, err := rivermigrate.New(riversqlite.New(db), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func (p *riverSQLitePeer) Close() error {
	if p.db != nil {
		return p.db.Close()
	}
	return nil
}

func (p *riverSQLitePeer) Reset(ctx context.Context) error {
	_, err := p.db.ExecContext(ctx, `DELETE FROM river_job`)
	return err
}

func (p *riverSQLitePeer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (p *riverSQLitePeer) InsertOne(ctx context.Context, n, workers int) error {
	return insertOne(ctx, riversqlite.New(p.db), p.logger(), n, workers, nil)
}

func (p *riverSQLitePeer) InsertBulk(ctx context.Context, n, size int) error {
	return insertBulk(ctx, riversqlite.New(p.db), p.logger(), n, size, nil)
}

func (p *riverSQLitePeer) Drain(ctx context.Context, n, workers int) error {
	p.workers = workers
	return drain(ctx, riversqlite.New(p.db), p.logger(), n, workers, nil)
}

func (p *riverSQLitePeer) Completed(ctx context.Context) (int, error) {
	var n int
	err := p.db.QueryRowContext(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n)
	return n, err
}

// insertOne inserts n jobs, one Insert per call with opts (nil: River's
// defaults), from workers goroutines of a client that works nothing.
func insertOne[TTx any](ctx context.Context, d riverdriver.Driver[TTx], log *slog.Logger, n, workers int, opts *river.InsertOpts) error {
	c, err := river.NewClient(d, &river.Config{Logger: log})
	if err != nil {
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				res, err := c.Insert(ctx, NoopArgs{N: int(i)}, opts)
				if err == nil && res.UniqueSkippedAsDuplicate {
					err = fmt.Errorf("Insert skipped job %d as a duplicate: every job's arguments differ", res.Job.ID)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// insertBulk inserts n jobs with InsertMany, size per call, each with opts
// (nil: River's defaults).
func insertBulk[TTx any](ctx context.Context, d riverdriver.Driver[TTx], log *slog.Logger, n, size int, opts *river.InsertOpts) error {
	c, err := river.NewClient(d, &river.Config{Logger: log})
	if err != nil {
		return err
	}
	batch := make([]river.InsertManyParams, 0, size)
	for i := 1; i <= n; i++ {
		batch = append(batch, river.InsertManyParams{Args: NoopArgs{N: i}, InsertOpts: opts})
		if len(batch) == size || i == n {
			results, err := c.InsertMany(ctx, batch)
			if err != nil {
				return err
			}
			for _, r := range results {
				if r.UniqueSkippedAsDuplicate {
					return fmt.Errorf("InsertMany skipped job %d as a duplicate: every job's arguments differ", r.Job.ID)
				}
			}
			batch = batch[:0]
		}
	}
	return nil
}

// workClient is a client with one queue of MaxWorkers = workers and
// River's benchmark fetch settings; start is called at each job's Work.
func workClient[TTx any](d riverdriver.Driver[TTx], log *slog.Logger, workers int, start func(n int)) (*river.Client[TTx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{start: start})
	return river.NewClient(d, &river.Config{
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: fetchPollInterval,
		Logger:            log,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
	})
}

// awaitCompleted reads n completion events (River sends them after its
// completer committed), calling done, when set, with each job's argument
// and progress, when set, with the count so far.
func awaitCompleted(ctx context.Context, events <-chan *river.Event, n int, done func(arg int), progress func(completed int)) error {
	for got := 0; got < n; {
		select {
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("subscription closed after %d of %d jobs", got, n)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("job %d: unexpected event %s", ev.Job.ID, ev.Kind)
			}
			if done != nil {
				var a NoopArgs
				if err := json.Unmarshal(ev.Job.EncodedArgs, &a); err != nil {
					return err
				}
				done(a.N)
			}
			got++
			if progress != nil {
				progress(got)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

var completionKinds = []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}

// drain works n queued jobs and returns when all completed, telling
// progress, when set, the count of completions after each.
func drain[TTx any](ctx context.Context, d riverdriver.Driver[TTx], log *slog.Logger, n, workers int, progress func(completed int)) error {
	c, err := workClient(d, log, workers, nil)
	if err != nil {
		return err
	}
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: completionKinds})
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer c.Stop(context.WithoutCancel(ctx))
	return awaitCompleted(ctx, events, n, nil, progress)
}

// steady starts the client, admits jobs 0..n-1 one Insert at a time at rate
// per second (bench.Pace) and returns when all completed, marking each
// job's start and completion in tl.
func steady[TTx any](ctx context.Context, d riverdriver.Driver[TTx], log *slog.Logger, n, workers int, rate float64, tl *bench.Timeline) error {
	c, err := workClient(d, log, workers, func(i int) { tl.Mark(tl.Start, i) })
	if err != nil {
		return err
	}
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: completionKinds})
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer c.Stop(context.WithoutCancel(ctx))
	time.Sleep(200 * time.Millisecond) // as for leasehold's worker: let it start listening
	done := make(chan error, 1)
	go func() { done <- awaitCompleted(ctx, events, n, func(i int) { tl.Mark(tl.Complete, i) }, nil) }()
	if err := bench.Pace(ctx, n, rate, workers, tl, func(ctx context.Context, i int) error {
		_, err := c.Insert(ctx, NoopArgs{N: i}, nil)
		return err
	}); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-time.After(time.Duration(float64(n)/rate*float64(time.Second)) + 60*time.Second):
		return fmt.Errorf("not every job completed a minute after the last insert")
	}
}

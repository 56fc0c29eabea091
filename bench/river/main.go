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
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasehold/leasehold/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
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
	o := c.Options
	if !c.NoPeer {
		o.Peer = &riverPeer{}
	}
	o.Log = os.Stderr
	r, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := r.Write(c.Reports); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s/bench.json and %s/bench.md in %.0f s\n", c.Reports, c.Reports, r.ElapsedSec)
	for _, x := range r.Ratios {
		fmt.Printf("%-70s %s\n", x.Name, ratioText(x))
	}
	return nil
}

func ratioText(x bench.Ratio) string {
	if x.Value == 0 {
		return "— " + x.Note
	}
	return fmt.Sprintf("%.2f", x.Value)
}

// River's benchmark settings (riverbench in River's CLI): they matter more
// than anything else for its throughput, and these are the ones its authors
// found best.
const (
	fetchCooldown     = 2 * time.Millisecond
	fetchPollInterval = 20 * time.Millisecond
	insertBatch       = 5_000
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

// noopWorker is the no-op handler.
type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

// Work does nothing.
func (noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

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
		"InsertMany batch":  strconv.Itoa(insertBatch),
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

// insertClient is a client that only inserts (no queues: it works nothing).
func (p *riverPeer) insertClient() (*river.Client[pgx.Tx], error) {
	return river.NewClient(riverpgxv5.New(p.pool), &river.Config{Logger: p.logger()})
}

func (p *riverPeer) InsertOne(ctx context.Context, n, workers int) error {
	c, err := p.insertClient()
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
				if _, err := c.Insert(ctx, NoopArgs{N: int(i)}, nil); err != nil {
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

func (p *riverPeer) InsertBulk(ctx context.Context, n int) error {
	c, err := p.insertClient()
	if err != nil {
		return err
	}
	batch := make([]river.InsertManyParams, 0, insertBatch)
	for i := 1; i <= n; i++ {
		batch = append(batch, river.InsertManyParams{Args: NoopArgs{N: i}})
		if len(batch) == insertBatch || i == n {
			if _, err := c.InsertMany(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// Drain starts a client with one queue of MaxWorkers = workers and River's
// benchmark fetch settings, and returns when n completion events arrived
// (River sends them after its completer committed the batch).
func (p *riverPeer) Drain(ctx context.Context, n, workers int) error {
	p.workers = workers
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{})
	c, err := river.NewClient(riverpgxv5.New(p.pool), &river.Config{
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: fetchPollInterval,
		Logger:            p.logger(),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
	})
	if err != nil {
		return err
	}
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}})
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer c.Stop(context.WithoutCancel(ctx))
	for done := 0; done < n; {
		select {
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("subscription closed after %d of %d jobs", done, n)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("job %d: unexpected event %s", ev.Job.ID, ev.Kind)
			}
			done++
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *riverPeer) Completed(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n)
	return n, err
}

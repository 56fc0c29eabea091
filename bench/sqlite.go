package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// sqliteVariants are the SQLite drains: its single writer makes the shape
// matter less than on PostgreSQL, so two are measured.
var sqliteVariants = []drainMode{
	{key: "single", name: "single claim, Complete per job"},
	{key: "batch_batchcomplete", name: "batch claim, CompleteBatch", batchClaim: true, batchComplete: true},
}

// sqliteBest is the SQLite drain measured in every round against the
// SQLite peer.
const sqliteBest = "batch_batchcomplete"

// runSQLite measures leasehold's SQLite store and the SQLite peer: a base
// file of SQLiteN runs admitted with CreateRun, the other drain variants
// once on copies of it, then o.Rounds alternating rounds of drain (a copy
// of the base against the peer's bulk-inserted jobs), admission one per call
// and bulk admission, each into a fresh file.
func runSQLite(ctx context.Context, o Options, r *Report, logf func(string, ...any)) error {
	dir := o.SQLiteDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "leasehold-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	base := filepath.Join(dir, "bench-base.db")
	removeDB(base)
	defer removeDB(base)
	s, err := sqlite.Open(ctx, base, sqlite.Options{Config: config(), MaxConns: o.Conns, Sync: o.SQLiteSync})
	if err != nil {
		return err
	}
	err = insertAPI(ctx, s, o.SQLiteN, o.Workers)
	s.Close()
	if err != nil {
		return fmt.Errorf("base file: %w", err)
	}
	for _, v := range sqliteVariants {
		if v.key == sqliteBest {
			continue
		}
		d, err := drainSQLite(ctx, dir, base, o, v, 0, logf)
		if err != nil {
			return err
		}
		r.Drains = append(r.Drains, d)
	}
	best := sqliteVariants[slices.IndexFunc(sqliteVariants, func(v drainMode) bool { return v.key == sqliteBest })]

	var peer Peer
	peerPath := filepath.Join(dir, "peer.db")
	if o.SQLitePeer != nil {
		peer = o.SQLitePeer
		removeDB(peerPath)
		defer removeDB(peerPath)
		if err := peer.Open(ctx, peerPath, o.Conns); err != nil {
			return fmt.Errorf("%s: %w", peer.Name(), err)
		}
		peer.Close()
		r.SQLitePeerName = peer.Name()
		r.SQLitePeerSettings = peer.Settings()
		warm := o
		warm.SQLiteN = min(o.SQLiteN, warmupN)
		if _, err := drainSQLitePeer(ctx, peer, peerPath, warm, -1, discard); err != nil {
			return fmt.Errorf("%s warm-up: %w", peer.Name(), err)
		}
	}
	for round := 1; round <= o.Rounds; round++ {
		d, err := drainSQLite(ctx, dir, base, o, best, round, logf)
		if err != nil {
			return err
		}
		r.Drains = append(r.Drains, d)
		if peer != nil {
			d, err := drainSQLitePeer(ctx, peer, peerPath, o, round, logf)
			if err != nil {
				return fmt.Errorf("%s drain: %w", peer.Name(), err)
			}
			r.Drains = append(r.Drains, d)
		}
		for _, bulk := range []bool{false, true} {
			in, err := insertSQLite(ctx, dir, o, bulk, round, logf)
			if err != nil {
				return err
			}
			r.Inserts = append(r.Inserts, in)
			if peer != nil {
				in, err := insertSQLitePeer(ctx, peer, peerPath, o, bulk, round, logf)
				if err != nil {
					return fmt.Errorf("%s insert: %w", peer.Name(), err)
				}
				r.Inserts = append(r.Inserts, in)
			}
		}
	}
	return nil
}

// timed runs fn and returns its wall time and this process's CPU per job.
func timed(jobs int, fn func() error) (time.Duration, Cost, error) {
	before := processCPU()
	start := time.Now()
	err := fn()
	elapsed := time.Since(start)
	return elapsed, Cost{ClientCPUPerJob: float64((processCPU() - before).Microseconds()) / float64(jobs)}, err
}

// drainSQLite drains a copy of the base file with variant v.
func drainSQLite(ctx context.Context, dir, base string, o Options, v drainMode, round int, logf func(string, ...any)) (DrainResult, error) {
	res := DrainResult{System: "leasehold", Store: "sqlite", Variant: v.key, Name: v.name, Jobs: o.SQLiteN, Round: round}
	path := filepath.Join(dir, "bench-"+v.key+".db")
	removeDB(path)
	defer removeDB(path)
	if err := copyFile(base, path); err != nil {
		return res, err
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{Config: config(), MaxConns: o.Conns, Sync: o.SQLiteSync})
	if err != nil {
		return res, err
	}
	defer s.Close()
	st := &drainStats{}
	elapsed, c, err := timed(o.SQLiteN, func() error {
		return profiled(o.ProfileDir, fmt.Sprintf("sqlite-%s-%d", v.key, round), func() error { return drain(ctx, s, o.SQLiteN, o, v, st) })
	})
	if err == errNoBatchCompleter {
		res.NotMeasured = "the SQLite store does not implement spec.BatchCompleter yet"
		return res, nil
	}
	if err == nil {
		err = checkCompletedSQLite(ctx, s, o.SQLiteN)
	}
	if err != nil {
		return res, fmt.Errorf("%s: %w", v.key, err)
	}
	res.fill(elapsed, c, st)
	logf("round %d: leasehold sqlite %s: %.0f jobs/s", round, v.key, res.JobsPerSec)
	return res, nil
}

// insertSQLite measures one round of admission into a fresh file.
func insertSQLite(ctx context.Context, dir string, o Options, bulk bool, round int, logf func(string, ...any)) (InsertResult, error) {
	n := o.admissionN(bulk)
	res := InsertResult{System: "leasehold", Store: "sqlite", Method: methodOne, Jobs: n, Round: round}
	if bulk {
		res.Method = methodBulk
	}
	path := filepath.Join(dir, "bench-insert.db")
	removeDB(path)
	defer removeDB(path)
	s, err := sqlite.Open(ctx, path, sqlite.Options{Config: config(), MaxConns: o.Conns, Sync: o.SQLiteSync})
	if err != nil {
		return res, err
	}
	defer s.Close()
	elapsed, c, err := timed(n, func() error {
		if bulk {
			return insertBulkAPI(ctx, s, n, o.BulkBatch)
		}
		return insertAPI(ctx, s, n, o.Workers)
	})
	if err == errNoBatchCreator {
		res.NotMeasured = notMeasuredCreateRuns
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Seconds, res.JobsPerSec, res.Cost = elapsed.Seconds(), float64(n)/elapsed.Seconds(), c
	logf("round %d: leasehold sqlite %s: %.0f jobs/s", round, res.Method, res.JobsPerSec)
	return res, nil
}

// insertSQLitePeer measures one round of the SQLite peer's admission into
// its emptied table.
func insertSQLitePeer(ctx context.Context, p Peer, path string, o Options, bulk bool, round int, logf func(string, ...any)) (InsertResult, error) {
	n := o.admissionN(bulk)
	res := InsertResult{System: p.Name(), Store: "sqlite", Method: methodOne, Jobs: n, Round: round}
	if bulk {
		res.Method = methodBulk
	}
	if err := p.Open(ctx, path, o.Conns); err != nil {
		return res, err
	}
	defer p.Close()
	if err := p.Reset(ctx); err != nil {
		return res, err
	}
	elapsed, c, err := timed(n, func() error {
		if bulk {
			return p.InsertBulk(ctx, n, o.BulkBatch)
		}
		return p.InsertOne(ctx, n, o.Workers)
	})
	if err != nil {
		return res, err
	}
	res.Seconds, res.JobsPerSec, res.Cost = elapsed.Seconds(), float64(n)/elapsed.Seconds(), c
	logf("round %d: %s sqlite %s: %.0f jobs/s", round, p.Name(), res.Method, res.JobsPerSec)
	return res, nil
}

// drainSQLitePeer bulk-inserts SQLiteN jobs into the peer's emptied table
// and drains them.
func drainSQLitePeer(ctx context.Context, p Peer, path string, o Options, round int, logf func(string, ...any)) (DrainResult, error) {
	res := DrainResult{System: p.Name(), Store: "sqlite", Variant: "peer", Name: p.Name() + " (riversqlite, its defaults)", Jobs: o.SQLiteN, Round: round}
	if err := p.Open(ctx, path, o.Conns); err != nil {
		return res, err
	}
	defer p.Close()
	if err := p.Reset(ctx); err != nil {
		return res, err
	}
	if err := p.InsertBulk(ctx, o.SQLiteN, peerLoadBatch); err != nil {
		return res, err
	}
	elapsed, c, err := timed(o.SQLiteN, func() error { return p.Drain(ctx, o.SQLiteN, o.Workers) })
	if err != nil {
		return res, err
	}
	completed, err := p.Completed(ctx)
	if err != nil {
		return res, err
	}
	if completed != o.SQLiteN {
		return res, fmt.Errorf("%d jobs completed after the drain, want %d", completed, o.SQLiteN)
	}
	res.fill(elapsed, c, &drainStats{})
	logf("round %d: %s sqlite drain: %.0f jobs/s", round, p.Name(), res.JobsPerSec)
	return res, nil
}

// checkCompletedSQLite checks a sample of runs (every run for small N) is
// completed after a drain.
func checkCompletedSQLite(ctx context.Context, s spec.Store, n int) error {
	step := max(1, n/50)
	for i := 1; i <= n; i += step {
		run, err := s.GetRun(ctx, tenant, runIDOf(int64(i)))
		if err != nil {
			return err
		}
		if run.State != spec.RunCompleted {
			return fmt.Errorf("run %s is %s after the drain", run.ID, run.State)
		}
	}
	return nil
}

func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// runSQLite admits N runs through CreateRun (W goroutines) into a fresh
// file, then drains a copy of that file with each variant.
func runSQLite(ctx context.Context, o Options, logf func(string, ...any)) (InsertResult, []DrainResult, error) {
	dir := o.SQLiteDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "leasehold-bench-")
		if err != nil {
			return InsertResult{}, nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	base := filepath.Join(dir, "bench-base.db")
	removeDB(base)
	s, err := sqlite.Open(ctx, base, sqlite.Options{Config: config(), MaxConns: o.Conns})
	if err != nil {
		return InsertResult{}, nil, err
	}
	before := processCPU()
	start := time.Now()
	err = insertAPI(ctx, s, o.N, o.Workers)
	elapsed := time.Since(start)
	cpu := processCPU() - before
	s.Close()
	if err != nil {
		return InsertResult{}, nil, err
	}
	ins := InsertResult{System: "leasehold", Store: "sqlite", Method: "CreateRun, one run per call, W goroutines",
		Jobs: o.N, Seconds: elapsed.Seconds(), JobsPerSec: float64(o.N) / elapsed.Seconds(),
		Cost: Cost{ClientCPUPerJob: float64(cpu.Microseconds()) / float64(o.N)}}
	logf("leasehold sqlite insert (CreateRun): %.0f jobs/s", ins.JobsPerSec)

	var drains []DrainResult
	for _, v := range sqliteVariants {
		res := DrainResult{System: "leasehold", Store: "sqlite", Variant: v.key, Name: v.name, Jobs: o.N}
		path := filepath.Join(dir, "bench-"+v.key+".db")
		removeDB(path)
		if err := copyFile(base, path); err != nil {
			return ins, nil, err
		}
		s, err := sqlite.Open(ctx, path, sqlite.Options{Config: config(), MaxConns: o.Conns})
		if err != nil {
			return ins, nil, err
		}
		st := &drainStats{}
		before := processCPU()
		start := time.Now()
		err = profiled(o.ProfileDir, "sqlite-"+v.key, func() error { return drain(ctx, s, o.N, o, v, st) })
		elapsed := time.Since(start)
		cpu := processCPU() - before
		if err == errNoBatchCompleter {
			res.NotMeasured = "the SQLite store does not implement spec.BatchCompleter yet"
			err = nil
		} else if err == nil {
			err = checkCompletedSQLite(ctx, s, o.N)
			res.fill(elapsed, Cost{ClientCPUPerJob: float64(cpu.Microseconds()) / float64(o.N)}, st)
			logf("leasehold sqlite %s: %.0f jobs/s", v.key, res.JobsPerSec)
		}
		s.Close()
		removeDB(path)
		if err != nil {
			return ins, nil, fmt.Errorf("%s: %w", v.key, err)
		}
		drains = append(drains, res)
	}
	removeDB(base)
	return ins, drains, nil
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

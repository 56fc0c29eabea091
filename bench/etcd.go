package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/leasehold/leasehold/impl/etcd"
	"github.com/leasehold/leasehold/impl/etcd/etcdtest"
	"github.com/leasehold/leasehold/spec"
)

// etcdMembers are the cluster sizes measured: one member (no replication:
// the engine's own cost) and three (every commit a quorum round trip).
var etcdMembers = []int{1, 3}

// wallClock is the process's clock, the store's injected clock in the
// benchmark. The production default, the cluster clock, adds one
// linearizable read per write attempt (see impl/etcd's package doc).
type wallClock struct{}

func (wallClock) Now() int64 { return time.Now().UnixMilli() }

// runEtcd measures the etcd store on clusters of each size it starts
// (members as child processes on loopback, data directories on the local
// disk): admission through CreateRun from W goroutines, then the drains of
// sqliteVariants on what it admitted, and once per cluster size bulk
// admission through CreateRuns.
func runEtcd(ctx context.Context, o Options, logf func(string, ...any)) ([]InsertResult, []DrainResult, error) {
	var inserts []InsertResult
	var drains []DrainResult
	for _, members := range etcdMembers {
		name := fmt.Sprintf("etcd-%d", members)
		for i, v := range sqliteVariants {
			dir, err := os.MkdirTemp("", "leasehold-bench-etcd-")
			if err != nil {
				return nil, nil, err
			}
			c, err := etcdtest.Start(dir, members)
			if err != nil {
				os.RemoveAll(dir)
				return nil, nil, err
			}
			ins, d, err := etcdRound(ctx, c, name, v, o, i == 0, logf)
			c.Stop()
			os.RemoveAll(dir)
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s: %w", name, v.key, err)
			}
			if i == 0 {
				inserts = append(inserts, ins...)
			}
			drains = append(drains, d)
		}
	}
	return inserts, drains, nil
}

// etcdRound admits SQLiteN runs into a fresh cluster and drains them with
// v; with bulk, it then admits SQLiteN more on another prefix through
// CreateRuns in batches of BulkBatch (after the drain, which they would
// otherwise share the cluster with). Its admissions are CreateRun's, then
// CreateRuns' when measured.
func etcdRound(ctx context.Context, c *etcdtest.Cluster, name string, v drainMode, o Options, bulk bool, logf func(string, ...any)) ([]InsertResult, DrainResult, error) {
	cli, err := c.Client()
	if err != nil {
		return nil, DrainResult{}, err
	}
	defer cli.Close()
	s, err := etcd.Open(cli, "bench", etcd.Options{Config: config(), Clock: wallClock{}})
	if err != nil {
		return nil, DrainResult{}, err
	}
	before := processCPU()
	start := time.Now()
	err = insertAPI(ctx, s, o.SQLiteN, o.Workers)
	elapsed := time.Since(start)
	cpu := processCPU() - before
	if err != nil {
		return nil, DrainResult{}, err
	}
	ins := InsertResult{System: "leasehold", Store: name, Method: "CreateRun, one run per call, W goroutines",
		Jobs: o.SQLiteN, Seconds: elapsed.Seconds(), JobsPerSec: float64(o.SQLiteN) / elapsed.Seconds(),
		Cost: Cost{ClientCPUPerJob: float64(cpu.Microseconds()) / float64(o.SQLiteN)}}
	logf("leasehold %s insert (CreateRun): %.0f jobs/s", name, ins.JobsPerSec)

	res := DrainResult{System: "leasehold", Store: name, Variant: v.key, Name: v.name, Jobs: o.SQLiteN}
	st := &drainStats{}
	before = processCPU()
	start = time.Now()
	err = profiled(o.ProfileDir, name+"-"+v.key, func() error { return drain(ctx, s, o.SQLiteN, o, v, st) })
	elapsed = time.Since(start)
	cpu = processCPU() - before
	if err == nil {
		err = checkCompletedSQLite(ctx, s, o.SQLiteN)
	}
	if err != nil {
		return []InsertResult{ins}, res, err
	}
	res.fill(elapsed, Cost{ClientCPUPerJob: float64(cpu.Microseconds()) / float64(o.SQLiteN)}, st)
	logf("leasehold %s %s: %.0f jobs/s", name, v.key, res.JobsPerSec)
	if !bulk {
		return []InsertResult{ins}, res, nil
	}
	bs, err := etcd.Open(cli, "bench-bulk", etcd.Options{Config: config(), Clock: wallClock{}})
	if err != nil {
		return nil, res, err
	}
	before = processCPU()
	start = time.Now()
	err = insertBulkAPI(ctx, bs, o.SQLiteN, o.BulkBatch)
	elapsed = time.Since(start)
	cpu = processCPU() - before
	if err != nil {
		return nil, res, fmt.Errorf("bulk admission: %w", err)
	}
	bin := InsertResult{System: "leasehold", Store: name, Method: methodBulk, Jobs: o.SQLiteN, Seconds: elapsed.Seconds(),
		JobsPerSec: float64(o.SQLiteN) / elapsed.Seconds(), Cost: Cost{ClientCPUPerJob: float64(cpu.Microseconds()) / float64(o.SQLiteN)}}
	logf("leasehold %s insert (CreateRuns, batches of %d): %.0f jobs/s", name, o.BulkBatch, bin.JobsPerSec)
	return []InsertResult{ins, bin}, res, nil
}

var (
	_ spec.BatchCompleter = (*etcd.Store)(nil)
	_ spec.BatchCreator   = (*etcd.Store)(nil)
)

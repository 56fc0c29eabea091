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
// sqliteVariants on what it admitted.
func runEtcd(ctx context.Context, o Options, logf func(string, ...any)) ([]InsertResult, []DrainResult, error) {
	var inserts []InsertResult
	var drains []DrainResult
	for _, members := range etcdMembers {
		name := fmt.Sprintf("etcd-%d", members)
		for _, v := range sqliteVariants {
			dir, err := os.MkdirTemp("", "leasehold-bench-etcd-")
			if err != nil {
				return nil, nil, err
			}
			c, err := etcdtest.Start(dir, members)
			if err != nil {
				os.RemoveAll(dir)
				return nil, nil, err
			}
			ins, d, err := etcdRound(ctx, c, name, v, o, logf)
			c.Stop()
			os.RemoveAll(dir)
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s: %w", name, v.key, err)
			}
			if len(inserts) == 0 || inserts[len(inserts)-1].Store != name {
				inserts = append(inserts, ins)
			}
			drains = append(drains, d)
		}
	}
	return inserts, drains, nil
}

// etcdRound admits SQLiteN runs into a fresh cluster and drains them with v.
func etcdRound(ctx context.Context, c *etcdtest.Cluster, name string, v drainMode, o Options, logf func(string, ...any)) (InsertResult, DrainResult, error) {
	cli, err := c.Client()
	if err != nil {
		return InsertResult{}, DrainResult{}, err
	}
	defer cli.Close()
	s, err := etcd.Open(cli, "bench", etcd.Options{Config: config(), Clock: wallClock{}})
	if err != nil {
		return InsertResult{}, DrainResult{}, err
	}
	before := processCPU()
	start := time.Now()
	err = insertAPI(ctx, s, o.SQLiteN, o.Workers)
	elapsed := time.Since(start)
	cpu := processCPU() - before
	if err != nil {
		return InsertResult{}, DrainResult{}, err
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
		return ins, res, err
	}
	res.fill(elapsed, Cost{ClientCPUPerJob: float64(cpu.Microseconds()) / float64(o.SQLiteN)}, st)
	logf("leasehold %s %s: %.0f jobs/s", name, v.key, res.JobsPerSec)
	return ins, res, nil
}

var _ spec.BatchCompleter = (*etcd.Store)(nil)

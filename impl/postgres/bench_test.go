package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/spec"
)

// benchStore opens a store on a fresh schema with the database clock (as
// production runs it) and notifications as given.
func benchStore(b *testing.B, notify bool, coalesce int) *postgres.Store {
	b.Helper()
	dsn, schema := pgtest.Schema(b)
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema,
		MaxConns: 8, DisableNotify: !notify, CoalesceCreateRun: coalesce})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// admission is the i-th request of a benchmark: a new key and run id.
func admission(prefix string, i int64) spec.CreateRunRequest {
	id := fmt.Sprintf("%s-%d", prefix, i)
	return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: id, RunID: id,
		Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
}

// BenchmarkCreateRun admits one run per call (run, job and idempotency
// record in one transaction; the run row is its first event), from one
// caller and from eight, with and without notifications, and reports runs/s.
func BenchmarkCreateRun(b *testing.B) {
	for _, c := range []struct {
		name     string
		callers  int
		notify   bool
		coalesce int
	}{{"callers=1", 1, false, 0}, {"callers=8", 8, false, 0}, {"callers=8/notify", 8, true, 0},
		{"callers=8/notify/coalesce=1", 8, true, 1}, {"callers=8/notify/coalesce=2", 8, true, 2}, {"callers=8/notify/coalesce=4", 8, true, 4},
		{"callers=100/notify", 100, true, 0}, {"callers=100/notify/coalesce=2", 100, true, 2}, {"callers=100/notify/coalesce=4", 100, true, 4}} {
		b.Run(c.name, func(b *testing.B) {
			s := benchStore(b, c.notify, c.coalesce)
			var n atomic.Int64
			b.SetParallelism(max(1, c.callers/max(1, testingProcs())))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.CreateRun(context.Background(), admission("r", n.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
			if st := s.AdmissionStats(); st.SharedTransactions > 0 {
				b.ReportMetric(float64(st.Coalesced)/float64(st.SharedTransactions), "calls/txn")
			}
		})
	}
}

// BenchmarkCreateRunReplay sends again, from eight callers, requests of
// 1,000 runs admitted before the timer starts: every call is a replay, the
// path a fresh admission falls back from (createFresh writes nothing, then
// the call is decided under its lock). It reports replays/s.
func BenchmarkCreateRunReplay(b *testing.B) {
	s := benchStore(b, false, 0)
	const admitted = 1000
	for i := range int64(admitted) {
		if _, err := s.CreateRun(context.Background(), admission("p", i)); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.SetParallelism(max(1, 8/max(1, testingProcs())))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := s.CreateRun(context.Background(), admission("p", n.Add(1)%admitted))
			if err != nil || !res.Replayed {
				b.Errorf("replay: %+v, %v; want the replay", res, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replays/s")
}

// BenchmarkCreateRuns admits batches of 100 and 1000 runs per call from one
// caller and reports runs/s; in "half replayed", each batch of 1000 sends
// the second half of the one before again (replays, which it locks:
// lockDecidedRuns) beside 500 new runs.
func BenchmarkCreateRuns(b *testing.B) {
	for _, c := range []struct {
		name     string
		size     int
		replayed int
	}{{"batch=100", 100, 0}, {"batch=1000", 1000, 0}, {"batch=1000/half_replayed", 1000, 500}} {
		b.Run(c.name, func(b *testing.B) {
			bc, ok := any(benchStore(b, false, 0)).(spec.BatchCreator)
			if !ok {
				b.Skip("the store does not implement spec.BatchCreator")
			}
			var n int64
			reqs := make([]spec.CreateRunRequest, c.size)
			for i := range reqs {
				n++
				reqs[i] = admission("b", n)
			}
			b.ResetTimer()
			for call := range b.N {
				copy(reqs, reqs[c.size-c.replayed:])
				for i := c.replayed; i < c.size; i++ {
					n++
					reqs[i] = admission("b", n)
				}
				if call == 0 {
					for i := range c.replayed {
						n++
						reqs[i] = admission("b", n)
					}
				}
				outs, err := bc.CreateRuns(context.Background(), reqs)
				if err != nil {
					b.Fatal(err)
				}
				for i, o := range outs {
					if wantReplay := call > 0 && i < c.replayed; o.Err != nil || o.Result.Replayed != wantReplay {
						b.Fatalf("member %d of call %d: %+v; want replayed %v", i, call, o, wantReplay)
					}
				}
			}
			b.ReportMetric(float64(b.N*c.size)/b.Elapsed().Seconds(), "runs/s")
		})
	}
}

func benchStoreT(t *testing.T) *postgres.Store {
	dsn, schema := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 8, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkPurgeRuns purges a thousand retired runs per iteration, each
// named by its expired idempotency record (admitted, claimed and completed
// in bulk, untimed), and reports purged runs/s.
func BenchmarkPurgeRuns(b *testing.B) {
	dsn, schema := pgtest.Schema(b)
	cfg := spec.DefaultConfig()
	cfg.RunRetentionMs, cfg.IdempotencyRetentionMs = 10_000, 5_000
	clk := clock.NewManual(t0)
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{Config: cfg, Schema: schema, Clock: clk, MaxConns: 4, DisableNotify: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	purged := 0
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		reqs := make([]spec.CreateRunRequest, spec.MaxBatch)
		for j := range reqs {
			reqs[j] = admission(fmt.Sprintf("p%d", i), int64(j))
		}
		if _, err := s.CreateRuns(ctx, reqs); err != nil {
			b.Fatal(err)
		}
		leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w1", LeaseMs: 60_000, Limit: spec.MaxBatch})
		if err != nil {
			b.Fatal(err)
		}
		done := make([]spec.CompleteRequest, len(leases))
		for j, l := range leases {
			done[j] = spec.CompleteRequest{Lease: l.Ref()}
		}
		if _, err := s.CompleteBatch(ctx, done); err != nil {
			b.Fatal(err)
		}
		if _, err := clk.Advance(20_000); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ids, err := s.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: spec.MaxBatch})
		if err != nil || len(ids) != spec.MaxBatch {
			b.Fatalf("purge: %d runs, %v; want %d", len(ids), err, spec.MaxBatch)
		}
		purged += len(ids)
	}
	b.ReportMetric(float64(purged)/b.Elapsed().Seconds(), "runs/s")
}

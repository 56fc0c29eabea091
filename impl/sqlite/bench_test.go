package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// benchStore opens a store in a fresh directory with the system clock.
func benchStore(b *testing.B) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{Config: spec.DefaultConfig()})
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

// BenchmarkCreateRun admits one run per call (run and job in one
// transaction; the run row is its first event and its idempotency record)
// from one caller and from eight, and reports runs/s.
func BenchmarkCreateRun(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := benchStore(b)
			var n atomic.Int64
			b.SetParallelism(max(1, callers/testingProcs()))
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
		})
	}
}

// BenchmarkCreateRuns admits batches of 100 and 1000 runs per call from one
// caller and reports runs/s.
func BenchmarkCreateRuns(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			bc, ok := any(benchStore(b)).(spec.BatchCreator)
			if !ok {
				b.Skip("the store does not implement spec.BatchCreator")
			}
			var n int64
			reqs := make([]spec.CreateRunRequest, size)
			b.ResetTimer()
			for range b.N {
				for i := range reqs {
					n++
					reqs[i] = admission("b", n)
				}
				outs, err := bc.CreateRuns(context.Background(), reqs)
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range outs {
					if o.Err != nil || o.Result.Replayed {
						b.Fatalf("member: %+v", o)
					}
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "runs/s")
		})
	}
}

// BenchmarkDrain claims one job and completes it per iteration (two
// transactions) from one caller, on a queue filled beforehand, and reports
// jobs/s.
func BenchmarkDrain(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	reqs := make([]spec.CreateRunRequest, 0, spec.MaxBatch)
	for i := int64(0); i < int64(b.N); i++ {
		reqs = append(reqs, admission("d", i))
		if len(reqs) == cap(reqs) || i == int64(b.N)-1 {
			if _, err := s.CreateRuns(ctx, reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
	b.ResetTimer()
	for range b.N {
		leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 60_000, Limit: 1})
		if err != nil || len(leases) != 1 {
			b.Fatalf("claim: %d leases, %v", len(leases), err)
		}
		if _, err := s.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref(), Result: []byte(`{"ok":true}`)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

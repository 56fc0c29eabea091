package worker_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// TestTelemetry: the worker's OpenTelemetry instruments count what its
// Stats count — claims, attempts by outcome, lost leases, renewals by
// result — recorded through a meter the test installs (the worker forces no
// exporter). Both of the worker's slots stay busy until both leases are
// lost, so no claim of the worker's races the test's own reclaim.
func TestTelemetry(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, separateClocks)
		reader := sdkmetric.NewManualReader()
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { provider.Shutdown(context.Background()) })

		e.create("r1")
		e.create("r2")
		started := make(chan *worker.Job, 3)
		cfg := e.config("w1", e.storeFor(nil), func(ctx context.Context, job *worker.Job) ([]byte, error) {
			started <- job
			if job.RunID == "r3" {
				return []byte(`{"ok":true}`), nil
			}
			<-ctx.Done() // r1, r2: their leases are lost while they run
			return nil, context.Cause(ctx)
		})
		cfg.Meter = provider.Meter("test")
		cfg.Concurrency = 2
		e.start(cfg)
		recv(e, "a handler", started)
		recv(e, "the other handler", started)
		e.dueN(e.wc.Now()+10_000, 2, "the first renewals")
		e.sc.Advance(1)   // so that a renewal shows in the lease's expiry
		e.advance(10_000) // both renewed: ok
		for _, id := range []string{"r1", "r2"} {
			for e.job(id).LeaseExpiresAt != t0+1+30_000 && e.ctx.Err() == nil {
				time.Sleep(time.Millisecond) // the renewal is in flight
			}
		}
		// The store's clock passes both leases and another client reclaims
		// them; the worker's next renewals are refused: two lost leases.
		e.sc.Advance(31_000)
		if l, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "other", LeaseMs: 30_000, Limit: 2}); err != nil || len(l) != 2 {
			t.Fatalf("reclaim r1 and r2: %v, %v", l, err)
		}
		e.dueN(e.wc.Now()+10_000, 2, "the second renewals")
		e.advance(10_000)
		lost := map[string]bool{}
		for range 2 {
			r := e.result()
			if r.Outcome != worker.OutcomeLost {
				t.Fatalf("result %+v, want a lost lease", r)
			}
			lost[r.RunID] = true
		}
		if !lost["r1"] || !lost["r2"] {
			t.Fatalf("lost %v, want r1 and r2", lost)
		}
		// r1 and r2 are the other client's now: the worker's next claim
		// can only find r3. The drive moves through idle waits (1s) but
		// never as far as r3's first renewal (10s), which would count.
		e.create("r3")
		if r := e.driveUntilResult(2_000); r.Outcome != worker.OutcomeCompleted || r.RunID != "r3" {
			t.Fatalf("result %+v, want r3 completed", r)
		}

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						got[m.Name+label(p.Attributes)] += p.Value
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						got[m.Name+label(p.Attributes)] += int64(p.Count)
					}
				}
			}
		}
		for name, want := range map[string]int64{
			"leasehold.worker.claimed{tenant=acme}":                    3,
			"leasehold.worker.attempts{outcome=completed,tenant=acme}": 1,
			"leasehold.worker.attempts{outcome=lost,tenant=acme}":      2,
			"leasehold.worker.lost_leases{tenant=acme}":                2,
			"leasehold.worker.in_flight{}":                             0,
			"leasehold.worker.renewal.duration{result=ok}":             2,
			"leasehold.worker.renewal.duration{result=refused}":        2,
		} {
			if got[name] != want {
				t.Errorf("%s = %d, want %d (all: %v)", name, got[name], want, got)
			}
		}
	})
}

// label renders a data point's attributes but the worker's id, sorted.
func label(set attribute.Set) string {
	s := "{"
	for _, kv := range set.ToSlice() {
		if kv.Key == "worker.id" {
			continue
		}
		if len(s) > 1 {
			s += ","
		}
		s += string(kv.Key) + "=" + kv.Value.Emit()
	}
	return s + "}"
}

package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instrumentation is the name of the worker's OpenTelemetry meter.
const instrumentation = "github.com/leasehold/leasehold/worker"

// telemetry is the worker's OpenTelemetry instruments, through the
// OpenTelemetry API only: the meter is Config.Meter, else the global
// MeterProvider's, which records nothing until the application installs a
// provider (and chooses an exporter). Every instrument carries the worker's
// id; the names and attributes are documented on Config.Meter.
type telemetry struct {
	worker       attribute.KeyValue
	claimed      metric.Int64Counter
	attempts     metric.Int64Counter
	lostLeases   metric.Int64Counter
	inFlight     metric.Int64UpDownCounter
	renewal      metric.Float64Histogram
	storeRetries metric.Int64Counter
	batches      metric.Int64Counter
	housekeeping metric.Int64Counter
}

func newTelemetry(m metric.Meter, workerID string) (*telemetry, error) {
	if m == nil {
		m = otel.GetMeterProvider().Meter(instrumentation)
	}
	t := &telemetry{worker: attribute.String("worker.id", workerID)}
	var err error
	for _, mk := range []func() error{
		func() (e error) {
			t.claimed, e = m.Int64Counter("leasehold.worker.claimed", metric.WithUnit("{job}"),
				metric.WithDescription("Jobs claimed (leases taken)."))
			return
		},
		func() (e error) {
			t.attempts, e = m.Int64Counter("leasehold.worker.attempts", metric.WithUnit("{attempt}"),
				metric.WithDescription("Attempts ended, by outcome (completed, retried, failed, released, lost, cancelled, already_terminal, abandoned)."))
			return
		},
		func() (e error) {
			t.lostLeases, e = m.Int64Counter("leasehold.worker.lost_leases", metric.WithUnit("{lease}"),
				metric.WithDescription("Leases lost before the attempt published: another generation owns the run, or the lease expired."))
			return
		},
		func() (e error) {
			t.inFlight, e = m.Int64UpDownCounter("leasehold.worker.in_flight", metric.WithUnit("{attempt}"),
				metric.WithDescription("Attempts holding a slot."))
			return
		},
		func() (e error) {
			t.renewal, e = m.Float64Histogram("leasehold.worker.renewal.duration", metric.WithUnit("s"),
				metric.WithDescription("Latency of lease renewals, by result (ok, refused, deadline, error)."))
			return
		},
		func() (e error) {
			t.storeRetries, e = m.Int64Counter("leasehold.worker.store_retries", metric.WithUnit("{retry}"),
				metric.WithDescription("Publications and effect-ledger writes sent again after the store could not run them."))
			return
		},
		func() (e error) {
			t.batches, e = m.Int64Counter("leasehold.worker.completion.batches", metric.WithUnit("{batch}"),
				metric.WithDescription("Batched completions flushed (CompleteBatch)."))
			return
		},
		func() (e error) {
			t.housekeeping, e = m.Int64Counter("leasehold.worker.housekeeping", metric.WithUnit("{row}"),
				metric.WithDescription("Rows housekeeping handled, by kind (reaped, idempotency_purged, runs_purged)."))
			return
		},
	} {
		if err = mk(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// ctx0 is the context measurements are recorded with: none of the worker's
// own contexts, so that a cancelled attempt still counts.
var ctx0 = context.Background()

func (t *telemetry) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append([]attribute.KeyValue{t.worker}, kv...)...)
}

func (t *telemetry) claim(tenant string) {
	t.claimed.Add(ctx0, 1, t.with(attribute.String("tenant", tenant)))
	t.inFlight.Add(ctx0, 1, t.with())
}

func (t *telemetry) ended(tenant string, o Outcome) {
	t.inFlight.Add(ctx0, -1, t.with())
	t.attempts.Add(ctx0, 1, t.with(attribute.String("tenant", tenant), attribute.String("outcome", string(o))))
	if o == OutcomeLost {
		t.lostLeases.Add(ctx0, 1, t.with(attribute.String("tenant", tenant)))
	}
}

func (t *telemetry) renewed(took time.Duration, result string) {
	t.renewal.Record(ctx0, took.Seconds(), t.with(attribute.String("result", result)))
}

func (t *telemetry) retried() { t.storeRetries.Add(ctx0, 1, t.with()) }

func (t *telemetry) flushed(members int) {
	t.batches.Add(ctx0, 1, t.with(attribute.Int("members", members)))
}

func (t *telemetry) housekept(kind string, n int) {
	if n > 0 {
		t.housekeeping.Add(ctx0, int64(n), t.with(attribute.String("kind", kind)))
	}
}

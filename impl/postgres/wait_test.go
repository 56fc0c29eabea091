package postgres_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/internal/logwatch"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/spec"
)

// TestOpenWaitsForServer: Open while the server is down fails at once by
// default (unavailable), and with WaitForServer waits until the server has
// started, then succeeds. The server is a cluster of the test's own.
func TestOpenWaitsForServer(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	c := pgtest.NewCluster(t)
	c.Stop(t)

	if s, err := postgres.Open(ctx, c.DSN(), postgres.Options{Config: spec.DefaultConfig()}); spec.CodeOf(err) != spec.CodeUnavailable {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open with the server down and no WaitForServer: %v, want unavailable at once", err)
	}

	watch, waiting := logwatch.New("not accepting connections yet")
	type opened struct {
		s   *postgres.Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := postgres.Open(ctx, c.DSN(), postgres.Options{Config: spec.DefaultConfig(), WaitForServer: hang.Patience(),
			Logger: slog.New(watch)})
		done <- opened{s, err}
	}()
	select {
	case <-waiting: // Open has tried and failed at least once
	case o := <-done:
		t.Fatalf("Open returned (%v) before the server started, want it waiting", o.err)
	case <-ctx.Done():
		t.Fatal(hang.Message("Open to report that it was waiting", hang.Patience()))
	}
	c.Start(t)
	up := time.Now()
	var o opened
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal(hang.Message("Open to return after the server started", hang.Patience()))
	}
	recovery := time.Since(up)
	if o.err != nil {
		t.Fatalf("Open after the server started: %v", o.err)
	}
	defer o.s.Close()
	if _, err := o.s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k1", RunID: "r1", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("CreateRun on the store Open waited for: %v", err)
	}
	metrics.Report(t, metrics.Line{Check: "fault/open-while-down", Store: "postgres", Operations: 1,
		Faults: &metrics.Faults{Injected: 1, MaxRecoveryMs: recovery.Milliseconds()}})
}

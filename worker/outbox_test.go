package worker_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// TestOutboxWithTheCompletion: messages a handler stages are written by its
// completion, at its generation; an attempt that is retried writes none of
// its own, and an invalid message is refused where it is staged.
func TestOutboxWithTheCompletion(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		e.create("r1")
		e.start(e.config("w1", e.storeFor(nil), func(ctx context.Context, job *worker.Job) ([]byte, error) {
			if err := job.Outbox("orders.attempted", []byte(`{"attempt": 1}`)); err != nil {
				return nil, err
			}
			if err := job.Outbox("orders.*", []byte(`{}`)); spec.CodeOf(err) != spec.CodeInvalidArgument {
				t.Errorf("staging a message to a wildcard subject: %v, want invalid_argument", err)
			}
			if job.Attempt == 1 {
				return nil, worker.Retryable(errBoom, 0) // its staged message goes with it
			}
			if err := job.Outbox("orders.done", []byte(`{"run": "r1"}`)); err != nil {
				return nil, err
			}
			return nil, nil
		}))
		if r := e.result(); r.Outcome != worker.OutcomeRetried {
			t.Fatalf("first attempt: %+v, want retried", r)
		}
		// The job is due again after the store's backoff (1 s), when the
		// worker's idle wait ends.
		e.due(t0+1_000, "the idle wait after the retry")
		e.advance(1_000)
		if r := e.result(); r.Outcome != worker.OutcomeCompleted || r.Generation != 2 {
			t.Fatalf("second attempt: %+v, want completed at generation 2", r)
		}
		snap, err := e.s.Snapshot(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range snap.Outbox {
			if m.Generation != 2 || m.State != spec.OutboxPending {
				t.Errorf("message %+v: want generation 2, pending", m)
			}
			got = append(got, m.Subject+" "+m.Payload)
		}
		if want := []string{`orders.attempted {"attempt":1}`, `orders.done {"run":"r1"}`}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("outbox %q, want %q (the second attempt's only)", got, want)
		}
	})
}

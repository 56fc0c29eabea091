package worker

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/spec"
)

// Handler runs one attempt of a job. It is called outside any transaction,
// with a context that the worker cancels when the attempt must stop: the
// lease was lost or the run cancelled (publish nothing: whatever it returns
// is discarded), the run's deadline allows no more renewals, or the shutdown
// grace period ended. context.Cause(ctx) says which (ErrLeaseLost,
// ErrRunCancelled, ErrRunTerminal, ErrRunDeadline, ErrShutdown).
//
// The return decides what the worker publishes for the attempt: a nil error
// completes the run with result (JSON, or nil for none); an error is
// classified (see Retryable, Terminal, Ambiguous, ErrShutdown,
// ErrCompletedInTx; an unclassified error is retried). Delivery is at least
// once: a handler may run again for the same run after a crash, a lost lease
// or a retry, so every external effect goes through Job.Effect.
type Handler interface {
	Handle(ctx context.Context, job *Job) (result []byte, err error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) ([]byte, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) ([]byte, error) { return f(ctx, job) }

// Mux routes jobs to handlers by operation. A job whose operation has no
// handler fails with code "unknown_operation" (retrying cannot help; deploy
// the handler and replay the run).
type Mux map[string]Handler

// Handle implements Handler.
func (m Mux) Handle(ctx context.Context, job *Job) ([]byte, error) {
	h, ok := m[job.Operation]
	if !ok {
		return nil, Terminal("unknown_operation", fmt.Errorf("no handler for operation %q", job.Operation))
	}
	return h.Handle(ctx, job)
}

// Job is one claimed attempt as a handler sees it. Its fields describe the
// lease; its methods reach the worker. A Job is valid only during the
// Handle call that received it.
type Job struct {
	Tenant    string
	RunID     string
	Operation string
	// Generation is the lease's fencing token; Attempt and MaxAttempts the
	// attempt budget after this claim.
	Generation  int64
	Attempt     int
	MaxAttempts int
	// Payload is the run's request payload in canonical JSON.
	Payload []byte
	// DeadlineAt is the run's deadline (store time, ms): no lease is
	// renewed past it.
	DeadlineAt int64

	a *attempt
}

// Lease returns the identity the attempt's guarded writes present.
func (j *Job) Lease() spec.LeaseRef { return j.a.lease.Ref() }

// Stopping is closed when the worker begins to shut down. The handler may
// finish (its result is published as usual during the grace period), or stop
// at a safe point and return an error wrapping ErrShutdown to have the job
// requeued without spending an attempt.
func (j *Job) Stopping() <-chan struct{} { return j.a.w.stopping }

// CompleteRequest is the completion of this attempt with result and the
// messages staged so far (Outbox), for a handler that completes the run
// inside its own transaction (postgres.Store.CompleteTx) and then returns
// ErrCompletedInTx.
func (j *Job) CompleteRequest(result []byte) spec.CompleteRequest {
	return spec.CompleteRequest{Lease: j.Lease(), Result: result, Outbox: j.a.staged()}
}

// Outbox stages a message (a subject and a JSON payload) for this attempt's
// completion: the store writes it in the completion's transaction, under
// its lease guard, and a relay (package relay) publishes it later. It is
// written only if the handler returns nil and the completion is accepted:
// a retried, failed, cancelled or lost attempt writes none of its messages,
// and a later attempt stages its own. The message is checked here; an
// invalid subject or payload, or more than spec.MaxOutboxMessages staged,
// is an invalid_argument error and is not staged. Safe for concurrent use.
func (j *Job) Outbox(subject string, payload []byte) error {
	m := spec.Message{Subject: subject, Payload: append([]byte(nil), payload...)}
	a := j.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := spec.NormalizeOutbox(append(append([]spec.Message(nil), a.outbox...), m)); err != nil {
		return err
	}
	a.outbox = append(a.outbox, m)
	return nil
}

package spec

import (
	"context"
	"encoding/json"
	"errors"
)

// Optional capabilities. A store may implement these interfaces in addition
// to Store; callers (the worker runtime in worker/) discover them with a type
// assertion and fall back to the plain Store methods when they are absent.
// Implementing one never changes the meaning of a Store method.

// OpCompleteBatch names BatchCompleter.CompleteBatch for hooks and reports.
const OpCompleteBatch Op = "complete_batch"

// BatchCompleter completes many runs in one transaction (batched
// completion, ADR-013: docs/adr/ADR-013-generation-fenced-writes.md).
type BatchCompleter interface {
	// CompleteBatch applies each request as its own guarded completion — the
	// exact writes, checks and error codes of Store.Complete — inside ONE
	// transaction that reads the store's clock once. A member whose lease is
	// not current (lost_lease, cancelled, already_terminal), whose run is
	// missing (not_found) or whose result is invalid (invalid_argument) is
	// refused individually, in its BatchOutcome, and the other members still
	// complete. The outcomes are in request order, one per request; a request
	// that appears twice completes once and the repeat is already_terminal.
	//
	// The returned error is for the batch as a whole: CodeUnavailable
	// (nothing was written), CodeUnknownOutcome (the commit's answer was lost:
	// every member may or may not have applied), CodeInvalidArgument (more
	// than MaxBatch requests, or an invalid clock reading). With a non-nil
	// error the outcomes are nil. An empty batch writes nothing and returns
	// no outcomes.
	CompleteBatch(ctx context.Context, reqs []CompleteRequest) ([]BatchOutcome, error)
}

// BatchOutcome is one member's result in a batch completion: the completed
// run when Err is nil, else Err (a *Error whose code is the one Store.Complete
// would have returned) and a zero Run.
type BatchOutcome struct {
	Run Run   `json:"run"`
	Err error `json:"error,omitempty"` // a *Error in its JSON form (see MarshalJSON)
}

// batchOutcomeJSON is BatchOutcome's JSON form: the error as an *Error.
type batchOutcomeJSON struct {
	Run Run    `json:"run"`
	Err *Error `json:"error,omitempty"`
}

// MarshalJSON encodes the outcome with its error as an Error object; an
// error that is not an *Error is encoded as CodeOf's code.
func (o BatchOutcome) MarshalJSON() ([]byte, error) {
	j := batchOutcomeJSON{Run: o.Run}
	if o.Err != nil {
		if !errors.As(o.Err, &j.Err) {
			j.Err = &Error{Code: CodeOf(o.Err), Message: o.Err.Error()}
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (o *BatchOutcome) UnmarshalJSON(data []byte) error {
	var j batchOutcomeJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	o.Run, o.Err = j.Run, nil
	if j.Err != nil {
		o.Err = j.Err
	}
	return nil
}

// CompleteBatchRequest is the request of BatchCompleter.CompleteBatch in
// the operation table: its members, in order.
type CompleteBatchRequest struct {
	Requests []CompleteRequest `json:"requests"`
}

// Op implements Request.
func (CompleteBatchRequest) Op() Op { return OpCompleteBatch }

// TenantScope implements Request: the members' tenant when they share one.
func (r CompleteBatchRequest) TenantScope() (string, bool) {
	if len(r.Requests) == 0 {
		return "", false
	}
	t := r.Requests[0].Lease.Tenant
	for _, m := range r.Requests[1:] {
		if m.Lease.Tenant != t {
			return "", false
		}
	}
	return t, true
}

// Leases implements Request: every member's lease, in order.
func (r CompleteBatchRequest) Leases() []LeaseRef {
	out := make([]LeaseRef, len(r.Requests))
	for i, m := range r.Requests {
		out[i] = m.Lease
	}
	return out
}

// BatchCreator admits many runs in one transaction (bulk admission).
type BatchCreator interface {
	// CreateRuns applies each request as its own idempotent admission — the
	// exact writes, checks and error codes of Store.CreateRun — inside ONE
	// transaction that reads the store's clock once. Each member has its own
	// outcome, in request order: created, replayed (a live record of the same
	// fingerprint, nothing written for it), or refused individually in its
	// CreateOutcome (idempotency_conflict, already_exists, invalid_argument)
	// while the other members are still admitted. Two members with the same
	// (tenant, operation, key) behave as two CreateRun calls in order: the
	// second is a replay or a conflict of the first.
	//
	// The returned error is for the batch as a whole: CodeUnavailable
	// (nothing was written), CodeUnknownOutcome (the commit's answer was
	// lost), CodeInvalidArgument (more than MaxBatch requests, or an invalid
	// clock reading). With a non-nil error the outcomes are nil. An empty
	// batch writes nothing and returns no outcomes.
	CreateRuns(ctx context.Context, reqs []CreateRunRequest) ([]CreateOutcome, error)
}

// CreateOutcome is one member's result in a bulk admission: the admitted or
// replayed run when Err is nil, else Err (a *Error whose code is the one
// Store.CreateRun would have returned) and a zero Result.
type CreateOutcome struct {
	Result CreateRunResult `json:"result"`
	Err    error           `json:"error,omitempty"` // a *Error in its JSON form
}

// OpCreateRuns names BatchCreator.CreateRuns for hooks and reports.
const OpCreateRuns Op = "create_runs"

// createOutcomeJSON is CreateOutcome's JSON form: the error as an *Error.
type createOutcomeJSON struct {
	Result CreateRunResult `json:"result"`
	Err    *Error          `json:"error,omitempty"`
}

// MarshalJSON encodes the outcome with its error as an Error object; an
// error that is not an *Error is encoded as CodeOf's code.
func (o CreateOutcome) MarshalJSON() ([]byte, error) {
	j := createOutcomeJSON{Result: o.Result}
	if o.Err != nil {
		if !errors.As(o.Err, &j.Err) {
			j.Err = &Error{Code: CodeOf(o.Err), Message: o.Err.Error()}
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (o *CreateOutcome) UnmarshalJSON(data []byte) error {
	var j createOutcomeJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	o.Result, o.Err = j.Result, nil
	if j.Err != nil {
		o.Err = j.Err
	}
	return nil
}

// CreateRunsRequest is the request of BatchCreator.CreateRuns in the
// operation table: its members, in order.
type CreateRunsRequest struct {
	Requests []CreateRunRequest `json:"requests"`
}

// Op implements Request.
func (CreateRunsRequest) Op() Op { return OpCreateRuns }

// TenantScope implements Request: the members' tenant when they share one.
func (r CreateRunsRequest) TenantScope() (string, bool) {
	if len(r.Requests) == 0 {
		return "", false
	}
	t := r.Requests[0].Tenant
	for _, m := range r.Requests[1:] {
		if m.Tenant != t {
			return "", false
		}
	}
	return t, true
}

// Leases implements Request: an admission presents no lease.
func (CreateRunsRequest) Leases() []LeaseRef { return nil }

// OpCreateRunTx names TxAdmitter.AdmitInTx for hooks and reports.
const OpCreateRunTx Op = "create_run_tx"

// TxAdmitter is a store that admits runs inside the application's own
// transaction: postgres.Store.CreateRunTx in the caller's pgx.Tx,
// sqlite.Store.CreateRunTx in the sqlite.Tx the store gives out. Those take
// each store's own transaction type, which this package cannot name;
// AdmitInTx is their form in the operation table (create_run_tx), so that
// the model, the harness, the conformance suite and scenario files run them
// as an application does.
type TxAdmitter interface {
	// AdmitInTx begins a transaction as an application does, admits
	// req.Request inside it with the store's in-transaction admission,
	// then commits the transaction, or rolls it back when req.Rollback,
	// and returns the admission's answer: exactly CreateRun's (the created
	// run, a replay, or idempotency_conflict, already_exists,
	// invalid_argument), decided from the key's record read after the
	// key's ordering lock, at one reading of the clock after it. A refusal
	// rolls the transaction back.
	//
	// Committed, the admission is CreateRun's: the run, its run_queued
	// event, its job, its idempotency record and its outbox messages,
	// written together. Rolled back, nothing of it remains and the key is
	// free for the next admission; a concurrent admission of the key waits
	// for the transaction to end. The Hook is called at BeforeCommit after
	// the admission, before the commit or the rollback (an error there
	// rolls the transaction back: unavailable), and at AfterCommit once the
	// transaction has ended (an error there is unknown_outcome).
	AdmitInTx(ctx context.Context, req CreateRunTxRequest) (CreateRunResult, error)
}

// CreateRunTxRequest is the request of TxAdmitter.AdmitInTx: an admission,
// and what the application does with its transaction after it.
type CreateRunTxRequest struct {
	Request CreateRunRequest `json:"request"`
	// Rollback: the application rolls its transaction back after the
	// admission instead of committing it.
	Rollback bool `json:"rollback,omitempty"`
}

// Op implements Request.
func (CreateRunTxRequest) Op() Op { return OpCreateRunTx }

// TenantScope implements Request: the admission's tenant.
func (r CreateRunTxRequest) TenantScope() (string, bool) { return r.Request.Tenant, true }

// Leases implements Request: an admission presents no lease.
func (CreateRunTxRequest) Leases() []LeaseRef { return nil }

// NotificationKind says what a Notification announces.
type NotificationKind string

const (
	// NotifyRunCreated: a run was admitted (CreateRun) or replayed, so a job
	// became claimable. Sent when the creating transaction commits.
	NotifyRunCreated NotificationKind = "run_created"
	// NotifyRunCancelled: a run was cancelled; Generation is the job's
	// generation at the cancel (the attempt it cut short, if leased). Sent
	// when the cancel commits.
	NotifyRunCancelled NotificationKind = "run_cancelled"
	// NotifyResync: the listener (re)connected and may have missed
	// notifications; a listener should look for work as if it had been told
	// about some. Tenant and RunID are empty.
	NotifyResync NotificationKind = "resync"
)

// Notification is a hint that something changed. It is delivered at most
// once, possibly late, possibly never (a listener that was disconnected gets
// NotifyResync instead): it may wake a waiting worker or stop a doomed
// attempt early, but nothing may depend on receiving it.
type Notification struct {
	Kind       NotificationKind
	Tenant     string
	RunID      string
	Generation int64
}

// Notifier is a store that can push notifications (PostgreSQL's
// LISTEN/NOTIFY).
type Notifier interface {
	// Listen calls fn for every notification, from one goroutine, until ctx
	// ends; it then returns nil. It reconnects by itself after a failure and
	// delivers NotifyResync after every (re)connection, the first included.
	// fn must not block for long.
	Listen(ctx context.Context, fn func(Notification)) error
}

// LockWaitReporter is a store that can tell how many of its own calls are
// blocked waiting for a lock another transaction holds: the observation a
// test needs to make "B waited for A's lock" happen on demand rather than by
// luck (the scenarios' await_blocked step). A store that orders writers
// without locks (optimistic transactions) does not implement it.
type LockWaitReporter interface {
	// LockWaits returns how many calls made through this Store value are,
	// at the moment it looks, waiting for a lock held by another
	// transaction (a row, advisory or database write lock). It never waits
	// for such a lock itself and never uses a connection a waiting call
	// holds. It writes nothing and reads no clock. An error means the
	// store could not tell, never that nothing is waiting.
	LockWaits(ctx context.Context) (int, error)
}

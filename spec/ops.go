package spec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// Operation is one row of the operation table: everything a caller needs to
// run one operation of the contract on a Store, to record it and to read it
// back. The harness's executor, history files, tenant partitioning, lease
// extraction, scenario files and the store protocol are all lookups in this
// table, so an operation is added here once and nowhere else in them.
type Operation struct {
	// Op is the operation's name: its request type's Op.
	Op Op
	// Method is the method that carries it: a Store method, or an optional
	// capability's ("BatchCompleter.CompleteBatch").
	Method string
	// Capability is the optional interface the store must implement for the
	// operation (see optional.go), or "" for a Store method.
	Capability string
	// Writes is true for a writing operation: it reads the store's clock
	// exactly once and calls the store's Hook at BeforeCommit and
	// AfterCommit. A read does neither.
	Writes bool
	// Guard is the predicate that decides whether the operation may write
	// (GuardNone for reads).
	Guard Guard
	// Request is the request type (a Request); Result is the type the
	// method returns on success.
	Request, Result reflect.Type

	call          func(context.Context, Store, Request) (any, error)
	decodeRequest func([]byte) (Request, error)
	decodeResult  func([]byte) (any, error)
}

// Call runs the operation on s. req must be of the row's Request type; any
// other is a caller's bug, reported as an error that is not an *Error. The
// value is what the method returned (its zero value with an error).
func (o Operation) Call(ctx context.Context, s Store, req Request) (any, error) {
	if reflect.TypeOf(req) != o.Request {
		return nil, fmt.Errorf("spec: %s needs a %v request, got %T", o.Op, o.Request, req)
	}
	return o.call(ctx, s, req)
}

// DecodeRequest decodes a request of the row's type from its JSON form.
// Decoding is strict: an unknown field, a value of the wrong type or
// trailing data is an error.
func (o Operation) DecodeRequest(data []byte) (Request, error) { return o.decodeRequest(data) }

// DecodeResult decodes a result of the row's type from its JSON form, as a
// store sends it: the value must have the result type's wire form
// (DecodeWire), so a missing field, a null, an unknown state or field is a
// *WireError naming the field, never a zero value.
func (o Operation) DecodeResult(data []byte) (any, error) { return o.decodeResult(data) }

// Guard is the predicate that decides whether an operation may write, in
// one neutral form over the contract's records ("now" is the operation's one
// clock reading). Each store states it once, as one named constant, and the
// model once, as one function (docs/MAPPING.md names them).
type Guard struct {
	Name      string
	Predicate string
}

// The guards of the contract.
var (
	GuardNone = Guard{}
	// GuardLease guards every write made under a lease.
	GuardLease = Guard{"lease", "job.state = leased AND job.lease_owner = lease.owner AND " +
		"job.generation = lease.generation AND job.lease_expires_at > now"}
	// GuardClaimable selects the jobs a claim may take.
	GuardClaimable = Guard{"claimable", "job.available_at <= now AND job.attempts < job.max_attempts AND " +
		"(job.state = queued OR (job.state = leased AND job.lease_expires_at <= now))"}
	// GuardReapable selects the jobs a reap may terminalize.
	GuardReapable = Guard{"reapable", "job.state = leased AND job.lease_expires_at <= now AND job.attempts >= job.max_attempts"}
	// GuardNotTerminal guards a cancel.
	GuardNotTerminal = Guard{"not_terminal", "job.state IN (queued, leased)"}
	// GuardAdmission guards a create: a live record of the key either
	// replays (same fingerprint, nothing written) or conflicts.
	GuardAdmission = Guard{"admission", "NOT EXISTS live idempotency(tenant, operation, key) AND " +
		"NOT EXISTS run(tenant, run_id)"}
	// GuardExpiredRecord selects the idempotency records a purge deletes.
	GuardExpiredRecord = Guard{"expired_record", "idempotency.expires_at <= now"}
	// GuardRetired selects what a run purge deletes: whole replay lineages
	// (an original and its chain of replays) of the tenant, every run of
	// which is retired.
	GuardRetired = Guard{"retired", "run_retention > 0 AND every run of the lineage: run.state IN (completed, failed, cancelled) AND " +
		"run.finished_at <= now - run_retention AND NOT EXISTS live idempotency(run) AND NOT EXISTS pending outbox(run)"}
	// GuardClaimableMessage selects the outbox messages a claim may take.
	GuardClaimableMessage = Guard{"claimable_message", "outbox.state = pending AND " +
		"(outbox.relay IS NULL OR outbox.claim_expires_at <= now)"}
	// GuardPendingMessage selects the outbox messages a mark changes.
	GuardPendingMessage = Guard{"pending_message", "outbox.state = pending"}
	// GuardReplayable guards a replay.
	GuardReplayable = Guard{"replayable", "original.state = failed AND original.replay_depth + 1 <= max_replays AND " +
		"NOT EXISTS run(replay_of = original) AND NOT EXISTS run(tenant, new_run_id)"}
)

// operations is the table, in SPEC.md's order.
var operations = []Operation{
	row(Store.CreateRun, "CreateRun", true, GuardAdmission),
	row(Store.Claim, "Claim", true, GuardClaimable),
	row(Store.Renew, "Renew", true, GuardLease),
	row(Store.Complete, "Complete", true, GuardLease),
	row(Store.Retry, "Retry", true, GuardLease),
	row(Store.Fail, "Fail", true, GuardLease),
	row(Store.Cancel, "Cancel", true, GuardNotTerminal),
	row(Store.Release, "Release", true, GuardLease),
	row(Store.Reap, "Reap", true, GuardReapable),
	row(Store.PurgeIdempotency, "PurgeIdempotency", true, GuardExpiredRecord),
	row(Store.PurgeRuns, "PurgeRuns", true, GuardRetired),
	row(Store.Replay, "Replay", true, GuardReplayable),
	row(Store.ReserveEffect, "ReserveEffect", true, GuardLease),
	row(Store.RecordEffect, "RecordEffect", true, GuardLease),
	row(Store.ReconcileEffect, "ReconcileEffect", true, GuardLease),
	row(Store.ClaimOutbox, "ClaimOutbox", true, GuardClaimableMessage),
	row(Store.MarkDelivered, "MarkDelivered", true, GuardPendingMessage),
	row(func(s Store, ctx context.Context, r GetRunRequest) (Run, error) {
		return s.GetRun(ctx, r.Tenant, r.RunID)
	},
		"GetRun", false, GuardNone),
	row(func(s Store, ctx context.Context, r GetJobRequest) (Job, error) {
		return s.GetJob(ctx, r.Tenant, r.RunID)
	},
		"GetJob", false, GuardNone),
	row(func(s Store, ctx context.Context, r EventsRequest) ([]Event, error) {
		return s.Events(ctx, r.Tenant, r.RunID)
	},
		"Events", false, GuardNone),
	row(func(s Store, ctx context.Context, r AttemptsRequest) ([]Attempt, error) {
		return s.Attempts(ctx, r.Tenant, r.RunID)
	},
		"Attempts", false, GuardNone),
	row(func(s Store, ctx context.Context, r EffectsRequest) ([]Effect, error) {
		return s.Effects(ctx, r.Tenant, r.RunID)
	},
		"Effects", false, GuardNone),
	row(func(s Store, ctx context.Context, r SnapshotRequest) (Snapshot, error) {
		snap, err := s.Snapshot(ctx)
		return snap.Of(r.Tenant), err
	}, "Snapshot", false, GuardNone),
	capability(row(func(s Store, ctx context.Context, r CompleteBatchRequest) ([]BatchOutcome, error) {
		b, ok := s.(BatchCompleter)
		if !ok {
			return nil, fmt.Errorf("spec: %T does not implement BatchCompleter", s)
		}
		return b.CompleteBatch(ctx, r.Requests)
	}, "BatchCompleter.CompleteBatch", true, GuardLease), "BatchCompleter"),
	capability(row(func(s Store, ctx context.Context, r CreateRunsRequest) ([]CreateOutcome, error) {
		b, ok := s.(BatchCreator)
		if !ok {
			return nil, fmt.Errorf("spec: %T does not implement BatchCreator", s)
		}
		return b.CreateRuns(ctx, r.Requests)
	}, "BatchCreator.CreateRuns", true, GuardAdmission), "BatchCreator"),
	capability(row(func(s Store, ctx context.Context, r ListRunsRequest) (RunPage, error) {
		l, ok := s.(RunLister)
		if !ok {
			return RunPage{}, fmt.Errorf("spec: %T does not implement RunLister", s)
		}
		return l.ListRuns(ctx, r)
	}, "RunLister.ListRuns", false, GuardNone), "RunLister"),
	capability(row(func(s Store, ctx context.Context, r CreateRunTxRequest) (CreateRunResult, error) {
		a, ok := s.(TxAdmitter)
		if !ok {
			return CreateRunResult{}, fmt.Errorf("spec: %T does not implement TxAdmitter", s)
		}
		return a.AdmitInTx(ctx, r)
	}, "TxAdmitter.AdmitInTx", true, GuardAdmission), "TxAdmitter"),
}

// capability marks a row as an optional capability's.
func capability(o Operation, name string) Operation {
	o.Capability = name
	return o
}

// Supports reports whether s can run o: a Store method always, a
// capability's only when s implements its interface.
func (o Operation) Supports(s Store) bool {
	switch o.Capability {
	case "":
		return true
	case "BatchCompleter":
		_, ok := s.(BatchCompleter)
		return ok
	case "BatchCreator":
		_, ok := s.(BatchCreator)
		return ok
	case "RunLister":
		_, ok := s.(RunLister)
		return ok
	case "TxAdmitter":
		_, ok := s.(TxAdmitter)
		return ok
	}
	return false
}

// row builds a table row from the function that calls the operation.
func row[Req Request, Res any](call func(Store, context.Context, Req) (Res, error), method string, writes bool, guard Guard) Operation {
	var zero Req
	return Operation{
		Op: zero.Op(), Method: method, Writes: writes, Guard: guard,
		Request: reflect.TypeFor[Req](), Result: reflect.TypeFor[Res](),
		call: func(ctx context.Context, s Store, req Request) (any, error) { return call(s, ctx, req.(Req)) },
		decodeRequest: func(data []byte) (Request, error) {
			var r Req
			return r, decodeStrict(data, &r)
		},
		decodeResult: func(data []byte) (any, error) {
			var r Res
			return r, DecodeWire(data, &r)
		},
	}
}

// Operations returns the operation table, one row per operation, in
// SPEC.md's order: the writing operations, the reads, then the optional
// capabilities'.
func Operations() []Operation { return append([]Operation(nil), operations...) }

// Lookup returns the row of op.
func Lookup(op Op) (Operation, bool) {
	for _, o := range operations {
		if o.Op == op {
			return o, true
		}
	}
	return Operation{}, false
}

// OperationOf returns the row of req's operation. Every Request type of this
// package has one; a type from elsewhere panics, as a caller's bug.
func OperationOf(req Request) Operation {
	o, ok := Lookup(req.Op())
	if !ok {
		panic(fmt.Sprintf("spec: no operation %q in the table (request %T)", req.Op(), req))
	}
	return o
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// Of returns the rows of tenant ("" keeps every tenant's), with every table
// a non-nil slice, so that two snapshots holding the same rows are
// reflect.DeepEqual.
func (s Snapshot) Of(tenant string) Snapshot {
	return Snapshot{
		Runs:        rowsOf(s.Runs, tenant, func(r Run) string { return r.Tenant }),
		Events:      rowsOf(s.Events, tenant, func(r Event) string { return r.Tenant }),
		Jobs:        rowsOf(s.Jobs, tenant, func(r Job) string { return r.Tenant }),
		Attempts:    rowsOf(s.Attempts, tenant, func(r Attempt) string { return r.Tenant }),
		Idempotency: rowsOf(s.Idempotency, tenant, func(r IdempotencyRecord) string { return r.Tenant }),
		Effects:     rowsOf(s.Effects, tenant, func(r Effect) string { return r.Tenant }),
		Outbox:      rowsOf(s.Outbox, tenant, func(r OutboxMessage) string { return r.Tenant }),
	}
}

func rowsOf[T any](rows []T, tenant string, tenantOf func(T) string) []T {
	out := make([]T, 0, len(rows))
	for _, r := range rows {
		if tenant == "" || tenantOf(r) == tenant {
			out = append(out, r)
		}
	}
	return out
}

package storeproto

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/leasehold/leasehold/spec"
)

// Store is a spec.Store over one store process: every method is one
// request, by the operation's name in spec.Operations, with its request in
// spec's JSON form, and its result decoded strictly as the operation's
// result type. Contract errors come back as *spec.Error; anything the
// protocol forbids as a *Finding.
type Store struct{ c *Conn }

// The optional operations, each a part a Store embeds when its process
// lists the operation in its open reply (NewStore).
type (
	completer struct{ s *Store } // complete_batch: spec.BatchCompleter
	creator   struct{ s *Store } // create_runs: spec.BatchCreator
	lister    struct{ s *Store } // list_runs: spec.RunLister
)

var (
	_ spec.Store          = (*Store)(nil)
	_ spec.BatchCompleter = completer{}
	_ spec.BatchCreator   = creator{}
	_ spec.RunLister      = lister{}
)

// NewStore returns the spec.Store of a connection, which is also a
// spec.BatchCompleter when the store lists complete_batch in its open
// reply, a spec.BatchCreator when it lists create_runs and a
// spec.RunLister when it lists list_runs (optional operations: a store
// that does not list one is not one, and the checks that need it are not
// applicable to it).
func NewStore(c *Conn) spec.Store {
	s := &Store{c: c}
	batch, bulk, list := c.hello.implements(spec.OpCompleteBatch), c.hello.implements(spec.OpCreateRuns), c.hello.implements(spec.OpListRuns)
	b, k, l := completer{s}, creator{s}, lister{s}
	switch {
	case batch && bulk && list:
		return struct {
			*Store
			completer
			creator
			lister
		}{s, b, k, l}
	case batch && bulk:
		return struct {
			*Store
			completer
			creator
		}{s, b, k}
	case batch && list:
		return struct {
			*Store
			completer
			lister
		}{s, b, l}
	case bulk && list:
		return struct {
			*Store
			creator
			lister
		}{s, k, l}
	case batch:
		return struct {
			*Store
			completer
		}{s, b}
	case bulk:
		return struct {
			*Store
			creator
		}{s, k}
	case list:
		return struct {
			*Store
			lister
		}{s, l}
	}
	return s
}

// Conn returns the store's connection.
func (s *Store) Conn() *Conn { return s.c }

// do runs one operation of the table and decodes its result as Res;
// check, when set, judges the decoded result (a non-empty answer is a
// finding).
func do[Res any](ctx context.Context, s *Store, req spec.Request, check func(Res) string) (Res, error) {
	var res Res
	row := spec.OperationOf(req)
	_, err := s.c.call(ctx, string(row.Op), req, func(raw json.RawMessage) string {
		v, err := row.DecodeResult(raw)
		if err != nil {
			return fmt.Sprintf("the result is not a %v as %s publishes it: %v: %s",
				row.Result, schemaFile(string(row.Op)+".result"), err, excerpt(raw))
		}
		var ok bool
		if res, ok = v.(Res); !ok {
			return fmt.Sprintf("the result decodes to %T, not %T (a bug of package storeproto)", v, res)
		}
		if check != nil {
			return check(res)
		}
		return ""
	})
	if err != nil {
		var zero Res
		return zero, err
	}
	return res, nil
}

// CreateRun implements spec.Store.
func (s *Store) CreateRun(ctx context.Context, req spec.CreateRunRequest) (spec.CreateRunResult, error) {
	return do[spec.CreateRunResult](ctx, s, req, nil)
}

// Claim implements spec.Store.
func (s *Store) Claim(ctx context.Context, req spec.ClaimRequest) ([]spec.Lease, error) {
	return do[[]spec.Lease](ctx, s, req, nil)
}

// Renew implements spec.Store.
func (s *Store) Renew(ctx context.Context, req spec.RenewRequest) (spec.Lease, error) {
	return do[spec.Lease](ctx, s, req, nil)
}

// Complete implements spec.Store.
func (s *Store) Complete(ctx context.Context, req spec.CompleteRequest) (spec.Run, error) {
	return do[spec.Run](ctx, s, req, nil)
}

// Retry implements spec.Store.
func (s *Store) Retry(ctx context.Context, req spec.RetryRequest) (spec.Job, error) {
	return do[spec.Job](ctx, s, req, nil)
}

// Fail implements spec.Store.
func (s *Store) Fail(ctx context.Context, req spec.FailRequest) (spec.Run, error) {
	return do[spec.Run](ctx, s, req, nil)
}

// Cancel implements spec.Store.
func (s *Store) Cancel(ctx context.Context, req spec.CancelRequest) (spec.Run, error) {
	return do[spec.Run](ctx, s, req, nil)
}

// Release implements spec.Store.
func (s *Store) Release(ctx context.Context, req spec.ReleaseRequest) (spec.Job, error) {
	return do[spec.Job](ctx, s, req, nil)
}

// Reap implements spec.Store.
func (s *Store) Reap(ctx context.Context, req spec.ReapRequest) ([]string, error) {
	return do[[]string](ctx, s, req, nil)
}

// PurgeIdempotency implements spec.Store.
func (s *Store) PurgeIdempotency(ctx context.Context, req spec.PurgeRequest) (int, error) {
	return do[int](ctx, s, req, nil)
}

// PurgeRuns implements spec.Store.
func (s *Store) PurgeRuns(ctx context.Context, req spec.PurgeRunsRequest) ([]string, error) {
	return do[[]string](ctx, s, req, nil)
}

// ClaimOutbox implements spec.Store.
func (s *Store) ClaimOutbox(ctx context.Context, req spec.ClaimOutboxRequest) ([]spec.OutboxMessage, error) {
	return do[[]spec.OutboxMessage](ctx, s, req, nil)
}

// MarkDelivered implements spec.Store.
func (s *Store) MarkDelivered(ctx context.Context, req spec.MarkDeliveredRequest) (int, error) {
	return do[int](ctx, s, req, nil)
}

// Replay implements spec.Store.
func (s *Store) Replay(ctx context.Context, req spec.ReplayRequest) (spec.Run, error) {
	return do[spec.Run](ctx, s, req, nil)
}

// ReserveEffect implements spec.Store.
func (s *Store) ReserveEffect(ctx context.Context, req spec.ReserveEffectRequest) (spec.EffectReservation, error) {
	return do[spec.EffectReservation](ctx, s, req, nil)
}

// RecordEffect implements spec.Store.
func (s *Store) RecordEffect(ctx context.Context, req spec.RecordEffectRequest) (spec.Effect, error) {
	return do[spec.Effect](ctx, s, req, nil)
}

// ReconcileEffect implements spec.Store.
func (s *Store) ReconcileEffect(ctx context.Context, req spec.ReconcileEffectRequest) (spec.Effect, error) {
	return do[spec.Effect](ctx, s, req, nil)
}

// GetRun implements spec.Store.
func (s *Store) GetRun(ctx context.Context, tenant, runID string) (spec.Run, error) {
	return do[spec.Run](ctx, s, spec.GetRunRequest{Tenant: tenant, RunID: runID}, nil)
}

// GetJob implements spec.Store.
func (s *Store) GetJob(ctx context.Context, tenant, runID string) (spec.Job, error) {
	return do[spec.Job](ctx, s, spec.GetJobRequest{Tenant: tenant, RunID: runID}, nil)
}

// Events implements spec.Store.
func (s *Store) Events(ctx context.Context, tenant, runID string) ([]spec.Event, error) {
	return do[[]spec.Event](ctx, s, spec.EventsRequest{Tenant: tenant, RunID: runID}, nil)
}

// Attempts implements spec.Store.
func (s *Store) Attempts(ctx context.Context, tenant, runID string) ([]spec.Attempt, error) {
	return do[[]spec.Attempt](ctx, s, spec.AttemptsRequest{Tenant: tenant, RunID: runID}, nil)
}

// Effects implements spec.Store.
func (s *Store) Effects(ctx context.Context, tenant, runID string) ([]spec.Effect, error) {
	return do[[]spec.Effect](ctx, s, spec.EffectsRequest{Tenant: tenant, RunID: runID}, nil)
}

// Snapshot implements spec.Store: every tenant's rows.
func (s *Store) Snapshot(ctx context.Context) (spec.Snapshot, error) {
	return do[spec.Snapshot](ctx, s, spec.SnapshotRequest{}, nil)
}

// Close implements spec.Store: the session ends and the process exits.
func (s *Store) Close() error { return s.c.Close() }

// CompleteBatch implements spec.BatchCompleter (see completeBatch).
func (b completer) CompleteBatch(ctx context.Context, reqs []spec.CompleteRequest) ([]spec.BatchOutcome, error) {
	return b.s.completeBatch(ctx, reqs)
}

// CreateRuns implements spec.BatchCreator (see createRuns).
func (k creator) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	return k.s.createRuns(ctx, reqs)
}

// ListRuns implements spec.RunLister: list_runs.
func (l lister) ListRuns(ctx context.Context, req spec.ListRunsRequest) (spec.RunPage, error) {
	return do[spec.RunPage](ctx, l.s, req, nil)
}

// createRuns is create_runs: one request, one outcome per member in its
// order.
func (s *Store) createRuns(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	return do(ctx, s, spec.CreateRunsRequest{Requests: reqs}, func(outs []spec.CreateOutcome) string {
		return memberFinding(len(reqs), outs)
	})
}

// completeBatch is complete_batch: one request, one outcome per member in
// its order.
func (s *Store) completeBatch(ctx context.Context, reqs []spec.CompleteRequest) ([]spec.BatchOutcome, error) {
	return do(ctx, s, spec.CompleteBatchRequest{Requests: reqs}, func(outs []spec.BatchOutcome) string {
		return memberFinding(len(reqs), outs)
	})
}

// memberFinding checks a batch's outcomes: one per request (each
// member's error is a contract error by the result's wire form).
func memberFinding[O any](n int, outs []O) string {
	if len(outs) != n {
		return fmt.Sprintf("%d outcomes for %d requests; want one per request, in order", len(outs), n)
	}
	return ""
}

// Package harness drives real stores and the model with the same operations
// and judges the stores against the model: rapid property tests (one random
// sequence at a time, compared step by step), porcupine linearizability checks
// of concurrent histories, barriers that stop a worker at a named point, and
// the fault and clock machinery they share.
package harness

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// Execute runs one model operation against a real store and returns its
// outcome in the model's terms. op.Req must be the request type for op.Kind.
// An error that is not a *spec.Error is returned as unexpected: the contract
// forbids untyped errors, so callers treat it as a violation.
func Execute(ctx context.Context, s spec.Store, op model.Op) (res model.Result, unexpected error) {
	var v any
	var err error
	switch req := op.Req.(type) {
	case spec.CreateRunRequest:
		v, err = s.CreateRun(ctx, req)
	case spec.ClaimRequest:
		v, err = s.Claim(ctx, req)
	case spec.RenewRequest:
		v, err = s.Renew(ctx, req)
	case spec.CompleteRequest:
		v, err = s.Complete(ctx, req)
	case spec.RetryRequest:
		v, err = s.Retry(ctx, req)
	case spec.FailRequest:
		v, err = s.Fail(ctx, req)
	case spec.CancelRequest:
		v, err = s.Cancel(ctx, req)
	case spec.ReleaseRequest:
		v, err = s.Release(ctx, req)
	case spec.ReapRequest:
		v, err = s.Reap(ctx, req)
	case spec.PurgeRequest:
		v, err = s.PurgeIdempotency(ctx, req)
	case spec.ReplayRequest:
		v, err = s.Replay(ctx, req)
	case spec.ReserveEffectRequest:
		v, err = s.ReserveEffect(ctx, req)
	case spec.RecordEffectRequest:
		if op.Kind == spec.OpReconcileEffect {
			v, err = s.ReconcileEffect(ctx, req)
		} else {
			v, err = s.RecordEffect(ctx, req)
		}
	default:
		return model.Result{}, fmt.Errorf("harness: no store call for %s with request %T", op.Kind, op.Req)
	}
	if err == nil {
		return model.Result{Value: v}, nil
	}
	var e *spec.Error
	if !errors.As(err, &e) {
		return model.Result{}, fmt.Errorf("harness: %s returned an untyped error: %w", op.Kind, err)
	}
	return model.Result{Err: e}, nil
}

package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/spec"
)

// Effect is one external call that must take effect at most once per
// (run, Step, Key), whatever crashes, lost leases and retries happen: a
// payment, an e-mail, a provider job. Key is the idempotency key the call
// passes to the external system (derive it from the run, never from the
// attempt, so that every generation uses the same one).
type Effect struct {
	Step string
	Key  string
	// Call performs the call once, passing req.Key to the external system
	// as its idempotency key and req.Generation as its fencing token. It
	// returns the provider's reference on success. An error wrapped by
	// Ambiguous means the outcome is unknown (a timeout after the request
	// was sent); any other error means the call certainly did not take
	// effect (a provider that refused a stale generation included).
	Call func(ctx context.Context, req EffectRequest) (providerRef string, err error)
	// Status asks the external system what became of the call made with
	// req.Key: EffectSucceeded (with the reference), EffectFailed (it did
	// not happen and never will: safe to call again), or EffectUnknown
	// (cannot tell yet). It is how an earlier attempt's unknown or
	// unrecorded call is reconciled, so it is required. A fencing provider
	// may record req.Generation as seen, so that a stale generation's call
	// arriving after it is refused.
	Status func(ctx context.Context, req EffectRequest) (EffectStatus, error)
}

// EffectRequest is what Job.Effect hands the external system with every
// Call and Status.
type EffectRequest struct {
	// Key is the effect's idempotency key (Effect.Key), the same for every
	// generation of the run: a provider that deduplicates by it returns the
	// original outcome to a repeated call instead of applying it again.
	Key string
	// Generation is the attempt's lease generation, a fencing token: it
	// rises with every claim of the run and never falls. A provider that
	// remembers the highest generation it has seen for Key and refuses a
	// lower one refuses a stale attempt that woke up late.
	Generation int64
}

// EffectStatus is what Effect.Status learned from the external system.
type EffectStatus struct {
	State       spec.EffectState // EffectSucceeded, EffectFailed or EffectUnknown
	ProviderRef string
}

// ErrEffectUnresolved is the cause inside the AmbiguousError that
// Job.Effect returns when Effect.Status cannot tell yet what became of an
// earlier call.
var ErrEffectUnresolved = errors.New("worker: the external system cannot tell yet whether the earlier call took effect")

// Effect runs e through the effect ledger under this attempt's lease and
// returns the provider reference. It never calls e.Call unless the ledger
// says the effect has not happened:
//
//   - ReserveEffect says proceed (no row, or a failed one): e.Call runs once
//     and its outcome is recorded: succeeded, failed, or unknown for an
//     Ambiguous error (then an *AmbiguousError naming the row is returned,
//     which makes the worker retry the job; the next attempt reconciles).
//   - done (an earlier attempt succeeded): e.Call is skipped; the recorded
//     reference is returned.
//   - reconcile (a row left unknown or reserved by a call whose outcome was
//     never recorded, this generation's included): e.Status is asked and the
//     answer recorded with ReconcileEffect. Succeeded returns its reference;
//     failed reserves again and proceeds; unknown returns an *AmbiguousError
//     (wrapping ErrEffectUnresolved) so that the job is retried later.
//
// A ledger write refused because the lease is gone (lost_lease, cancelled,
// already_terminal) stops the attempt: the error is returned and the worker
// publishes nothing more for this generation. e.Call never starts once the
// handler's context is done, nor once less than Config.SafetyMargin of the
// lease is left by the worker's monotonic clock (a worker paused between the
// reservation and the call, past its lease, while another generation took
// the run over): the attempt is then fenced and the error wraps
// ErrLeaseExpiring.
func (j *Job) Effect(ctx context.Context, e Effect) (string, error) {
	if e.Call == nil || e.Status == nil {
		return "", Terminal("effect_misconfigured", fmt.Errorf("effect %s: Call and Status are both required", e.Step))
	}
	a := j.a
	ref := a.lease.Ref()
	req := EffectRequest{Key: e.Key, Generation: a.lease.Generation}
	// At most: reconcile to failed, reserve again, proceed.
	for range 2 {
		var reservation spec.EffectReservation
		// A reservation whose outcome was unknown is sent again: if the
		// first applied, the row is reserved and the answer is reconcile,
		// never a second proceed.
		err := a.storeCall(ctx, "reserve effect", func(sctx context.Context) error {
			var err error
			reservation, err = a.w.cfg.Store.ReserveEffect(sctx, spec.ReserveEffectRequest{Lease: ref, Step: e.Step, Key: e.Key})
			return err
		}, nil)
		if err != nil {
			return "", err
		}
		switch reservation.Decision {
		case spec.DecisionDone:
			a.log.DebugContext(ctx, "effect already succeeded; not called again", "step", e.Step)
			return reservation.Effect.ProviderRef, nil
		case spec.DecisionProceed:
			return a.proceed(ctx, e, req)
		case spec.DecisionReconcile:
			st, err := e.Status(ctx, req)
			if err != nil {
				return "", &AmbiguousError{Err: fmt.Errorf("effect status: %w", err), Step: e.Step, Key: e.Key}
			}
			switch st.State {
			case spec.EffectSucceeded:
				if err := a.recordEffect(ctx, e, spec.EffectSucceeded, st.ProviderRef, true); err != nil {
					return "", err
				}
				a.log.InfoContext(ctx, "effect reconciled: it had succeeded; not called again", "step", e.Step)
				return st.ProviderRef, nil
			case spec.EffectFailed:
				if err := a.recordEffect(ctx, e, spec.EffectFailed, st.ProviderRef, true); err != nil {
					return "", err
				}
				a.log.InfoContext(ctx, "effect reconciled: it had not happened; calling again", "step", e.Step)
				continue
			default:
				return "", &AmbiguousError{Err: ErrEffectUnresolved, Step: e.Step, Key: e.Key}
			}
		default:
			return "", fmt.Errorf("worker: ReserveEffect returned decision %q", reservation.Decision)
		}
	}
	return "", &AmbiguousError{Err: errors.New("effect reconciled as failed but not reservable again"), Step: e.Step, Key: e.Key}
}

// proceed makes the call the ledger just reserved for this generation and
// records its outcome.
func (a *attempt) proceed(ctx context.Context, e Effect, req EffectRequest) (string, error) {
	// Reserved but never called: the next attempt asks Status, which finds
	// nothing and says failed, and the call is made then.
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	if f := a.checkLease("call the external system"); f != nil {
		return "", f
	}
	providerRef, err := e.Call(ctx, req)
	var amb *AmbiguousError
	switch {
	case err == nil:
		if rerr := a.recordEffect(ctx, e, spec.EffectSucceeded, providerRef, false); rerr != nil {
			// The call took effect but the ledger does not say so: the row
			// stays reserved, and the next attempt reconciles it through
			// Status instead of calling again.
			return "", &AmbiguousError{Err: fmt.Errorf("effect succeeded but recording it failed: %w", rerr), Step: e.Step, Key: e.Key}
		}
		return providerRef, nil
	case errors.As(err, &amb):
		if rerr := a.recordEffect(ctx, e, spec.EffectUnknown, "", false); rerr != nil {
			a.log.WarnContext(ctx, "recording an unknown effect failed; the row stays reserved, which is reconciled the same way", "step", e.Step, "err", rerr)
		}
		return "", &AmbiguousError{Err: amb.Err, Step: e.Step, Key: e.Key}
	default:
		if rerr := a.recordEffect(ctx, e, spec.EffectFailed, "", false); rerr != nil {
			a.log.WarnContext(ctx, "recording a failed effect failed; the row stays reserved and the next attempt asks Status", "step", e.Step, "err", rerr)
			if fenceFor(rerr) != nil {
				return "", rerr
			}
		}
		return "", err
	}
}

// recordEffect writes an effect's outcome: RecordEffect for this
// generation's own call, ReconcileEffect after asking Status. An unknown
// outcome is resolved by reading the row back: it shows the outcome written
// by this generation (applied), or still the state the write requires
// (reserved by this generation; for a reconcile, unknown or reserved: not
// applied, sent again).
func (a *attempt) recordEffect(ctx context.Context, e Effect, state spec.EffectState, providerRef string, reconcile bool) error {
	req := spec.RecordEffectRequest{Lease: a.lease.Ref(), Step: e.Step, Key: e.Key, State: state, ProviderRef: providerRef}
	what := "record effect"
	if reconcile {
		what = "reconcile effect"
	}
	resolve := func(rctx context.Context) error {
		effs, err := a.w.cfg.Store.Effects(rctx, a.lease.Tenant, a.lease.RunID)
		if err != nil {
			return err
		}
		for _, f := range effs {
			if f.Step != e.Step || f.Key != e.Key {
				continue
			}
			switch {
			case f.State == state && f.ProviderRef == providerRef && f.Generation == a.lease.Generation:
				return nil
			case f.State == spec.EffectReserved && f.Generation == a.lease.Generation,
				reconcile && (f.State == spec.EffectUnknown || f.State == spec.EffectReserved):
				return errNotApplied
			}
			return fmt.Errorf("the ledger row is %s at generation %d", f.State, f.Generation)
		}
		return errors.New("the ledger row is missing")
	}
	return a.storeCall(ctx, what, func(sctx context.Context) error {
		var err error
		if reconcile {
			_, err = a.w.cfg.Store.ReconcileEffect(sctx, spec.ReconcileEffectRequest(req))
		} else {
			_, err = a.w.cfg.Store.RecordEffect(sctx, req)
		}
		return err
	}, resolve)
}

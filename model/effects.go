package model

import "github.com/leasehold/leasehold/spec"

// reserveEffect is ReserveEffect: under the caller's current lease, reserve
// (run, step, key) before calling out, or say why not. The job is not changed.
func (m Model) reserveEffect(s State, now int64, req spec.ReserveEffectRequest) (State, Result) {
	if err := m.Config.CheckReserveEffect(req, now); err != nil {
		return s, failed(err)
	}
	old, gerr := guard(s, req.Lease, now)
	if gerr != nil {
		return s, failed(gerr)
	}
	g := req.Lease.Generation
	reserve := func() (State, Result) {
		r := old.clone()
		e := spec.Effect{Tenant: r.run.Tenant, RunID: r.run.ID, Step: req.Step, Key: req.Key,
			State: spec.EffectReserved, Generation: g, UpdatedAt: now}
		r.putEffect(e)
		return s.put(r), ok(spec.EffectReservation{Effect: e, Decision: spec.DecisionProceed})
	}
	e, found := old.effect(req.Step, req.Key)
	switch {
	case !found:
		return reserve()
	case e.State == spec.EffectSucceeded && m.bug == bugReserveReopensSucceeded:
		return reserve()
	case e.State == spec.EffectSucceeded:
		return s, ok(spec.EffectReservation{Effect: e, Decision: spec.DecisionDone})
	case e.State == spec.EffectFailed:
		return reserve()
	default: // unknown, or reserved by any generation (the caller's too): it may have been applied
		return s, ok(spec.EffectReservation{Effect: e, Decision: spec.DecisionReconcile})
	}
}

// recordEffect is RecordEffect: the outcome of a call this generation reserved.
func (m Model) recordEffect(s State, now int64, req spec.RecordEffectRequest) (State, Result) {
	if err := m.Config.CheckRecordEffect(req, now, false); err != nil {
		return s, failed(err)
	}
	return m.writeEffect(s, now, req, func(e spec.Effect, g int64) bool {
		return e.State == spec.EffectReserved && e.Generation == g
	})
}

// reconcileEffect is ReconcileEffect: the caller asked the external system
// about a row that is unknown or reserved (by any generation, its own
// included) and now resolves it (taking it over for its generation).
func (m Model) reconcileEffect(s State, now int64, req spec.ReconcileEffectRequest) (State, Result) {
	if err := m.Config.CheckReconcileEffect(req, now); err != nil {
		return s, failed(err)
	}
	return m.writeEffect(s, now, spec.RecordEffectRequest(req), func(e spec.Effect, g int64) bool {
		return e.State == spec.EffectUnknown || e.State == spec.EffectReserved
	})
}

// writeEffect is the shared tail of RecordEffect and ReconcileEffect: guard,
// not_found for an absent row, effect_conflict unless allowed(row, g), then
// state, provider reference, generation g and time.
func (m Model) writeEffect(s State, now int64, req spec.RecordEffectRequest, allowed func(spec.Effect, int64) bool) (State, Result) {
	old, gerr := guard(s, req.Lease, now)
	if gerr != nil {
		return s, failed(gerr)
	}
	g := req.Lease.Generation
	e, found := old.effect(req.Step, req.Key)
	if !found {
		return s, failed(spec.Errorf(spec.CodeNotFound, "effect %s/%s of run %s was never reserved", req.Step, spec.ShortHash(req.Key), old.run.ID))
	}
	if !allowed(e, g) {
		return s, failed(spec.Errorf(spec.CodeEffectConflict, "effect %s/%s is %s by generation %d; generation %d cannot write it",
			req.Step, spec.ShortHash(req.Key), e.State, e.Generation, g))
	}
	e.State = req.State
	e.ProviderRef = req.ProviderRef
	e.Generation = g // RecordEffect: already g; ReconcileEffect: taken over by g
	e.UpdatedAt = now
	r := old.clone()
	r.putEffect(e)
	return s.put(r), ok(e)
}

package worker

import (
	"context"
	"math"

	"github.com/leasehold/leasehold/spec"
)

// decorrelatedDelay is decorrelated jitter ("Exponential Backoff and
// Jitter", AWS Architecture Blog): min(cap, base + r) with r drawn from
// [0, 3*prev - base], where prev is the previous delay (base when there was
// none). Each delay grows from the last one actually taken instead of from
// the attempt number, which spreads competing retries better than adding a
// bounded jitter to a shared exponential.
func decorrelatedDelay(b spec.Backoff, prev int64, rnd spec.Random) int64 {
	base := max(b.BaseMs, 1)
	ceiling := max(b.CapMs, base)
	prev = min(max(prev, base), ceiling)
	hi := ceiling // 3*prev, without overflow
	if prev <= math.MaxInt64/3 {
		hi = 3 * prev
	}
	span := hi - base
	return min(base+rnd.Int64N(span+1), ceiling)
}

// retryPlan returns the RetryAfterMs to pass to Store.Retry, or why the run
// must fail instead: its next attempt could not start before the run's
// deadline, or after RetryPolicy.Deadline from the run's creation. At the
// attempt budget it never fails here: Store.Retry terminalizes the run
// itself, atomically, with the retry's code.
func (a *attempt) retryPlan(d decision) (retryAfterMs int64, failWhy string) {
	p := a.w.cfg.Retry
	retryAfterMs = ms(d.retryAfter)
	if p.Decorrelated {
		retryAfterMs = max(retryAfterMs, decorrelatedDelay(p.Backoff, a.previousDelay(), a.w.cfg.Random))
	}
	if a.lease.Attempt >= a.lease.MaxAttempts {
		return retryAfterMs, ""
	}
	// The earliest the store could make the job available again: its
	// exponential delay without jitter, raised to the capped Retry-After.
	floor, err := p.Backoff.Delay(a.lease.Attempt, retryAfterMs, 0)
	if err != nil {
		floor = retryAfterMs
	}
	now := a.w.cfg.Timers.Now()
	next := now + floor
	if floor > math.MaxInt64-now {
		next = math.MaxInt64
	}
	if next >= a.lease.DeadlineAt {
		return 0, "the next attempt could not start before the run's deadline"
	}
	if p.Deadline > 0 {
		ctx, cancel := context.WithTimeout(a.w.bg, a.w.cfg.StoreTimeout)
		run, err := a.w.cfg.Store.GetRun(ctx, a.lease.Tenant, a.lease.RunID)
		cancel()
		switch {
		case err != nil:
			a.log.Warn("could not read the run to check the retry deadline; retrying", "err", err)
		case next > run.CreatedAt+ms(p.Deadline):
			return 0, "the retry deadline has passed"
		}
	}
	return retryAfterMs, ""
}

// previousDelay is the delay the store applied before the current attempt:
// the latest retried attempt's retry time minus its finish time, or 0 when
// there was none (or the history cannot be read).
func (a *attempt) previousDelay() int64 {
	ctx, cancel := context.WithTimeout(a.w.bg, a.w.cfg.StoreTimeout)
	defer cancel()
	hist, err := a.w.cfg.Store.Attempts(ctx, a.lease.Tenant, a.lease.RunID)
	if err != nil {
		a.log.Warn("could not read the attempt history for decorrelated jitter; starting from the base delay", "err", err)
		return 0
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if h := hist[i]; h.Outcome == spec.AttemptRetried && h.RetryAt >= h.FinishedAt {
			return h.RetryAt - h.FinishedAt
		}
	}
	return 0
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/spec"
)

// attempt supervises one claimed generation: it runs the handler, renews
// the lease, and publishes exactly one outcome, or nothing once the store
// has refused the lease.
type attempt struct {
	w     *Worker
	lease spec.Lease
	log   *slog.Logger

	// ctx is the handler's context; cancel ends it with a cause.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	fence error // non-nil: publish nothing more for this generation
	// publishing: the handler returned and the attempt publishes its
	// outcome (or has); a fence from outside (a cancel notification, a
	// recheck) no longer applies to it: the store's answer to the
	// publication decides.
	publishing bool
	// outbox is what the handler staged (Job.Outbox) for the completion.
	outbox []spec.Message

	// deadline is the monotonic reading (Timers.Monotonic) past which this
	// worker no longer counts on the lease: when the last claim or renewal
	// that succeeded was sent, plus the lease, less SafetyMargin.
	deadline atomic.Int64

	stopRenew     chan struct{}
	stopRenewOnce sync.Once
	renewDone     chan struct{}
}

// newAttempt supervises lease l, whose claim was sent at the monotonic
// reading sent.
func newAttempt(w *Worker, l spec.Lease, sent int64) *attempt {
	ctx, cancel := context.WithCancelCause(w.bg)
	a := &attempt{
		w: w, lease: l, ctx: ctx, cancel: cancel,
		log:       w.log.With("tenant", l.Tenant, "run_id", l.RunID, "generation", l.Generation, "attempt", l.Attempt),
		stopRenew: make(chan struct{}),
		renewDone: make(chan struct{}),
	}
	a.deadline.Store(w.leaseDeadline(sent))
	return a
}

// extend moves the deadline for a renewal sent at the monotonic reading
// sent that succeeded. It never moves it back.
func (a *attempt) extend(sent int64) {
	d := a.w.leaseDeadline(sent)
	for {
		old := a.deadline.Load()
		if d <= old || a.deadline.CompareAndSwap(old, d) {
			return
		}
	}
}

// checkLease fences the attempt, and returns the fence, when by the
// worker's own monotonic clock less than SafetyMargin of the lease is left:
// the store may have expired the lease already and another generation may
// hold the run, so nothing outside the store (an external call) may start.
// It returns the fence already set, if any, and nil while the lease holds.
func (a *attempt) checkLease(what string) error {
	if f := a.fenced(); f != nil {
		return f
	}
	left := a.deadline.Load() - a.w.cfg.Timers.Monotonic()
	if left > 0 {
		return nil
	}
	f := &fenceError{reason: ErrLeaseLost, cause: fmt.Errorf("%w: %d ms of the lease left by the worker's monotonic clock, under the %d ms safety margin, before %s",
		ErrLeaseExpiring, left+ms(a.w.cfg.SafetyMargin), ms(a.w.cfg.SafetyMargin), what)}
	if prev := a.setFence(f); prev != nil {
		return prev
	}
	a.log.Warn("too little of the lease is left to "+what+" (the worker was paused or the store unreachable): handler context cancelled, publishing nothing more for this generation",
		"left_ms", left+ms(a.w.cfg.SafetyMargin), "margin_ms", ms(a.w.cfg.SafetyMargin))
	return f
}

// setFence stops publishing for this generation and cancels the handler's
// context with f as the cause. It returns the fence already set (and changes
// nothing) if there was one.
func (a *attempt) setFence(f error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fence != nil {
		return a.fence
	}
	a.fence = f
	a.cancel(f)
	return nil
}

// fenceRunning is setFence for a fence found from outside the attempt (a
// notification, a recheck): it applies only while the handler runs, and
// reports whether it was set (false: already fenced, or publishing).
func (a *attempt) fenceRunning(f error) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fence != nil || a.publishing {
		return false
	}
	a.fence = f
	a.cancel(f)
	return true
}

// beginPublishing marks the attempt as publishing and returns the fence
// set before, if any.
func (a *attempt) beginPublishing() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.publishing = true
	return a.fence
}

func (a *attempt) isPublishing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.publishing
}

func (a *attempt) fenced() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fence
}

type handlerReturn struct {
	result []byte
	err    error
}

// run is the attempt's goroutine. With releaseNow (a lease that arrived
// after shutdown began) it only releases the lease.
func (a *attempt) run(releaseNow bool) {
	defer a.w.finished(a)
	defer a.cancel(nil)
	if releaseNow {
		a.setFence(&fenceError{reason: ErrShutdown})
		a.report(a.release())
		return
	}
	a.log.Debug("attempt started", "operation", a.lease.Operation, "max_attempts", a.lease.MaxAttempts, "expires_at", a.lease.ExpiresAt)
	job := &Job{Tenant: a.lease.Tenant, RunID: a.lease.RunID, Operation: a.lease.Operation, Generation: a.lease.Generation,
		Attempt: a.lease.Attempt, MaxAttempts: a.lease.MaxAttempts, Payload: []byte(a.lease.Payload), DeadlineAt: a.lease.DeadlineAt, a: a}
	returned := make(chan handlerReturn, 1)
	go func() { returned <- a.callHandler(job) }()
	go a.renewLoop()

	var ret handlerReturn
	select {
	case ret = <-returned:
	case <-a.w.hardStop:
		a.stopRenewing()
		if prev := a.setFence(&fenceError{reason: ErrShutdown}); prev != nil {
			a.report(a.fencedResult(prev))
			return
		}
		a.log.Warn("grace period over: handler cancelled, releasing the lease")
		a.report(a.release())
		return
	}
	a.stopRenewing()
	f := a.beginPublishing()
	if errors.Is(ret.err, ErrCompletedInTx) {
		// The handler committed the completion itself; a renewal made
		// after that commit was refused as already_terminal, which must
		// not turn the run's own completion into a loss.
		a.report(a.result(OutcomeCompleted))
		return
	}
	if f != nil {
		a.report(a.fencedResult(f))
		return
	}
	var cause error
	if a.ctx.Err() != nil {
		cause = context.Cause(a.ctx)
	}
	d := classify(ret.err, cause)
	a.report(a.publish(d, ret))
}

// callHandler runs the handler, turning a panic into a retryable error.
func (a *attempt) callHandler(job *Job) (ret handlerReturn) {
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			ret = handlerReturn{err: Retryable(fmt.Errorf("handler panicked: %v", p), 0).WithCode(CodeHandlerPanic)}
		}
	}()
	result, err := a.w.cfg.Handler.Handle(a.ctx, job)
	return handlerReturn{result: result, err: err}
}

// renewLoop renews the lease every RenewEvery until stopRenewing. A refusal
// of the lease fences the attempt (the handler's context is cancelled and
// nothing more is published); deadline_exceeded cancels the handler's
// context with ErrRunDeadline and stops renewing (the lease stays valid
// until it expires); any other failure is tried again after a quarter of the
// interval, the store deciding in the end whether the lease still holds.
func (a *attempt) renewLoop() {
	defer close(a.renewDone)
	every := ms(a.w.cfg.RenewEvery)
	wait := every
	for {
		t := a.w.cfg.Timers.NewTimer(wait)
		select {
		case <-t.C():
		case <-a.stopRenew:
			t.Stop()
			return
		}
		select {
		case <-a.stopRenew:
			return
		default:
		}
		if a.fenced() != nil {
			return // the lease is not this generation's any more
		}
		sent := a.w.cfg.Timers.Monotonic()
		ctx, cancel := context.WithTimeout(a.w.bg, a.w.cfg.StoreTimeout)
		began := time.Now()
		l, err := a.w.cfg.Store.Renew(ctx, spec.RenewRequest{Lease: a.lease.Ref(), LeaseMs: ms(a.w.cfg.Lease)})
		cancel()
		a.w.tel.renewed(time.Since(began), renewalResult(err))
		if err == nil {
			a.extend(sent)
			a.log.Debug("lease renewed", "expires_at", l.ExpiresAt)
			wait = every
			continue
		}
		code := spec.CodeOf(err)
		if f := fenceFor(err); f != nil || code == spec.CodeNotFound {
			if f == nil {
				f = &fenceError{reason: ErrLeaseLost, cause: err}
			}
			if a.setFence(f) == nil {
				a.log.Warn("renewal refused: handler context cancelled, publishing nothing more for this generation", "code", code, "err", err)
			}
			return
		}
		if code == spec.CodeDeadlineExceeded {
			a.log.Warn("the lease cannot be renewed past the run's deadline: handler context cancelled", "deadline_at", a.lease.DeadlineAt)
			a.cancel(fmt.Errorf("%w: %w", ErrRunDeadline, err))
			return
		}
		a.log.Warn("renewal failed; trying again sooner", "code", code, "err", err)
		wait = max(every/4, 1)
	}
}

// renewalResult names a renewal's result for telemetry.
func renewalResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case fenceFor(err) != nil || spec.CodeOf(err) == spec.CodeNotFound:
		return "refused"
	case spec.CodeOf(err) == spec.CodeDeadlineExceeded:
		return "deadline"
	}
	return "error"
}

// stopRenewing stops the renewal loop and waits for it (and any renewal in
// flight) to end.
func (a *attempt) stopRenewing() {
	a.stopRenewOnce.Do(func() { close(a.stopRenew) })
	<-a.renewDone
}

// fencedResult is the result of an attempt the store refused (or that
// shutdown released) before it published.
func (a *attempt) fencedResult(f error) Result {
	r := a.result(OutcomeLost)
	r.Err = f
	switch {
	case errors.Is(f, ErrRunCancelled):
		r.Outcome = OutcomeCancelled
	case errors.Is(f, ErrRunTerminal):
		r.Outcome = OutcomeAlreadyTerminal
	case errors.Is(f, ErrShutdown):
		r.Outcome = OutcomeReleased
	}
	return r
}

func (a *attempt) result(o Outcome) Result {
	return Result{Tenant: a.lease.Tenant, RunID: a.lease.RunID, Operation: a.lease.Operation, Generation: a.lease.Generation,
		Attempt: a.lease.Attempt, Outcome: o}
}

// publish makes the one write the decision calls for.
func (a *attempt) publish(d decision, ret handlerReturn) Result {
	switch d.kind {
	case decideComplete:
		return a.complete(ret.result)
	case decideCompleted:
		return a.result(OutcomeCompleted)
	case decideRetry:
		return a.retry(d, ret.err)
	case decideFail:
		return a.fail(d.code, ret.err, d.why)
	case decideRelease:
		select {
		case <-a.w.stopping:
			return a.release()
		default:
			// Outside a shutdown a release would requeue the job at once
			// with its attempt refunded, over and over: retry it instead.
			return a.retry(decision{kind: decideRetry, code: CodeHandlerError, why: "ErrShutdown returned while the worker was not shutting down"}, ret.err)
		}
	default: // decideNothing
		a.setFence(d.fence)
		return a.fencedResult(d.fence)
	}
}

// complete publishes the handler's result, through the completer when
// completions are batched. The slot is held until the store acknowledged
// the completion or refused it.
func (a *attempt) complete(result []byte) Result {
	if len(result) > 0 {
		// The store would refuse it with invalid_argument on every attempt:
		// fail the run instead of abandoning the lease to expiry again and
		// again.
		if _, err := spec.Canonicalize(result); err != nil {
			return a.fail(CodeInvalidResult, err, "the handler's result is not valid JSON within the size limit")
		}
	}
	req := spec.CompleteRequest{Lease: a.lease.Ref(), Result: result, Outbox: a.staged()}
	var job *spec.Job
	var err error
	if a.w.completer != nil {
		job, err = a.w.completer.submit(a, req)
	} else {
		job, err = a.write("complete", func(ctx context.Context) error {
			_, err := a.w.cfg.Store.Complete(ctx, req)
			return err
		})
	}
	return a.outcome(OutcomeCompleted, job, err)
}

// staged returns the messages the handler staged.
func (a *attempt) staged() []spec.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outbox
}

// fail publishes a terminal failure with code.
func (a *attempt) fail(code string, cause error, why string) Result {
	job, err := a.write("fail", func(ctx context.Context) error {
		_, err := a.w.cfg.Store.Fail(ctx, spec.FailRequest{Lease: a.lease.Ref(), ErrorCode: code})
		return err
	})
	r := a.outcome(OutcomeFailed, job, err)
	if r.Outcome == OutcomeFailed {
		r.ErrorCode, r.Err = code, cause
		a.log.Warn("run failed", "code", code, "why", why, "err", cause)
	}
	return r
}

// retry publishes a retryable failure, or fails the run when the retry
// deadline has passed.
func (a *attempt) retry(d decision, cause error) Result {
	retryAfterMs, failWhy := a.retryPlan(d)
	if failWhy != "" {
		return a.fail(d.code, cause, failWhy)
	}
	var after spec.Job
	job, err := a.write("retry", func(ctx context.Context) error {
		var err error
		after, err = a.w.cfg.Store.Retry(ctx, spec.RetryRequest{Lease: a.lease.Ref(), ErrorCode: d.code, RetryAfterMs: retryAfterMs})
		return err
	})
	if job == nil && err == nil {
		job = &after
	}
	r := a.outcome(OutcomeRetried, job, err)
	switch r.Outcome {
	case OutcomeRetried:
		r.ErrorCode, r.Err, r.RetryAt = d.code, cause, job.AvailableAt
		a.log.Info("attempt failed; job requeued", "code", d.code, "why", d.why, "retry_at", job.AvailableAt, "err", cause)
	case OutcomeFailed:
		r.ErrorCode, r.Err = d.code, cause
		a.log.Warn("attempt failed with no attempts left; run failed", "code", d.code, "why", d.why, "err", cause)
	}
	return r
}

// release gives the lease back (shutdown): the job is requeued, the attempt
// refunded, the generation kept. The store's lease guard makes it a no-op
// for a lease no longer owned.
func (a *attempt) release() Result {
	job, err := a.write("release", func(ctx context.Context) error {
		_, err := a.w.cfg.Store.Release(ctx, spec.ReleaseRequest{Lease: a.lease.Ref()})
		return err
	})
	r := a.outcome(OutcomeReleased, job, err)
	if r.Outcome == OutcomeReleased {
		r.Err = ErrShutdown
	}
	return r
}

// write runs a guarded write of this attempt's lease. After unavailable
// (nothing was written) it sends it again, with backoff (Config.StoreRetry),
// for as long as the lease allows (see Worker.retryWait). After
// unknown_outcome it reads the job back (again with backoff while the read
// fails): still leased to this generation means the write did not apply, and
// it is sent again; anything else is returned as the job read (the caller
// decides what it shows). It returns (nil, nil) when the write applied,
// (nil, err) when it was refused or never got through, and (job, nil) for a
// read-back.
func (a *attempt) write(what string, call func(ctx context.Context) error) (*spec.Job, error) {
	var err error
	for try := 0; try == 0 || a.w.retryWait(try, a.deadline.Load()); try++ {
		ctx, cancel := context.WithTimeout(a.w.bg, a.w.cfg.StoreTimeout)
		err = call(ctx)
		cancel()
		switch spec.CodeOf(err) {
		case "":
			return nil, nil
		case spec.CodeUnavailable:
			a.log.Warn(what+" failed; nothing was written, sending it again after a backoff while the lease lasts", "try", try+1, "err", err)
			continue
		case spec.CodeUnknownOutcome:
			job, rerr := a.readBackRetrying(&try)
			if rerr != nil {
				return nil, fmt.Errorf("%s: outcome unknown and the job could not be read back before the lease ran out (%v): %w", what, rerr, err)
			}
			if job.State == spec.JobLeased && job.Generation == a.lease.Generation && job.LeaseOwner == a.lease.Owner {
				a.log.Warn(what+": outcome unknown; the job is still leased to this generation, so it did not apply: sending it again", "err", err)
				continue
			}
			return &job, nil
		default:
			return nil, err
		}
	}
	return nil, err
}

// readBackRetrying reads the job back, trying again with backoff while the
// read is unavailable and the lease allows; *try counts the tries of the
// write it serves, reads included, so that the backoff keeps growing.
func (a *attempt) readBackRetrying(try *int) (spec.Job, error) {
	for {
		job, err := a.readBack()
		if spec.CodeOf(err) != spec.CodeUnavailable {
			return job, err
		}
		*try++
		if !a.w.retryWait(*try, a.deadline.Load()) {
			return job, err
		}
	}
}

func (a *attempt) readBack() (spec.Job, error) {
	ctx, cancel := context.WithTimeout(a.w.bg, a.w.cfg.StoreTimeout)
	defer cancel()
	return a.w.cfg.Store.GetJob(ctx, a.lease.Tenant, a.lease.RunID)
}

// outcome turns what a publication returned into a Result: want when it
// applied; the loser's outcome when the store refused the lease (a
// completion refused as cancelled lost the cancel-vs-complete race); for a
// read-back, what the job shows; abandoned when the store never answered.
func (a *attempt) outcome(want Outcome, job *spec.Job, err error) Result {
	r := a.result(want)
	switch {
	case job != nil:
		r.Outcome = a.shown(want, *job)
		if r.Outcome == OutcomeAbandoned {
			r.Err = fmt.Errorf("the job read back after an unknown outcome is %s at generation %d", job.State, job.Generation)
		}
	case err == nil:
	case fenceFor(err) != nil:
		f := fenceFor(err)
		a.setFence(f)
		r = a.fencedResult(f)
		switch r.Outcome {
		case OutcomeCancelled:
			a.log.Warn("the run was cancelled before this attempt published: its "+string(want)+" lost to the cancel and was discarded", "err", err)
		case OutcomeAlreadyTerminal:
			a.log.Warn("the run was already terminal: this attempt's "+string(want)+" was discarded", "state", spec.StateOf(err), "err", err)
		default:
			a.log.Warn("lease lost before this attempt published: its "+string(want)+" was discarded", "err", err)
		}
	default:
		r.Outcome, r.Err = OutcomeAbandoned, err
		a.log.Error("could not publish the attempt's "+string(want)+"; the lease recovers by expiry and the run is attempted again", "code", spec.CodeOf(err), "err", err)
	}
	if r.Outcome == OutcomeCompleted {
		a.log.Info("run completed")
	}
	return r
}

// shown is the outcome a job read back after an unknown outcome shows.
func (a *attempt) shown(want Outcome, job spec.Job) Outcome {
	if job.Generation != a.lease.Generation {
		return OutcomeLost
	}
	switch job.State {
	case spec.JobCompleted:
		if want == OutcomeCompleted {
			return OutcomeCompleted
		}
		return OutcomeAlreadyTerminal
	case spec.JobDead:
		if want == OutcomeFailed || want == OutcomeRetried {
			return OutcomeFailed
		}
		return OutcomeAlreadyTerminal
	case spec.JobCancelled:
		return OutcomeCancelled
	case spec.JobQueued:
		if want == OutcomeRetried || want == OutcomeReleased {
			return want
		}
	}
	return OutcomeAbandoned
}

// report counts, logs and delivers the attempt's one result.
func (a *attempt) report(r Result) {
	a.w.stats.count(r.Outcome)
	a.w.tel.ended(a.lease.Tenant, r.Outcome)
	a.log.Debug("attempt ended", "outcome", r.Outcome, "code", r.ErrorCode)
	if a.w.cfg.OnResult != nil {
		a.w.cfg.OnResult(r)
	}
}

// storeCall runs one effect-ledger write for the handler under
// StoreTimeout, on a context that the handler's cancellation does not cut
// (the store's lease guard decides whether the write may still happen).
// After unavailable it sends it again with backoff while the lease allows,
// as write does. After unknown_outcome it calls resolve, which reads the
// ledger back: applied (nil), not applied (errNotApplied: sent again), or an
// error, which is returned. A nil resolve sends the call again. It fences
// the attempt when the store refuses the lease.
func (a *attempt) storeCall(ctx context.Context, what string, call func(ctx context.Context) error, resolve func(ctx context.Context) error) error {
	var err error
	for try := 0; try == 0 || a.w.retryWait(try, a.deadline.Load()); try++ {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.w.cfg.StoreTimeout)
		err = call(sctx)
		cancel()
		if spec.CodeOf(err) == spec.CodeUnknownOutcome && resolve != nil {
			rerr := a.resolveRetrying(ctx, &try, resolve)
			switch {
			case rerr == nil:
				a.log.Warn(what+": outcome unknown; read back: it applied", "err", err)
				return nil
			case errors.Is(rerr, errNotApplied):
				a.log.Warn(what+": outcome unknown; read back: it did not apply, sending it again", "err", err)
				continue
			default:
				err = fmt.Errorf("%s: outcome unknown and not resolved by reading the ledger back (%v): %w", what, rerr, err)
			}
			break
		}
		if c := spec.CodeOf(err); c != spec.CodeUnavailable && c != spec.CodeUnknownOutcome {
			break
		}
		a.log.Warn(what+" failed; sending it again after a backoff while the lease lasts", "code", spec.CodeOf(err), "try", try+1, "err", err)
	}
	if f := fenceFor(err); f != nil {
		if a.setFence(f) == nil {
			a.log.Warn(what+" refused: handler context cancelled, publishing nothing more for this generation", "code", spec.CodeOf(err))
		}
	}
	return err
}

// errNotApplied is what a storeCall resolve function returns when the
// ledger shows that the write did not apply.
var errNotApplied = errors.New("the write did not apply")

// resolveRetrying runs resolve under StoreTimeout, again with backoff while
// it fails with unavailable and the lease allows.
func (a *attempt) resolveRetrying(ctx context.Context, try *int, resolve func(ctx context.Context) error) error {
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.w.cfg.StoreTimeout)
		err := resolve(rctx)
		cancel()
		// Only the store's own unavailable: spec.CodeOf would call any
		// other error (errNotApplied too) unavailable.
		var se *spec.Error
		if !errors.As(err, &se) || se.Code != spec.CodeUnavailable {
			return err
		}
		*try++
		if !a.w.retryWait(*try, a.deadline.Load()) {
			return err
		}
	}
}

// leaseDeadline is the monotonic deadline of a lease whose claim or
// renewal was sent at the monotonic reading sent.
func (w *Worker) leaseDeadline(sent int64) int64 {
	d := ms(w.cfg.Lease) - ms(w.cfg.SafetyMargin)
	if sent > math.MaxInt64-d {
		return math.MaxInt64
	}
	return sent + d
}

// storeRetryDelay is the wait before try number try (1 for the first
// resend) of a store call, in ms: half of min(Cap, Base*2^(try-1)) plus a
// jitter up to as much again (Config.StoreRetry).
func (w *Worker) storeRetryDelay(try int) int64 {
	base, ceiling := ms(w.cfg.StoreRetry.Base), ms(w.cfg.StoreRetry.Cap)
	d := ceiling
	if try-1 < 62 && base <= ceiling>>(try-1) {
		d = base << (try - 1)
	}
	return d/2 + w.cfg.Random.Int64N(d-d/2+1)
}

// retryWait waits storeRetryDelay(try) on Config.Timers before a resend.
// It returns false at once, without waiting, when the wait would end at or
// past deadline (a monotonic reading): the lease would be gone by then.
func (w *Worker) retryWait(try int, deadline int64) bool {
	d := w.storeRetryDelay(try)
	if now := w.cfg.Timers.Monotonic(); now >= deadline || d >= deadline-now {
		return false
	}
	<-w.cfg.Timers.NewTimer(d).C()
	w.tel.retried()
	return true
}

package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/queueproto"
)

// QuickBound is how long a probe waits for an event that needs no recovery
// by the queue (a worker starting a job just enqueued); a hang guard, never
// a measurement.
const QuickBound = 30 * time.Second

// pollEvery is how often a probe reads a job's state while it waits for
// the job to change.
const pollEvery = 100 * time.Millisecond

// Step is one line of a run's interleaving: a runner action or an event,
// in the order the runner saw them.
type Step struct {
	Seq     int    `json:"seq"`
	AtMs    int64  `json:"at_ms"`
	Process string `json:"process"`
	What    string `json:"what"`
}

// Result is one run of one probe on one system.
type Result struct {
	Outcome Outcome `json:"outcome"`
	// Why says what the run showed: the violation, why it was not
	// exercised, the adapter's finding.
	Why string `json:"why,omitempty"`
	// Notes are observations that do not decide the outcome ("another
	// payload: rejected").
	Notes []string `json:"notes,omitempty"`
	// Steps is the run's interleaving.
	Steps []Step `json:"steps"`
	// Rows are the queue's records of the run's jobs, read at the end of a
	// violated run.
	Rows map[string][]json.RawMessage `json:"rows,omitempty"`
	// Starts counts the handler starts per job.
	Starts    map[string]int `json:"starts"`
	Namespace string         `json:"namespace"`
	Seconds   float64        `json:"seconds"`
}

// abort ends a run early with an outcome; Run recovers only this type.
type abort struct {
	outcome Outcome
	why     string
}

// Run is one run of one probe: its processes, its interleaving and the
// ledger of handler starts. A probe's script calls its methods; a method
// that meets an adapter finding, or a violation, ends the run.
type Run struct {
	ctx    context.Context
	target *target
	hello  queueproto.Hello
	ns     string
	begun  time.Time

	mu     sync.Mutex
	steps  []Step
	starts []start
	notes  []string
	jobs   []string // every job the run enqueued, in order
	procs  []*Proc
	byName map[string]*Proc
	opened bool
}

// start is one handler start in the ledger.
type start struct {
	step int // the index of its Step
	proc string
	ev   queueproto.Started
}

func (r *Run) logf(process, format string, args ...any) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logLocked(process, fmt.Sprintf(format, args...))
}

func (r *Run) logLocked(process, what string) int {
	r.steps = append(r.steps, Step{Seq: len(r.steps) + 1, AtMs: time.Since(r.begun).Milliseconds(), Process: process, What: what})
	return len(r.steps) - 1
}

// Violated ends the run: the probe's promise was broken.
func (r *Run) Violated(format string, args ...any) {
	why := fmt.Sprintf(format, args...)
	r.logf("runner", "VIOLATION: %s", why)
	panic(abort{Violated, why})
}

// NotExercised ends the run: the race the probe needs did not happen.
func (r *Run) NotExercised(format string, args ...any) {
	why := fmt.Sprintf(format, args...)
	r.logf("runner", "not exercised: %s", why)
	panic(abort{NotExercised, why})
}

// Note records an observation that does not decide the outcome.
func (r *Run) Note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// adapterError ends the run on an adapter finding or an answer the probe
// cannot use.
func (r *Run) adapterError(err error) {
	r.logf("runner", "adapter error: %v", firstLine(err.Error()))
	panic(abort{AdapterError, err.Error()})
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Has reports whether the queue offers feature.
func (r *Run) Has(feature string) bool { return r.hello.Features[feature].Supported }

// Hello is the system's hello.
func (r *Run) Hello() queueproto.Hello { return r.hello }

// RecoveryBound is how long a probe waits for the queue's own machinery to
// act after expire or make_due: max(QuickBound, 3 × recovery_ms).
func (r *Run) RecoveryBound() time.Duration {
	return max(QuickBound, 3*time.Duration(r.hello.RecoveryMs)*time.Millisecond)
}

// Proc is one adapter process of a run.
type Proc struct {
	r    *Run
	name string
	p    *queueproto.Process
	// held is the process's handles that were started and not finished.
	held map[string]queueproto.Started
}

// Client returns the run's client process C, starting it if needed.
func (r *Run) Client() *Proc { return r.proc("C") }

// NewClient starts a fresh client process (after the old one was killed).
func (r *Run) NewClient(name string) *Proc { return r.proc(name) }

// Worker starts a process named name and its worker (concurrency 1).
func (r *Run) Worker(name string) *Proc {
	p := r.proc(name)
	p.call(queueproto.OpStart, queueproto.StartParams{Concurrency: 1}, nil, "start worker")
	return p
}

func (r *Run) proc(name string) *Proc {
	r.mu.Lock()
	if p, ok := r.byName[name]; ok {
		r.mu.Unlock()
		return p
	}
	create := !r.opened
	r.opened = true
	r.mu.Unlock()
	qp, err := queueproto.Start(r.target.command, name, queueproto.Hooks{
		Wire:    r.target.wire(name),
		Started: func(s queueproto.Started) { r.started(name, s) },
	})
	if err != nil {
		r.adapterError(err)
	}
	p := &Proc{r: r, name: name, p: qp, held: map[string]queueproto.Started{}}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.byName[name] = p
	r.mu.Unlock()
	var h queueproto.Hello
	p.call(queueproto.OpHello, queueproto.HelloParams{Protocol: queueproto.Version}, &h, "")
	if h.System != r.hello.System || h.Protocol != r.hello.Protocol {
		r.adapterError(fmt.Errorf("process %s says it is %q (protocol %d); the first process said %q (protocol %d)", name, h.System, h.Protocol, r.hello.System, r.hello.Protocol))
	}
	open := r.target.open(r.ns, name, create)
	p.call(queueproto.OpOpen, open, nil, fmt.Sprintf("open (create=%v)", create))
	return p
}

// started records a handler start in the ledger, as it arrives.
func (r *Run) started(proc string, s queueproto.Started) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.logLocked(proc, fmt.Sprintf("started %s attempt %d (%s)", r.jobNameLocked(s.Job), s.Attempt, s.Handle))
	r.starts = append(r.starts, start{step: i, proc: proc, ev: s})
}

// JobName is how steps name a job: J1, J2, … in enqueue order, with the
// queue's id.
func (r *Run) JobName(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.jobNameLocked(id)
}

func (r *Run) jobNameLocked(id string) string {
	if i := slices.Index(r.jobs, id); i >= 0 {
		return fmt.Sprintf("J%d [%s]", i+1, id)
	}
	return fmt.Sprintf("job %s", id)
}

// call sends one request; an adapter finding ends the run, an error reply
// is returned.
func (p *Proc) call(op string, params, result any, what string) *queueproto.Error {
	if what != "" {
		p.r.logf(p.name, "%s", what)
	}
	err := p.p.Call(p.r.ctx, op, params, result)
	var qe *queueproto.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &qe) && qe.Code != queueproto.ErrFailed && qe.Code != queueproto.ErrBadRequest:
		return qe
	}
	p.r.adapterError(fmt.Errorf("%s: %s: %w", p.name, op, err))
	return nil
}

// must is call for requests that have no answer but success.
func (p *Proc) must(op string, params, result any, what string) {
	if qe := p.call(op, params, result, what); qe != nil {
		p.r.adapterError(fmt.Errorf("%s: %s: %w", p.name, op, qe))
	}
}

// Enqueue enqueues and returns the queue's answer; an error reply
// (rejected) is returned as the queue's answer.
func (p *Proc) Enqueue(params queueproto.EnqueueParams) (queueproto.EnqueueResult, *queueproto.Error) {
	var res queueproto.EnqueueResult
	desc := fmt.Sprintf("enqueue %s", params.Payload)
	if params.Key != "" {
		desc += fmt.Sprintf(" key %q", params.Key)
	}
	if params.MaxAttempts > 0 {
		desc += fmt.Sprintf(" max_attempts %d", params.MaxAttempts)
	}
	if params.Tx != "" {
		desc += " in a transaction that will " + params.Tx
	}
	qe := p.call(queueproto.OpEnqueue, params, &res, desc)
	if qe != nil {
		p.r.logf(p.name, "  -> %s: %s", qe.Code, firstLine(qe.Message))
		return res, qe
	}
	if res.Job != "" {
		p.r.mu.Lock()
		if !slices.Contains(p.r.jobs, res.Job) {
			p.r.jobs = append(p.r.jobs, res.Job)
		}
		p.r.mu.Unlock()
	}
	dup := "not said"
	if res.Duplicate != nil {
		dup = fmt.Sprint(*res.Duplicate)
	}
	p.r.logf(p.name, "  -> %s (duplicate: %s, seen in tx: %v)", p.r.JobName(res.Job), dup, res.SeenInTx)
	return res, nil
}

// Job enqueues a job that must be created and returns its id.
func (p *Proc) Job(payload string, maxAttempts int) string {
	res, qe := p.Enqueue(queueproto.EnqueueParams{Payload: json.RawMessage(payload), MaxAttempts: maxAttempts})
	if qe != nil {
		p.r.adapterError(fmt.Errorf("%s: enqueue %s was refused: %w", p.name, payload, qe))
	}
	if res.Job == "" {
		p.r.adapterError(fmt.Errorf("%s: enqueue %s returned no job id (only a deduplicated enqueue may)", p.name, payload))
	}
	return res.Job
}

// State reads a job.
func (p *Proc) State(job string) queueproto.JobInfo {
	var info queueproto.JobInfo
	p.must(queueproto.OpState, queueproto.JobParams{Job: job}, &info, "")
	p.r.logf(p.name, "state %s: %s", p.r.JobName(job), describe(info))
	return info
}

func describe(i queueproto.JobInfo) string {
	s := i.State
	if i.RawState != "" {
		s += " (" + i.RawState + ")"
	}
	return fmt.Sprintf("%s, attempt %d", s, i.Attempt)
}

// Jobs lists every job of the namespace.
func (p *Proc) Jobs() []queueproto.JobInfo {
	var res queueproto.JobsResult
	p.must(queueproto.OpJobs, queueproto.Empty{}, &res, "")
	var parts []string
	for _, j := range res.Jobs {
		parts = append(parts, fmt.Sprintf("%s %s %s", p.r.JobName(j.Job), j.State, j.Payload))
	}
	p.r.logf(p.name, "jobs: %d [%s]", len(res.Jobs), strings.Join(parts, "; "))
	return res.Jobs
}

// Expire rewinds a job's lease (docs/ADAPTERS.md, Time). It is logged
// before it is sent: a start it causes is explained by it.
func (p *Proc) Expire(job string) {
	p.must(queueproto.OpExpire, queueproto.JobParams{Job: job}, nil, "expire "+p.r.JobName(job))
}

// MakeDue makes a job waiting for a retry due now.
func (p *Proc) MakeDue(job string) {
	p.must(queueproto.OpMakeDue, queueproto.JobParams{Job: job}, nil, "make_due "+p.r.JobName(job))
}

// Cancel cancels a job; a rejected reply is returned as outcome "refused".
func (p *Proc) Cancel(job string) queueproto.CancelResult {
	var res queueproto.CancelResult
	if qe := p.call(queueproto.OpCancel, queueproto.JobParams{Job: job}, &res, "cancel "+p.r.JobName(job)); qe != nil {
		if qe.Code != queueproto.ErrRejected {
			p.r.adapterError(fmt.Errorf("%s: cancel: %w", p.name, qe))
		}
		res = queueproto.CancelResult{Outcome: queueproto.CancelRefused, RawState: "rejected: " + firstLine(qe.Message)}
	}
	p.r.logf(p.name, "  -> %s (%s)", res.Outcome, res.RawState)
	return res
}

// AwaitStart waits up to bound for this process to start job (any job when
// job is ""), and reports whether it did.
func (p *Proc) AwaitStart(job string, bound time.Duration) (queueproto.Started, bool) {
	ctx, cancel := context.WithTimeout(p.r.ctx, bound)
	defer cancel()
	s, err := p.p.Await(ctx, func(s queueproto.Started) bool { return job == "" || s.Job == job })
	switch {
	case err == nil:
		p.held[s.Handle] = s
		return s, true
	case errors.Is(err, context.DeadlineExceeded) && p.r.ctx.Err() == nil:
		p.r.logf(p.name, "no start of %s within %s", p.r.JobName(job), bound)
		return queueproto.Started{}, false
	}
	p.r.adapterError(fmt.Errorf("%s: waiting for a start: %w", p.name, err))
	return queueproto.Started{}, false
}

// MustStart waits for this process to start job; a probe whose first
// start never comes is not exercised.
func (p *Proc) MustStart(job string) queueproto.Started {
	s, ok := p.AwaitStart(job, QuickBound)
	if !ok {
		p.r.NotExercised("%s never started %s within %s", p.name, p.r.JobName(job), QuickBound)
	}
	return s
}

// AwaitStartOrEnd waits up to bound for this process to start job, or for
// c to read job in a final state (completed, failed, cancelled, missing).
// It returns the start (ok) or the final state (ended).
func (p *Proc) AwaitStartOrEnd(c *Proc, job string, bound time.Duration) (s queueproto.Started, info queueproto.JobInfo, ok bool) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(p.r.ctx, pollEvery*5)
		st, err := p.p.Await(ctx, func(s queueproto.Started) bool { return s.Job == job })
		cancel()
		if err == nil {
			p.held[st.Handle] = st
			return st, queueproto.JobInfo{}, true
		}
		if !errors.Is(err, context.DeadlineExceeded) || p.r.ctx.Err() != nil {
			p.r.adapterError(fmt.Errorf("%s: waiting for a start: %w", p.name, err))
		}
		var i queueproto.JobInfo
		c.must(queueproto.OpState, queueproto.JobParams{Job: job}, &i, "")
		if Final(i.State) {
			c.r.logf(c.name, "state %s: %s", c.r.JobName(job), describe(i))
			return queueproto.Started{}, i, false
		}
	}
	info = c.State(job)
	p.r.logf(p.name, "no start of %s within %s, and it did not end", p.r.JobName(job), bound)
	return queueproto.Started{}, info, false
}

// AwaitState waits up to bound for c to read job in a state that matches.
func (p *Proc) AwaitState(job string, bound time.Duration, match func(queueproto.JobInfo) bool) (queueproto.JobInfo, bool) {
	deadline := time.Now().Add(bound)
	for {
		var i queueproto.JobInfo
		p.must(queueproto.OpState, queueproto.JobParams{Job: job}, &i, "")
		if match(i) || !time.Now().Before(deadline) {
			p.r.logf(p.name, "state %s: %s", p.r.JobName(job), describe(i))
			return i, match(i)
		}
		select {
		case <-time.After(pollEvery):
		case <-p.r.ctx.Done():
			p.r.adapterError(p.r.ctx.Err())
		}
	}
}

// Final reports whether a normalized state is the end of a job.
func Final(state string) bool {
	switch state {
	case queueproto.StateCompleted, queueproto.StateFailed, queueproto.StateCancelled, queueproto.StateMissing:
		return true
	}
	return false
}

// Finish ends a held handler with do. A retry is logged before it is sent:
// the next start of the job is explained by it.
func (p *Proc) Finish(s queueproto.Started, do string) {
	delete(p.held, s.Handle)
	p.must(queueproto.OpFinish, queueproto.FinishParams{Handle: s.Handle, Do: do}, nil,
		fmt.Sprintf("finish %s attempt %d (%s): %s", p.r.JobName(s.Job), s.Attempt, s.Handle, do))
}

// Heartbeat extends a held handler's lease; it returns whether the queue
// accepted it.
func (p *Proc) Heartbeat(s queueproto.Started) bool {
	var res queueproto.HeartbeatResult
	p.must(queueproto.OpHeartbeat, queueproto.HandleParams{Handle: s.Handle}, &res,
		fmt.Sprintf("heartbeat %s attempt %d (%s)", p.r.JobName(s.Job), s.Attempt, s.Handle))
	p.r.logf(p.name, "  -> accepted: %v", res.Accepted)
	return res.Accepted
}

// CompleteInTx completes a held handler's job in a transaction that then
// commits or rolls back; it returns whether the transaction saw the job
// completed.
func (p *Proc) CompleteInTx(s queueproto.Started, commit bool) bool {
	var res queueproto.CompleteInTxResult
	end := "roll back"
	if commit {
		end = "commit"
	}
	p.must(queueproto.OpCompleteInTx, queueproto.CompleteInTxParams{Handle: s.Handle, Commit: commit}, &res,
		fmt.Sprintf("complete %s (%s) in a transaction, then %s", p.r.JobName(s.Job), s.Handle, end))
	p.r.logf(p.name, "  -> seen completed in the transaction: %v", res.SeenInTx)
	return res.SeenInTx
}

// Stop stops the process's worker gracefully: the barrier after which its
// outcomes are written. A start the script did not wait for would hold the
// stop forever: an unexplained one ends the run as a violation, an
// explained one (a re-claim after an expiry that came late) is completed
// first.
func (p *Proc) Stop() {
	for _, s := range p.p.Pending() {
		if u := p.r.unexplained(); u != "" {
			p.r.Violated("%s", u)
		}
		if got, ok := p.AwaitStart(s.Job, QuickBound); ok {
			p.r.logf(p.name, "a start the probe did not wait for, completed before the stop")
			p.Finish(got, queueproto.DoComplete)
		}
	}
	if len(p.held) > 0 {
		p.r.adapterError(fmt.Errorf("probe bug: stop of %s with %d handlers held", p.name, len(p.held)))
	}
	p.must(queueproto.OpStop, queueproto.Empty{}, nil, "stop (graceful)")
}

// Kill SIGKILLs the process: its held handlers die with it. Logged before
// the kill: the next start of each held job is explained by it.
func (p *Proc) Kill() {
	var jobs []string
	for _, s := range p.held {
		jobs = append(jobs, p.r.JobName(s.Job))
	}
	slices.Sort(jobs)
	p.r.logf(p.name, "SIGKILL (holding %s)", strings.Join(jobs, ", "))
	p.held = map[string]queueproto.Started{}
	p.p.Kill()
}

// Pause SIGSTOPs the process; Resume SIGCONTs it.
func (p *Proc) Pause() {
	p.r.logf(p.name, "SIGSTOP")
	if err := p.p.Pause(); err != nil {
		p.r.adapterError(fmt.Errorf("%s: SIGSTOP: %w", p.name, err))
	}
}

// Resume SIGCONTs a paused process.
func (p *Proc) Resume() {
	p.r.logf(p.name, "SIGCONT")
	if err := p.p.Resume(); err != nil {
		p.r.adapterError(fmt.Errorf("%s: SIGCONT: %w", p.name, err))
	}
}

// KillAll SIGKILLs every process of the run.
func (r *Run) KillAll() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		if !p.killed() {
			p.Kill()
		}
	}
}

func (p *Proc) killed() bool { return p.p.Killed() }

// Starts returns the starts of job so far, in order.
func (r *Run) Starts(job string) []queueproto.Started {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []queueproto.Started
	for _, s := range r.starts {
		if s.ev.Job == job {
			out = append(out, s.ev)
		}
	}
	return out
}

// unexplained returns why a start of a job is not explained by a retry of
// its previous attempt, a kill of its worker or an expiry while it was
// held, or "" when every start is explained. Each explaining action
// explains one start.
func (r *Run) unexplained() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[string]start{} // the previous start of each job
	used := map[int]bool{}
	for _, s := range r.starts {
		prev, seen := last[s.ev.Job]
		last[s.ev.Job] = s
		if !seen {
			continue
		}
		found := false
		for i := prev.step + 1; i < s.step && !found; i++ {
			if used[i] {
				continue
			}
			st := r.steps[i]
			what := st.What
			explains := (st.Process == prev.proc && strings.HasPrefix(what, "SIGKILL")) ||
				what == "expire "+r.jobNameLocked(s.ev.Job) ||
				(st.Process == prev.proc && strings.HasPrefix(what, fmt.Sprintf("finish %s attempt %d (%s): %s", r.jobNameLocked(prev.ev.Job), prev.ev.Attempt, prev.ev.Handle, queueproto.DoRetry)))
			if explains {
				used[i], found = true, true
			}
		}
		if !found {
			return fmt.Sprintf("%s started %s again (attempt %d, step %d) after its start on %s (attempt %d, step %d) with no retry, kill or expiry of that attempt in between",
				s.proc, r.jobNameLocked(s.ev.Job), s.ev.Attempt, s.step+1, prev.proc, prev.ev.Attempt, prev.step+1)
		}
	}
	return ""
}

package probe

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/queueproto"
)

// Probe is one promise a job queue makes or implies, checked by a fixed
// script (docs/ADAPTERS.md, The probes).
type Probe struct {
	Name string `json:"name"`
	// Promise is what holds means, in one sentence.
	Promise string `json:"promise"`
	// Script is the steps, in one line, for the report.
	Script string `json:"script"`
	// Needs are the features without which the probe is not applicable.
	Needs []string `json:"needs,omitempty"`
	// Restart: the probe crashes and restarts the database, so its cell
	// runs on a private server.
	Restart bool `json:"restart,omitempty"`
	run     func(r *Run)
}

// Probes is every probe, in the matrix's order.
var Probes = []Probe{
	{Name: "kill-worker", Promise: "an acknowledged job is not lost when its worker is SIGKILLed mid-job",
		Script: "enqueue J; W1 starts J; SIGKILL W1; expire J; W2 runs J to completion", run: killWorker},
	{Name: "db-restart", Promise: "an acknowledged job is not lost when the database crashes and restarts", Restart: true,
		Script: "enqueue J1, J2; W1 starts one (held); kill every process; crash and restart the database; expire the held one; W2 runs both", run: dbRestart},
	{Name: "stale-completion", Promise: "a worker whose lease expired and whose job was claimed again cannot complete (or extend) the newer attempt",
		Script: "W1 starts J (held); SIGSTOP W1; expire J; W2 starts J (held); SIGCONT W1; W1 heartbeats and completes; stop W1; J must still be W2's", run: staleCompletion},
	{Name: "double-start", Promise: "a handler is not started twice beyond the queue's stated delivery semantics",
		Script: "W1 starts J (held); W2 runs a sentinel; SIGSTOP W1; expire J; W2 may start J; both complete; W3 runs a sentinel",
		run:    doubleStart},
	{Name: "dead-worker", Promise: "a job whose worker died on its last attempt ends or runs again on its own, with no operator call",
		Script: "enqueue J with 1 attempt; W1 starts J; SIGKILL W1; expire J; W2 runs; J must end or run again", Needs: []string{queueproto.FeatureMaxAttempts}, run: deadWorker},
	{Name: "retry-budget", Promise: "a job with a budget of 3 attempts runs exactly 3 times and ends in the documented state",
		Script: "enqueue J with 3 attempts; each start fails (retry), then make_due; then a sentinel", Needs: []string{queueproto.FeatureMaxAttempts}, run: retryBudget},
	{Name: "cancel-vs-complete", Promise: "cancel against complete has one winner, and the final state agrees with what cancel answered",
		Script: "three jobs: cancel before the handler returns, after it returns (before stop), after stop", Needs: []string{queueproto.FeatureCancel}, run: cancelVsComplete},
	{Name: "key-dedupe", Promise: "the same key admitted twice gives one job; another payload under it is rejected or kept out",
		Script: "enqueue (k, P) twice, then (k, Q); count the jobs", Needs: []string{queueproto.FeatureKey}, run: keyDedupe},
	{Name: "tx-enqueue-rollback", Promise: "an enqueue in the caller's transaction that rolls back leaves no job",
		Script: "enqueue in a transaction that commits, then in one that rolls back", Needs: []string{queueproto.FeatureTxEnqueue}, run: txEnqueueRollback},
	{Name: "tx-complete-rollback", Promise: "a completion in the caller's transaction that rolls back leaves the job unfinished",
		Script: "W1 starts J; complete J in a transaction that rolls back; J must still run; complete J2 in one that commits", Needs: []string{queueproto.FeatureTxComplete}, run: txCompleteRollback},
}

// ProbeNames lists the probes' names in order.
func ProbeNames() []string {
	var names []string
	for _, p := range Probes {
		names = append(names, p.Name)
	}
	return names
}

// FindProbe returns the probe named name, or nil.
func FindProbe(name string) *Probe {
	i := slices.IndexFunc(Probes, func(p Probe) bool { return p.Name == name })
	if i < 0 {
		return nil
	}
	return &Probes[i]
}

// attempts returns n when the queue takes a per-job budget, else 0 (its
// default).
func attempts(r *Run, n int) int {
	if r.Has(queueproto.FeatureMaxAttempts) {
		return n
	}
	return 0
}

// completed reports whether a job reads as finished successfully: completed,
// or missing on a queue that deletes completed jobs.
func completed(r *Run, i queueproto.JobInfo) bool {
	return i.State == queueproto.StateCompleted || (i.State == queueproto.StateMissing && r.hello.DeletesCompleted)
}

// mustComplete finishes a held handler with complete, stops the worker and
// requires the job to read completed.
func mustComplete(r *Run, c, w *Proc, s queueproto.Started, what string) {
	w.Finish(s, queueproto.DoComplete)
	w.Stop()
	if i := c.State(s.Job); !completed(r, i) {
		r.Violated("%s: %s completed by its current attempt (on %s) reads %s after the worker stopped", what, r.JobName(s.Job), w.name, describe(i))
	}
}

func killWorker(r *Run) {
	c := r.Client()
	j := c.Job(`{"probe":"kill-worker"}`, attempts(r, 3))
	w1 := r.Worker("W1")
	w1.MustStart(j)
	w1.Kill()
	c.Expire(j)
	w2 := r.Worker("W2")
	s, end, ok := w2.AwaitStartOrEnd(c, j, r.RecoveryBound())
	if !ok {
		if Final(end.State) {
			r.Violated("lost: %s ended %s although its only attempt died with its worker and no attempt was told to finish", r.JobName(j), describe(end))
		}
		r.Violated("lost: %s never ran again within %s after its worker was SIGKILLed and its lease expired; it reads %s", r.JobName(j), r.RecoveryBound(), describe(end))
	}
	mustComplete(r, c, w2, s, "after the kill")
}

func dbRestart(r *Run) {
	c := r.Client()
	j1 := c.Job(`{"probe":"db-restart","n":1}`, attempts(r, 3))
	j2 := c.Job(`{"probe":"db-restart","n":2}`, attempts(r, 3))
	w1 := r.Worker("W1")
	held := w1.MustStart("")
	if held.Job != j1 && held.Job != j2 {
		r.Violated("W1 started %s, which no one enqueued", r.JobName(held.Job))
	}
	r.KillAll()
	what, restarted := r.RestartDatabase()
	if !restarted {
		r.NotExercised("the database did not restart: %s", what)
	}
	r.Note("%s", what)
	c = r.NewClient("C2")
	for _, j := range []string{j1, j2} {
		if i := c.State(j); i.State == queueproto.StateMissing || Final(i.State) {
			r.Violated("lost: %s, acknowledged before the restart, reads %s after it", r.JobName(j), describe(i))
		}
	}
	c.Expire(held.Job)
	w2 := r.Worker("W2")
	left := []string{j1, j2}
	for len(left) > 0 {
		s, ok := w2.AwaitStart("", r.RecoveryBound())
		if !ok {
			r.Violated("lost: %s never ran after the restart within %s", r.JobName(left[0]), r.RecoveryBound())
		}
		left = slices.DeleteFunc(left, func(j string) bool { return j == s.Job })
		w2.Finish(s, queueproto.DoComplete)
	}
	w2.Stop()
	for _, j := range []string{j1, j2} {
		if i := c.State(j); !completed(r, i) {
			r.Violated("%s reads %s after its completion", r.JobName(j), describe(i))
		}
	}
}

func staleCompletion(r *Run) {
	c := r.Client()
	j := c.Job(`{"probe":"stale-completion"}`, attempts(r, 3))
	w1 := r.Worker("W1")
	s1 := w1.MustStart(j)
	w1.Pause()
	c.Expire(j)
	w2 := r.Worker("W2")
	s2, ok := w2.AwaitStart(j, r.RecoveryBound())
	if !ok {
		w1.Resume()
		r.NotExercised("with W1 paused and %s's lease expired, no worker started it again within %s", r.JobName(j), r.RecoveryBound())
	}
	w1.Resume()
	heartbeat := false
	if r.Has(queueproto.FeatureHeartbeat) {
		heartbeat = w1.Heartbeat(s1)
	}
	w1.Finish(s1, queueproto.DoComplete)
	w1.Stop()
	i := c.State(j)
	switch {
	case i.State != queueproto.StateRunning:
		r.Violated("the stale attempt %d (W1, whose lease had expired) finished %s: it reads %s while W2's attempt %d is still running", s1.Attempt, r.JobName(j), describe(i), s2.Attempt)
	case heartbeat:
		r.Violated("the stale attempt %d (W1) extended %s's lease while W2's attempt %d held it", s1.Attempt, r.JobName(j), s2.Attempt)
	}
	mustComplete(r, c, w2, s2, "after the stale completion was refused")
}

func doubleStart(r *Run) {
	c := r.Client()
	j := c.Job(`{"probe":"double-start"}`, attempts(r, 3))
	w1 := r.Worker("W1")
	s1 := w1.MustStart(j)
	w2 := r.Worker("W2")
	sentinel := c.Job(`{"probe":"double-start","sentinel":1}`, 0)
	s, ok := w2.AwaitStart("", QuickBound)
	if !ok {
		r.NotExercised("W2 never ran the sentinel within %s: no proof it polled while %s was held", QuickBound, r.JobName(j))
	}
	if s.Job == j {
		r.Violated("W2 started %s (attempt %d) while W1's attempt %d was live (not expired, not finished)", r.JobName(j), s.Attempt, s1.Attempt)
	}
	w2.Finish(s, queueproto.DoComplete)
	if s.Job != sentinel {
		r.Violated("W2 started %s, which no one enqueued", r.JobName(s.Job))
	}
	w1.Pause()
	c.Expire(j)
	s2, again := w2.AwaitStart(j, r.RecoveryBound())
	w1.Resume()
	w1.Finish(s1, queueproto.DoComplete)
	if again {
		w2.Finish(s2, queueproto.DoComplete)
	}
	w1.Stop()
	w2.Stop()
	w3 := r.Worker("W3")
	sentinel2 := c.Job(`{"probe":"double-start","sentinel":2}`, 0)
	s3, ok := w3.AwaitStart("", QuickBound)
	if !ok {
		r.NotExercised("W3 never ran the second sentinel within %s", QuickBound)
	}
	if s3.Job == j {
		r.Violated("%s started again (attempt %d) on W3 after it completed", r.JobName(j), s3.Attempt)
	}
	w3.Finish(s3, queueproto.DoComplete)
	w3.Stop()
	if s3.Job != sentinel2 {
		r.Violated("W3 started %s, which no one enqueued", r.JobName(s3.Job))
	}
	d := r.hello.Delivery
	switch {
	case again && d.Semantics == queueproto.ExactlyOnce:
		r.Violated("the documentation promises %s delivery (%s: %q), and %s's handler started twice: on W1, paused past its lease but alive, and on W2",
			d.Semantics, d.Doc, d.Quote, r.JobName(j))
	case again:
		r.Note("started twice, the second time after W1 paused past its lease: %s delivery", d.Semantics)
	default:
		r.Note("not started again after W1 paused past its lease (within %s)", r.RecoveryBound())
	}
}

func deadWorker(r *Run) {
	c := r.Client()
	j := c.Job(`{"probe":"dead-worker"}`, 1)
	w1 := r.Worker("W1")
	w1.MustStart(j)
	w1.Kill()
	c.Expire(j)
	w2 := r.Worker("W2")
	s, end, ok := w2.AwaitStartOrEnd(c, j, r.RecoveryBound())
	switch {
	case ok:
		r.Note("ran again (attempt %d) after its worker died, although its budget was 1 attempt", s.Attempt)
		mustComplete(r, c, w2, s, "after the worker died")
	case end.State == queueproto.StateFailed || end.State == queueproto.StateCancelled:
		r.Note("ended %s on its own", describe(end))
	case Final(end.State):
		r.Violated("%s ended %s, although no attempt of it completed", r.JobName(j), describe(end))
	default:
		r.Violated("orphaned: %s still reads %s %s after its worker died and its lease expired; nothing ended it without an operator",
			r.JobName(j), describe(end), fmt.Sprintf("(waited %s)", r.RecoveryBound()))
	}
}

func retryBudget(r *Run) {
	const budget = 3
	c := r.Client()
	j := c.Job(`{"probe":"retry-budget"}`, budget)
	w1 := r.Worker("W1")
	starts := 0
	for {
		s, end, ok := w1.AwaitStartOrEnd(c, j, r.RecoveryBound())
		if !ok {
			if !Final(end.State) {
				r.Violated("after %d of %d attempts %s neither ran again nor ended within %s: it reads %s", starts, budget, r.JobName(j), r.RecoveryBound(), describe(end))
			}
			break
		}
		starts++
		w1.Finish(s, queueproto.DoRetry)
		if starts > budget {
			r.Violated("attempt %d of %s started: its budget is %d", starts, r.JobName(j), budget)
		}
		// The queue records the failure: the job waits for its retry (make
		// it due), ends, or is claimed again at once (BullMQ with no
		// backoff): a later attempt reads running.
		i, _ := c.AwaitState(j, QuickBound, func(i queueproto.JobInfo) bool {
			return i.State != queueproto.StateRunning || i.Attempt > s.Attempt
		})
		if i.State == queueproto.StateWaiting {
			c.MakeDue(j)
		}
	}
	end := c.State(j)
	switch {
	case starts < budget:
		r.Violated("%s ended %s after %d attempts: its budget is %d", r.JobName(j), describe(end), starts, budget)
	case end.State != queueproto.StateFailed || end.RawState != r.hello.Exhausted.RawState:
		r.Violated("after its %d attempts failed %s reads %s; the documentation says %q (%s)", budget, r.JobName(j), describe(end), r.hello.Exhausted.RawState, r.hello.Exhausted.Doc)
	}
	sentinel := c.Job(`{"probe":"retry-budget","sentinel":1}`, 0)
	s, ok := w1.AwaitStart("", QuickBound)
	if !ok {
		r.NotExercised("W1 never ran the sentinel within %s", QuickBound)
	}
	if s.Job == j {
		r.Violated("attempt %d of %s started after it ended %s", starts+1, r.JobName(j), describe(end))
	}
	w1.Finish(s, queueproto.DoComplete)
	w1.Stop()
	if s.Job != sentinel {
		r.Violated("W1 started %s, which no one enqueued", r.JobName(s.Job))
	}
}

func cancelVsComplete(r *Run) {
	c := r.Client()
	w1 := r.Worker("W1")
	type order struct {
		name    string
		job     string
		outcome queueproto.CancelResult
	}
	var orders []order
	// A: the cancel lands while the handler is still working.
	ja := c.Job(`{"probe":"cancel-vs-complete","order":"A"}`, 0)
	sa := w1.MustStart(ja)
	oa := c.Cancel(ja)
	w1.Finish(sa, queueproto.DoComplete)
	orders = append(orders, order{"cancel before the handler returned", ja, oa})
	// B: the handler returned; the queue may not have written it yet.
	jb := c.Job(`{"probe":"cancel-vs-complete","order":"B"}`, 0)
	sb := w1.MustStart(jb)
	w1.Finish(sb, queueproto.DoComplete)
	ob := c.Cancel(jb)
	w1.Stop()
	orders = append(orders, order{"cancel after the handler returned, before the worker stopped", jb, ob})
	// C: the completion is written.
	jc := c.Job(`{"probe":"cancel-vs-complete","order":"C"}`, 0)
	w2 := r.Worker("W2")
	sc := w2.MustStart(jc)
	w2.Finish(sc, queueproto.DoComplete)
	w2.Stop()
	oc := c.Cancel(jc)
	orders = append(orders, order{"cancel after the worker stopped", jc, oc})
	for _, o := range orders {
		i := c.State(o.job)
		done := completed(r, i)
		switch {
		case !Final(i.State):
			r.Violated("%s: no winner: %s reads %s after both the cancel (%s) and the completion", o.name, r.JobName(o.job), describe(i), o.outcome.Outcome)
		case o.outcome.Outcome == queueproto.CancelCancelled && i.State != queueproto.StateCancelled:
			r.Violated("%s: cancel answered cancelled, yet %s ended %s: both sides were told they won", o.name, r.JobName(o.job), describe(i))
		case o.outcome.Outcome == queueproto.CancelRefused && !done:
			r.Violated("%s: cancel was refused, yet %s ended %s", o.name, r.JobName(o.job), describe(i))
		case !done && i.State != queueproto.StateCancelled:
			r.Violated("%s: %s ended %s: neither the completion nor the cancel", o.name, r.JobName(o.job), describe(i))
		}
		r.Note("%s: cancel %s, final %s", o.name, o.outcome.Outcome, i.State)
	}
}

func keyDedupe(r *Run) {
	c := r.Client()
	key := "k-" + r.ns
	p, q := `{"probe":"key-dedupe","v":"P"}`, `{"probe":"key-dedupe","v":"Q"}`
	first, qe := c.Enqueue(queueproto.EnqueueParams{Key: key, Payload: []byte(p)})
	if qe != nil {
		r.adapterError(fmt.Errorf("the first enqueue under a fresh key was refused: %v", qe))
	}
	if _, qe := c.Enqueue(queueproto.EnqueueParams{Key: key, Payload: []byte(p)}); qe != nil {
		r.Note("the same key and payload again: answered with an error (%s)", qe.Code)
	}
	if jobs := c.Jobs(); len(jobs) != 1 {
		r.Violated("the same key with the same payload, enqueued twice, left %d jobs", len(jobs))
	}
	_, qe = c.Enqueue(queueproto.EnqueueParams{Key: key, Payload: []byte(q)})
	jobs := c.Jobs()
	if len(jobs) != 1 {
		r.Violated("the same key with another payload left %d jobs", len(jobs))
	}
	switch got := string(jobs[0].Payload); {
	case qe != nil:
		r.Note("another payload under the key: rejected (the queue answered %s; its message is in the steps)", qe.Code)
	case jsonEqual(got, p):
		r.Note("another payload under the key: silently accepted, the first payload kept")
	case jsonEqual(got, q):
		r.Note("another payload under the key: accepted, the payload replaced")
	default:
		r.Note("another payload under the key: accepted; the job's payload reads %s", got)
	}
	if first.Job != "" && jobs[0].Job != first.Job {
		r.Note("the job under the key is %s, not the first enqueue's %s", jobs[0].Job, first.Job)
	}
}

func txEnqueueRollback(r *Run) {
	c := r.Client()
	committed, qe := c.Enqueue(queueproto.EnqueueParams{Payload: []byte(`{"probe":"tx-enqueue-rollback","tx":"commit"}`), Tx: queueproto.TxCommit})
	if qe != nil {
		r.adapterError(fmt.Errorf("an enqueue in a transaction that commits was refused: %v", qe))
	}
	rolled, qe := c.Enqueue(queueproto.EnqueueParams{Payload: []byte(`{"probe":"tx-enqueue-rollback","tx":"rollback"}`), Tx: queueproto.TxRollback})
	if qe != nil {
		r.adapterError(fmt.Errorf("an enqueue in a transaction that rolls back was refused: %v", qe))
	}
	if !committed.SeenInTx || !rolled.SeenInTx {
		r.NotExercised("the job was not visible inside its transaction (commit: %v, rollback: %v)", committed.SeenInTx, rolled.SeenInTx)
	}
	jobs := c.Jobs()
	if len(jobs) != 1 || (committed.Job != "" && jobs[0].Job != committed.Job) {
		r.Violated("after one committed and one rolled-back transactional enqueue the queue holds %d jobs (want the committed one only)", len(jobs))
	}
	if rolled.Job != "" {
		if i := c.State(rolled.Job); i.State != queueproto.StateMissing {
			r.Violated("the job enqueued in the transaction that rolled back reads %s", describe(i))
		}
	}
}

func txCompleteRollback(r *Run) {
	c := r.Client()
	j := c.Job(`{"probe":"tx-complete-rollback","tx":"rollback"}`, attempts(r, 3))
	w1 := r.Worker("W1")
	s := w1.MustStart(j)
	if !w1.CompleteInTx(s, false) {
		r.NotExercised("the job did not read completed inside the transaction")
	}
	if i := c.State(j); i.State != queueproto.StateRunning {
		r.Violated("the completion rolled back with its transaction, yet %s reads %s", r.JobName(j), describe(i))
	}
	mustComplete(r, c, w1, s, "after the rolled-back completion")
	j2 := c.Job(`{"probe":"tx-complete-rollback","tx":"commit"}`, attempts(r, 3))
	w2 := r.Worker("W2")
	s2 := w2.MustStart(j2)
	if !w2.CompleteInTx(s2, true) {
		r.NotExercised("the job did not read completed inside the committed transaction")
	}
	if i := c.State(j2); !completed(r, i) {
		r.Violated("the completion committed with its transaction, yet %s reads %s", r.JobName(j2), describe(i))
	}
	mustComplete(r, c, w2, s2, "after the committed completion")
}

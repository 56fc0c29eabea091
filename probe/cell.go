package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/leasehold/leasehold/queueproto"
)

// Outcome is a run's or a cell's verdict.
type Outcome string

const (
	// Holds: every run that exercised the probe's race kept the promise.
	Holds Outcome = "holds"
	// Violated: every run broke the promise (at least MinRuns of them).
	Violated Outcome = "violated"
	// Intermittent: some runs broke the promise, others did not.
	Intermittent Outcome = "intermittent"
	// Unconfirmed: every run broke the promise, but fewer than MinRuns ran.
	Unconfirmed Outcome = "unconfirmed"
	// NotApplicable: the queue does not offer a feature the probe needs
	// (its documentation cited), or the environment lacks its database.
	NotApplicable Outcome = "not applicable"
	// NotExercised: the race the probe needs never happened.
	NotExercised Outcome = "not exercised"
	// AdapterError: the adapter crashed, hung or broke the protocol: a
	// finding about the adapter, never a pass.
	AdapterError Outcome = "adapter error"
)

// MinRuns is how many runs, all violated, a violation needs to be reported.
const MinRuns = 3

// Cell is one probe on one system: its runs and their verdict.
type Cell struct {
	System  string   `json:"system"`
	Probe   string   `json:"probe"`
	Outcome Outcome  `json:"outcome"`
	Why     string   `json:"why,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	// Violations is how many runs were violated, of the Exercised runs
	// (those that held or were violated; a run whose race did not happen
	// is run again, up to twice the runs asked for).
	Violations int      `json:"violations"`
	Exercised  int      `json:"exercised"`
	Runs       []Result `json:"runs"`
	// Example is the run that shows the verdict (the first violated run,
	// or the first run).
	Example int `json:"example"`
	// Replay is the one-line command that runs the cell again.
	Replay string `json:"replay"`
	// References are the queue's documentation or issues that match a
	// violation; a violation without one is a new finding.
	References []queueproto.Reference `json:"references,omitempty"`
	NewFinding bool                   `json:"new_finding,omitempty"`
}

// runOne runs one probe once on a fresh namespace of t.
func runOne(ctx context.Context, t *target, hello queueproto.Hello, p *Probe) (res Result) {
	r := &Run{ctx: ctx, target: t, hello: hello, ns: newNamespace(), begun: time.Now(), byName: map[string]*Proc{}}
	res.Namespace = r.ns
	defer func() {
		res.Seconds = time.Since(r.begun).Seconds()
	}()
	if err := t.prepare(r.ns); err != nil {
		return Result{Outcome: AdapterError, Why: fmt.Sprintf("preparing namespace %s: %v", r.ns, err), Namespace: r.ns}
	}
	res.Outcome, res.Why = r.play(p)
	// The rows of every job, for a violation; the processes closed; a
	// finding met while closing is the run's if nothing else was.
	if res.Outcome == Violated {
		res.Rows = r.rows()
	}
	if err := r.close(); err != nil && res.Outcome != AdapterError && res.Outcome != Violated {
		res.Outcome, res.Why = AdapterError, err.Error()
	}
	if err := t.cleanup(r.ns); err != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("cleaning namespace %s up: %v", r.ns, err))
	}
	r.mu.Lock()
	res.Steps = r.steps
	res.Notes = append(r.notes, res.Notes...)
	res.Starts = map[string]int{}
	for _, s := range r.starts {
		res.Starts[r.jobNameLocked(s.ev.Job)]++
	}
	r.mu.Unlock()
	return res
}

// play runs the script, turning its aborts into an outcome; after a script
// that ended well it checks that every start was explained.
func (r *Run) play(p *Probe) (outcome Outcome, why string) {
	defer func() {
		if v := recover(); v != nil {
			a, ok := v.(abort)
			if !ok {
				outcome, why = AdapterError, fmt.Sprintf("probe bug: panic: %v\n%s", v, debug.Stack())
				return
			}
			outcome, why = a.outcome, a.why
		}
	}()
	p.run(r)
	if u := r.unexplained(); u != "" {
		r.logf("runner", "VIOLATION: %s", u)
		return Violated, u
	}
	return Holds, ""
}

// rows reads the queue's records of every job the run touched, through a
// fresh client (the run's own may be dead).
func (r *Run) rows() (rows map[string][]json.RawMessage) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(abort); !ok {
				panic(v)
			}
		}
	}()
	r.mu.Lock()
	jobs := append([]string(nil), r.jobs...)
	for _, s := range r.starts {
		if !contains(jobs, s.ev.Job) {
			jobs = append(jobs, s.ev.Job)
		}
	}
	r.mu.Unlock()
	rows = map[string][]json.RawMessage{}
	c := r.proc("rows")
	for _, j := range jobs {
		var res queueproto.RowsResult
		c.must(queueproto.OpRows, queueproto.JobParams{Job: j}, &res, "")
		rows[r.JobName(j)] = res.Rows
	}
	return rows
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// close ends every process: resumed if paused, its input closed; it
// returns the first finding.
func (r *Run) close() error {
	r.mu.Lock()
	procs := append([]*Proc(nil), r.procs...)
	r.mu.Unlock()
	var first error
	for _, p := range procs {
		p.p.Resume()
		if err := p.p.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// RestartDatabase kills every process, crashes the database and starts it
// again; it returns what happened and whether the server really restarted.
func (r *Run) RestartDatabase() (string, bool) {
	r.KillAll()
	r.logf("runner", "crash and restart the database")
	what, ok, err := r.target.restart()
	if err != nil {
		r.adapterError(fmt.Errorf("restarting the database: %w", err))
	}
	r.logf("runner", "%s", what)
	return what, ok
}

// verdict decides a cell from its runs: a violation needs every exercised
// run, and at least MinRuns of them.
func verdict(c *Cell) {
	counts := map[Outcome]int{}
	first := map[Outcome]int{}
	for i, res := range c.Runs {
		if _, seen := first[res.Outcome]; !seen {
			first[res.Outcome] = i
		}
		counts[res.Outcome]++
	}
	c.Violations = counts[Violated]
	c.Exercised = counts[Violated] + counts[Holds]
	switch {
	case counts[AdapterError] > 0:
		c.Outcome, c.Example = AdapterError, first[AdapterError]
	case c.Exercised == 0:
		c.Outcome, c.Example = NotExercised, first[NotExercised]
	case c.Violations == c.Exercised && c.Exercised >= MinRuns:
		c.Outcome, c.Example = Violated, first[Violated]
	case c.Violations == c.Exercised:
		c.Outcome, c.Example = Unconfirmed, first[Violated]
	case c.Violations > 0:
		c.Outcome, c.Example = Intermittent, first[Violated]
	default:
		c.Outcome, c.Example = Holds, first[Holds]
	}
	ex := c.Runs[c.Example]
	c.Why = ex.Why
	switch c.Outcome {
	case Intermittent:
		c.Why = fmt.Sprintf("violated in %d of %d exercised runs: %s", c.Violations, c.Exercised, ex.Why)
	case Unconfirmed:
		c.Why = fmt.Sprintf("violated in %d of %d exercised runs (at least %d are needed to report a violation): %s", c.Violations, c.Exercised, MinRuns, ex.Why)
	}
	if k := counts[NotExercised]; k > 0 && c.Exercised > 0 {
		c.Why = strings.TrimSpace(fmt.Sprintf("%s (%d more runs did not exercise the race: %s)", c.Why, k, c.Runs[first[NotExercised]].Why))
	}
	seen := map[string]bool{}
	for _, res := range c.Runs {
		for _, note := range res.Notes {
			if !seen[note] && !strings.HasPrefix(note, "cleaning namespace") {
				seen[note] = true
				c.Notes = append(c.Notes, note)
			}
		}
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

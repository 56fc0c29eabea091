package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/queueproto"
)

// Config is one `leasehold probe` run.
type Config struct {
	Systems []System
	// Probes names the probes to run (empty: every probe).
	Probes []string
	// Runs is how many times each cell runs; a violation is reported only
	// when every run shows it and Runs >= MinRuns.
	Runs int
	Env  Env
	// NoBuild skips the systems' build commands.
	NoBuild bool
	// Jobs is how many systems are probed at once (default 1); each
	// system's cells run one after another.
	Jobs int
	// Progress receives one line per run (nil: none).
	Progress io.Writer
	// Replay is the command prefix of every replay line ("go run
	// ./cmd/leasehold probe").
	Replay string
}

// Report is the matrix and everything behind it (reports/peers.json).
type Report struct {
	Version  int           `json:"version"`
	Started  time.Time     `json:"started"`
	Seconds  float64       `json:"seconds"`
	Commit   string        `json:"commit,omitempty"`
	Runs     int           `json:"runs"`
	Probes   []Probe       `json:"probes"`
	Systems  []SystemRow   `json:"systems"`
	Skipped  []string      `json:"skipped,omitempty"`
	Outcomes []OutcomeNote `json:"outcomes"`
}

// SystemRow is one system: its hello and its cells, in Probes' order.
type SystemRow struct {
	System System            `json:"system"`
	Hello  *queueproto.Hello `json:"hello,omitempty"`
	// Error is why the system could not be probed at all (build, hello).
	Error string `json:"error,omitempty"`
	Cells []Cell `json:"cells"`
}

// OutcomeNote says what an outcome means, for the report's legend.
type OutcomeNote struct {
	Outcome Outcome `json:"outcome"`
	Means   string  `json:"means"`
}

var legend = []OutcomeNote{
	{Holds, "every run that exercised the race kept the promise"},
	{Violated, fmt.Sprintf("every exercised run (at least %d) broke the promise: the example run's steps, the rows it left and a replay command follow", MinRuns)},
	{Intermittent, "some exercised runs broke the promise and others did not: the rate is given"},
	{Unconfirmed, fmt.Sprintf("every exercised run broke the promise, but fewer than %d ran", MinRuns)},
	{NotApplicable, "the queue does not offer what the probe needs (its documentation cited)"},
	{NotExercised, "the race the probe needs never happened: no verdict (a run that does not exercise it is run again, up to twice the runs)"},
	{AdapterError, "the adapter crashed, hung or broke the protocol: a finding about the adapter, never a pass"},
}

// ProbeAll runs every selected probe on every system.
func ProbeAll(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Runs < 1 {
		return nil, fmt.Errorf("runs %d: want at least 1 (%d to report a violation)", cfg.Runs, MinRuns)
	}
	probes := Probes
	if len(cfg.Probes) > 0 {
		probes = nil
		for _, name := range cfg.Probes {
			p := FindProbe(name)
			if p == nil {
				return nil, fmt.Errorf("no probe %q (the probes: %s)", name, strings.Join(ProbeNames(), ", "))
			}
			probes = append(probes, *p)
		}
	}
	if cfg.Env.TmpDir == "" {
		dir, err := os.MkdirTemp("", "leasehold-probe-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		cfg.Env.TmpDir = dir
	}
	rep := &Report{Version: 1, Started: time.Now().UTC(), Runs: cfg.Runs, Probes: probes, Outcomes: legend}
	rep.Systems = make([]SystemRow, len(cfg.Systems))
	sem := make(chan struct{}, max(cfg.Jobs, 1))
	var wg sync.WaitGroup
	for i, sys := range cfg.Systems {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rep.Systems[i] = probeSystem(ctx, cfg, sys, probes)
		}()
	}
	wg.Wait()
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, ctx.Err()
}

var progressMu sync.Mutex

func (cfg Config) progress(format string, args ...any) {
	if cfg.Progress != nil {
		progressMu.Lock()
		defer progressMu.Unlock()
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

// HelloOf starts one process of sys and returns its validated hello.
func HelloOf(ctx context.Context, sys System) (queueproto.Hello, error) {
	p, err := queueproto.Start(queueproto.Command{Cmd: sys.Run, Dir: sys.Dir}, "hello", queueproto.Hooks{})
	if err != nil {
		return queueproto.Hello{}, err
	}
	var h queueproto.Hello
	err = p.Call(ctx, queueproto.OpHello, queueproto.HelloParams{Protocol: queueproto.Version}, &h)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return h, err
	}
	if err := h.Validate(ProbeNames()); err != nil {
		return h, err
	}
	if h.System != sys.Name {
		return h, fmt.Errorf("the adapter says it is %q; the system is listed as %q", h.System, sys.Name)
	}
	return h, nil
}

func probeSystem(ctx context.Context, cfg Config, sys System, probes []Probe) SystemRow {
	row := SystemRow{System: sys}
	fail := func(err error) SystemRow {
		row.Error = err.Error()
		for _, p := range probes {
			row.Cells = append(row.Cells, Cell{System: sys.Name, Probe: p.Name, Outcome: AdapterError, Why: err.Error(), Replay: cfg.replay(sys, p)})
		}
		cfg.progress("%s: %v", sys.Name, firstLine(err.Error()))
		return row
	}
	if !cfg.NoBuild && sys.Build != "" {
		cfg.progress("%s: building (%s)", sys.Name, sys.Build)
		if err := BuildSystem(ctx, sys); err != nil {
			return fail(err)
		}
	}
	hello, err := HelloOf(ctx, sys)
	if err != nil {
		return fail(err)
	}
	row.Hello = &hello
	for _, p := range probes {
		row.Cells = append(row.Cells, probeCell(ctx, cfg, sys, hello, &p))
		if ctx.Err() != nil {
			break
		}
	}
	return row
}

func (cfg Config) replay(sys System, p Probe) string {
	prefix := cfg.Replay
	if prefix == "" {
		prefix = "go run ./cmd/leasehold probe"
	}
	return fmt.Sprintf("%s %s --probe %s --runs %d", prefix, sys.Flag, p.Name, max(cfg.Runs, MinRuns))
}

func probeCell(ctx context.Context, cfg Config, sys System, hello queueproto.Hello, p *Probe) Cell {
	c := Cell{System: sys.Name, Probe: p.Name, Replay: cfg.replay(sys, *p)}
	for _, f := range p.Needs {
		if feat := hello.Features[f]; !feat.Supported {
			c.Outcome = NotApplicable
			c.Why = fmt.Sprintf("%s does not offer %s: %s", sys.Name, f, feat.Doc)
			if feat.Note != "" {
				c.Why += " (" + feat.Note + ")"
			}
			cfg.progress("%s %s: not applicable (%s)", sys.Name, p.Name, f)
			return c
		}
	}
	t := &target{sys: sys, command: queueproto.Command{Cmd: sys.Run, Dir: sys.Dir}, needs: hello.Needs, env: &cfg.Env,
		cell: sys.Name + "/" + p.Name, postgres: cfg.Env.PostgresDSN, redis: cfg.Env.RedisURL}
	if p.Restart {
		if err := t.private(hello); err != nil {
			c.Outcome, c.Why = AdapterError, fmt.Sprintf("starting a private database server to restart: %v", err)
			return c
		}
		defer t.close()
	}
	if m := t.missing(); m != "" {
		c.Outcome, c.Why = NotApplicable, "the environment has no "+m
		cfg.progress("%s %s: not applicable (no %s)", sys.Name, p.Name, m)
		return c
	}
	// Runs exercised runs are wanted; a run whose race did not happen is
	// run again, up to twice as many runs, unless none of the first Runs
	// exercised it (then it never will).
	exercised := 0
	for i := 0; exercised < cfg.Runs && i < 2*cfg.Runs && (exercised > 0 || i < cfg.Runs); i++ {
		res := runOne(ctx, t, hello, p)
		c.Runs = append(c.Runs, res)
		if res.Outcome == Holds || res.Outcome == Violated {
			exercised++
		}
		cfg.progress("%s %s: run %d (%d of %d exercised): %s (%.1fs)%s", sys.Name, p.Name, i+1, exercised, cfg.Runs, res.Outcome, res.Seconds, short(res.Why))
		if res.Outcome == AdapterError || errors.Is(ctx.Err(), context.Canceled) {
			break
		}
	}
	verdict(&c)
	if c.Outcome == Violated || c.Outcome == Intermittent || c.Outcome == Unconfirmed {
		for _, ref := range hello.References {
			if ref.Probe == p.Name {
				c.References = append(c.References, ref)
			}
		}
		c.NewFinding = len(c.References) == 0
	}
	return c
}

func short(why string) string {
	if why == "" {
		return ""
	}
	return ": " + firstLine(why)
}

// Matrix returns the outcome of every cell: systems × probes.
func (rep *Report) Matrix() map[string]map[string]Outcome {
	m := map[string]map[string]Outcome{}
	for _, row := range rep.Systems {
		m[row.System.Name] = map[string]Outcome{}
		for _, c := range row.Cells {
			m[row.System.Name][c.Probe] = c.Outcome
		}
	}
	return m
}

// Failed reports whether a system of names (a control row) did not hold a
// probe it was applicable to; it returns the cells that did not.
func (rep *Report) Failed(names ...string) []Cell {
	var bad []Cell
	for _, row := range rep.Systems {
		if !slices.Contains(names, row.System.Name) {
			continue
		}
		for _, c := range row.Cells {
			if c.Outcome != Holds && c.Outcome != NotApplicable {
				bad = append(bad, c)
			}
		}
	}
	return bad
}

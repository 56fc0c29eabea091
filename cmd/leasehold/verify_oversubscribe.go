package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
)

// A check of verify itself: its verdicts must not depend on how loaded the
// machine is, since no check asserts anything about elapsed time.
// --oversubscribe runs the checks beside CPU-burning processes, and
// --same-verdicts-as compares the run's verdicts with a quiet run's (make
// verify-oversubscribed does both). Depth is not compared: a loaded machine
// explores less in the same budget, and says so in its headline.

// burnCPU starts round(perCore x cores) processes that each keep one core
// busy until stop is called. They are plain shell loops, so that they
// compete with the checks as any other load would.
func burnCPU(perCore float64) (n int, stop func(), err error) {
	n = int(math.Round(perCore * float64(runtime.NumCPU())))
	var procs []*exec.Cmd
	stop = func() {
		for _, p := range procs {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			p.Wait()
		}
	}
	for range n {
		p := exec.Command("sh", "-c", "while :; do :; done")
		p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := p.Start(); err != nil {
			stop()
			return 0, nil, fmt.Errorf("start a CPU-burning process: %w", err)
		}
		procs = append(procs, p)
	}
	return n, stop, nil
}

// readVerifyReport reads a verify.json.
func readVerifyReport(path string) (verifyReport, error) {
	var rep verifyReport
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("not a verify.json: %w", err)
	}
	if rep.Verdict == "" || len(rep.Checks) == 0 {
		return rep, fmt.Errorf("no verdict or no checks in it")
	}
	return rep, nil
}

// verdictDiffs lists how got's verdicts differ from want's: the run's
// verdict (judged without --min-depth, which a loaded machine's shallower
// run may not meet), and each check's status, a check missing from either
// run included.
func verdictDiffs(want, got verifyReport) []string {
	var diffs []string
	plain := func(r verifyReport) string { return verdictOf(r.Checks, len(r.Checks), nil) }
	if w, g := plain(want), plain(got); w != g {
		diffs = append(diffs, fmt.Sprintf("verdict %s, was %s", g, w))
	}
	key := func(c checkResult) string { return c.Name + "/" + c.Store }
	for _, w := range want.Checks {
		i := slices.IndexFunc(got.Checks, func(g checkResult) bool { return key(g) == key(w) })
		switch {
		case i < 0:
			diffs = append(diffs, fmt.Sprintf("%s did not run, was %s", key(w), w.Status))
		case got.Checks[i].Status != w.Status:
			g := got.Checks[i]
			d := fmt.Sprintf("%s %s, was %s", key(g), g.Status, w.Status)
			if len(g.Failures) > 0 {
				d += fmt.Sprintf(" (failed: %v)", g.Failures)
			}
			if g.Note != "" {
				d += ": " + g.Note
			}
			diffs = append(diffs, d)
		}
	}
	for _, g := range got.Checks {
		if !slices.ContainsFunc(want.Checks, func(w checkResult) bool { return key(w) == key(g) }) {
			diffs = append(diffs, fmt.Sprintf("%s %s, did not run", key(g), g.Status))
		}
	}
	return diffs
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/leasehold/leasehold/harness"
)

// replay re-runs kept failfiles: every one under reports/failfiles, or the
// one given. A regression ("expect": "pass") must pass; a mutant's failfile
// ("expect": "fail") must still fail, proving it still reproduces the bug.
func replay(ctx context.Context, out io.Writer, reports string, files []string) error {
	var kept []harness.Kept
	if len(files) == 0 {
		var err error
		if kept, err = harness.KeptFailfiles(reports); err != nil {
			return err
		}
		if len(kept) == 0 {
			fmt.Fprintf(out, "no kept failfiles under %s/failfiles: nothing to replay\n", reports)
			return nil
		}
	}
	for _, f := range files {
		body, err := os.ReadFile(f + ".json")
		if err != nil {
			return fmt.Errorf("%s has no sidecar %s.json saying how to replay it: %w", f, f, err)
		}
		var k harness.Kept
		if err := json.Unmarshal(body, &k); err != nil {
			return fmt.Errorf("%s.json: %w", f, err)
		}
		kept = append(kept, k)
	}
	bad := 0
	for _, k := range kept {
		abs, err := filepath.Abs(k.File)
		if err != nil {
			return err
		}
		args := []string{"test"}
		if k.Tags != "" {
			args = append(args, "-tags", k.Tags)
		}
		args = append(args, k.Package, "-count=1", "-run", harness.RunPattern(k.Test), "-rapid.failfile="+abs)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = os.Environ()
		for name, v := range k.Env {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
		output, runErr := cmd.CombinedOutput()
		passed := runErr == nil
		verdict := "ok"
		switch {
		case k.Expect == "fail" && !passed:
			verdict = "ok (still reproduces: expected)"
		case k.Expect == "fail":
			verdict, bad = "NO LONGER REPRODUCES", bad+1
		case !passed:
			verdict, bad = "FAILS", bad+1
		}
		fmt.Fprintf(out, "%-32s seed %-20s expect %-4s -> %s\n    %s\n", filepath.Base(k.File), k.Seed, k.Expect, verdict, k.Command)
		if verdict == "FAILS" || verdict == "NO LONGER REPRODUCES" {
			fmt.Fprintf(out, "%s\n", lastLines(string(output), 30))
		}
		if verdict == "NO LONGER REPRODUCES" {
			fmt.Fprintf(out, "    (a generator or the mutant changed: delete %s and rerun its test to keep a fresh one)\n", filepath.Dir(k.File))
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d kept failfiles did not replay as expected", bad, len(kept))
	}
	fmt.Fprintf(out, "%d kept failfiles replayed as expected\n", len(kept))
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/harness/report"
)

var replayCommand = &command{
	name:    "replay",
	summary: "replay every kept failing seed under reports/failfiles (or the files given)",
	usage:   "replay [--reports DIR] [FILE.fail | FILE.fail.json ...]",
	help: `Re-runs kept rapid failfiles. A regression ("expect": "pass") must pass; a mutant's failfile
("expect": "fail") must still fail, proving it still reproduces the bug. A failfile of a
PostgreSQL test cannot be replayed without a PostgreSQL server: it is reported as skipped and the
run is incomplete (exit status 1), never ok.`,
	env: pgEnv,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		reports := fs.String("reports", "reports", "directory holding failfiles/")
		return func(ctx context.Context, args []string) error { return replay(ctx, o.out, *reports, args) }
	},
}

// replay re-runs kept failfiles: every one under reports/failfiles, or the
// ones given (a failfile or its sidecar).
func replay(ctx context.Context, out io.Writer, reports string, files []string) error {
	var kept []report.Kept
	if len(files) == 0 {
		// A mistyped --reports (or a run outside the repository root) is not
		// "nothing to replay".
		if st, err := os.Stat(filepath.Join(reports, "failfiles")); err != nil || !st.IsDir() {
			return usagef("--reports %s: there is no %s directory (kept failfiles are under reports/failfiles: run from the repository root, or name the directory that holds failfiles/)",
				reports, filepath.Join(reports, "failfiles"))
		}
		var err error
		if kept, err = report.KeptFailfiles(reports); err != nil {
			return err
		}
		if len(kept) == 0 {
			fmt.Fprintf(out, "no kept failfiles under %s/failfiles: nothing to replay\n", reports)
			return nil
		}
	}
	for _, f := range files {
		f = strings.TrimSuffix(f, ".json")
		body, err := os.ReadFile(f + ".json")
		if err != nil {
			return fmt.Errorf("%s has no sidecar %s.json saying how to replay it: %w", f, f, err)
		}
		var k report.Kept
		if err := json.Unmarshal(body, &k); err != nil {
			return fmt.Errorf("%s.json: %w", f, err)
		}
		kept = append(kept, k)
	}
	bad, skipped := 0, 0
	pgProblem := ""
	if dsn := pgDSN(); dsn == "" {
		pgProblem = "no PostgreSQL configured (set LEASEHOLD_PG_DSN)"
	} else if err := probePostgres(ctx, dsn); err != nil {
		pgProblem = fmt.Sprintf("PostgreSQL does not answer at %s: %v", redactDSN(dsn), err)
	}
	for _, k := range kept {
		if (k.Store == "postgres" || strings.Contains(k.Test, "Postgres")) && pgProblem != "" {
			skipped++
			fmt.Fprintf(out, "%-32s seed %-20s expect %-4s -> SKIPPED: %s\n    %s\n", filepath.Base(k.File), k.Seed, k.Expect, pgProblem, k.Command)
			continue
		}
		if why := harness.StaleFailfile(k); why != "" {
			bad++
			fmt.Fprintf(out, "%-32s seed %-20s expect %-4s -> REFUSED (stale)\n    %s\n", filepath.Base(k.File), k.Seed, k.Expect, why)
			continue
		}
		abs, err := filepath.Abs(k.File)
		if err != nil {
			return err
		}
		args := []string{"test"}
		if k.Tags != "" {
			args = append(args, "-tags", k.Tags)
		}
		args = append(args, k.Package, "-count=1", "-run", report.RunPattern(k.Test), "-rapid.failfile="+abs)
		cmd := exec.CommandContext(ctx, "go", args...)
		// A PostgreSQL test must fail, not skip, when its server is missing.
		cmd.Env = append(os.Environ(), "LEASEHOLD_REQUIRE_PG=1")
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
	if skipped > 0 {
		fmt.Fprintf(out, "INCOMPLETE: %d kept failfiles replayed as expected, %d skipped\n", len(kept)-skipped, skipped)
		return errors.New("INCOMPLETE: some kept failfiles could not be replayed")
	}
	fmt.Fprintf(out, "%d kept failfiles replayed as expected\n", len(kept))
	return nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/bench"
)

// benchModule is the benchmark program's directory, relative to the
// repository root.
const benchModule = "bench/river"

var benchCommand = &command{
	name:    "bench",
	summary: "leasehold against River (PostgreSQL and SQLite) and the database's commit ceiling",
	usage:   "bench [--quick] [flags]",
	help: `Measures leasehold against River (riverpgxv5 on PostgreSQL, riversqlite on SQLite) and against
the database's own commit ceiling, and writes bench.json, bench.md and bench.html (package bench
documents what is measured). Every leasehold / River ratio is the median of --rounds alternating
rounds with its min–max; a ratio whose spread exceeds 20 % of its median is reported as "noisy: not
readable". The benchmark program is the separate module bench/river (it imports River); flags are
checked here first, so a usage error or -h needs neither River nor a database.`,
	env: pgEnv,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		c := bench.NewCommandLine(filepath.Join("reports", "latest"))
		c.Flags.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			pass, err := benchArgs(fs, c.Reports)
			if err != nil {
				return usagef("%v", err)
			}
			return benchCmd(ctx, o.out, o.err, pass)
		}
	},
}

// benchArgs are the flags set on fs as the benchmark program gets them,
// --reports defaulting to reports. They are checked first as the program
// will parse them, from the flags that were set: parsing nothing into the
// flags' own values instead took every flag as unset and overwrote
// --etcd with its mode's default.
func benchArgs(fs *flag.FlagSet, reports string) ([]string, error) {
	var pass []string
	fs.Visit(func(f *flag.Flag) { pass = append(pass, "--"+f.Name+"="+f.Value.String()) })
	if err := bench.NewCommandLine(reports).Parse(pass); err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(pass, func(a string) bool { return strings.HasPrefix(a, "--reports=") }) {
		pass = append(pass, "--reports="+reports)
	}
	return pass, nil
}

// benchCmd runs `leasehold bench`: leasehold against River and against the
// database's own commit ceiling, writing reports/bench.json and
// reports/bench.md (package bench documents what is measured).
//
// Why it runs another program: comparing with River in the same run means
// the benchmark program must import River, and leasehold's own module must
// not (its dependency graph must not grow). The benchmark code lives in
// package bench, a module of its own (tested by make test); the program that
// plugs River into it is the separate module bench/river, which requires
// leasehold through a replace to this repository and River from the module
// proxy (its go.sum is committed). This command finds the repository that
// contains the working directory and runs `go run .` in bench/river with
// the same arguments, so `leasehold bench` and `make bench` work from a
// clean clone with nothing but Go, the module proxy and PostgreSQL. A
// --reports directory is resolved against the caller's working directory
// first, since the program runs in another one.
func benchCmd(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	args, err = absReports(args)
	if err != nil {
		return err
	}
	hasRepo := false
	for _, a := range args {
		if a == "--repo" || a == "-repo" || strings.HasPrefix(a, "--repo=") || strings.HasPrefix(a, "-repo=") {
			hasRepo = true
		}
	}
	if !hasRepo {
		args = append([]string{"--repo", root}, args...)
	}
	goTool := "go"
	if g := os.Getenv("GO"); g != "" {
		goTool = g
	}
	cmd := exec.CommandContext(ctx, goTool, append([]string{"run", "."}, args...)...)
	cmd.Dir = filepath.Join(root, benchModule)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, stdout, stderr
	// The bench module is its own module; a go.work of the caller must not
	// pull it into another build list.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("bench: the benchmark program (%s) failed: %v", benchModule, err)
		}
		return fmt.Errorf("bench: cannot run the benchmark program in %s: %w", cmd.Dir, err)
	}
	return nil
}

// repoRoot is the nearest directory, from the working directory up, that
// holds bench/river/go.mod beside leasehold's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, benchModule, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("bench: run it inside the leasehold repository (no " + benchModule + "/go.mod above the working directory)")
		}
		dir = parent
	}
}

// absReports makes the values of --reports and --render (either spelling,
// either form) absolute, --reports defaulting to ./reports of the caller.
func absReports(args []string) ([]string, error) {
	out := append([]string(nil), args...)
	found := false
	for i := 0; i < len(out); i++ {
		a := out[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "reports" && name != "render") {
			continue
		}
		found = found || name == "reports"
		if !hasValue {
			if i+1 >= len(out) {
				return nil, errors.New("bench: --" + name + " needs a directory")
			}
			i++
			value = out[i]
		}
		abs, err := filepath.Abs(value)
		if err != nil {
			return nil, err
		}
		if hasValue {
			out[i] = "--" + name + "=" + abs
		} else {
			out[i] = abs
		}
	}
	if !found {
		abs, err := filepath.Abs("reports")
		if err != nil {
			return nil, err
		}
		out = append(out, "--reports", abs)
	}
	return out, nil
}

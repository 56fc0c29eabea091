package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// compileEvery is how often the compile phase says it is still at work
// when no package has finished for that long (a cold build cache takes
// minutes).
const compileEvery = 20 * time.Second

// build is one compilation the checks need: the tests of some packages
// with some build tags, or one package's fuzzing build (instrumented, as
// go test -fuzz builds it, one package at a time).
type build struct {
	module   string // the directory of a module of its own ("": this one)
	tags     string
	packages []string
	fuzz     string // a fuzz target of packages[0]: its instrumented build
}

// builds returns the compilations the checks cs need, each once: one per
// module and set of build tags, and one per package with a fuzz check.
func builds(cs []check) []build {
	var out []build
	for _, c := range cs {
		if len(c.Fuzz) > 0 {
			if !slices.ContainsFunc(out, func(b build) bool { return b.fuzz != "" && b.packages[0] == c.Package }) {
				out = append(out, build{tags: c.Tags, packages: []string{c.Package}, fuzz: c.Fuzz[0]})
			}
			continue
		}
		i := slices.IndexFunc(out, func(b build) bool { return b.fuzz == "" && b.tags == c.Tags && b.module == c.Module })
		if i < 0 {
			out = append(out, build{module: c.Module, tags: c.Tags})
			i = len(out) - 1
		}
		if !slices.Contains(out[i].packages, c.Package) {
			out[i].packages = append(out[i].packages, c.Package)
		}
	}
	return out
}

// compileChecks compiles the tests of every check in cs before any runs
// (go test with no test to run, which links each test binary and runs
// only its TestMain), printing each package as it is done and, while none
// is, that it is still compiling. It returns how long that took and how
// many packages it built. Compiling does not depend on the budget: done
// first, it is taken from no check's share and from no fixed-work check's
// time. A build that fails is left for its checks to report.
func compileChecks(ctx context.Context, cs []check, o verifyOptions) (time.Duration, int) {
	start := time.Now()
	bs := builds(cs)
	total := 0
	for _, b := range bs {
		total += len(b.packages)
	}
	var mu sync.Mutex
	done := 0
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(o.out.out, format, args...)
	}
	say("compiling the checks' tests: %d packages (a cold build cache takes minutes)\n", total)
	stop := make(chan struct{})
	defer close(stop)
	last := time.Now()
	go func() {
		tick := time.NewTicker(compileEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				quiet := time.Since(last) >= compileEvery
				n := done
				mu.Unlock()
				if quiet {
					say("  still compiling: %d of %d packages done, %s so far\n", n, total, time.Since(start).Round(time.Second))
				}
			}
		}
	}()
	for _, b := range bs {
		if ctx.Err() != nil {
			break
		}
		compileOne(ctx, b, o, func(pkg string) {
			mu.Lock()
			done++
			last = time.Now()
			n := done
			mu.Unlock()
			say("  compiled %s (%d/%d, %s)\n", pkg, n, total, time.Since(start).Round(100*time.Millisecond))
		})
	}
	took := time.Since(start)
	say("compiled the checks' tests in %.1fs\n", took.Seconds())
	return took, total
}

// compileOne runs one build, calling compiled with each package's import
// path once its test binary has been built (test2json's start event).
func compileOne(ctx context.Context, b build, o verifyOptions, compiled func(pkg string)) {
	args := []string{"test", "-json", "-count=1", "-run", "^$"}
	if b.fuzz != "" {
		args = append(args, "-fuzz", "^"+b.fuzz+"$", "-fuzztime", "1x")
	}
	if b.tags != "" {
		args = append(args, "-tags", b.tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, b.packages...)...)
	cmd.Dir = b.module
	cmd.Env = append(os.Environ(), "LEASEHOLD_BUDGET=", "LEASEHOLD_REPORTS="+absPath(o.reports))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return
	}
	cmd.Stderr = io.Discard
	if cmd.Start() != nil {
		return
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	seen := map[string]bool{}
	for sc.Scan() {
		var ev struct{ Action, Package, Test string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test != "" || seen[ev.Package] {
			continue
		}
		// start: the binary was built and runs; fail or skip without a
		// start: the build failed, which its checks will report.
		if ev.Action == "start" || ev.Action == "fail" || ev.Action == "skip" {
			seen[ev.Package] = true
			name := strings.TrimPrefix(ev.Package, modulePath+"/")
			if b.fuzz != "" {
				name += " (fuzzing build)"
			}
			compiled(name)
		}
	}
	cmd.Wait()
}

// modulePath is the module's import path, trimmed from package names in
// progress lines.
const modulePath = "github.com/leasehold/leasehold"

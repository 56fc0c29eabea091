package storeproto

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// Environment variables read by FromEnv.
const (
	// EnvCmd is the store command (run with sh -c).
	EnvCmd = "LEASEHOLD_STORE_CMD"
	// EnvDir is the directory the command runs in (default: the
	// repository root, so that a command written for it works from any
	// package's tests and from every replay command).
	EnvDir = "LEASEHOLD_STORE_DIR"
	// EnvTimeout bounds the store's silence (a Go duration; default
	// DefaultTimeout, or hang.EnvPatience when set).
	EnvTimeout = "LEASEHOLD_STORE_TIMEOUT"
)

// Command is a store command: a process that speaks the protocol on its
// stdin and stdout.
type Command struct {
	// Line is run with sh -c, so it may set environment variables and take
	// arguments: "LEASEHOLD_PY_BUG=x python3 ports/python-sqlite/store.py".
	Line string
	// Dir is its working directory ("": the current one).
	Dir string
	// Env is added to the harness's environment.
	Env []string
	// Timeout bounds the store's silence while the harness waits for it
	// (0: DefaultTimeout, or hang.EnvPatience when set).
	Timeout time.Duration
	// Stderr, when set, also receives the store's stderr (the last lines
	// are kept for findings in any case).
	Stderr io.Writer
}

// Start starts one process of the command and opens its session. Findings
// go to fs (which may be nil). The error is a *Finding when the process did
// not start, did not answer open, or answered it wrongly.
func (c Command) Start(ctx context.Context, s Session, fs *Findings) (*Conn, error) {
	s.defaults()
	timeout := c.timeout()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	cmd := exec.Command("sh", "-c", c.Line)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdin, cmd.Stdout = stdinR, stdoutW
	errTail := newTail(40)
	cmd.Stderr = errTail
	if c.Stderr != nil {
		cmd.Stderr = io.MultiWriter(errTail, c.Stderr)
	}
	ownProcessGroup(cmd)
	startErr := cmd.Start()
	stdinR.Close()
	stdoutW.Close()
	conn := &Conn{name: c.Line, session: s, timeout: timeout, findings: fs, w: stdinW,
		lines: make(chan lineOrErr, 16), stderr: errTail}
	if startErr != nil {
		stdinW.Close()
		stdoutR.Close()
		f := &Finding{Store: c.Line, What: fmt.Sprintf("the store command did not start: %v", startErr)}
		fs.add(f)
		return nil, f
	}
	conn.proc, conn.exited = cmd, make(chan struct{})
	go func() {
		conn.waitErr = cmd.Wait()
		close(conn.exited)
	}()
	go readLines(stdoutR, conn.lines)
	conn.closeFn = func() {
		<-conn.exited
		stdoutR.Close()
	}
	if err := conn.open(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// FromEnv returns the command of LEASEHOLD_STORE_CMD (ok false when it is
// unset), run in LEASEHOLD_STORE_DIR or else dir, with the timeout of
// LEASEHOLD_STORE_TIMEOUT.
func FromEnv(dir string) (Command, bool, error) {
	line := strings.TrimSpace(os.Getenv(EnvCmd))
	if line == "" {
		return Command{}, false, nil
	}
	c := Command{Line: line, Dir: dir}
	if d := os.Getenv(EnvDir); d != "" {
		c.Dir = d
	}
	if v := os.Getenv(EnvTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, true, fmt.Errorf("%s=%q: want a positive Go duration such as 2m", EnvTimeout, v)
		}
		c.Timeout = d
	}
	return c, true, nil
}

// Factory returns a storetest.Factory whose every call gives a fresh
// database (a new temporary directory of the test) and starts a process on
// it for the Handle's store; Reopen and OpenWith start more processes on the
// same database. The Handle declares the capabilities the store's open reply
// lists; a store that lists complete_batch is a spec.BatchCompleter, one
// that lists create_runs a spec.BatchCreator. When
// the test ends, every process is closed and every finding of any of them
// fails the test, even one a check tolerated.
func (c Command) Factory() storetest.Factory {
	return func(t testing.TB, opts storetest.Options) storetest.Handle {
		t.Helper()
		db := t.TempDir()
		fs := &Findings{}
		// Registered after TempDir's removal, so it runs before it: the
		// processes are gone before their database is.
		t.Cleanup(func() {
			for _, f := range fs.List() {
				t.Errorf("%v", f)
			}
		})
		var opened atomic.Bool
		open := func(t testing.TB, o storetest.Options) spec.Store {
			t.Helper()
			s := Session{Database: db, Create: !opened.Swap(true), Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: o.Hook}
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout()+10*time.Second)
			defer cancel()
			conn, err := c.Start(ctx, s, fs)
			if err != nil {
				t.Fatalf("start the store: %v", err)
			}
			t.Cleanup(func() { conn.Close() })
			return NewStore(conn)
		}
		st := open(t, opts)
		hello := st.(interface{ Conn() *Conn }).Conn().Hello()
		h := storetest.Handle{
			Store:    st,
			Reopen:   func(t testing.TB) spec.Store { return open(t, opts) },
			OpenWith: func(t testing.TB, o storetest.Options) spec.Store { return open(t, o) },
			Caps:     storetest.Caps{Hooks: hello.has(CapHooks), SQL: hello.has(CapSQL), DatabaseClock: hello.has(CapDatabaseClock)},
		}
		if hello.has(CapSQL) {
			conn := st.(interface{ Conn() *Conn }).Conn()
			h.Exec = conn.Exec
			if hello.Layout == LayoutJobRow {
				h.Layout = storetest.LayoutJobRow
			}
		}
		return h
	}
}

// timeout is the command's Timeout, else the checks' patience
// (DefaultTimeout unless hang.EnvPatience says otherwise).
func (c Command) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return hang.Patience()
}

// Exec runs one SQL statement on a store that offers CapSQL: nil when the
// database accepted it, an error saying why not otherwise.
func (c *Conn) Exec(ctx context.Context, query string) error {
	_, err := c.call(ctx, OpExec, ExecParams{Query: query}, func(raw json.RawMessage) string {
		if string(raw) != "{}" {
			return "the result of exec is {} (or an error), got " + excerpt(raw)
		}
		return ""
	})
	return err
}

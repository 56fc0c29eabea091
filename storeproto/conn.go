package storeproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// DefaultTimeout is how long a store may stay silent while the harness
// waits for it (a reply or a callback), and how long it may take to exit
// once its input closes, unless hang.EnvPatience says otherwise: a guard
// against a hung store, never a judgement of a slow one. The time the
// harness itself spends answering a callback (a barrier holding a hook)
// does not count.
const DefaultTimeout = hang.DefaultPatience

// Finding is something a store process did that the protocol or the
// contract forbids. It is an error, never a *spec.Error, so that every check
// counts it as a violation.
type Finding struct {
	// Store is the store's name (from its open reply) or its command.
	Store string
	// Request names the request in flight ("create_run #17"), if any.
	Request string
	// What says what was wrong, and what was expected.
	What string
	// Stderr is the tail of the process's stderr.
	Stderr string
}

func (f *Finding) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store protocol finding (%s", f.Store)
	if f.Request != "" {
		fmt.Fprintf(&b, ", %s", f.Request)
	}
	fmt.Fprintf(&b, "): %s", f.What)
	if s := strings.TrimSpace(f.Stderr); s != "" {
		fmt.Fprintf(&b, "\n--- the store's stderr, last lines ---\n%s\n---", s)
	}
	return b.String()
}

// Findings collects the findings of every process of one check, for the
// report at its end. It is safe for concurrent use.
type Findings struct {
	mu   sync.Mutex
	list []*Finding
}

func (fs *Findings) add(f *Finding) {
	if fs == nil {
		return
	}
	fs.mu.Lock()
	fs.list = append(fs.list, f)
	fs.mu.Unlock()
}

// List returns the findings so far.
func (fs *Findings) List() []*Finding {
	if fs == nil {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]*Finding(nil), fs.list...)
}

// Session is what one process serves: the options of the store it opens.
type Session struct {
	Database string
	Create   bool
	Config   spec.Config
	// Clock answers "now" (default: the system clock), Random answers
	// "random" (default: a PCG), Hook answers "hook" (nil: the store is not
	// asked to call hooks).
	Clock  clock.Clock
	Random spec.Random
	Hook   spec.Hook
}

// Conn is the harness's end of one store process. Requests go one at a
// time (a Conn serializes its callers); callbacks are answered while a
// request is in flight. Once a Conn is broken (a finding, a crash, a
// cancelled request) every later request fails at once.
type Conn struct {
	name     string
	session  Session
	hello    Hello
	timeout  time.Duration
	findings *Findings

	w       io.WriteCloser
	lines   chan lineOrErr
	proc    *exec.Cmd     // nil when not a process of ours
	exited  chan struct{} // closed when proc has exited
	waitErr error         // proc's exit, once exited is closed
	stderr  *tail
	closeFn func()

	mu     sync.Mutex // one request at a time
	nextID int64
	broken error
	closed bool
}

type lineOrErr struct {
	line []byte
	err  error
}

// stderrTail returns the last lines of the process's stderr.
func (c *Conn) stderrTail() string {
	if c.stderr == nil {
		return ""
	}
	return c.stderr.String()
}

// finding records a finding, breaks the connection and returns the finding.
func (c *Conn) finding(request, format string, args ...any) *Finding {
	f := &Finding{Store: c.name, Request: request, What: fmt.Sprintf(format, args...), Stderr: c.stderrTail()}
	c.findings.add(f)
	c.breakWith(f)
	return f
}

// breakWith marks the connection unusable and stops its process.
func (c *Conn) breakWith(err error) {
	if c.broken == nil {
		c.broken = err
	}
	c.kill()
}

// kill stops the process and everything it started (its process group),
// unless it has already exited.
func (c *Conn) kill() {
	if c.proc == nil {
		return
	}
	select {
	case <-c.exited:
	default:
		killProcessGroup(c.proc)
	}
}

// Hello returns what the store said in its open reply.
func (c *Conn) Hello() Hello { return c.hello }

// open sends the open request and checks the reply.
func (c *Conn) open(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := OpenParams{Protocol: Version, Database: c.session.Database, Create: c.session.Create,
		Config: c.session.Config, Hooks: c.session.Hook != nil}
	raw, perr, err := c.roundTrip(ctx, OpOpen, p)
	if err != nil {
		return err
	}
	label := "open #1"
	if perr != nil {
		return c.finding(label, "the store refused to open: %v", perr)
	}
	var h Hello
	if err := spec.DecodeWire(raw, &h); err != nil {
		return c.finding(label, "the open result is not a storeproto.Hello as %s publishes it: %v: %s", schemaFile("open.result"), err, excerpt(raw))
	}
	if h.Protocol != Version {
		return c.finding(label, "the store speaks protocol %d; this harness speaks %d", h.Protocol, Version)
	}
	if h.Store != "" {
		c.name = h.Store
	}
	for _, o := range spec.Operations() {
		if o.Capability == "" && !h.implements(o.Op) {
			return c.finding(label, "the store does not implement operation %s (%s): every operation of the contract "+
				"(spec.Operations) that is not an optional capability is required; it lists %v", o.Op, "Store."+o.Method, h.Operations)
		}
	}
	for _, cp := range h.Capabilities {
		switch cp {
		case CapHooks, CapDatabaseClock:
		case CapSQL:
			if h.Layout != LayoutTablePerRecord && h.Layout != LayoutJobRow {
				return c.finding(label, "the store offers %q with layout %q; want %q or %q", CapSQL, h.Layout, LayoutTablePerRecord, LayoutJobRow)
			}
		default:
			return c.finding(label, "unknown capability %q (protocol %d has %q, %q and %q)", cp, Version, CapHooks, CapSQL, CapDatabaseClock)
		}
	}
	c.hello = h
	return nil
}

// call runs one request and returns its result, or its contract error as
// a *spec.Error, or a Finding. check, when set, judges the result while the
// request is still the connection's latest: a non-empty answer is a
// finding.
func (c *Conn) call(ctx context.Context, op string, params any, check func(json.RawMessage) string) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	raw, perr, err := c.roundTrip(ctx, op, params)
	if err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, perr
	}
	if check != nil {
		if what := check(raw); what != "" {
			return nil, c.finding(fmt.Sprintf("%s #%d", op, c.nextID), "%s", what)
		}
	}
	return raw, nil
}

// roundTrip sends one request and serves the store's callbacks until the
// reply comes. It returns the result, or the contract error, or an error
// that is a *Finding (or, when ctx ended, an unknown outcome). c.mu is held.
func (c *Conn) roundTrip(ctx context.Context, op string, params any) (json.RawMessage, *spec.Error, error) {
	if c.broken != nil {
		return nil, nil, c.broken
	}
	if c.closed {
		return nil, nil, errors.New("storeproto: the store is closed")
	}
	c.nextID++
	id := c.nextID
	label := fmt.Sprintf("%s #%d", op, id)
	p, err := json.Marshal(params)
	if err != nil {
		return nil, nil, fmt.Errorf("storeproto: encode the params of %s: %w", label, err)
	}
	if err := c.send(message{ID: &id, Op: op, Params: p}); err != nil {
		return nil, nil, c.lost(label, "writing the request", err)
	}
	// Faults a hook returned for this request, by point: the store's reply
	// must agree with them.
	var faults map[spec.HookPoint]error
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	for {
		var in lineOrErr
		select {
		case in = <-c.lines:
		case <-ctx.Done():
			// The store may be anywhere in the operation: stop it, and say
			// the outcome is unknown (it may have committed).
			c.breakWith(fmt.Errorf("storeproto: %s: stopped after the caller's context ended", label))
			return nil, nil, &spec.Error{Code: spec.CodeUnknownOutcome,
				Message: fmt.Sprintf("%s: the caller's context ended while the store was running it; the store process was stopped, and the operation may or may not have applied", label),
				Err:     ctx.Err()}
		case <-timer.C:
			return nil, nil, c.finding(label, "hung: waiting for a reply or a callback (nothing after %s; %s sets the patience)", c.timeout, EnvTimeout)
		}
		if in.err != nil {
			return nil, nil, c.lost(label, "reading the reply", in.err)
		}
		m, err := parseMessage(in.line)
		if err != nil {
			return nil, nil, c.finding(label, "%v: %s", err, excerpt(in.line))
		}
		if m.InReplyTo != nil {
			if *m.InReplyTo != id {
				return nil, nil, c.finding(label, "a reply to request %d, which is not in flight (want in_reply_to %d): %s", *m.InReplyTo, id, excerpt(in.line))
			}
			return c.reply(label, m, faults)
		}
		if m.Op != "" {
			return nil, nil, c.finding(label, "the store sent a request (op %q); a store only replies and calls back (call)", m.Op)
		}
		// A callback: the harness's time, not the store's.
		timer.Stop()
		res, herr, fault := c.callback(ctx, label, op, m)
		if fault != nil {
			return nil, nil, fault
		}
		if herr != nil {
			if faults == nil {
				faults = map[spec.HookPoint]error{}
			}
			faults[herr.point] = herr.err
		}
		out := message{InReplyTo: m.ID}
		if herr != nil {
			out.Error, _ = json.Marshal(HookError{Message: herr.err.Error()})
		} else {
			out.Result = res
		}
		if err := c.send(out); err != nil {
			return nil, nil, c.lost(label, "answering a callback", err)
		}
		timer.Reset(c.timeout)
	}
}

// hookFault is an error a hook returned, at its point.
type hookFault struct {
	point spec.HookPoint
	err   error
}

// callback answers one callback of the store: a result, or a hook's fault,
// or a finding.
func (c *Conn) callback(ctx context.Context, label, op string, m message) (json.RawMessage, *hookFault, error) {
	what := fmt.Sprintf("callback %q (id %d)", m.Call, *m.ID)
	row, isOp := spec.Lookup(spec.Op(op))
	switch m.Call {
	case CallNow:
		if present(m.Params) && string(m.Params) != "{}" && string(m.Params) != "null" {
			return nil, nil, c.finding(label, "%s takes no params, got %s", what, excerpt(m.Params))
		}
		if !isOp || !row.Writes {
			return nil, nil, c.finding(label, "%s during %s: a read (and open) must not read the clock", what, op)
		}
		now := c.session.Clock.Now()
		res, _ := json.Marshal(NowResult{Now: now})
		return res, nil, nil
	case CallRandom:
		var p RandomParams
		if err := spec.DecodeWire(m.Params, &p); err != nil || p.N < 1 {
			return nil, nil, c.finding(label, "%s wants params {\"n\": n} with n >= 1, got %s (%v)", what, excerpt(m.Params), err)
		}
		if !isOp || !row.Writes {
			return nil, nil, c.finding(label, "%s during %s: only a writing operation draws jitter", what, op)
		}
		v := c.session.Random.Int64N(p.N)
		res, _ := json.Marshal(RandomResult{Value: v})
		return res, nil, nil
	case CallHook:
		var p HookParams
		if err := spec.DecodeWire(m.Params, &p); err != nil {
			return nil, nil, c.finding(label, "%s wants params {\"op\", \"point\"} as %s publishes them, got %s (%v)", what, schemaFile("hook.params"), excerpt(m.Params), err)
		}
		if p.Point != spec.BeforeCommit && p.Point != spec.AfterCommit {
			return nil, nil, c.finding(label, "%s at point %q: want %q or %q", what, p.Point, spec.BeforeCommit, spec.AfterCommit)
		}
		if !isOp || !row.Writes || p.Op != spec.Op(op) {
			return nil, nil, c.finding(label, "%s names operation %q during %s: a hook is called by the writing operation in flight, with its own name", what, p.Op, op)
		}
		if c.session.Hook == nil {
			return json.RawMessage("{}"), nil, nil
		}
		if err := c.session.Hook(ctx, p.Op, p.Point); err != nil {
			return nil, &hookFault{point: p.Point, err: err}, nil
		}
		return json.RawMessage("{}"), nil, nil
	}
	return nil, nil, c.finding(label, "unknown callback %q (protocol %d has %q, %q and %q)", m.Call, Version, CallNow, CallRandom, CallHook)
}

// reply interprets the reply to the request in flight.
func (c *Conn) reply(label string, m message, faults map[spec.HookPoint]error) (json.RawMessage, *spec.Error, error) {
	if m.ProtocolError != "" {
		return nil, nil, c.finding(label, "the store answered with a protocol error: %s", m.ProtocolError)
	}
	var perr *spec.Error
	if present(m.Error) {
		var err error
		if perr, err = specError(m.Error); err != nil {
			return nil, nil, c.finding(label, "%v: %s", err, excerpt(m.Error))
		}
	}
	// A fault injected at a hook decides the outcome: rolled back before the
	// commit (unavailable), unknown after it. The hook's own error is
	// carried along, as a Go store wraps it.
	if err := faults[spec.BeforeCommit]; err != nil {
		if perr == nil || perr.Code != spec.CodeUnavailable {
			return nil, nil, c.finding(label, "the hook failed at before_commit, so the store must roll back and answer unavailable; it answered %s", outcome(m, perr))
		}
		perr.Err = err
	} else if err := faults[spec.AfterCommit]; err != nil {
		accepted := perr != nil && perr.Code == spec.CodeUnknownOutcome
		if mutant.On(mutant.AfterCommitAcceptsUnavailable) && perr != nil && perr.Code == spec.CodeUnavailable {
			accepted = true
		}
		if !accepted {
			return nil, nil, c.finding(label, "the hook failed at after_commit, so the store must answer unknown_outcome; it answered %s", outcome(m, perr))
		}
		perr.Err = err
	}
	if perr != nil {
		return nil, perr, nil
	}
	return m.Result, nil, nil
}

func outcome(m message, perr *spec.Error) string {
	if perr != nil {
		return "error " + string(perr.Code)
	}
	return "success " + excerpt(m.Result)
}

// lost reports a broken pipe or a closed stdout: the process ended (or
// closed its output) while a request was in flight.
func (c *Conn) lost(label, doing string, err error) error {
	status := ""
	if c.exited != nil {
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
		}
		select {
		case <-c.exited:
			status = describeExit(c.waitErr)
		default:
			status = "still running, with its output closed"
		}
	}
	if errors.Is(err, io.EOF) {
		return c.finding(label, "the store process ended while %s (%s)", doing, status)
	}
	return c.finding(label, "%s: %v (%s)", doing, err, status)
}

func describeExit(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.ProcessState.String()
	}
	return err.Error()
}

// send writes one message as one line.
func (c *Conn) send(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = c.w.Write(append(b, '\n'))
	return err
}

// readLines feeds c.lines from r until it ends.
func readLines(r io.Reader, out chan<- lineOrErr) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if err != nil {
			out <- lineOrErr{err: err}
			close(out)
			return
		}
		out <- lineOrErr{line: line}
	}
}

// readLine reads one line (without its newline), up to MaxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", MaxLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return nil, fmt.Errorf("the output ended in the middle of a line: %s", excerpt(line))
			}
			return nil, err
		}
		return line[:len(line)-1], nil
	}
}

// excerpt shows at most 200 bytes of a line for a message.
func excerpt(b []byte) string {
	const max = 200
	if len(b) > max {
		return fmt.Sprintf("%q… (%d bytes)", b[:max], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// Close ends the session: the store's stdin is closed, and the process must
// exit with status 0 (after a grace period it is killed, which is a
// finding).
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.w.Close()
	// Whatever the store still says is not read: let its reader finish.
	go func() {
		for range c.lines {
		}
	}()
	if c.closeFn != nil {
		defer c.closeFn()
	}
	if c.exited == nil {
		return nil
	}
	select {
	case <-c.exited:
	case <-time.After(c.timeout):
		c.kill()
		<-c.exited
		if c.broken == nil {
			return c.finding("close", "hung: waiting for the store to exit after its input closed (nothing after %s; %s sets the patience)", c.timeout, EnvTimeout)
		}
		return nil
	}
	if c.broken == nil && c.waitErr != nil {
		return c.finding("close", "the store exited with %s after its input closed; want exit status 0", describeExit(c.waitErr))
	}
	return nil
}

// defaults fills the session's unset callbacks.
func (s *Session) defaults() {
	if s.Clock == nil {
		s.Clock = clock.System{}
	}
	if s.Random == nil {
		s.Random = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6c68))
	}
}

// tail keeps the last lines written to it.
type tail struct {
	mu    sync.Mutex
	lines []string
	part  string
	max   int
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	if len(t.part) > 4096 {
		t.part = t.part[len(t.part)-4096:]
	}
	for _, l := range parts[:len(parts)-1] {
		if len(l) > 1000 {
			l = l[:1000] + "…"
		}
		t.lines = append(t.lines, l)
	}
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := strings.Join(t.lines, "\n")
	if t.part != "" {
		out += "\n" + t.part
	}
	return out
}

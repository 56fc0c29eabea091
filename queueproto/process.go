package queueproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout is how long an adapter may stay silent while the runner
// waits for a reply (LEASEHOLD_ADAPTER_TIMEOUT overrides it).
const DefaultTimeout = time.Minute

// ExitTimeout is how long an adapter may take to exit after its stdin closed.
const ExitTimeout = 10 * time.Second

// stderrLines is how many lines of an adapter's stderr a finding shows.
const stderrLines = 40

// Finding is something an adapter process did that the protocol forbids: a
// malformed line, a reply that does not decode, silence, a crash. It is
// never the queue's answer (that is an *Error reply): a probe that meets one
// reports it as a finding of its cell, never as holds.
type Finding struct {
	// Process names the process ("W1") and its command.
	Process string
	// Request is the request in flight ("enqueue #3"), if any.
	Request string
	// What says what was wrong and what was expected.
	What string
	// Stderr is the tail of the process's stderr.
	Stderr string
}

func (f *Finding) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "adapter finding (%s", f.Process)
	if f.Request != "" {
		fmt.Fprintf(&b, ", %s", f.Request)
	}
	fmt.Fprintf(&b, "): %s", f.What)
	if s := strings.TrimSpace(f.Stderr); s != "" {
		fmt.Fprintf(&b, "\n--- the adapter's stderr, last lines ---\n%s\n---", s)
	}
	return b.String()
}

// ErrKilled is returned by a process the runner killed on purpose.
var ErrKilled = errors.New("the process was killed by the runner")

// Command is how to start an adapter process.
type Command struct {
	// Cmd is run with sh -c.
	Cmd string
	// Dir is its working directory ("" for the current one).
	Dir string
	// Env is added to the runner's environment.
	Env []string
	// Timeout bounds the silence while a request is in flight (0:
	// DefaultTimeout or LEASEHOLD_ADAPTER_TIMEOUT).
	Timeout time.Duration
}

// Process is one adapter process, from the runner's side. Its methods are
// safe for concurrent use; requests are sent one at a time.
type Process struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	timeout time.Duration

	callMu sync.Mutex // one request in flight
	nextID int64

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change below
	reply    *Message      // the reply to the request in flight, once read
	waiting  int64         // the id in flight, 0 when none
	events   []Started
	consumed []bool
	handles  map[string]bool
	finding  *Finding
	killed   bool
	exited   bool
	exitErr  error
	stderr   []string
	partial  string
	inFlight string
	hooks    Hooks
}

// Hooks observe a process. Each is called from one goroutine at a time, in
// the order of the lines.
type Hooks struct {
	// Wire receives every line in both directions ("<" from the adapter,
	// ">" to it).
	Wire func(dir, line string)
	// Started receives every started event as it arrives, before Await
	// can return it.
	Started func(Started)
}

// Start starts an adapter process named name ("C", "W1").
func Start(c Command, name string, hooks Hooks) (*Process, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
		if s := os.Getenv("LEASEHOLD_ADAPTER_TIMEOUT"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("LEASEHOLD_ADAPTER_TIMEOUT=%q: %v (want a duration such as 90s)", s, err)
			}
			timeout = d
		}
	}
	cmd := exec.Command("sh", "-c", c.Cmd)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), c.Env...)
	ownProcessGroup(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the adapter %q: %w", c.Cmd, err)
	}
	if hooks.Wire == nil {
		hooks.Wire = func(string, string) {}
	}
	if hooks.Started == nil {
		hooks.Started = func(Started) {}
	}
	p := &Process{name: fmt.Sprintf("%s: %s", name, c.Cmd), cmd: cmd, stdin: stdin, timeout: timeout,
		changed: make(chan struct{}), handles: map[string]bool{}, hooks: hooks}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); p.readStderr(stderr) }()
	go func() { defer readers.Done(); p.readStdout(stdout) }()
	go func() {
		readers.Wait()
		err := cmd.Wait()
		p.mu.Lock()
		p.exited, p.exitErr = true, err
		if p.waiting != 0 && p.reply == nil && !p.killed {
			p.findLocked(fmt.Sprintf("the process ended while the request was in flight (%s)", exitStatus(err)))
		}
		p.notifyLocked()
		p.mu.Unlock()
	}()
	return p, nil
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// Name is the process's name and command.
func (p *Process) Name() string { return p.name }

func (p *Process) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// findLocked records the process's first finding and stops it.
func (p *Process) findLocked(what string) {
	if p.finding != nil || p.killed {
		return
	}
	p.finding = &Finding{Process: p.name, Request: p.inFlight, What: what, Stderr: strings.Join(p.stderr, "\n")}
	killProcessGroup(p.cmd)
	p.notifyLocked()
}

func (p *Process) readStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.stderr = append(p.stderr, sc.Text())
		if len(p.stderr) > stderrLines {
			p.stderr = p.stderr[len(p.stderr)-stderrLines:]
		}
		p.mu.Unlock()
	}
}

func (p *Process) readStdout(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			var long []byte
			long = append(long, line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= MaxLine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
			if len(line) > MaxLine {
				p.mu.Lock()
				p.findLocked(fmt.Sprintf("a line longer than %d bytes", MaxLine))
				p.mu.Unlock()
				return
			}
		}
		if err != nil {
			if len(line) > 0 {
				p.mu.Lock()
				if !p.killed {
					p.findLocked(fmt.Sprintf("output ended mid-line: %q", truncate(string(line))))
				}
				p.mu.Unlock()
			}
			return
		}
		text := strings.TrimRight(string(line), "\r\n")
		p.hooks.Wire("<", text)
		if s := p.handle([]byte(text)); s != nil {
			p.hooks.Started(*s)
			p.mu.Lock()
			p.events = append(p.events, *s)
			p.consumed = append(p.consumed, false)
			p.notifyLocked()
			p.mu.Unlock()
		}
	}
}

func truncate(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// handle routes one line from the adapter; it returns a started event for
// the caller to record.
func (p *Process) handle(line []byte) *Started {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finding != nil || p.killed {
		return nil
	}
	var m Message
	if err := strictUnmarshal(line, &m); err != nil {
		p.findLocked(fmt.Sprintf("a line that is not a message (%v): %q", err, truncate(string(line))))
		return nil
	}
	switch {
	case m.Event != "":
		if m.InReplyTo != nil || m.Result != nil || m.Error != nil {
			p.findLocked(fmt.Sprintf("an event with reply fields: %q", truncate(string(line))))
			return nil
		}
		if m.Event != EventStarted {
			p.findLocked(fmt.Sprintf("unknown event %q (the only event is %q)", m.Event, EventStarted))
			return nil
		}
		var s Started
		var raw map[string]json.RawMessage
		json.Unmarshal(line, &raw)
		delete(raw, "event")
		rest, _ := json.Marshal(raw)
		if err := strictUnmarshal(rest, &s); err != nil {
			p.findLocked(fmt.Sprintf("a started event that does not decode (%v): %q", err, truncate(string(line))))
			return nil
		}
		if s.Handle == "" || s.Job == "" || s.Attempt < 1 {
			p.findLocked(fmt.Sprintf("a started event without a handle, a job or an attempt >= 1: %q", truncate(string(line))))
			return nil
		}
		if p.handles[s.Handle] {
			p.findLocked(fmt.Sprintf("a started event reusing handle %q", s.Handle))
			return nil
		}
		p.handles[s.Handle] = true
		return &s
	case m.InReplyTo != nil:
		if m.Started != nil {
			p.findLocked(fmt.Sprintf("a reply with event fields: %q", truncate(string(line))))
			return nil
		}
		if (m.Result == nil) == (m.Error == nil) {
			p.findLocked(fmt.Sprintf("a reply with both or neither of result and error: %q", truncate(string(line))))
			return nil
		}
		if *m.InReplyTo != p.waiting || p.waiting == 0 || p.reply != nil {
			p.findLocked(fmt.Sprintf("a reply to request %d, which is not in flight", *m.InReplyTo))
			return nil
		}
		if m.Error != nil && !validCode(m.Error.Code) {
			p.findLocked(fmt.Sprintf("error code %q is not one of %v", m.Error.Code, ErrorCodes))
			return nil
		}
		p.reply = &m
		p.notifyLocked()
	default:
		p.findLocked(fmt.Sprintf("a message that is neither a reply nor an event: %q", truncate(string(line))))
	}
	return nil
}

func validCode(code string) bool {
	for _, c := range ErrorCodes {
		if c == code {
			return true
		}
	}
	return false
}

// Call sends one request and decodes its result into result (nil: expect
// {}). It returns an *Error when the adapter answered with one, a *Finding
// when the adapter broke the protocol (then and ever after), ErrKilled after
// Kill, or ctx's error.
func (p *Process) Call(ctx context.Context, op string, params, result any) error {
	p.callMu.Lock()
	defer p.callMu.Unlock()
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	if params == nil {
		raw = nil
	}
	p.mu.Lock()
	if err := p.deadLocked(); err != nil {
		p.mu.Unlock()
		return err
	}
	p.nextID++
	id := p.nextID
	p.waiting, p.reply, p.inFlight = id, nil, fmt.Sprintf("%s #%d", op, id)
	p.mu.Unlock()
	line, _ := json.Marshal(Request{ID: id, Op: op, Params: raw})
	p.hooks.Wire(">", string(line))
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	hung := fmt.Sprintf("no reply within %s (LEASEHOLD_ADAPTER_TIMEOUT)", p.timeout)
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		// The adapter closed its stdin, most often by exiting: its exit
		// (recorded as a finding while the request is in flight) says why
		// with its status and stderr tail, better than a broken pipe does.
		hung = fmt.Sprintf("writing the request: %v; the adapter did not exit within %s", err, p.timeout)
	}
	for {
		p.mu.Lock()
		if p.reply != nil {
			m := p.reply
			p.waiting, p.reply, p.inFlight = 0, nil, ""
			p.mu.Unlock()
			if m.Error != nil {
				return m.Error
			}
			if result == nil {
				result = &Empty{}
			}
			if err := strictUnmarshal(m.Result, result); err != nil {
				p.mu.Lock()
				p.inFlight = fmt.Sprintf("%s #%d", op, id)
				p.findLocked(fmt.Sprintf("the result of %s does not decode as %T: %v: %s", op, result, err, truncate(string(m.Result))))
				p.inFlight = ""
				f := p.finding
				p.mu.Unlock()
				return f
			}
			return nil
		}
		if err := p.deadLocked(); err != nil {
			p.mu.Unlock()
			return err
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			p.mu.Lock()
			p.findLocked(hung)
			f := p.finding
			p.mu.Unlock()
			return f
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// deadLocked returns why the process can take no request, or nil.
func (p *Process) deadLocked() error {
	switch {
	case p.finding != nil:
		return p.finding
	case p.killed:
		return ErrKilled
	case p.exited:
		p.findLocked(fmt.Sprintf("the process exited (%s)", exitStatus(p.exitErr)))
		return p.finding
	}
	return nil
}

// Await returns the first started event, in the order they arrived, that
// matches and that no Await returned before. It waits until one arrives, the
// process fails (its finding), it is killed (ErrKilled), or ctx ends.
func (p *Process) Await(ctx context.Context, match func(Started) bool) (Started, error) {
	for {
		p.mu.Lock()
		for i, e := range p.events {
			if !p.consumed[i] && match(e) {
				p.consumed[i] = true
				p.mu.Unlock()
				return e, nil
			}
		}
		if p.finding != nil {
			p.mu.Unlock()
			return Started{}, p.finding
		}
		if p.killed {
			p.mu.Unlock()
			return Started{}, ErrKilled
		}
		if p.exited {
			err := p.deadLocked()
			p.mu.Unlock()
			return Started{}, err
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Started{}, ctx.Err()
		}
	}
}

// Pending returns the started events no Await has returned yet.
func (p *Process) Pending() []Started {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Started
	for i, e := range p.events {
		if !p.consumed[i] {
			out = append(out, e)
		}
	}
	return out
}

// Started returns every started event so far.
func (p *Process) Started() []Started {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Started(nil), p.events...)
}

// Finding returns the process's finding, or nil.
func (p *Process) Finding() *Finding {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finding
}

// Stderr returns the tail of the process's stderr.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// Kill SIGKILLs the process group: a crash the runner caused.
func (p *Process) Kill() {
	p.mu.Lock()
	p.killed = true
	p.notifyLocked()
	p.mu.Unlock()
	killProcessGroup(p.cmd)
}

// Killed reports whether Kill was called.
func (p *Process) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// Pause SIGSTOPs the process group; Resume SIGCONTs it.
func (p *Process) Pause() error  { return signalProcessGroup(p.cmd, sigStop) }
func (p *Process) Resume() error { return signalProcessGroup(p.cmd, sigCont) }

// Close closes the process's stdin and waits for it to exit with status 0
// (ExitTimeout); it returns the process's finding, if any, or a finding
// for an exit that is late or not 0. A killed process is only reaped.
func (p *Process) Close() error {
	p.stdin.Close()
	deadline := time.NewTimer(ExitTimeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if p.exited {
			defer p.mu.Unlock()
			if p.finding != nil {
				return p.finding
			}
			if p.killed {
				return nil
			}
			if p.exitErr != nil {
				p.findLocked(fmt.Sprintf("after its input closed the process exited with %s, not 0", exitStatus(p.exitErr)))
				return p.finding
			}
			return nil
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			p.mu.Lock()
			p.findLocked(fmt.Sprintf("the process did not exit within %s after its input closed", ExitTimeout))
			p.mu.Unlock()
			killProcessGroup(p.cmd)
			signalProcessGroup(p.cmd, sigCont)
		}
	}
}

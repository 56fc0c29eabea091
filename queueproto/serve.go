package queueproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// Queue is a job queue behind the adapter protocol, in Go: what an adapter
// implements for Serve. Every method but Hello runs after Open; the ones
// that act on a held handler receive what the handler passed to Hold.
// Errors: an *Error passes its code through; any other error is answered
// as ErrFailed.
type Queue interface {
	// Hello describes the queue (hello's result).
	Hello() Hello
	// Open connects to the namespace's queue, creating it when p.Create.
	Open(ctx context.Context, p OpenParams) error
	Enqueue(ctx context.Context, p EnqueueParams) (EnqueueResult, error)
	// State returns a job, or a JobInfo with StateMissing.
	State(ctx context.Context, job string) (JobInfo, error)
	Jobs(ctx context.Context) ([]JobInfo, error)
	Rows(ctx context.Context, job string) ([]json.RawMessage, error)
	Cancel(ctx context.Context, job string) (CancelResult, error)
	Expire(ctx context.Context, job string) error
	MakeDue(ctx context.Context, job string) error
	// Start starts the queue's worker; its handler calls h.Hold for every
	// attempt it starts and does what Hold returns.
	Start(ctx context.Context, concurrency int, h *Holder) error
	// Stop stops the worker gracefully: it returns once every handler
	// returned and the queue wrote every outcome.
	Stop(ctx context.Context) error
	// Heartbeat and CompleteInTx act on a held handler's job; held is
	// what the handler passed to Hold.
	Heartbeat(ctx context.Context, held any) (bool, error)
	CompleteInTx(ctx context.Context, held any, commit bool) (bool, error)
	// Close releases the queue's connections; the process then exits.
	Close() error
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Holder holds handlers for the runner: a handler calls Hold, which emits
// the started event and returns the runner's instruction (DoComplete or
// DoRetry) once finish names its handle.
type Holder struct {
	s *server
}

type held struct {
	data any
	do   chan string
}

// Hold emits a started event for an attempt of job, keeps data for the
// requests that act on the held handler (heartbeat, complete_in_tx), and
// blocks until the runner's finish, returning its instruction. It ignores
// the handler's context (docs/ADAPTERS.md: a held handler models one busy
// with its work); it returns "" only when the session ends first.
func (h *Holder) Hold(job string, attempt int, payload json.RawMessage, data any) string {
	s := h.s
	s.mu.Lock()
	s.next++
	handle := "h" + strconv.Itoa(s.next)
	e := &held{data: data, do: make(chan string, 1)}
	s.held[handle] = e
	s.mu.Unlock()
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	s.write(Message{Event: EventStarted, Started: &Started{Handle: handle, Job: job, Attempt: attempt, Payload: payload}})
	select {
	case do := <-e.do:
		return do
	case <-s.done:
		return ""
	}
}

type server struct {
	q     Queue
	out   io.Writer
	outMu sync.Mutex
	mu    sync.Mutex
	next  int
	held  map[string]*held
	done  chan struct{}
}

func (s *server) write(m Message) {
	line, err := json.Marshal(m)
	if err != nil {
		line, _ = json.Marshal(Message{InReplyTo: m.InReplyTo, Error: Errorf(ErrFailed, "encoding the reply: %v", err)})
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.out.Write(append(line, '\n'))
}

// Serve runs q as an adapter process: it reads requests from in and answers
// on out until in ends, then closes q. Requests are served one at a time, in
// order; started events are written as handlers start.
func Serve(ctx context.Context, in io.Reader, out io.Writer, q Queue) error {
	s := &server{q: q, out: out, held: map[string]*held{}, done: make(chan struct{})}
	defer close(s.done)
	defer q.Close()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	opened := false
	for sc.Scan() {
		var req Request
		if err := strictUnmarshal(sc.Bytes(), &req); err != nil {
			s.write(Message{InReplyTo: new(int64), Error: Errorf(ErrBadRequest, "not a request: %v", err)})
			continue
		}
		id := req.ID
		result, err := s.serve(ctx, req, &opened)
		m := Message{InReplyTo: &id}
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				pe = Errorf(ErrFailed, "%v", err)
			}
			m.Error = pe
		} else {
			raw, err := json.Marshal(result)
			if err != nil {
				m.Error = Errorf(ErrFailed, "encoding the result: %v", err)
			} else {
				m.Result = raw
			}
		}
		s.write(m)
	}
	return sc.Err()
}

func (s *server) serve(ctx context.Context, req Request, opened *bool) (any, error) {
	params := req.Params
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	decode := func(v any) error {
		if err := strictUnmarshal(params, v); err != nil {
			return Errorf(ErrBadRequest, "%s params: %v", req.Op, err)
		}
		return nil
	}
	if req.Op != OpHello && req.Op != OpOpen && !*opened {
		return nil, Errorf(ErrBadRequest, "%s before open", req.Op)
	}
	switch req.Op {
	case OpHello:
		var p HelloParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		if p.Protocol != Version {
			return nil, Errorf(ErrBadRequest, "protocol %d: this adapter speaks %d", p.Protocol, Version)
		}
		return s.q.Hello(), nil
	case OpOpen:
		var p OpenParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		if err := s.q.Open(ctx, p); err != nil {
			return nil, err
		}
		*opened = true
		return Empty{}, nil
	case OpEnqueue:
		var p EnqueueParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return s.q.Enqueue(ctx, p)
	case OpState, OpRows, OpCancel, OpExpire, OpMakeDue:
		var p JobParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		switch req.Op {
		case OpState:
			return s.q.State(ctx, p.Job)
		case OpRows:
			rows, err := s.q.Rows(ctx, p.Job)
			if rows == nil {
				rows = []json.RawMessage{}
			}
			return RowsResult{Rows: rows}, err
		case OpCancel:
			return s.q.Cancel(ctx, p.Job)
		case OpExpire:
			return Empty{}, s.q.Expire(ctx, p.Job)
		default:
			return Empty{}, s.q.MakeDue(ctx, p.Job)
		}
	case OpJobs:
		if err := decode(&Empty{}); err != nil {
			return nil, err
		}
		jobs, err := s.q.Jobs(ctx)
		if jobs == nil {
			jobs = []JobInfo{}
		}
		return JobsResult{Jobs: jobs}, err
	case OpStart:
		var p StartParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		if p.Concurrency < 1 {
			return nil, Errorf(ErrBadRequest, "start: concurrency %d: want at least 1", p.Concurrency)
		}
		return Empty{}, s.q.Start(ctx, p.Concurrency, &Holder{s: s})
	case OpStop:
		if err := decode(&Empty{}); err != nil {
			return nil, err
		}
		return Empty{}, s.q.Stop(ctx)
	case OpFinish:
		var p FinishParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		if p.Do != DoComplete && p.Do != DoRetry {
			return nil, Errorf(ErrBadRequest, "finish: do %q: want %q or %q", p.Do, DoComplete, DoRetry)
		}
		e, err := s.take(p.Handle)
		if err != nil {
			return nil, err
		}
		e.do <- p.Do
		return Empty{}, nil
	case OpHeartbeat:
		var p HandleParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		e, err := s.peek(p.Handle)
		if err != nil {
			return nil, err
		}
		ok, err := s.q.Heartbeat(ctx, e.data)
		return HeartbeatResult{Accepted: ok}, err
	case OpCompleteInTx:
		var p CompleteInTxParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		e, err := s.peek(p.Handle)
		if err != nil {
			return nil, err
		}
		seen, err := s.q.CompleteInTx(ctx, e.data, p.Commit)
		return CompleteInTxResult{SeenInTx: seen}, err
	}
	return nil, Errorf(ErrBadRequest, "unknown op %q", req.Op)
}

func (s *server) peek(handle string) (*held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.held[handle]
	if !ok {
		return nil, Errorf(ErrBadRequest, "no held handler %q", handle)
	}
	return e, nil
}

func (s *server) take(handle string) (*held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.held[handle]
	if !ok {
		return nil, Errorf(ErrBadRequest, "no held handler %q", handle)
	}
	delete(s.held, handle)
	return e, nil
}

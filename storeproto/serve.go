package storeproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/leasehold/leasehold/spec"
)

// Served is what an opener gives Serve: the store of the session and what
// it declares.
type Served struct {
	Store spec.Store
	// Name names the store in the open reply.
	Name string
	// Hooks declares CapHooks: the store calls the session's Hook.
	Hooks bool
	// Exec, when set, declares CapSQL with Layout.
	Exec   func(ctx context.Context, query string) error
	Layout string
}

// Opener opens the store one session serves, with the session's clock,
// random source and hook (which call back to the harness).
type Opener func(ctx context.Context, s Session) (Served, error)

// Serve runs one session of the protocol on in and out: it answers open by
// calling open, then every request by running it on the opened store, until
// in ends. It returns nil when in ends cleanly (the harness closed the
// session), or the error that stopped it.
func Serve(ctx context.Context, in io.Reader, out io.Writer, open Opener) error {
	s := &server{br: bufio.NewReaderSize(in, 64<<10), w: bufio.NewWriter(out)}
	defer func() {
		if s.store != nil {
			s.store.Close()
		}
	}()
	for {
		line, err := readLine(s.br)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		m, err := parseMessage(line)
		if err != nil {
			return fmt.Errorf("storeproto: serve: %w", err)
		}
		if m.ID == nil || m.Op == "" {
			return fmt.Errorf("storeproto: serve: want a request, got %s", excerpt(line))
		}
		reply := s.handle(ctx, m, open)
		if err := s.send(reply); err != nil {
			return err
		}
	}
}

type server struct {
	mu     sync.Mutex // the store's callbacks come from its goroutines
	br     *bufio.Reader
	w      *bufio.Writer
	store  spec.Store
	served Served
	nextID int64
	broken error
}

func (s *server) send(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	s.w.Write(append(b, '\n'))
	return s.w.Flush()
}

func (s *server) handle(ctx context.Context, m message, open Opener) message {
	r := message{InReplyTo: m.ID}
	protoErr := func(format string, args ...any) message {
		r.ProtocolError = fmt.Sprintf(format, args...)
		return r
	}
	if m.Op == OpOpen {
		if s.store != nil {
			return protoErr("open twice")
		}
		var p OpenParams
		if err := decodeStrict(m.Params, &p); err != nil {
			return protoErr("open params: %v", err)
		}
		if p.Protocol != Version {
			return protoErr("this store speaks protocol %d, not %d", Version, p.Protocol)
		}
		sess := Session{Database: p.Database, Create: p.Create, Config: p.Config, Clock: callbackClock{s}, Random: callbackRandom{s}}
		if p.Hooks {
			sess.Hook = s.hook
		}
		served, err := open(ctx, sess)
		if err != nil {
			return s.fail(r, err)
		}
		s.store, s.served = served.Store, served
		h := Hello{Protocol: Version, Store: served.Name, Capabilities: []string{}}
		for _, o := range spec.Operations() {
			if o.Supports(served.Store) {
				h.Operations = append(h.Operations, string(o.Op))
			}
		}
		if served.Hooks {
			h.Capabilities = append(h.Capabilities, CapHooks)
		}
		if served.Exec != nil {
			h.Capabilities, h.Layout = append(h.Capabilities, CapSQL), served.Layout
		}
		r.Result, _ = json.Marshal(h)
		return r
	}
	if s.store == nil {
		return protoErr("the first request must be open")
	}
	if m.Op == OpExec && s.served.Exec != nil {
		var p ExecParams
		if err := decodeStrict(m.Params, &p); err != nil {
			return protoErr("exec params: %v", err)
		}
		if err := s.served.Exec(ctx, p.Query); err != nil {
			r.Error, _ = json.Marshal(spec.Error{Code: spec.CodeInvalidArgument, Message: err.Error()})
			return r
		}
		r.Result = json.RawMessage("{}")
		return r
	}
	row, ok := spec.Lookup(spec.Op(m.Op))
	if !ok || !row.Supports(s.store) {
		return protoErr("unknown operation %q", m.Op)
	}
	req, err := row.DecodeRequest(m.Params)
	if err != nil {
		return protoErr("%s params: %v", m.Op, err)
	}
	v, err := row.Call(ctx, s.store, req)
	if s.broken != nil {
		return protoErr("%v", s.broken)
	}
	if err != nil {
		return s.fail(r, err)
	}
	r.Result, err = json.Marshal(v)
	if err != nil {
		return protoErr("encode the result: %v", err)
	}
	return r
}

// fail replies with err: a contract error as itself, anything else as a
// protocol error (a store must not return untyped errors, and the harness
// must hear of one).
func (s *server) fail(r message, err error) message {
	var e *spec.Error
	if !errors.As(err, &e) {
		r.ProtocolError = fmt.Sprintf("untyped error from the store: %v", err)
		return r
	}
	msg := e.Message
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	r.Error, _ = json.Marshal(spec.Error{Code: e.Code, State: e.State, Message: msg})
	return r
}

// callback sends one callback and reads its reply.
func (s *server) callback(name string, params any) (json.RawMessage, json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return nil, nil, s.broken
	}
	s.nextID++
	id := s.nextID
	m := message{ID: &id, Call: name}
	if params != nil {
		m.Params, _ = json.Marshal(params)
	}
	if err := s.send(m); err != nil {
		s.broken = err
		return nil, nil, err
	}
	line, err := readLine(s.br)
	if err == nil {
		var r message
		if r, err = parseMessage(line); err == nil {
			if r.InReplyTo == nil || *r.InReplyTo != id || present(r.Params) {
				err = fmt.Errorf("want the reply to callback %d, got %s", id, excerpt(line))
			} else {
				return r.Result, r.Error, nil
			}
		}
	}
	s.broken = fmt.Errorf("storeproto: serve: callback %s: %w", name, err)
	return nil, nil, s.broken
}

func (s *server) hook(ctx context.Context, op spec.Op, point spec.HookPoint) error {
	_, herr, err := s.callback(CallHook, HookParams{Op: op, Point: point})
	if err != nil {
		return err
	}
	if present(herr) {
		var e HookError
		json.Unmarshal(herr, &e)
		return errors.New(e.Message)
	}
	return nil
}

type callbackClock struct{ s *server }

// Now implements clock.Clock by asking the harness. A broken connection
// reads -1, which every writing operation refuses as invalid_argument.
func (c callbackClock) Now() int64 {
	res, _, err := c.s.callback(CallNow, nil)
	var r NowResult
	if err != nil || json.Unmarshal(res, &r) != nil {
		return -1
	}
	return r.Now
}

type callbackRandom struct{ s *server }

// Int64N implements spec.Random by asking the harness.
func (c callbackRandom) Int64N(n int64) int64 {
	res, _, err := c.s.callback(CallRandom, RandomParams{N: n})
	var r RandomResult
	if err != nil || json.Unmarshal(res, &r) != nil || r.Value < 0 || r.Value >= n {
		return 0
	}
	return r.Value
}

package queueproto

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// A fake adapter in Go: TestMain runs it when the test binary is started
// with LEASEHOLD_QUEUEPROTO_FAKE set, so Serve is tested across a real
// process boundary.
func TestMain(m *testing.M) {
	if os.Getenv("LEASEHOLD_QUEUEPROTO_FAKE") != "" {
		if err := Serve(context.Background(), os.Stdin, os.Stdout, &fakeQueue{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeQueue starts one handler per Start, for job "j1".
type fakeQueue struct{ h *Holder }

func (q *fakeQueue) Hello() Hello {
	f := map[string]Feature{}
	for _, n := range Features {
		f[n] = Feature{Supported: false, Doc: "none"}
	}
	return Hello{Protocol: Version, System: "fake", Version: "1", Language: "go", Needs: NeedDir, Features: f,
		Delivery: Delivery{Semantics: AtLeastOnce, Doc: "none"}, Exhausted: Exhausted{RawState: "dead", Doc: "none"},
		Config: []Setting{}, References: []Reference{}}
}
func (q *fakeQueue) Open(context.Context, OpenParams) error { return nil }
func (q *fakeQueue) Enqueue(_ context.Context, p EnqueueParams) (EnqueueResult, error) {
	if p.Key == "taken" {
		return EnqueueResult{}, Errorf(ErrRejected, "key taken")
	}
	return EnqueueResult{Job: "j1"}, nil
}
func (q *fakeQueue) State(_ context.Context, job string) (JobInfo, error) {
	return JobInfo{Job: job, State: StateWaiting}, nil
}
func (q *fakeQueue) Jobs(context.Context) ([]JobInfo, error)                 { return nil, nil }
func (q *fakeQueue) Rows(context.Context, string) ([]json.RawMessage, error) { return nil, nil }
func (q *fakeQueue) Cancel(context.Context, string) (CancelResult, error) {
	return CancelResult{}, Errorf(ErrUnsupported, "no cancel")
}
func (q *fakeQueue) Expire(context.Context, string) error  { return nil }
func (q *fakeQueue) MakeDue(context.Context, string) error { return nil }
func (q *fakeQueue) Start(_ context.Context, _ int, h *Holder) error {
	q.h = h
	go func() { h.Hold("j1", 1, json.RawMessage(`{"n":1}`), "data") }()
	return nil
}
func (q *fakeQueue) Stop(context.Context) error { return nil }
func (q *fakeQueue) Heartbeat(_ context.Context, held any) (bool, error) {
	return held == "data", nil
}
func (q *fakeQueue) CompleteInTx(context.Context, any, bool) (bool, error) { return false, nil }
func (q *fakeQueue) Close() error                                          { return nil }

func fakeCommand(t *testing.T) Command {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Command{Cmd: "LEASEHOLD_QUEUEPROTO_FAKE=1 '" + exe + "'"}
}

func TestServeAcrossAProcess(t *testing.T) {
	ctx := context.Background()
	p, err := Start(fakeCommand(t), "F", Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	var h Hello
	if err := p.Call(ctx, OpHello, HelloParams{Protocol: Version}, &h); err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(nil); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if err := p.Call(ctx, OpEnqueue, EnqueueParams{Payload: json.RawMessage(`{}`)}, &EnqueueResult{}); !errors.As(err, &e) || e.Code != ErrBadRequest {
		t.Fatalf("enqueue before open: %v, want bad_request", err)
	}
	if err := p.Call(ctx, OpOpen, OpenParams{Namespace: "lhp_x", Create: true, Process: "F"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Call(ctx, OpEnqueue, EnqueueParams{Key: "taken", Payload: json.RawMessage(`{}`)}, &EnqueueResult{}); !errors.As(err, &e) || e.Code != ErrRejected {
		t.Fatalf("enqueue under a taken key: %v, want rejected", err)
	}
	if err := p.Call(ctx, OpStart, StartParams{Concurrency: 1}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := p.Await(ctx, func(s Started) bool { return s.Job == "j1" })
	if err != nil {
		t.Fatal(err)
	}
	if s.Attempt != 1 || string(s.Payload) != `{"n":1}` {
		t.Fatalf("started %+v", s)
	}
	var hb HeartbeatResult
	if err := p.Call(ctx, OpHeartbeat, HandleParams{Handle: s.Handle}, &hb); err != nil || !hb.Accepted {
		t.Fatalf("heartbeat: %v %+v (the held handler's data must reach the queue)", err, hb)
	}
	if err := p.Call(ctx, OpFinish, FinishParams{Handle: s.Handle, Do: DoComplete}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Call(ctx, OpFinish, FinishParams{Handle: s.Handle, Do: DoComplete}, nil); !errors.As(err, &e) || e.Code != ErrBadRequest {
		t.Fatalf("a second finish of one handle: %v, want bad_request", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBadAdapters: whatever an adapter does wrong is a Finding that says
// what, with its stderr tail; never a panic, a hang or a pass.
func TestBadAdapters(t *testing.T) {
	cases := []struct {
		name, script string
		want         string
	}{
		{"crash", `echo "boom: out of memory" >&2; exit 3`, "exit status 3"},
		{"malformed JSON", `read l; echo '{"in_reply_to":1,"result":'; echo 'the adapter wrote garbage' >&2; sleep 30`, "not a message"},
		{"not an object", `read l; echo '[1,2]'; sleep 30`, "not a message"},
		{"unknown field", `read l; echo '{"in_reply_to":1,"result":{},"extra":1}'; sleep 30`, "unknown field"},
		{"both result and error", `read l; echo '{"in_reply_to":1,"result":{},"error":{"code":"failed","message":"x"}}'; sleep 30`, "both or neither"},
		{"unknown error code", `read l; echo '{"in_reply_to":1,"error":{"code":"oops","message":"x"}}'; sleep 30`, "error code"},
		{"reply to another request", `read l; echo '{"in_reply_to":7,"result":{}}'; sleep 30`, "not in flight"},
		{"a result that does not decode", `read l; echo '{"in_reply_to":1,"result":{"protocol":"one"}}'; sleep 30`, "does not decode"},
		{"a result missing a field", `read l; echo '{"in_reply_to":1,"result":{"protocol":1}}'; sleep 30`, "missing field"},
		{"hang", `read l; echo 'stuck in a loop' >&2; sleep 30`, "no reply within"},
		{"mid-line exit", `read l; printf '{"in_reply_to":1'; exit 0`, "mid-line"},
		{"unknown event", `read l; echo '{"event":"finished","handle":"h1","job":"j","attempt":1}'; sleep 30`, "unknown event"},
		{"event reusing a handle", `read l; echo '{"event":"started","handle":"h1","job":"j","attempt":1}'; echo '{"event":"started","handle":"h1","job":"j","attempt":2}'; sleep 30`, "reusing handle"},
		{"started without an attempt", `read l; echo '{"event":"started","handle":"h1","job":"j","attempt":0}'; sleep 30`, "attempt >= 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := Start(Command{Cmd: c.script, Timeout: 2 * time.Second}, "bad", Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			var h Hello
			err = p.Call(context.Background(), OpHello, HelloParams{Protocol: Version}, &h)
			if err == nil {
				// A bad event arrives around the reply: wait for it.
				_, err = p.Await(context.Background(), func(Started) bool { return false })
			}
			var f *Finding
			if !errors.As(err, &f) {
				t.Fatalf("got %v (%T), want a *Finding", err, err)
			}
			if !strings.Contains(f.What, c.want) {
				t.Errorf("finding %q does not say %q", f.What, c.want)
			}
			if c.name == "crash" && !strings.Contains(f.Error(), "boom: out of memory") {
				t.Errorf("the finding does not show the stderr tail:\n%v", f)
			}
			if c.name == "hang" && !strings.Contains(f.Error(), "stuck in a loop") {
				t.Errorf("the finding does not show the stderr tail:\n%v", f)
			}
			// The finding is sticky, and closing reaps the process.
			if err := p.Call(context.Background(), OpJobs, Empty{}, &JobsResult{}); !errors.As(err, &f) {
				t.Errorf("a later call: %v, want the finding again", err)
			}
			p.Close()
		})
	}
}

// TestAdapterThatClosesItsInput: an adapter that closes its stdin and then
// exits fails the request's write with a broken pipe, while it is still
// running (its second of sleep) or after it exited (a request larger than
// the pipe's buffer cannot be written before the adapter closed its end); either way the finding
// is its exit status and stderr tail, never the broken pipe (the crash case
// of TestBadAdapters met this at random).
func TestAdapterThatClosesItsInput(t *testing.T) {
	p, err := Start(Command{Cmd: `exec 0<&-; echo "boom: out of memory" >&2; sleep 1; exit 3`, Timeout: time.Minute}, "bad", Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	big := map[string]string{"padding": strings.Repeat("x", 1<<20)}
	err = p.Call(context.Background(), OpHello, big, nil)
	var f *Finding
	if !errors.As(err, &f) || !strings.Contains(f.What, "exit status 3") || !strings.Contains(f.Error(), "boom: out of memory") {
		t.Fatalf("got %v; want a finding with the exit status 3 and the stderr tail", err)
	}
}

func TestCloseRequiresACleanExit(t *testing.T) {
	for _, c := range []struct{ name, script, want string }{
		{"non-zero exit", `cat >/dev/null; exit 4`, "not 0"},
		{"no exit", `trap '' TERM; cat >/dev/null; sleep 60`, "did not exit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.name == "no exit" && testing.Short() {
				t.Skip("waits ExitTimeout")
			}
			p, err := Start(Command{Cmd: c.script}, "bad", Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			err = p.Close()
			var f *Finding
			if !errors.As(err, &f) || !strings.Contains(f.What, c.want) {
				t.Fatalf("Close: %v, want a finding saying %q", err, c.want)
			}
		})
	}
}

func TestHelloValidate(t *testing.T) {
	good := (&fakeQueue{}).Hello()
	if err := good.Validate([]string{"kill-worker"}); err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.Features = map[string]Feature{FeatureKey: {Supported: false}, "teleport": {Supported: true}}
	bad.Delivery.Semantics = "maybe"
	bad.References = []Reference{{Probe: "nope", URL: "u", Title: "t"}}
	err := bad.Validate([]string{"kill-worker"})
	for _, want := range []string{`feature "key" is absent without a doc`, `feature "cancel" is not declared`, `unknown feature "teleport"`, `delivery semantics "maybe"`, `unknown probe "nope"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to say %s", err, want)
		}
	}
}

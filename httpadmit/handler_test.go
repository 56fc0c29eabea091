package httpadmit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/httpadmit"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Two tenants and their API keys.
const (
	tenantA = "acme"
	tenantB = "globex"
	apiKeyA = "sk_test_acme_0123456789abcdef"
	apiKeyB = "sk_test_globex_0123456789abcdef"
	op      = "charge"
	// secret is in every idempotency key the tests send: no log line and no
	// response body may contain it.
	secret = "SECRET"
)

func testConfig() spec.Config {
	cfg := spec.DefaultConfig()
	cfg.Operations = map[string]spec.OperationPolicy{
		op:      {SchemaVersion: 1, DefaultMaxAttempts: 3, MaxMaxAttempts: 5, DefaultTimeoutMs: 3_600_000, MaxTimeoutMs: 86_400_000},
		"other": {SchemaVersion: 1, DefaultMaxAttempts: 3, MaxMaxAttempts: 5, DefaultTimeoutMs: 3_600_000, MaxTimeoutMs: 86_400_000},
	}
	return cfg
}

// backends are the real stores every HTTP test runs on. pgtest.Factory finds
// PostgreSQL in LEASEHOLD_PG_DSN and skips without one (fails under CI=true).
var backends = []struct {
	name    string
	factory storetest.Factory
}{
	{"sqlite", sqlitetest.Factory},
	{"postgres", pgtest.Factory},
}

// env is one store, one Handler and a real HTTP server in front of them.
type env struct {
	t      *testing.T
	handle storetest.Handle
	store  spec.Store
	h      *httpadmit.Handler
	srv    *httptest.Server
	hook   atomic.Pointer[spec.Hook] // the store's hook for now; nil: none
	logs   syncBuffer
	bodies syncBuffer // every response body
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// payload is the tests' Config.Payload: a negative amount is refused with a
// field error, as a service's validation would.
func payload(_ *http.Request, body []byte) ([]byte, error) {
	var o struct {
		Amount *int64 `json:"amount"`
	}
	if json.Unmarshal(body, &o) == nil && o.Amount != nil && *o.Amount <= 0 {
		return nil, &httpadmit.FieldError{Field: "/amount", Detail: "amount must be a positive number of cents"}
	}
	return body, nil
}

func newEnv(t *testing.T, factory storetest.Factory, configure func(*httpadmit.Config)) *env {
	t.Helper()
	e := &env{t: t}
	e.handle = factory(t, storetest.Options{Config: testConfig(), Clock: clock.NewManual(1_700_000_000_000),
		Hook: func(ctx context.Context, o spec.Op, p spec.HookPoint) error {
			if f := e.hook.Load(); f != nil {
				return (*f)(ctx, o, p)
			}
			return nil
		}})
	e.store = e.handle.Store
	keys, err := httpadmit.NewAPIKeys(map[string]string{apiKeyA: tenantA, apiKeyB: tenantB})
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpadmit.Config{Store: e.store, Operation: op, Auth: keys, Payload: payload,
		Logger: slog.New(slog.NewTextHandler(&e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if configure != nil {
		configure(&cfg)
	}
	if e.h, err = httpadmit.New(cfg); err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.mux(e.h))
	t.Cleanup(e.srv.Close)
	t.Cleanup(func() {
		for what, text := range map[string]string{"log": e.logs.String(), "response body": e.bodies.String()} {
			if strings.Contains(text, secret) {
				t.Errorf("a %s contains an idempotency key:\n%s", what, text)
			}
		}
	})
	return e
}

func (e *env) mux(h *httpadmit.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", h)
	mux.Handle("GET /orders/{id}", h.Status("id"))
	return mux
}

// setHook installs f as the store's hook until the test ends or the next call.
func (e *env) setHook(f spec.Hook) { e.hook.Store(&f) }

type request struct {
	method string // default POST
	path   string // default /orders
	auth   string // Authorization value; default "Bearer " + apiKeyA; "-" for none
	keys   []string
	body   string
	header http.Header // more request headers
}

// client bounds every request generously, so that a handler that waits when
// it must answer fails the test instead of hanging it.
var client = &http.Client{Timeout: 2 * time.Minute}

type response struct {
	status int
	header http.Header
	body   []byte
}

// post is a request as tenant A with one key line.
func post(key, body string) request { return request{keys: []string{key}, body: body} }

func (e *env) do(r request) response {
	e.t.Helper()
	return doAt(e.t, e.srv.URL, r, &e.bodies)
}

func doAt(t testing.TB, base string, r request, bodies io.Writer) response {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/orders"
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, base+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	switch r.auth {
	case "":
		req.Header.Set("Authorization", "Bearer "+apiKeyA)
	case "-":
	default:
		req.Header.Set("Authorization", r.auth)
	}
	for _, k := range r.keys {
		req.Header.Add(httpadmit.KeyHeader, k)
	}
	for name, values := range r.header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", r.method, r.path, err)
		return response{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the body: %v", r.method, r.path, err)
	}
	_, _ = bodies.Write(append(b, '\n'))
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (r response) view(t testing.TB) httpadmit.RunView {
	t.Helper()
	var v httpadmit.RunView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("response %d %q is not a RunView: %v", r.status, r.body, err)
	}
	return v
}

func (r response) problem(t testing.TB) httpadmit.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != httpadmit.ProblemContentType {
		t.Fatalf("response %d: Content-Type %q, want %q; body %s", r.status, ct, httpadmit.ProblemContentType, r.body)
	}
	var p httpadmit.Problem
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("response %d %q is not a Problem: %v", r.status, r.body, err)
	}
	if p.Status != r.status || p.Type == "" || p.Title == "" || p.Detail == "" || p.Code == "" {
		t.Fatalf("problem %+v: want type, title, detail, code and status %d all set", p, r.status)
	}
	return p
}

// wantCreated checks a 201 and its headers and returns its view. replayed
// says whether it must be a replay.
func wantCreated(t testing.TB, r response, replayed bool) httpadmit.RunView {
	t.Helper()
	if r.status != http.StatusCreated {
		t.Fatalf("status %d, want 201; body %s", r.status, r.body)
	}
	if got := r.header.Get(httpadmit.ReplayedHeader); (got == "true") != replayed || (!replayed && got != "") {
		t.Fatalf("%s: %q; want replayed=%v", httpadmit.ReplayedHeader, got, replayed)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	v := r.view(t)
	if loc := r.header.Get("Location"); loc != "/orders/"+v.RunID {
		t.Fatalf("Location %q, want /orders/%s", loc, v.RunID)
	}
	if v.State != spec.RunQueued || v.Operation != op || v.MaxAttempts != 3 || v.Result != nil || v.ErrorCode != "" {
		t.Fatalf("201 body %s: want the run as admitted (queued, %s, 3 attempts, no result)", r.body, op)
	}
	return v
}

// wantProblem checks an error response.
func wantProblem(t testing.TB, r response, status int, typ, field, code string) httpadmit.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	p := r.problem(t)
	if p.Type != typ || p.Field != field || p.Code != code {
		t.Fatalf("problem %+v; want type %s, field %q, code %q", p, typ, field, code)
	}
	if (status == http.StatusServiceUnavailable || typ == httpadmit.TypeKeyInFlight) != (r.header.Get("Retry-After") != "") {
		t.Fatalf("Retry-After %q on a %d %s", r.header.Get("Retry-After"), status, typ)
	}
	if r.header.Get(httpadmit.ReplayedHeader) != "" {
		t.Fatalf("an error response is marked %s", httpadmit.ReplayedHeader)
	}
	return p
}

func (e *env) runs() []spec.Run {
	e.t.Helper()
	snap, err := e.store.Snapshot(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return snap.Runs
}

const order = `{"amount":1200,"currency":"EUR"}`

// TestAdmission walks the status codes one by one on every store, through a
// real HTTP client.
func TestAdmission(t *testing.T) {
	quotedKey := `"` + secret + `-order-1"`
	tests := []struct {
		name      string
		configure func(*httpadmit.Config)
		// check runs the case against e.
		check func(t *testing.T, e *env)
	}{
		{"201 created", nil, func(t *testing.T, e *env) {
			v := wantCreated(t, e.do(post(quotedKey, order)), false)
			runs := e.runs()
			if len(runs) != 1 || runs[0].ID != v.RunID || runs[0].Tenant != tenantA || runs[0].Payload != order {
				t.Fatalf("runs %+v; want one run %s of %s with the canonical order", runs, v.RunID, tenantA)
			}
			if v.CreatedAtMs != runs[0].CreatedAt || v.DeadlineAtMs != runs[0].DeadlineAt {
				t.Fatalf("view %+v does not show the run's times %d, %d", v, runs[0].CreatedAt, runs[0].DeadlineAt)
			}
		}},
		{"201 replay: the same body, byte for byte", nil, func(t *testing.T, e *env) {
			first := e.do(post(quotedKey, order))
			wantCreated(t, first, false)
			again := e.do(post(quotedKey, `{ "currency": "EUR", "amount": 1200 }`))
			wantCreated(t, again, true)
			if !bytes.Equal(again.body, first.body) || again.header.Get("Location") != first.header.Get("Location") {
				t.Fatalf("replay %s (Location %s); want the original %s (Location %s)", again.body, again.header.Get("Location"), first.body, first.header.Get("Location"))
			}
			if n := len(e.runs()); n != 1 {
				t.Fatalf("%d runs after a replay, want 1", n)
			}
		}},
		{"201 replay after the run completed: still the original body", nil, func(t *testing.T, e *env) {
			first := e.do(post(quotedKey, order))
			v := wantCreated(t, first, false)
			ctx := context.Background()
			leases, err := e.store.Claim(ctx, spec.ClaimRequest{Tenant: tenantA, Worker: "w1", LeaseMs: 60_000, Limit: 1})
			if err != nil || len(leases) != 1 {
				t.Fatalf("claim: %v, %v", leases, err)
			}
			if _, err := e.store.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref(), Result: []byte(`{"payment":"pay_1"}`)}); err != nil {
				t.Fatal(err)
			}
			again := e.do(post(quotedKey, order))
			wantCreated(t, again, true)
			if !bytes.Equal(again.body, first.body) {
				t.Fatalf("replay after completion %s; want the original %s", again.body, first.body)
			}
			st := e.do(request{method: http.MethodGet, path: "/orders/" + v.RunID})
			if st.status != http.StatusOK || st.view(t).State != spec.RunCompleted || string(st.view(t).Result) != `{"payment":"pay_1"}` {
				t.Fatalf("GET %d %s; want 200 completed with the result", st.status, st.body)
			}
		}},
		{"201 replay: the bare and the quoted form are one key", nil, func(t *testing.T, e *env) {
			first := e.do(post(quotedKey, order))
			wantCreated(t, first, false)
			again := e.do(post(secret+"-order-1", order))
			wantCreated(t, again, true)
			if !bytes.Equal(again.body, first.body) {
				t.Fatalf("bare-key replay %s; want %s", again.body, first.body)
			}
		}},
		{"201 escaped key: stored unescaped", nil, func(t *testing.T, e *env) {
			k := `"` + secret + `\"q\\b"`
			wantCreated(t, e.do(post(k, order)), false)
			wantCreated(t, e.do(post(k, order)), true)
			snap, err := e.store.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Idempotency) != 1 || snap.Idempotency[0].Key != secret+`"q\b` {
				t.Fatalf("idempotency records %+v; want one with the unescaped key", snap.Idempotency)
			}
		}},
		{"201 another tenant's key is another scope", nil, func(t *testing.T, e *env) {
			b := e.do(request{auth: "Bearer " + apiKeyB, keys: []string{quotedKey}, body: order})
			vb := wantCreated(t, b, false)
			a := e.do(post(quotedKey, `{"amount":9900,"currency":"EUR"}`))
			va := wantCreated(t, a, false)
			if va.RunID == vb.RunID {
				t.Fatalf("tenants A and B got the same run %s", va.RunID)
			}
		}},
		{"422 the key with another payload", nil, func(t *testing.T, e *env) {
			wantCreated(t, e.do(post(quotedKey, order)), false)
			wantProblem(t, e.do(post(quotedKey, `{"amount":9900,"currency":"EUR"}`)), http.StatusUnprocessableEntity,
				httpadmit.TypeKeyReused, httpadmit.KeyHeader, string(spec.CodeIdempotencyConflict))
		}},
		{"400 missing key", nil, func(t *testing.T, e *env) {
			wantProblem(t, e.do(request{body: order}), http.StatusBadRequest, httpadmit.TypeKeyMissing, httpadmit.KeyHeader, string(spec.CodeInvalidArgument))
		}},
		{"400 malformed keys", nil, func(t *testing.T, e *env) {
			for _, k := range []string{`"` + secret + `-unterminated`, `"` + secret + `\n"`, `"` + secret + ` space"`, `""`, "",
				`"` + secret + strings.Repeat("k", 250) + `"`, `"` + secret + `";p=1`, secret + `"x`, `"-` + secret + `"`, `"\"` + secret + `"`} {
				wantProblem(t, e.do(post(k, order)), http.StatusBadRequest, httpadmit.TypeKeyMalformed, httpadmit.KeyHeader, string(spec.CodeInvalidArgument))
			}
		}},
		{"400 duplicate keys", nil, func(t *testing.T, e *env) {
			for _, keys := range [][]string{{`"` + secret + `-a"`, `"` + secret + `-b"`}, {quotedKey, quotedKey},
				{`"` + secret + `-a", "` + secret + `-b"`}, {secret + "-a," + secret + "-b"}} {
				wantProblem(t, e.do(request{keys: keys, body: order}), http.StatusBadRequest, httpadmit.TypeKeyDuplicate, httpadmit.KeyHeader, string(spec.CodeInvalidArgument))
			}
			if n := len(e.runs()); n != 0 {
				t.Fatalf("%d runs after refused requests", n)
			}
		}},
		{"400 invalid JSON body", nil, func(t *testing.T, e *env) {
			wantProblem(t, e.do(post(quotedKey, `{"amount":`)), http.StatusBadRequest, httpadmit.TypeInvalidBody, "body", string(spec.CodeInvalidArgument))
		}},
		{"400 a payload field, named", nil, func(t *testing.T, e *env) {
			p := wantProblem(t, e.do(post(quotedKey, `{"amount":-5,"currency":"EUR"}`)), http.StatusBadRequest, httpadmit.TypeInvalidBody, "/amount", string(spec.CodeInvalidArgument))
			if p.Detail != "amount must be a positive number of cents" {
				t.Fatalf("detail %q; want the Payload function's", p.Detail)
			}
		}},
		{"401 unauthenticated", nil, func(t *testing.T, e *env) {
			for _, auth := range []string{"-", "Bearer sk_test_wrong_0123456789abcdef", "Basic " + apiKeyA, "Bearer"} {
				for _, r := range []request{{auth: auth, keys: []string{quotedKey}, body: order}, {method: http.MethodGet, path: "/orders/x", auth: auth}} {
					resp := e.do(r)
					wantProblem(t, resp, http.StatusUnauthorized, httpadmit.TypeUnauthenticated, "Authorization", httpadmit.CodeUnauthenticated)
					if got := resp.header.Get("WWW-Authenticate"); got != `Bearer realm="leasehold"` {
						t.Fatalf("WWW-Authenticate %q", got)
					}
				}
			}
			if n := len(e.runs()); n != 0 {
				t.Fatalf("%d runs after unauthenticated requests", n)
			}
		}},
		{"200 GET own run, 404 another tenant's", nil, func(t *testing.T, e *env) {
			v := wantCreated(t, e.do(request{auth: "Bearer " + apiKeyB, keys: []string{quotedKey}, body: order}), false)
			own := e.do(request{method: http.MethodGet, path: "/orders/" + v.RunID, auth: "Bearer " + apiKeyB})
			if own.status != http.StatusOK || own.view(t).RunID != v.RunID || own.view(t).State != spec.RunQueued {
				t.Fatalf("GET own run: %d %s", own.status, own.body)
			}
			wantProblem(t, e.do(request{method: http.MethodGet, path: "/orders/" + v.RunID}), http.StatusNotFound, httpadmit.TypeNotFound, "", string(spec.CodeNotFound))
		}},
		{"404 GET unknown, malformed, other operation", nil, func(t *testing.T, e *env) {
			if _, err := e.store.CreateRun(context.Background(), spec.CreateRunRequest{Tenant: tenantA, Operation: "other",
				IdempotencyKey: "k", RunID: "other-run", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"no-such-run", "bad!id", "other-run"} {
				wantProblem(t, e.do(request{method: http.MethodGet, path: "/orders/" + id}), http.StatusNotFound, httpadmit.TypeNotFound, "", string(spec.CodeNotFound))
			}
		}},
		{"409 the proposed run id is taken", func(c *httpadmit.Config) {
			c.RunID = func(*http.Request) (string, error) { return "fixed-id", nil }
		}, func(t *testing.T, e *env) {
			wantCreated(t, e.do(post(`"`+secret+`-1"`, order)), false)
			wantProblem(t, e.do(post(`"`+secret+`-2"`, order)), http.StatusConflict, httpadmit.TypeRunIDTaken, "", string(spec.CodeAlreadyExists))
		}},
		{"413 body too large", nil, func(t *testing.T, e *env) {
			big := `{"pad":"` + strings.Repeat("x", spec.MaxPayloadBytes) + `"}`
			wantProblem(t, e.do(post(quotedKey, big)), http.StatusRequestEntityTooLarge, httpadmit.TypeBodyTooLarge, "body", string(spec.CodeInvalidArgument))
		}},
		{"503 unavailable, then the retry admits", nil, func(t *testing.T, e *env) {
			var once atomic.Bool
			e.setHook(func(_ context.Context, o spec.Op, p spec.HookPoint) error {
				if o == spec.OpCreateRun && p == spec.BeforeCommit && once.CompareAndSwap(false, true) {
					return spec.Errorf(spec.CodeUnavailable, "injected: database busy")
				}
				return nil
			})
			r := e.do(post(quotedKey, order))
			wantProblem(t, r, http.StatusServiceUnavailable, httpadmit.TypeUnavailable, "", string(spec.CodeUnavailable))
			if got := r.header.Get("Retry-After"); got != "1" {
				t.Fatalf("Retry-After %q, want 1", got)
			}
			wantCreated(t, e.do(post(quotedKey, order)), false)
		}},
		{"503 unknown outcome, then the retry replays", nil, func(t *testing.T, e *env) {
			var once atomic.Bool
			e.setHook(func(_ context.Context, o spec.Op, p spec.HookPoint) error {
				if o == spec.OpCreateRun && p == spec.AfterCommit && once.CompareAndSwap(false, true) {
					return errors.New("injected: connection lost after COMMIT")
				}
				return nil
			})
			wantProblem(t, e.do(post(quotedKey, order)), http.StatusServiceUnavailable, httpadmit.TypeUnknownOutcome, "", string(spec.CodeUnknownOutcome))
			v := wantCreated(t, e.do(post(quotedKey, order)), true)
			if runs := e.runs(); len(runs) != 1 || runs[0].ID != v.RunID {
				t.Fatalf("runs %+v; want the one the lost reply admitted, %s", runs, v.RunID)
			}
		}},
		{"409 while the same key is being admitted", nil, func(t *testing.T, e *env) {
			reached, release := make(chan struct{}), make(chan struct{})
			var once atomic.Bool
			e.setHook(func(ctx context.Context, o spec.Op, p spec.HookPoint) error {
				if o == spec.OpCreateRun && p == spec.BeforeCommit && once.CompareAndSwap(false, true) {
					close(reached)
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
				return nil
			})
			firstc := make(chan response, 1)
			go func() { firstc <- e.do(post(quotedKey, order)) }()
			select {
			case <-reached:
			case r := <-firstc:
				t.Fatalf("the first request never reached the store: %d %s", r.status, r.body)
			}
			wantProblem(t, e.do(post(quotedKey, order)), http.StatusConflict, httpadmit.TypeKeyInFlight, httpadmit.KeyHeader, httpadmit.CodeKeyInFlight)
			close(release)
			first := <-firstc
			wantCreated(t, first, false)
			again := e.do(post(quotedKey, order))
			wantCreated(t, again, true)
			if !bytes.Equal(again.body, first.body) {
				t.Fatalf("replay %s; want %s", again.body, first.body)
			}
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					tt.check(t, newEnv(t, b.factory, tt.configure))
				})
			}
		})
	}
}

// TestConcurrentSameKey sends one request from many goroutines at once
// through two Handlers over one store (two processes, as far as the
// in-flight registry knows). The first admission is held in the store until
// every request has reached a server, so the others meet it in flight: at
// its Handler's registry (409) or inside the other Handler's CreateRun
// (which waits for the store and replays). Exactly one run is created;
// exactly one response is the first 201, every other is the same 201 marked
// as a replay or a 409 in flight; none is anything else.
func TestConcurrentSameKey(t *testing.T) {
	const clients = 24
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b.factory, nil)
			keys, err := httpadmit.NewAPIKeys(map[string]string{apiKeyA: tenantA})
			if err != nil {
				t.Fatal(err)
			}
			h2, err := httpadmit.New(httpadmit.Config{Store: e.handle.Reopen(t), Operation: op, Auth: keys})
			if err != nil {
				t.Fatal(err)
			}
			var entered atomic.Int32
			allIn := make(chan struct{})
			count := func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if entered.Add(1) == clients {
						close(allIn)
					}
					h.ServeHTTP(w, r)
				})
			}
			var held atomic.Bool
			e.setHook(func(ctx context.Context, o spec.Op, p spec.HookPoint) error {
				if o == spec.OpCreateRun && p == spec.BeforeCommit && held.CompareAndSwap(false, true) {
					select {
					case <-allIn:
					case <-ctx.Done():
					}
				}
				return nil
			})
			srv1 := httptest.NewServer(count(e.mux(e.h)))
			defer srv1.Close()
			srv2 := httptest.NewServer(count(e.mux(h2)))
			defer srv2.Close()
			bases := []string{srv1.URL, srv2.URL}

			start := make(chan struct{})
			results := make([]response, clients)
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					<-start
					results[i] = doAt(t, bases[i%2], post(`"`+secret+`-concurrent"`, order), &e.bodies)
				})
			}
			close(start)
			wg.Wait()

			runs := e.runs()
			if len(runs) != 1 {
				t.Fatalf("%d runs for one key, want 1", len(runs))
			}
			want, err := json.Marshal(httpadmit.RunView{RunID: runs[0].ID, Operation: op, State: spec.RunQueued,
				MaxAttempts: runs[0].MaxAttempts, CreatedAtMs: runs[0].CreatedAt, DeadlineAtMs: runs[0].DeadlineAt})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, '\n')
			counts := map[string]int{}
			for i, r := range results {
				switch {
				case r.status == http.StatusCreated && bytes.Equal(r.body, want) && r.header.Get(httpadmit.ReplayedHeader) == "":
					counts["created"]++
				case r.status == http.StatusCreated && bytes.Equal(r.body, want) && r.header.Get(httpadmit.ReplayedHeader) == "true":
					counts["replayed"]++
				case r.status == http.StatusConflict && r.problem(t).Type == httpadmit.TypeKeyInFlight:
					counts["in flight"]++
				default:
					t.Errorf("client %d: %d %s; want the original 201 %s or 409 in flight", i, r.status, r.body, want)
				}
			}
			if counts["created"] != 1 {
				t.Errorf("%d first responses, want exactly 1 (counts %v)", counts["created"], counts)
			}
			t.Logf("responses: %v", counts)
		})
	}
}

// TestStatusMapping checks every error code CreateRun can return, and those
// it cannot, against the documented status (the mapping is a switch the
// compiler cannot check for completeness).
func TestStatusMapping(t *testing.T) {
	want := map[spec.Code]int{
		spec.CodeInvalidArgument:     http.StatusInternalServerError, // the handler validated the client's input first
		spec.CodeNotFound:            http.StatusInternalServerError,
		spec.CodeAlreadyExists:       http.StatusConflict,
		spec.CodeIdempotencyConflict: http.StatusUnprocessableEntity,
		spec.CodeLostLease:           http.StatusInternalServerError,
		spec.CodeCancelled:           http.StatusInternalServerError,
		spec.CodeAlreadyTerminal:     http.StatusInternalServerError,
		spec.CodeDeadlineExceeded:    http.StatusInternalServerError,
		spec.CodeFailedPrecondition:  http.StatusInternalServerError,
		spec.CodeReplayLimit:         http.StatusInternalServerError,
		spec.CodeEffectConflict:      http.StatusInternalServerError,
		spec.CodeUnavailable:         http.StatusServiceUnavailable,
		spec.CodeUnknownOutcome:      http.StatusServiceUnavailable,
	}
	if len(want) != len(spec.Codes) {
		t.Fatalf("the table has %d codes, spec.Codes %d: add the new code here and to createProblem", len(want), len(spec.Codes))
	}
	for _, code := range spec.Codes {
		status, ok := want[code]
		if !ok {
			t.Fatalf("code %s is not in the table", code)
		}
		t.Run(string(code), func(t *testing.T) {
			e := newEnv(t, sqlitetest.Factory, nil)
			e.setHook(func(_ context.Context, o spec.Op, p spec.HookPoint) error {
				if o == spec.OpCreateRun && p == spec.BeforeCommit {
					return spec.Errorf(code, "injected")
				}
				return nil
			})
			r := e.do(post(fmt.Sprintf(`"%s-%s"`, secret, code), order))
			if r.status != status {
				t.Fatalf("%s: status %d, want %d", code, r.status, status)
			}
			if p := r.problem(t); p.Code != string(code) {
				t.Fatalf("%s: problem code %q", code, p.Code)
			}
		})
	}
}

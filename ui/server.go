// Package ui is the operator's web view of a live leasehold database
// (`leasehold ui`): one tenant's runs by state with live counts, paged with
// the store's ListRuns cursor and filters; a run's page with its timeline
// (attempts by generation with their lease windows and owners, writes under
// each, events), its effect ledger rows and outbox messages; dead runs with
// the replay action; cancel; and the doctor's findings.
//
// It is read-only unless Options.Actor names who acts; then each action is
// the store's own guarded operation (Store.Cancel, Store.Replay) through the
// doctor (doctor.Cancel, doctor.Replay), so it is audited with the actor in
// the same trail as the doctor's repairs. Every page is of one tenant, read
// through the store's tenant-scoped reads: another tenant's run is
// not_found. With Options.Token every request must carry it (a bearer
// header, or the cookie a first ?token= visit sets); Listen refuses a
// non-loopback address without one. Actions are POSTs that must carry the
// page's CSRF token and pass Go's cross-origin protection (Sec-Fetch-Site /
// Origin). Errors are *Error values with stable codes and what to do.
//
// The pages are html/template with a small script (live counts) embedded
// in the binary: nothing to build or install.
package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/doctor"
	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/timeline"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Options configure a Server.
type Options struct {
	// Target is the database: its store (which must offer spec.RunLister)
	// and the doctor's reads and audit trail.
	Target *doctor.Target
	// Actor names who acts, for the audit trail; "" makes the UI
	// read-only (every action is refused with CodeReadOnly).
	Actor string
	// Token, when set, is required on every request.
	Token string
	// Doctor is the doctor's options for the findings page and the audit
	// (its Clock, when set, stamps audit rows; Tenant is set per page).
	Doctor doctor.Options
	// NewRunID names a replay's new run; default "replay-" and 12 random
	// hex digits.
	NewRunID func() string
	// PageSize is the runs listed per page (default 50, at most
	// spec.MaxBatch).
	PageSize int
}

// Server serves the UI; it is an http.Handler.
type Server struct {
	o       Options
	lister  spec.RunLister
	csrf    string
	mux     *http.ServeMux
	pages   *template.Template
	handler http.Handler

	// cached holds what the UIRunPageCached and UICountsCached mutants serve.
	mu     sync.Mutex
	cached map[string]any
}

// CountCap is where the live counts stop counting (shown as "1000+"):
// counting reads the listing index, so a count costs at most this many
// index rows per state.
const CountCap = 1000

// New makes a Server. An invalid actor or a store that cannot list runs is
// invalid_argument.
func New(o Options) (*Server, error) {
	if o.Target == nil {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "ui: no database")
	}
	lister, ok := o.Target.Store().(spec.RunLister)
	if !ok {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "ui: the store %T cannot list runs (spec.RunLister)", o.Target.Store())
	}
	if o.Actor != "" {
		if err := spec.CheckWorker(o.Actor); err != nil {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "ui: actor %q: want who acts, 1-128 printable ASCII bytes, for the audit trail", o.Actor)
		}
	}
	if o.PageSize == 0 {
		o.PageSize = 50
	}
	if err := spec.CheckLimit(o.PageSize); err != nil {
		return nil, err
	}
	if o.NewRunID == nil {
		o.NewRunID = func() string { return "replay-" + randomHex(6) }
	}
	pages, err := template.New("").Funcs(template.FuncMap{"at": formatAt, "query": queryWith, "dict": dict}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, lister: lister, csrf: randomHex(16), mux: http.NewServeMux(), pages: pages, cached: map[string]any{}}
	static, _ := fs.Sub(assets, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /static/timeline.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		fmt.Fprint(w, timeline.Style)
	})
	s.mux.HandleFunc("GET /{$}", s.home)
	s.mux.HandleFunc("GET /tenants/{tenant}/{$}", s.runs)
	s.mux.HandleFunc("GET /tenants/{tenant}/counts", s.counts)
	s.mux.HandleFunc("GET /tenants/{tenant}/runs/{run}", s.run)
	s.mux.HandleFunc("POST /tenants/{tenant}/runs/{run}/cancel", s.cancel)
	s.mux.HandleFunc("POST /tenants/{tenant}/runs/{run}/replay", s.replay)
	s.mux.HandleFunc("GET /tenants/{tenant}/doctor", s.doctor)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, &Error{Code: CodeNoSuchPage, Status: http.StatusNotFound, Message: r.Method + " " + r.URL.Path + " is not a page of leasehold ui",
			Hint: "Start from the home page, /, and pick a tenant."})
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, &Error{Code: CodeCrossSite, Status: http.StatusForbidden, Message: "the action came from another origin than this leasehold ui's page",
			Hint: "Use the buttons of leasehold ui's own pages; nothing was changed."})
	}))
	s.handler = s.guard(cop.Handler(s.mux))
	return s, nil
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tokenCookie carries the access token after a ?token= visit.
const tokenCookie = "leasehold_ui_token"

// guard checks the access token (when one is set) and sets the headers
// every response carries.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if s.o.Token == "" {
			next.ServeHTTP(w, r)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet && s.tokenOK(q) {
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			u := *r.URL
			v := u.Query()
			v.Del("token")
			u.RawQuery = v.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		given := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if c, err := r.Cookie(tokenCookie); err == nil && given == "" {
			given = c.Value
		}
		if !s.tokenOK(given) {
			s.fail(w, r, &Error{Code: CodeUnauthorized, Status: http.StatusUnauthorized, Message: "this leasehold ui requires its access token",
				Hint: "Open the address with ?token=TOKEN once (the token leasehold ui was started with, --token or LEASEHOLD_UI_TOKEN), or send Authorization: Bearer TOKEN."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) tokenOK(given string) bool {
	return given != "" && subtle.ConstantTimeCompare([]byte(given), []byte(s.o.Token)) == 1
}

// Listen checks addr for `leasehold ui`: a non-loopback address (or a host
// name other than localhost) without a token is CodeTokenRequired, since
// anyone who can reach it could read every tenant's runs.
func Listen(addr, token string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("--listen %q is not host:port: %v", addr, err), Hint: "Use e.g. 127.0.0.1:8427."}
	}
	if token == "" && !loopback(host) {
		return nil, &Error{Code: CodeTokenRequired, Message: fmt.Sprintf("refusing to listen on %s without an access token: it is not a loopback address", addr),
			Hint: "Listen on 127.0.0.1, or set a token with --token or LEASEHOLD_UI_TOKEN (every request must then carry it)."}
	}
	return net.Listen("tcp", addr)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// layout is what every page's frame shows.
type layout struct {
	Title    string
	Tenant   string
	Actor    string
	CSRF     string
	Flash    string
	Body     any
	ReadOnly bool
}

func (s *Server) render(w http.ResponseWriter, name string, status int, l layout) {
	l.Actor, l.CSRF, l.ReadOnly = s.o.Actor, s.csrf, s.o.Actor == ""
	var b strings.Builder
	if err := s.pages.ExecuteTemplate(&b, name, l); err != nil {
		http.Error(w, "ui: rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprint(w, b.String())
}

func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	if t := r.URL.Query().Get("tenant"); t != "" {
		http.Redirect(w, r, "/tenants/"+url.PathEscape(t)+"/", http.StatusSeeOther)
		return
	}
	s.render(w, "home.html", http.StatusOK, layout{Title: "leasehold ui"})
}

// tenant reads and checks the page's tenant.
func (s *Server) tenant(r *http.Request) (string, error) {
	t := r.PathValue("tenant")
	if err := spec.DefaultConfig().CheckTenant(t); err != nil {
		return "", err
	}
	return t, nil
}

// runsPage is the runs page's data.
type runsPage struct {
	Filter spec.ListRunsRequest
	States []spec.RunState
	Counts map[spec.RunState]string
	Page   spec.RunPage
	Query  url.Values
}

func (s *Server) runs(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.tenant(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	req := spec.ListRunsRequest{Tenant: tenant, State: spec.RunState(q.Get("state")), Operation: q.Get("operation"), Cursor: q.Get("cursor"), Limit: s.o.PageSize}
	for name, dst := range map[string]*int64{"from": &req.CreatedFrom, "before": &req.CreatedBefore} {
		if v := q.Get(name); v != "" {
			if *dst, err = strconv.ParseInt(v, 10, 64); err != nil {
				s.fail(w, r, spec.Errorf(spec.CodeInvalidArgument, "%s=%q is not a time in ms since 1970", name, v))
				return
			}
		}
	}
	page, err := s.lister.ListRuns(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	counts, err := s.countAll(r.Context(), tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, "runs.html", http.StatusOK, layout{Title: "runs of " + tenant, Tenant: tenant, Flash: q.Get("done"),
		Body: runsPage{Filter: req, States: states, Counts: counts, Page: page, Query: q}})
}

var states = []spec.RunState{spec.RunQueued, spec.RunRunning, spec.RunCompleted, spec.RunFailed, spec.RunCancelled}

// countAll counts tenant's runs per state through the listing, up to
// CountCap each.
func (s *Server) countAll(ctx context.Context, tenant string) (map[spec.RunState]string, error) {
	if mutant.On(mutant.UICountsCached) {
		if c, ok := s.memo("counts/" + tenant).(map[spec.RunState]string); ok {
			return c, nil
		}
	}
	out := map[spec.RunState]string{}
	for _, st := range states {
		n, cursor := 0, ""
		for {
			page, err := s.lister.ListRuns(ctx, spec.ListRunsRequest{Tenant: tenant, State: st, Limit: min(spec.MaxBatch, CountCap+1-n), Cursor: cursor})
			if err != nil {
				return nil, err
			}
			n += len(page.Runs)
			if page.Next == "" || n > CountCap {
				break
			}
			cursor = page.Next
		}
		out[st] = strconv.Itoa(n)
		if n > CountCap {
			out[st] = strconv.Itoa(CountCap) + "+"
		}
	}
	if mutant.On(mutant.UICountsCached) {
		s.keep("counts/"+tenant, out)
	}
	return out, nil
}

// counts serves the live counts as JSON: {"queued": "3", ...}.
func (s *Server) counts(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.tenant(r)
	if err == nil {
		var c map[spec.RunState]string
		if c, err = s.countAll(r.Context(), tenant); err == nil {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(c)
			return
		}
	}
	s.fail(w, r, err)
}

// runPage is a run's page's data.
type runPage struct {
	Run      spec.Run
	Job      spec.Job
	Attempts []spec.Attempt
	Events   []spec.Event
	Effects  []spec.Effect
	Outbox   []spec.OutboxMessage
	Timeline template.HTML
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.tenant(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, id, st := r.Context(), r.PathValue("run"), s.o.Target.Store()
	if p, ok := s.memo("run/" + tenant + "/" + id).(runPage); ok && mutant.On(mutant.UIRunPageCached) {
		s.render(w, "run.html", http.StatusOK, layout{Title: "run " + id, Tenant: tenant, Flash: r.URL.Query().Get("done"), Body: p})
		return
	}
	var p runPage
	if p.Run, err = st.GetRun(ctx, tenant, id); err == nil {
		p.Job, err = st.GetJob(ctx, tenant, id)
	}
	if err == nil {
		p.Attempts, err = st.Attempts(ctx, tenant, id)
	}
	if err == nil {
		p.Events, err = st.Events(ctx, tenant, id)
	}
	if err == nil {
		p.Effects, err = st.Effects(ctx, tenant, id)
	}
	if err == nil {
		p.Outbox, err = doctor.RunOutbox(ctx, s.o.Target, tenant, id)
	}
	if err == nil {
		p.Timeline, err = RunTimeline(p.Job, p.Attempts, p.Events, p.Effects, p.Outbox).HTML()
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if mutant.On(mutant.UIRunPageCached) {
		s.keep("run/"+tenant+"/"+id, p)
	}
	s.render(w, "run.html", http.StatusOK, layout{Title: "run " + id, Tenant: tenant, Flash: r.URL.Query().Get("done"), Body: p})
}

// RunTimeline is a run's timeline: a generation per attempt (its lease from
// the claim to its end, or to the job's lease expiry while it runs), the
// writes the store accepted under each (a renewal, the attempt's end,
// effect ledger rows, outbox messages; the store keeps no refused write),
// and the events as marks.
func RunTimeline(job spec.Job, attempts []spec.Attempt, events []spec.Event, effects []spec.Effect, outbox []spec.OutboxMessage) timeline.Timeline {
	t := timeline.Timeline{Unit: "ms"}
	if mutant.On(mutant.UITimelineLastGeneration) && len(attempts) > 1 {
		attempts = attempts[len(attempts)-1:]
	}
	owner := map[int64]string{}
	for _, a := range attempts {
		g := timeline.Generation{Generation: a.Generation, Owner: a.Worker, From: a.ClaimedAt, To: a.FinishedAt, Outcome: string(a.Outcome)}
		if a.Outcome == spec.AttemptRunning {
			g.To, g.Open, g.Outcome = job.LeaseExpiresAt, true, "holds the lease"
		}
		t.Generations = append(t.Generations, g)
		owner[a.Generation] = a.Worker
		if a.RenewedAt > a.ClaimedAt {
			t.Writes = append(t.Writes, timeline.Write{At: a.RenewedAt, Generation: a.Generation, Owner: a.Worker, Op: "renew (last)", Accepted: true})
		}
		if a.Outcome != spec.AttemptRunning && a.Outcome != spec.AttemptExpired && a.Outcome != spec.AttemptCancelled {
			t.Writes = append(t.Writes, timeline.Write{At: a.FinishedAt, Generation: a.Generation, Owner: a.Worker, Op: string(a.Outcome), Accepted: true, Detail: a.ErrorCode})
		}
	}
	for _, e := range effects {
		t.Writes = append(t.Writes, timeline.Write{At: e.UpdatedAt, Generation: e.Generation, Owner: owner[e.Generation],
			Op: "effect " + e.Step + "/" + e.Key + ": " + string(e.State), Accepted: true})
	}
	for _, m := range outbox {
		if m.Generation > 0 {
			t.Writes = append(t.Writes, timeline.Write{At: m.CreatedAt, Generation: m.Generation, Owner: owner[m.Generation], Op: "outbox " + m.Subject, Accepted: true})
		}
	}
	for _, e := range events {
		t.Marks = append(t.Marks, timeline.Mark{At: e.At, Label: string(e.Kind)})
	}
	return t
}

// act checks what every action needs: an actor and the page's CSRF token.
func (s *Server) act(r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		return &Error{Code: CodeBadRequest, Status: http.StatusBadRequest, Message: "the form could not be read: " + err.Error(), Hint: "Reload the page and try again."}
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
		return &Error{Code: CodeCrossSite, Status: http.StatusForbidden, Message: "the action did not come from a page this leasehold ui served (no or a stale CSRF token)",
			Hint: "Reload the run's page (leasehold ui may have restarted) and use its button."}
	}
	if s.actor() == "" {
		return &Error{Code: CodeReadOnly, Status: http.StatusForbidden, Message: "this leasehold ui is read-only: nothing was changed",
			Hint: "Restart it with --actor NAME (who is acting): every action is then audited with that name in leasehold_doctor_audit."}
	}
	return nil
}

// actor is who acts ("" read-only).
func (s *Server) actor() string {
	if s.o.Actor == "" && mutant.On(mutant.UIIgnoresActor) {
		return "anonymous"
	}
	return s.o.Actor
}

func (s *Server) memo(key string) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cached[key]
}

func (s *Server) keep(key string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cached[key]; !ok {
		s.cached[key] = v
	}
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.tenant(r)
	if err == nil {
		err = s.act(r)
	}
	if err == nil {
		_, err = doctor.Cancel(r.Context(), s.o.Target, s.o.Doctor, s.actor(), tenant, r.PathValue("run"))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/tenants/"+url.PathEscape(tenant)+"/runs/"+url.PathEscape(r.PathValue("run"))+"?done=cancelled", http.StatusSeeOther)
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.tenant(r)
	if err == nil {
		err = s.act(r)
	}
	var run spec.Run
	if err == nil {
		run, err = doctor.Replay(r.Context(), s.o.Target, s.o.Doctor, s.actor(), tenant, r.PathValue("run"), s.o.NewRunID())
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/tenants/"+url.PathEscape(tenant)+"/runs/"+url.PathEscape(run.ID)+"?done=replayed+"+url.QueryEscape(r.PathValue("run")), http.StatusSeeOther)
}

// doctorPage is the findings page's data.
type doctorPage struct {
	Verdict  string
	Markdown string
}

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.tenant(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o := s.o.Doctor
	o.Tenant = tenant
	rep, err := doctor.Diagnose(r.Context(), s.o.Target, o)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, "doctor.html", http.StatusOK, layout{Title: "doctor: " + tenant, Tenant: tenant, Body: doctorPage{Verdict: string(rep.Verdict), Markdown: b.String()}})
}

func formatAt(ms int64) string {
	if ms == 0 {
		return "—"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000") + " (" + strconv.FormatInt(ms, 10) + ")"
}

// queryWith returns the link to this page with q's key set to value (""
// deletes it), any other change starting from the first page.
func queryWith(q url.Values, key, value string) template.URL {
	v := url.Values{}
	for k, vs := range q {
		if k != "done" {
			v[k] = vs
		}
	}
	if value == "" {
		v.Del(key)
	} else {
		v.Set(key, value)
	}
	if key != "cursor" {
		v.Del("cursor")
	}
	return template.URL("?" + v.Encode())
}

// dict makes a map of its key, value arguments (for a sub-template).
func dict(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

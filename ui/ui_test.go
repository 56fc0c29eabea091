package ui

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/doctor"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

const t0 = 1_700_000_000_000

// fx is a SQLite store with an injected clock behind a UI server.
type fx struct {
	t      *testing.T
	ctx    context.Context
	store  *sqlite.Store
	clock  *clock.Manual
	target *doctor.Target
	srv    *httptest.Server
	c      *http.Client
	csrf   string // the pages' CSRF token, once a page showed it
}

func newFx(t *testing.T, o Options) *fx {
	t.Helper()
	f := &fx{t: t, ctx: context.Background(), clock: clock.NewManual(t0)}
	var err error
	f.store, err = sqlite.Open(f.ctx, filepath.Join(t.TempDir(), "ui.db"), sqlite.Options{Config: spec.DefaultConfig(), Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	if f.target, err = doctor.New(f.store, "test"); err != nil {
		t.Fatal(err)
	}
	o.Target = f.target
	o.Doctor.Clock = f.clock
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(s)
	t.Cleanup(f.srv.Close)
	jar, _ := cookiejar.New(nil)
	f.c = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f
}

func (f *fx) create(tenant, run string) {
	f.t.Helper()
	if _, err := f.store.CreateRun(f.ctx, spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: "k-" + run,
		RunID: run, Payload: []byte(`{}`), MaxAttempts: 3}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fx) claim(tenant, worker string) spec.Lease {
	f.t.Helper()
	ls, err := f.store.Claim(f.ctx, spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: 30_000, Limit: 1})
	if err != nil || len(ls) != 1 {
		f.t.Fatalf("claim: %v, %v", ls, err)
	}
	return ls[0]
}

// get fetches path and returns the status and body.
func (f *fx) get(path string, header ...string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// post submits a form as the page's button does (same origin, with the
// page's CSRF token unless csrf is given).
func (f *fx) post(path string, csrf string, header ...string) (int, string, string) {
	f.t.Helper()
	if csrf == "" {
		csrf = f.csrf
	}
	if csrf == "" {
		_, page := f.get(path[:strings.LastIndex(path, "/")])
		m := csrfRE.FindStringSubmatch(page)
		if m == nil {
			f.t.Fatalf("no CSRF token on %s:\n%s", path, page)
		}
		csrf, f.csrf = m[1], m[1]
	}
	req, _ := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

func (f *fx) state(tenant, run string) spec.RunState {
	f.t.Helper()
	r, err := f.store.GetRun(f.ctx, tenant, run)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.State
}

func wantCode(t *testing.T, body string, code string) {
	t.Helper()
	if !strings.Contains(body, `data-code="`+code+`"`) && !strings.Contains(body, `"code":"`+code+`"`) {
		t.Fatalf("want error %s, got:\n%s", code, body)
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	f := newFx(t, Options{})
	f.create("acme", "r1")
	status, _, body := f.post("/tenants/acme/runs/r1/cancel", "")
	if status != http.StatusForbidden {
		t.Fatalf("cancel without an actor: %d, want 403", status)
	}
	wantCode(t, body, "read_only")
	if !strings.Contains(body, "--actor NAME") {
		t.Errorf("the refusal does not say what to do:\n%s", body)
	}
	if st := f.state("acme", "r1"); st != spec.RunQueued {
		t.Fatalf("a refused cancel changed the run: %s", st)
	}
	if a, _ := doctor.ReadAudit(f.ctx, f.target); len(a) != 0 {
		t.Fatalf("a refused cancel was audited as an action: %+v", a)
	}
}

func TestCancelAuditedWithActor(t *testing.T) {
	f := newFx(t, Options{Actor: "ops-ann"})
	f.create("acme", "r1")
	status, loc, body := f.post("/tenants/acme/runs/r1/cancel", "")
	if status != http.StatusSeeOther || loc != "/tenants/acme/runs/r1?done=cancelled" {
		t.Fatalf("cancel: %d %q\n%s", status, loc, body)
	}
	if st := f.state("acme", "r1"); st != spec.RunCancelled {
		t.Fatalf("after the cancel the run is %s", st)
	}
	a, err := doctor.ReadAudit(f.ctx, f.target)
	if err != nil || len(a) != 2 || a[0].Actor != "ops-ann" || a[0].Action != "cancel" || a[0].Outcome != "started" || a[1].Outcome != doctor.OutcomeApplied {
		t.Fatalf("audit: %+v, %v", a, err)
	}
	_, page := f.get(loc)
	if !strings.Contains(page, `<dd id="run-state">cancelled</dd>`) || strings.Contains(page, `id="cancel"`) {
		t.Fatalf("the run's page after the cancel:\n%s", page)
	}
	// Again: the store's guard refuses, shown with its code and a hint.
	status, _, body = f.post("/tenants/acme/runs/r1/cancel", "")
	if status != http.StatusConflict {
		t.Fatalf("second cancel: %d", status)
	}
	wantCode(t, body, "cancelled")
}

func TestActionsNeedThePagesToken(t *testing.T) {
	f := newFx(t, Options{Actor: "ops-ann"})
	f.create("acme", "r1")
	status, _, body := f.post("/tenants/acme/runs/r1/cancel", "0123abcd")
	if status != http.StatusForbidden {
		t.Fatalf("a cancel with a wrong CSRF token: %d", status)
	}
	wantCode(t, body, "cross_site")
	_, page := f.get("/tenants/acme/runs/r1")
	csrf := csrfRE.FindStringSubmatch(page)[1]
	status, _, body = f.post("/tenants/acme/runs/r1/cancel", csrf, "Sec-Fetch-Site", "cross-site")
	if status != http.StatusForbidden {
		t.Fatalf("a cross-site cancel: %d", status)
	}
	wantCode(t, body, "cross_site")
	if st := f.state("acme", "r1"); st != spec.RunQueued {
		t.Fatalf("a refused cancel changed the run: %s", st)
	}
}

func TestToken(t *testing.T) {
	f := newFx(t, Options{Token: "s3cret"})
	if status, body := f.get("/"); status != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", status)
	} else {
		wantCode(t, body, "unauthorized")
	}
	if status, _ := f.get("/", "Authorization", "Bearer wrong"); status != http.StatusUnauthorized {
		t.Fatalf("with a wrong token: %d", status)
	}
	if status, _ := f.get("/", "Authorization", "Bearer s3cret"); status != http.StatusOK {
		t.Fatalf("with the bearer token: %d", status)
	}
	if status, _ := f.get("/?token=s3cret"); status != http.StatusSeeOther {
		t.Fatalf("?token=: %d, want a redirect that sets the cookie", status)
	}
	if status, _ := f.get("/tenants/acme/"); status != http.StatusOK {
		t.Fatalf("with the cookie: %d", status)
	}
}

func TestListenRefusesAnOpenAddressWithoutToken(t *testing.T) {
	if _, err := Listen("0.0.0.0:0", ""); asError(err).Code != CodeTokenRequired {
		t.Fatalf("0.0.0.0 without a token: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, err := Listen(addr, "")
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		l.Close()
	}
	l, err := Listen("0.0.0.0:0", "tok")
	if err != nil {
		t.Fatalf("0.0.0.0 with a token: %v", err)
	}
	l.Close()
}

func TestTenantIsolation(t *testing.T) {
	f := newFx(t, Options{Actor: "ops-ann"})
	f.create("acme", "a1")
	f.create("beta", "b1")
	_, page := f.get("/tenants/acme/")
	if !strings.Contains(page, `data-run="a1"`) || strings.Contains(page, "b1") {
		t.Fatalf("acme's runs page:\n%s", page)
	}
	status, body := f.get("/tenants/acme/runs/b1")
	if status != http.StatusNotFound {
		t.Fatalf("beta's run through acme: %d", status)
	}
	wantCode(t, body, "not_found")
	_, page = f.get("/tenants/acme/runs/a1")
	status, _, _ = f.post("/tenants/acme/runs/b1/cancel", csrfRE.FindStringSubmatch(page)[1])
	if status != http.StatusNotFound || f.state("beta", "b1") != spec.RunQueued {
		t.Fatalf("cancel of beta's run through acme: %d, state %s", status, f.state("beta", "b1"))
	}
	var counts map[string]string
	_, body = f.get("/tenants/beta/counts")
	if err := json.Unmarshal([]byte(body), &counts); err != nil || counts["queued"] != "1" || counts["cancelled"] != "0" {
		t.Fatalf("beta's counts: %s", body)
	}
}

var runRE = regexp.MustCompile(`data-run="([^"]+)"`)
var nextRE = regexp.MustCompile(`id="next" href="\?([^"]+)"`)

func TestPaging(t *testing.T) {
	f := newFx(t, Options{PageSize: 2})
	for _, id := range []string{"r1", "r2", "r3", "r4", "r5"} {
		f.create("acme", id)
		f.clock.Advance(1)
	}
	var seen []string
	path := "/tenants/acme/"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		_, page := f.get(path)
		for _, m := range runRE.FindAllStringSubmatch(page, -1) {
			seen = append(seen, m[1])
		}
		m := nextRE.FindStringSubmatch(page)
		if m == nil {
			break
		}
		path = "/tenants/acme/?" + strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if got := strings.Join(seen, ","); got != "r5,r4,r3,r2,r1" {
		t.Fatalf("paged runs: %s", got)
	}
	if status, body := f.get("/tenants/acme/?cursor=bogus"); status != http.StatusBadRequest {
		t.Fatalf("a bogus cursor: %d", status)
	} else {
		wantCode(t, body, "invalid_argument")
	}
}

func TestTimelineOfAReclaimedRun(t *testing.T) {
	f := newFx(t, Options{})
	f.create("acme", "r1")
	f.claim("acme", "w-one")
	f.clock.Advance(31_000)
	f.claim("acme", "w-two")
	_, page := f.get("/tenants/acme/runs/r1")
	for _, want := range []string{
		`<tr data-generation="1"><td>1</td><td>w-one</td><td>1700000000000</td><td>1700000031000</td><td>expired</td></tr>`,
		`<tr data-generation="2"><td>2</td><td>w-two</td><td>1700000031000</td><td>1700000061000 (expiry)</td><td>holds the lease</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Fatalf("the run's timeline lacks %s:\n%s", want, page)
		}
	}
}

func TestReplay(t *testing.T) {
	f := newFx(t, Options{Actor: "ops-ann", NewRunID: func() string { return "r1-again" }})
	f.create("acme", "r1")
	l := f.claim("acme", "w")
	if _, err := f.store.Fail(f.ctx, spec.FailRequest{Lease: l.Ref(), ErrorCode: "boom"}); err != nil {
		t.Fatal(err)
	}
	_, page := f.get("/tenants/acme/?state=failed")
	if !strings.Contains(page, `id="replay-r1"`) {
		t.Fatalf("the dead runs page has no replay action:\n%s", page)
	}
	status, loc, _ := f.post("/tenants/acme/runs/r1/replay", "")
	if status != http.StatusSeeOther || !strings.HasPrefix(loc, "/tenants/acme/runs/r1-again?") {
		t.Fatalf("replay: %d %q", status, loc)
	}
	r, err := f.store.GetRun(f.ctx, "acme", "r1-again")
	if err != nil || r.ReplayOf != "r1" {
		t.Fatalf("the replay: %+v, %v", r, err)
	}
	if status, body := f.get("/tenants/acme/doctor"); status != http.StatusOK || !strings.Contains(body, `id="verdict"`) {
		t.Fatalf("doctor page: %d\n%s", status, body)
	}
}

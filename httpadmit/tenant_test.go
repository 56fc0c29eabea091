package httpadmit_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/leasehold/leasehold/httpadmit"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/spec"
)

// smuggle is one way a request may name a tenant besides its credentials.
type smuggle struct {
	name   string
	header http.Header
	query  string // appended to the path
	body   string // the request body (it names the tenant too)
}

// smuggles name tenant B (globex) every way a handler might be tempted to
// read a tenant from: headers (the relay's own header name among them), the
// query, the body, and all of them at once.
func smuggles() []smuggle {
	order := func(extra string) string { return `{"amount":1200,"currency":"EUR"` + extra + `}` }
	all := http.Header{}
	cases := []smuggle{}
	for _, name := range []string{"X-Tenant", "Tenant", "X-Tenant-Id", httpadmitRelayHeader, "X-Leasehold-Tenant"} {
		h := http.Header{name: {tenantB}}
		all[name] = []string{tenantB}
		cases = append(cases, smuggle{name: "header " + name, header: h, body: order(fmt.Sprintf(`,"n":%d`, len(cases)))})
	}
	cases = append(cases,
		smuggle{name: "query tenant", query: "?tenant=" + tenantB, body: order(`,"n":"q"`)},
		smuggle{name: "body tenant", body: order(`,"tenant":"` + tenantB + `"`)},
		smuggle{name: "everything at once", header: all, query: "?tenant=" + tenantB + "&tenant_id=" + tenantB,
			body: order(`,"tenant":"` + tenantB + `","tenant_id":"` + tenantB + `"`)})
	return cases
}

// httpadmitRelayHeader is the header the relay puts the tenant in on every
// message it publishes: a client that copies a message's headers into a
// request sends it.
const httpadmitRelayHeader = "Leasehold-Tenant"

// smuggledTenant has tenant B admit one run per smuggle, then sends, as
// tenant A (A's API key), the same key and body naming B every way smuggles
// lists, and reads B's runs through GET; unauthenticated, it names B too.
// It returns what went wrong: every admission must create A's own run (not
// replay B's), every read of B's run must be 404, and every request
// without credentials 401, whatever the request carries.
func smuggledTenant(t *testing.T, e *env) (problems []string) {
	t.Helper()
	for i, s := range smuggles() {
		key := fmt.Sprintf(`"k-%d"`, i)
		b := e.do(request{auth: "Bearer " + apiKeyB, keys: []string{key}, body: s.body})
		if b.status != http.StatusCreated {
			t.Fatalf("%s: tenant B's own admission: %d %s", s.name, b.status, b.body)
		}
		runB := b.view(t).RunID

		a := e.do(request{path: "/orders" + s.query, keys: []string{key}, body: s.body, header: s.header})
		switch {
		case a.status != http.StatusCreated:
			problems = append(problems, fmt.Sprintf("%s: tenant A's admission answered %d %s; want 201, a run of A's own", s.name, a.status, a.body))
		case a.header.Get(httpadmit.ReplayedHeader) != "":
			problems = append(problems, fmt.Sprintf("%s: tenant A's admission replayed tenant B's run %s (%s: %s)", s.name, runB, httpadmit.ReplayedHeader, a.header.Get(httpadmit.ReplayedHeader)))
		case a.view(t).RunID == runB:
			problems = append(problems, fmt.Sprintf("%s: tenant A's admission answered with tenant B's run %s", s.name, runB))
		default:
			runA := a.view(t).RunID
			if run, err := e.store.GetRun(context.Background(), tenantA, runA); err != nil || run.Payload != canonical(t, s.body) {
				problems = append(problems, fmt.Sprintf("%s: run %s is not tenant A's run of this body (%v)", s.name, runA, err))
			}
		}

		get := e.do(request{method: http.MethodGet, path: "/orders/" + runB + s.query, header: s.header})
		if get.status != http.StatusNotFound {
			problems = append(problems, fmt.Sprintf("%s: tenant A read tenant B's run %s: %d %s; want 404", s.name, runB, get.status, get.body))
		}
		for _, r := range []request{
			{auth: "-", keys: []string{key}, body: s.body, path: "/orders" + s.query, header: s.header},
			{auth: "-", method: http.MethodGet, path: "/orders/" + runB + s.query, header: s.header},
		} {
			if resp := e.do(r); resp.status != http.StatusUnauthorized {
				problems = append(problems, fmt.Sprintf("%s: %s without credentials answered %d %s; want 401", s.name, r.methodOr(), resp.status, resp.body))
			}
		}
	}
	// B's runs are exactly B's own admissions, untouched.
	n := 0
	for _, run := range e.runs() {
		if run.Tenant == tenantB {
			n++
		}
	}
	if want := len(smuggles()); n != want {
		problems = append(problems, fmt.Sprintf("tenant B has %d runs; want its own %d", n, want))
	}
	return problems
}

func (r request) methodOr() string {
	if r.method == "" {
		return http.MethodPost
	}
	return r.method
}

// canonical is body as the store keeps it (the tests' Payload passes it
// through; the handler canonicalizes it).
func canonical(t *testing.T, body string) string {
	t.Helper()
	c, err := spec.Canonicalize([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTenantOnlyFromAuthenticator: only the Authenticator decides the
// tenant. A request authenticated as tenant A that names tenant B in a
// header, the query or the body acts for A: it creates A's own run under a
// key B has used (never B's replay), reads none of B's runs, and without
// credentials it is 401 whatever it names. The handler's tenant is one
// value, so one store (SQLite) shows it; the mutant httpadmit_tenant_from_request
// (TestMutantTenantFromRequest) is caught by this check.
func TestTenantOnlyFromAuthenticator(t *testing.T) {
	e := newEnv(t, sqlitetest.Factory, nil)
	for _, p := range smuggledTenant(t, e) {
		t.Error(p)
	}
}

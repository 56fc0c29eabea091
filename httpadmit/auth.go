package httpadmit

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// Authenticator decides which tenant a request acts for. The tenant scopes
// everything the handlers do: idempotency keys, run ids and reads.
type Authenticator interface {
	// Authenticate returns the request's tenant (a valid spec tenant name),
	// or an error, which the handlers answer with 401. The error's text is
	// sent to the client as the problem's detail: it should say what is
	// wrong with the credentials and must never echo them.
	Authenticate(r *http.Request) (tenant string, err error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (string, error)

// Authenticate calls f(r).
func (f AuthenticatorFunc) Authenticate(r *http.Request) (string, error) { return f(r) }

// Challenger is implemented by an Authenticator that names its scheme: the
// handlers send Challenge() as the WWW-Authenticate header of every 401
// (RFC 9110 §11.6.1). Without it they send "Bearer".
type Challenger interface {
	Challenge() string
}

// MinAPIKeyBytes is the shortest API key NewAPIKeys accepts.
const MinAPIKeyBytes = 16

// APIKeys authenticates requests by a static API key sent as
// "Authorization: Bearer <key>" (RFC 6750). It compares SHA-256 digests of
// the presented and of every configured key with subtle.ConstantTimeCompare,
// always against all keys, so the time taken says nothing about which key,
// or how much of one, matched. It is safe for concurrent use.
type APIKeys struct {
	keys []apiKey
}

type apiKey struct {
	digest [sha256.Size]byte
	tenant string
}

// NewAPIKeys returns an APIKeys for keys, a map from API key to tenant.
// Each key must be at least MinAPIKeyBytes bytes of the RFC 6750 b64token
// alphabet (letters, digits, "-._~+/", trailing "="), and each tenant a valid
// tenant name (1-64 bytes of [a-z0-9_-]); several keys may share a tenant
// (rotation). An empty map is an error. Errors never contain a key.
func NewAPIKeys(keys map[string]string) (*APIKeys, error) {
	if len(keys) == 0 {
		return nil, errors.New("httpadmit: no API keys configured")
	}
	a := &APIKeys{}
	for key, tenant := range keys {
		if err := (spec.Config{}).CheckTenant(tenant); err != nil {
			return nil, fmt.Errorf("httpadmit: API key for tenant %q: %w", tenant, err)
		}
		if len(key) < MinAPIKeyBytes {
			return nil, fmt.Errorf("httpadmit: an API key of tenant %q is %d bytes; use at least %d random bytes", tenant, len(key), MinAPIKeyBytes)
		}
		if !isB64Token(key) {
			return nil, fmt.Errorf("httpadmit: an API key of tenant %q has a byte outside the Bearer token alphabet (letters, digits, -._~+/ and trailing =)", tenant)
		}
		a.keys = append(a.keys, apiKey{digest: sha256.Sum256([]byte(key)), tenant: tenant})
	}
	return a, nil
}

// Authenticate returns the tenant of the request's Bearer key. No
// Authorization header, another scheme, more than one credential or an
// unknown key is an error (401 at the handlers).
func (a *APIKeys) Authenticate(r *http.Request) (string, error) {
	lines := r.Header.Values("Authorization")
	if len(lines) == 0 {
		return "", errors.New("no credentials: send Authorization: Bearer <API key>")
	}
	if len(lines) > 1 {
		return "", errors.New("more than one Authorization header; send exactly one")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(lines[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", errors.New("the Authorization header is not a Bearer credential; send Authorization: Bearer <API key>")
	}
	digest := sha256.Sum256([]byte(strings.TrimLeft(token, " ")))
	tenant := ""
	for i := range a.keys {
		if subtle.ConstantTimeCompare(digest[:], a.keys[i].digest[:]) == 1 {
			tenant = a.keys[i].tenant
		}
	}
	if tenant == "" {
		return "", errors.New("the API key is not valid")
	}
	return tenant, nil
}

// Challenge returns the WWW-Authenticate value of a 401.
func (a *APIKeys) Challenge() string { return `Bearer realm="leasehold"` }

// isB64Token reports whether s is an RFC 6750 b64token.
func isB64Token(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return false
		}
	}
	return true
}

package httpadmit

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// ProblemContentType is the media type of every error response (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is the body of every error response: an RFC 9457 problem details
// object with two extension members. Field names what is wrong: a header
// name ("Idempotency-Key", "Authorization"), "body" for the request body as
// a whole, or an RFC 6901 JSON Pointer into it ("/amount"); it is empty when
// nothing the client sent is at fault. Code is a leasehold spec.Code when the
// condition is one of the contract's (invalid_argument, idempotency_conflict,
// not_found, already_exists, unavailable, unknown_outcome, ...) and one of
// the edge codes below otherwise.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
	Code   string `json:"code"`
}

// Codes of the conditions that exist only at the HTTP edge, carried in
// Problem.Code.
const (
	// CodeUnauthenticated: the Authenticator refused the request (401).
	CodeUnauthenticated = "unauthenticated"
	// CodeKeyInFlight: a request with the same key is being admitted (409).
	CodeKeyInFlight = "idempotency_key_in_flight"
	// CodeInternal: the server failed in a way the client cannot fix (500).
	CodeInternal = "internal"
)

// typeBase makes each problem type a URI that resolves to the constant's
// documentation below.
const typeBase = "https://pkg.go.dev/github.com/leasehold/leasehold/httpadmit#"

// Problem types (Problem.Type). Each is documented here, which is where its
// URI points.
const (
	// TypeKeyMissing (400, invalid_argument): the request has no
	// Idempotency-Key. Send one: a fresh random key per logical request
	// (a UUID), the same key on every retry of it.
	TypeKeyMissing = typeBase + "TypeKeyMissing"
	// TypeKeyMalformed (400, invalid_argument): the Idempotency-Key is not
	// one quoted sf-string or bare key, or breaks the limits (1-255 bytes of
	// printable ASCII, no spaces, the first a letter or digit). The detail
	// says which byte. See ParseKeyValue.
	TypeKeyMalformed = typeBase + "TypeKeyMalformed"
	// TypeKeyDuplicate (400, invalid_argument): the request carries more
	// than one Idempotency-Key (two header lines or a list). Send one.
	TypeKeyDuplicate = typeBase + "TypeKeyDuplicate"
	// TypeKeyReused (422, idempotency_conflict): the key was already used
	// for a request with another payload. Do not retry: a new request needs
	// a new key.
	TypeKeyReused = typeBase + "TypeKeyReused"
	// TypeKeyInFlight (409, idempotency_key_in_flight): a request with the
	// same key is still being admitted. Retry the same request, unchanged,
	// after Retry-After: it then gets the original response.
	TypeKeyInFlight = typeBase + "TypeKeyInFlight"
	// TypeUnauthenticated (401, unauthenticated): no valid credentials. See
	// the WWW-Authenticate header.
	TypeUnauthenticated = typeBase + "TypeUnauthenticated"
	// TypeBodyTooLarge (413, invalid_argument): the body is over the
	// handler's limit (64 KiB by default, the store's payload limit).
	TypeBodyTooLarge = typeBase + "TypeBodyTooLarge"
	// TypeInvalidBody (400, invalid_argument): the body is not a valid
	// payload: Field names where (a JSON Pointer, or "body").
	TypeInvalidBody = typeBase + "TypeInvalidBody"
	// TypeRunIDTaken (409, already_exists): the run id the handler proposed
	// for this request already names another run of the tenant.
	TypeRunIDTaken = typeBase + "TypeRunIDTaken"
	// TypeNotFound (404, not_found): the tenant has no such run.
	TypeNotFound = typeBase + "TypeNotFound"
	// TypeUnavailable (503, unavailable): the store could not run the
	// admission and wrote nothing. Retry with the same Idempotency-Key and
	// body after Retry-After.
	TypeUnavailable = typeBase + "TypeUnavailable"
	// TypeUnknownOutcome (503, unknown_outcome): the store lost its
	// connection after committing, so the run may or may not have been
	// admitted. Retry with the same Idempotency-Key and body after
	// Retry-After: if it was admitted you get the original response, if not
	// it is admitted then.
	TypeUnknownOutcome = typeBase + "TypeUnknownOutcome"
	// TypeInternal (500, internal or the store's code): a server fault (a
	// misconfigured handler or store). Retrying will not help until it is
	// fixed.
	TypeInternal = typeBase + "TypeInternal"
)

// writeProblem sends p. A 503 or a 409-in-flight also gets Retry-After.
func writeProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable || p.Type == TypeKeyInFlight {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(encode(p))
}

// encode returns v as one line of JSON, without the HTML escapes
// json.Marshal adds (a detail reads "<API key>", not "\u003cAPI key\u003e").
// It is deterministic, which a replayed body relies on. v is a Problem or a
// RunView, which always encode.
func encode(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return b.Bytes()
}

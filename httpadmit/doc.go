// Package httpadmit is the HTTP edge of leasehold's idempotent admission: a
// net/http handler that admits a request as a run through spec.Store.CreateRun
// following the IETF httpapi Idempotency-Key draft
// (draft-ietf-httpapi-idempotency-key-header), and a handler for a run's
// status.
//
//	h, err := httpadmit.New(httpadmit.Config{Store: store, Operation: "charge_order", Auth: keys})
//	mux.Handle("POST /orders", h)
//	mux.Handle("GET /orders/{id}", h.Status("id"))
//
// # The key
//
// Idempotency-Key is parsed as the draft defines it, an RFC 9651 sf-string
// ("8e03978e-...", with \" and \\ escapes), and, for the clients that send
// it so, as a bare value taken verbatim (8e03978e-...); both spell the same
// key (ParseKeyValue). A missing, malformed or repeated key (two header lines,
// or a list in one) is 400. The key is scoped by the tenant the
// Authenticator returns and by the Handler's operation: tenant A's key is
// never tenant B's, and neither can read or replay the other's runs. Only
// the Authenticator decides the tenant: a header, the query or the body
// naming another tenant changes nothing (TestTenantOnlyFromAuthenticator). Keys
// are never logged or echoed; logs carry spec.ShortHash of the key.
//
// # Responses
//
//	201  created: Location, and the run as admitted (RunView)
//	201  replay (same key, same payload): the original status and body, byte
//	     for byte, plus "Idempotent-Replayed: true"
//	400  Idempotency-Key missing, malformed or repeated; invalid body
//	401  the Authenticator refused the request (WWW-Authenticate)
//	404  (status) no such run for this tenant
//	409  a request with the same key is still being admitted here; or the
//	     proposed run id is taken (already_exists)
//	413  body over Config.MaxBodyBytes
//	422  the key was used with another payload (idempotency_conflict)
//	503  store unavailable, outcome unknown, or no answer from the store
//	     within Config.Timeout (default 5 s): retry with the same key after
//	     Retry-After
//
// Every error is an RFC 9457 application/problem+json Problem with a type
// URI per condition, a detail that says what to do, and two extensions:
// "field" (what is wrong: "Idempotency-Key", "Authorization", "body" or a
// JSON Pointer into the body) and "code" (the leasehold error code).
//
// # Replaying the original response without storing it
//
// The draft asks a retry to get the result of the original request. This
// package keeps no response store: the 201 body is derived only from the
// fields of the run that never change after admission (id, operation,
// max attempts, created and deadline times) and the state every admission
// creates (queued). The store's replay returns the run as it is now, and
// the handler renders it as it was admitted, so a replay a week later,
// after the run completed, sends the same bytes as the first response.
// The price is that a 201 does not show progress: GET the Location for the
// current state. Errors are not remembered: a request refused before the
// store admitted it wrote nothing, and its retry is judged afresh (the
// draft's 400 and 422 cases are decided again and decided the same way).
//
// # Requests in flight
//
// While a request is being admitted, a second request with the same tenant
// and key at the same Handler gets 409 and Retry-After; retried unchanged,
// it then gets the original response. That registry is in memory, per
// Handler. Across processes (or Handlers) no request waits on another's
// registry: the store serializes admissions of one key (its unique
// idempotency record), so the second request waits inside CreateRun and
// gets the replay, never a second run.
//
// Each request is one CreateRun. On PostgreSQL, open the store with
// postgres.Options.CoalesceCreateRun so that concurrent requests share
// admission transactions; every response is still that request's own.
package httpadmit

package httpadmit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

// ReplayedHeader marks a replay: a response to a request whose key and
// payload were admitted before carries "Idempotent-Replayed: true" (the
// name Stripe uses); a first response has no such header.
const ReplayedHeader = "Idempotent-Replayed"

// DefaultTimeout is Config.Timeout's default: a few seconds, well inside
// the minute or so most HTTP clients and proxies wait.
const DefaultTimeout = 5 * time.Second

// Config configures a Handler. Store, Operation and Auth are required; every
// other field has a default.
type Config struct {
	// Store admits the runs. Its spec.Config must configure Operation.
	Store spec.Store
	// Operation is the run operation of every admitted request.
	Operation string
	// Auth decides the request's tenant.
	Auth Authenticator
	// Payload turns the request body into the run's JSON payload (it may
	// validate, pick fields, add defaults). To reject the body, return a
	// *FieldError (400 naming the field); any other error is a 400 naming
	// "body" with the error's text as detail. Default: the body, as sent.
	// The result is canonicalized (RFC 8785), so key order and whitespace
	// never matter to the fingerprint.
	Payload func(r *http.Request, body []byte) ([]byte, error)
	// RunID proposes the id of a new run (1-64 bytes of [A-Za-z0-9_.:-]); a
	// replay returns the original run whatever it proposes. A *FieldError is
	// a 400 naming the field, any other error a 500. Default: "run_" and 24
	// random hex digits.
	RunID func(r *http.Request) (string, error)
	// Location returns the URL of a run, sent as the Location of a 201.
	// Default: the request's path, "/", and the run id (POST /orders ->
	// /orders/<id>).
	Location func(r *http.Request, runID string) string
	// MaxBodyBytes bounds the request body; more is 413. Default
	// spec.MaxPayloadBytes (64 KiB).
	MaxBodyBytes int64
	// RetryAfter is the Retry-After of a 503 and of a 409 (key in flight),
	// rounded up to whole seconds. Default 1s.
	RetryAfter time.Duration
	// Timeout bounds each request's store call (the admission, or the
	// status read): a store that has not answered by then (a database
	// whose write lock another process holds, a server that does not
	// answer) gets the request a 503 with Retry-After, so that clients hear
	// back before they give up. The call is cancelled: nothing was written,
	// or, when the store answers unknown_outcome, the retry with the same
	// key gets the original response. Default DefaultTimeout.
	Timeout time.Duration
	// Logger gets one debug line per request (tenant, key hash, run id,
	// status) and an error line per 5xx. It never sees a full key. Default:
	// no logging.
	Logger *slog.Logger
}

// FieldError rejects a request with a 400 problem whose field member is
// Field: a Config.Payload or Config.RunID function returns it.
type FieldError struct {
	// Field is an RFC 6901 JSON Pointer into the body ("/amount"), "body",
	// or a header name.
	Field string
	// Detail says what is wrong and what to send instead.
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// Handler admits requests as runs (ServeHTTP) and serves their status
// (Status). It is safe for concurrent use; use one Handler per operation.
type Handler struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	inFlight map[scope]struct{}
}

// scope is what an idempotency key is unique within at one Handler: the
// store's (tenant, operation, key) with the Handler's operation.
type scope struct{ tenant, key string }

// New checks cfg and returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("httpadmit: Config.Store is required")
	}
	if cfg.Auth == nil {
		return nil, errors.New("httpadmit: Config.Auth is required (an Authenticator, for example NewAPIKeys)")
	}
	if err := spec.CheckErrorCode("operation", cfg.Operation); err != nil {
		return nil, fmt.Errorf("httpadmit: Config.Operation: %w", err)
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("httpadmit: Config.MaxBodyBytes is %d; want > 0 or 0 for the default", cfg.MaxBodyBytes)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = spec.MaxPayloadBytes
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("httpadmit: Config.Timeout is %v; want > 0 or 0 for the default (%v)", cfg.Timeout, DefaultTimeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Payload == nil {
		cfg.Payload = func(_ *http.Request, body []byte) ([]byte, error) { return body, nil }
	}
	if cfg.RunID == nil {
		cfg.RunID = randomRunID
	}
	if cfg.Location == nil {
		cfg.Location = func(r *http.Request, runID string) string {
			return strings.TrimSuffix(r.URL.Path, "/") + "/" + runID
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, log: log, inFlight: map[scope]struct{}{}}, nil
}

func randomRunID(*http.Request) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "run_" + hex.EncodeToString(b[:]), nil
}

// RunView is the JSON body of a run. A 201 (and every replay of it) is the
// run as admitted: State is "queued" and only the fields fixed at admission
// are set, so the body is the same bytes however often, and however late,
// it is replayed. Status responses show the run as it is now.
type RunView struct {
	RunID        string          `json:"run_id"`
	Operation    string          `json:"operation"`
	State        spec.RunState   `json:"state"`
	MaxAttempts  int             `json:"max_attempts"`
	CreatedAtMs  int64           `json:"created_at_ms"`
	DeadlineAtMs int64           `json:"deadline_at_ms"`
	ErrorCode    string          `json:"error_code,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
}

// admittedView is the 201 body: only fields of run that never change after
// admission, and the state every admission creates.
func admittedView(run spec.Run) RunView {
	return RunView{RunID: run.ID, Operation: run.Operation, State: spec.RunQueued,
		MaxAttempts: run.MaxAttempts, CreatedAtMs: run.CreatedAt, DeadlineAtMs: run.DeadlineAt}
}

func currentView(run spec.Run) RunView {
	v := admittedView(run)
	v.State, v.ErrorCode = run.State, run.ErrorCode
	if run.Result != "" {
		v.Result = json.RawMessage(run.Result)
	}
	return v
}

// ServeHTTP admits the request as a run of Config.Operation through
// Store.CreateRun. In order: the Authenticator decides the tenant (401);
// the Idempotency-Key is parsed (400); a request with the same tenant and
// key already being admitted by this Handler is 409; the body is read (413
// past MaxBodyBytes) and turned into the payload (400). Then CreateRun:
// a new run is 201 with Location and the run as admitted; a replay is the
// same 201 and body, plus "Idempotent-Replayed: true"; the key with another
// payload is 422; a proposed run id that is taken is 409 (already_exists);
// unavailable and unknown_outcome are 503 with Retry-After, as is a store
// that has not answered within Config.Timeout; anything else the store
// returns is 500. Every error is an application/problem+json
// Problem.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	key, err := ParseKey(r.Header)
	if err != nil {
		h.reject(w, r, tenant, "", keyProblem(err), nil)
		return
	}
	sc := scope{tenant: tenant, key: key}
	if !h.enter(sc) {
		h.reject(w, r, tenant, key, Problem{Type: TypeKeyInFlight, Title: "A request with this Idempotency-Key is in flight",
			Status: http.StatusConflict, Field: KeyHeader, Code: CodeKeyInFlight,
			Detail: "a request with the same Idempotency-Key is still being admitted; retry this request unchanged after Retry-After to get its response"}, nil)
		return
	}
	defer h.leave(sc)

	payload, p := h.readPayload(w, r)
	if p != nil {
		h.reject(w, r, tenant, key, *p, nil)
		return
	}
	runID, err := h.cfg.RunID(r)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			h.reject(w, r, tenant, key, Problem{Type: TypeInvalidBody, Title: "Invalid request", Status: http.StatusBadRequest,
				Detail: fe.Detail, Field: fe.Field, Code: string(spec.CodeInvalidArgument)}, nil)
			return
		}
		h.reject(w, r, tenant, key, internalProblem(""), fmt.Errorf("proposing a run id: %w", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	res, err := h.cfg.Store.CreateRun(ctx, spec.CreateRunRequest{Tenant: tenant, Operation: h.cfg.Operation,
		IdempotencyKey: key, RunID: runID, Payload: payload})
	if err != nil {
		p := createProblem(err)
		if h.timedOut(ctx, r) && p.Status == http.StatusServiceUnavailable {
			p.Detail = fmt.Sprintf("the store did not answer within %v (it is busy); %s", h.cfg.Timeout, p.Detail)
		}
		h.reject(w, r, tenant, key, p, err)
		return
	}
	body := encode(admittedView(res.Run))
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Location", h.cfg.Location(r, res.Run.ID))
	hd.Set("Cache-Control", "no-store")
	if res.Replayed {
		hd.Set(ReplayedHeader, "true")
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
	h.log.Debug("httpadmit: admitted", "tenant", tenant, "operation", h.cfg.Operation, "key", spec.ShortHash(key),
		"run_id", res.Run.ID, "replayed", res.Replayed, "status", http.StatusCreated)
}

// Status returns a handler for GET of a run: the run id is
// r.PathValue(name) (mount it as "GET /orders/{id}" with name "id"). It
// answers 200 with the run as it is now (RunView), 401 as ServeHTTP, 404
// for a run the tenant does not have (another tenant's run included) or of
// another operation, and 503 with Retry-After when the store is
// unavailable.
func (h *Handler) Status(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		notFound := Problem{Type: TypeNotFound, Title: "No such run", Status: http.StatusNotFound,
			Detail: "this tenant has no run with that id", Code: string(spec.CodeNotFound)}
		id := r.PathValue(name)
		if spec.CheckRunID("run id", id) != nil {
			h.reject(w, r, tenant, "", notFound, nil)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		defer cancel()
		run, err := h.cfg.Store.GetRun(ctx, tenant, id)
		switch code := spec.CodeOf(err); {
		case code == "" && run.Operation == h.cfg.Operation:
		case code == "" || code == spec.CodeNotFound:
			h.reject(w, r, tenant, "", notFound, nil)
			return
		case code == spec.CodeUnavailable || code == spec.CodeUnknownOutcome:
			h.reject(w, r, tenant, "", Problem{Type: TypeUnavailable, Title: "Store unavailable", Status: http.StatusServiceUnavailable,
				Detail: "the run could not be read; retry after Retry-After", Code: string(code)}, err)
			return
		default:
			h.reject(w, r, tenant, "", internalProblem(code), err)
			return
		}
		body := encode(currentView(run))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
}

// timedOut reports whether ctx, the request's store call's, ended at
// Config.Timeout rather than with the request.
func (h *Handler) timedOut(ctx context.Context, r *http.Request) bool {
	return errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil
}

// authenticate returns the request's tenant, or answers 401 and false.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	tenant, err := h.cfg.Auth.Authenticate(r)
	if err == nil {
		if mutant.On(mutant.TenantFromRequest) && r.Header.Get("X-Tenant") != "" {
			tenant = r.Header.Get("X-Tenant")
		}
		return tenant, true
	}
	challenge := "Bearer"
	if c, ok := h.cfg.Auth.(Challenger); ok {
		challenge = c.Challenge()
	}
	w.Header().Set("WWW-Authenticate", challenge)
	h.reject(w, r, "", "", Problem{Type: TypeUnauthenticated, Title: "Not authenticated", Status: http.StatusUnauthorized,
		Detail: err.Error(), Field: "Authorization", Code: CodeUnauthenticated}, nil)
	return "", false
}

// enter registers sc as being admitted; false if it already is.
func (h *Handler) enter(sc scope) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, busy := h.inFlight[sc]; busy {
		return false
	}
	h.inFlight[sc] = struct{}{}
	return true
}

func (h *Handler) leave(sc scope) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.inFlight, sc)
}

// readPayload reads the body and returns the canonical payload, or the
// problem that rejects it.
func (h *Handler) readPayload(w http.ResponseWriter, r *http.Request) ([]byte, *Problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &Problem{Type: TypeBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("the body is over %d bytes; send a smaller payload", h.cfg.MaxBodyBytes), Field: "body",
				Code: string(spec.CodeInvalidArgument)}
		}
		return nil, &Problem{Type: TypeInvalidBody, Title: "Invalid request body", Status: http.StatusBadRequest,
			Detail: "the body could not be read; send it again with the same Idempotency-Key", Field: "body",
			Code: string(spec.CodeInvalidArgument)}
	}
	payload, err := h.cfg.Payload(r, body)
	if err == nil {
		var canonical string
		if canonical, err = spec.Canonicalize(payload); err == nil {
			return []byte(canonical), nil
		}
	}
	p := &Problem{Type: TypeInvalidBody, Title: "Invalid request body", Status: http.StatusBadRequest,
		Detail: err.Error(), Field: "body", Code: string(spec.CodeInvalidArgument)}
	var fe *FieldError
	var se *spec.Error
	switch {
	case errors.As(err, &fe):
		p.Field, p.Detail = fe.Field, fe.Detail
	case errors.As(err, &se):
		p.Detail = se.Message
		if se.Err != nil {
			p.Detail += ": " + se.Err.Error()
		}
	}
	return nil, p
}

// keyProblem is the 400 for a ParseKey error.
func keyProblem(err error) Problem {
	p := Problem{Type: TypeKeyMalformed, Title: "Malformed Idempotency-Key", Status: http.StatusBadRequest,
		Detail: err.Error(), Field: KeyHeader, Code: string(spec.CodeInvalidArgument)}
	var ke *KeyError
	if errors.As(err, &ke) {
		p.Detail = ke.Detail
		switch ke.Reason {
		case KeyMissing:
			p.Type, p.Title = TypeKeyMissing, "Idempotency-Key is missing"
		case KeyDuplicate:
			p.Type, p.Title = TypeKeyDuplicate, "More than one Idempotency-Key"
		}
	}
	return p
}

// createProblem maps a CreateRun error to its response. Codes CreateRun
// cannot return (the lease and effect codes) and invalid_argument (the
// handler has already checked the key, payload and limits, so what remains
// is the tenant, operation, run id or clock: the server's configuration)
// are 500.
func createProblem(err error) Problem {
	switch code := spec.CodeOf(err); code {
	case spec.CodeIdempotencyConflict:
		return Problem{Type: TypeKeyReused, Title: "Idempotency-Key is already used", Status: http.StatusUnprocessableEntity,
			Detail: "this Idempotency-Key was used for a request with another payload; a new request needs a new key",
			Field:  KeyHeader, Code: string(code)}
	case spec.CodeAlreadyExists:
		return Problem{Type: TypeRunIDTaken, Title: "Run id already taken", Status: http.StatusConflict,
			Detail: "the run id proposed for this request names another run; send the request again with a new Idempotency-Key",
			Code:   string(code)}
	case spec.CodeUnavailable:
		return Problem{Type: TypeUnavailable, Title: "Store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "nothing was admitted; retry with the same Idempotency-Key and body after Retry-After", Code: string(code)}
	case spec.CodeUnknownOutcome:
		return Problem{Type: TypeUnknownOutcome, Title: "Admission outcome unknown", Status: http.StatusServiceUnavailable,
			Detail: "the request may or may not have been admitted; retry with the same Idempotency-Key and body after Retry-After: if it was admitted you get the original response",
			Code:   string(code)}
	default:
		return internalProblem(code)
	}
}

func internalProblem(code spec.Code) Problem {
	c := string(code)
	if c == "" {
		c = CodeInternal
	}
	return Problem{Type: TypeInternal, Title: "Internal server error", Status: http.StatusInternalServerError,
		Detail: "the server could not handle the request; retrying will not help until it is fixed", Code: c}
}

// reject sends p and logs it; cause, when set, is logged (never sent).
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, tenant, key string, p Problem, cause error) {
	writeProblem(w, p, h.cfg.RetryAfter)
	attrs := []any{"tenant", tenant, "operation", h.cfg.Operation, "method", r.Method, "path", r.URL.Path,
		"status", p.Status, "code", p.Code}
	if key != "" {
		attrs = append(attrs, "key", spec.ShortHash(key))
	}
	if p.Status >= 500 {
		h.log.Error("httpadmit: "+p.Title, append(attrs, "err", cause)...)
		return
	}
	h.log.Debug("httpadmit: "+p.Title, attrs...)
}

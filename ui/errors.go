package ui

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// ErrorCode is a stable code of the UI's own refusals; the store's refusals
// keep their spec.Code.
type ErrorCode string

// The UI's codes.
const (
	// CodeReadOnly: an action on a UI started without --actor. Nothing changed.
	CodeReadOnly ErrorCode = "read_only"
	// CodeUnauthorized: the request did not carry the access token.
	CodeUnauthorized ErrorCode = "unauthorized"
	// CodeCrossSite: an action without this server's CSRF token, or from
	// another origin. Nothing changed.
	CodeCrossSite ErrorCode = "cross_site"
	// CodeTokenRequired: a non-loopback listen address without a token.
	CodeTokenRequired ErrorCode = "token_required"
	// CodeBadRequest: a request the UI cannot read.
	CodeBadRequest ErrorCode = "bad_request"
	// CodeNoSuchPage: no page at that address.
	CodeNoSuchPage ErrorCode = "no_such_page"
)

// Error is a refusal shown to the user: a stable code, what happened, and
// what to do.
type Error struct {
	Code    ErrorCode `json:"code"`
	Status  int       `json:"-"`
	Message string    `json:"message"`
	Hint    string    `json:"hint"`
}

func (e *Error) Error() string { return "ui: " + string(e.Code) + ": " + e.Message + ". " + e.Hint }

// hints say what to do after a store's refusal.
var hints = map[spec.Code]string{
	spec.CodeNotFound:           "Check the run id and the tenant: a page shows one tenant's runs only, and another tenant's run is not found here.",
	spec.CodeCancelled:          "The run was already cancelled; nothing was changed.",
	spec.CodeAlreadyTerminal:    "The run ended before the action (its state says how); reload its page. Nothing was changed.",
	spec.CodeFailedPrecondition: "Only a failed (dead) run can be replayed; reload its page to see its state.",
	spec.CodeAlreadyExists:      "This run was already replayed: follow its replay from the runs page (state queued or running).",
	spec.CodeReplayLimit:        "The lineage reached the store's replay limit (Config.MaxReplays); investigate the failure before admitting the work again.",
	spec.CodeInvalidArgument:    "Fix the value named in the message (a filter, a cursor or a tenant) and retry.",
	spec.CodeUnavailable:        "The database is busy or unreachable; nothing was written. Retry in a moment.",
	spec.CodeUnknownOutcome:     "The database's answer was lost: reload the run's page to see whether the action applied before retrying.",
}

var statuses = map[spec.Code]int{
	spec.CodeNotFound: http.StatusNotFound, spec.CodeInvalidArgument: http.StatusBadRequest,
	spec.CodeUnavailable: http.StatusServiceUnavailable, spec.CodeUnknownOutcome: http.StatusBadGateway,
}

// asError makes any error an *Error: the UI's own as they are, a store's
// with its spec code and a hint.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	code := spec.CodeOf(err)
	status, ok := statuses[code]
	if !ok {
		status = http.StatusConflict
	}
	var se *spec.Error
	msg := err.Error()
	if errors.As(err, &se) {
		msg = se.Message
	}
	hint, ok := hints[code]
	if !ok {
		hint = "See the message; nothing else was changed by this request."
	}
	if code == "" {
		status, code, hint = http.StatusInternalServerError, "internal", "This is a bug or an unexpected database error; the message says which."
	}
	return &Error{Code: ErrorCode(code), Status: status, Message: msg, Hint: hint}
}

// fail answers with the error: JSON for a script (Accept: application/json
// or the counts), else the error page.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := asError(err)
	if e.Status == 0 {
		e.Status = http.StatusBadRequest
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") || strings.HasSuffix(r.URL.Path, "/counts") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.Status)
		json.NewEncoder(w).Encode(e)
		return
	}
	s.render(w, "error.html", e.Status, layout{Title: "refused: " + string(e.Code), Tenant: r.PathValue("tenant"), Body: e})
}

package spec

import (
	"context"
	"encoding/base64"
	"math"
	"strconv"
	"strings"
)

// OpListRuns names RunLister.ListRuns for hooks and reports.
const OpListRuns Op = "list_runs"

// RunLister lists one tenant's runs, page by page (an optional capability).
type RunLister interface {
	// ListRuns returns the page of req.Tenant's runs that req asks for: the
	// runs matching its filters, newest first (created_at descending, then
	// run id descending: a total order, so a page boundary falls between
	// two runs even when many were created in the same millisecond),
	// starting after req.Cursor, at most req.Limit of them. RunPage.Next
	// is the cursor of the page's last run when more runs matched at the
	// time of the read, else "". Another tenant's runs never appear.
	//
	// Each call is one read at one moment: a run committed before a
	// listing's first call and still there at its last call appears on
	// exactly one of its pages when the filters it matches do not change
	// meanwhile (state may: a run that leaves the state filtered for
	// between two calls may be missed, one that enters it may appear).
	// A run committed during the listing appears at most once.
	//
	// Errors: CodeInvalidArgument (the request fails CheckListRuns, with a
	// page size past MaxBatch among its reasons), CodeUnavailable. It reads
	// no clock and writes nothing.
	ListRuns(ctx context.Context, req ListRunsRequest) (RunPage, error)
}

// ListRunsRequest asks for one page of a tenant's runs (RunLister.ListRuns).
// Every filter is optional; the zero value of a filter matches every run.
type ListRunsRequest struct {
	Tenant string `json:"tenant"`
	// State keeps the runs in this state.
	State RunState `json:"state,omitempty"`
	// Operation keeps the runs of this operation (configured or not: a run
	// of an operation since removed from the Config is still listed).
	Operation string `json:"operation,omitempty"`
	// CreatedFrom keeps the runs created at or after it (ms).
	CreatedFrom int64 `json:"created_from,omitempty"`
	// CreatedBefore, when not 0, keeps the runs created before it (ms).
	CreatedBefore int64 `json:"created_before,omitempty"`
	// Limit is the page size, 1..MaxBatch.
	Limit int `json:"limit"`
	// Cursor is the Next of the page before, or "" for the first page.
	// It is a position in the order, so a later page may be asked for
	// with other filters.
	Cursor string `json:"cursor,omitempty"`
}

// Op implements Request.
func (ListRunsRequest) Op() Op { return OpListRuns }

// TenantScope implements Request.
func (r ListRunsRequest) TenantScope() (string, bool) { return r.Tenant, true }

// Leases implements Request: a read presents no lease.
func (ListRunsRequest) Leases() []LeaseRef { return nil }

// RunPage is one page of a listing.
type RunPage struct {
	Runs []Run `json:"runs"`
	// Next is the cursor of the next page, "" on the last one.
	Next string `json:"next,omitempty"`
}

// RunPosition is a run's place in the listing order: newest first, by
// created_at descending and then run id descending (byte order).
type RunPosition struct {
	CreatedAt int64
	RunID     string
}

// PositionOf returns r's position.
func PositionOf(r Run) RunPosition { return RunPosition{CreatedAt: r.CreatedAt, RunID: r.ID} }

// Before reports whether p is listed before q: created later, or at the same
// time with a greater run id. A position with RunID "" is listed after
// every run created at its time ("" is the least id), so (t, "") bounds the
// runs created before t.
func (p RunPosition) Before(q RunPosition) bool {
	if p.CreatedAt != q.CreatedAt {
		return p.CreatedAt > q.CreatedAt
	}
	return p.RunID > q.RunID
}

// cursorVersion starts every cursor's text, so that a later format can
// tell an old cursor apart.
const cursorVersion = "c1"

// Cursor returns the opaque cursor of p: a page that ends at p has it as
// its Next.
func (p RunPosition) Cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + "/" + strconv.FormatInt(p.CreatedAt, 10) + "/" + p.RunID))
}

// ParseCursor decodes a cursor Cursor made; anything else is
// CodeInvalidArgument.
func ParseCursor(s string) (RunPosition, error) {
	bad := func() (RunPosition, error) {
		return RunPosition{}, Errorf(CodeInvalidArgument, "cursor %q is not one ListRuns returned: pass a page's Next unchanged, or \"\" for the first page", short(s))
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad()
	}
	parts := strings.SplitN(string(raw), "/", 3)
	if len(parts) != 3 || parts[0] != cursorVersion {
		return bad()
	}
	at, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || at < 0 || strconv.FormatInt(at, 10) != parts[1] || CheckRunID("run id", parts[2]) != nil {
		return bad()
	}
	return RunPosition{CreatedAt: at, RunID: parts[2]}, nil
}

func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// RunListing is a ListRunsRequest as CheckListRuns validated it, in the one
// form every store reads it: a run is listed when it is of Tenant, matches
// State and Operation (each "" for any), was created at or after From, and
// its position is listed after Below; the first Limit such runs in the
// listing order are the page.
type RunListing struct {
	Tenant    string
	State     RunState
	Operation string
	From      int64
	// Below is the later in the order of the cursor's position and
	// (CreatedBefore, "") (every run created before CreatedBefore is listed
	// after it); with neither, (math.MaxInt64, "").
	Below RunPosition
	Limit int
}

// Matches reports whether run r belongs in the listing (its position
// included).
func (l RunListing) Matches(r Run) bool {
	return r.Tenant == l.Tenant && (l.State == "" || r.State == l.State) &&
		(l.Operation == "" || r.Operation == l.Operation) && r.CreatedAt >= l.From && l.Below.Before(PositionOf(r))
}

// Page cuts the page from runs, the first Limit+1 (or fewer, when there are
// no more) listed runs in the listing order: at most Limit runs, and the
// cursor of the last one when a run follows it.
func (l RunListing) Page(runs []Run) RunPage {
	if len(runs) > l.Limit {
		return RunPage{Runs: runs[:l.Limit], Next: PositionOf(runs[l.Limit-1]).Cursor()}
	}
	if runs == nil {
		runs = []Run{}
	}
	return RunPage{Runs: runs}
}

// CheckListRuns validates a listing, in this order: the tenant, the state
// (one of the run states, or ""), the operation's spelling (an operation
// name, or ""), the creation range (neither bound negative; CreatedBefore,
// when set, after CreatedFrom), the limit (1..MaxBatch) and the cursor (one
// ListRuns returned, or "").
func (c Config) CheckListRuns(req ListRunsRequest) (RunListing, error) {
	if err := c.CheckTenant(req.Tenant); err != nil {
		return RunListing{}, err
	}
	switch req.State {
	case "", RunQueued, RunRunning, RunCompleted, RunFailed, RunCancelled:
	default:
		return RunListing{}, Errorf(CodeInvalidArgument, "state %q is not a run state (queued, running, completed, failed, cancelled; \"\" for any)", short(string(req.State)))
	}
	if req.Operation != "" {
		if err := checkName("operation", req.Operation, MaxCodeBytes, isCodeByte); err != nil {
			return RunListing{}, err
		}
	}
	if req.CreatedFrom < 0 || req.CreatedBefore < 0 || req.CreatedBefore != 0 && req.CreatedBefore <= req.CreatedFrom {
		return RunListing{}, Errorf(CodeInvalidArgument, "creation range [%d, %d) is not a range of times: want 0 <= created_from < created_before, or created_before 0 for no upper bound",
			req.CreatedFrom, req.CreatedBefore)
	}
	if err := CheckLimit(req.Limit); err != nil {
		return RunListing{}, err
	}
	below := RunPosition{CreatedAt: math.MaxInt64}
	if req.CreatedBefore != 0 {
		below.CreatedAt = req.CreatedBefore
	}
	if req.Cursor != "" {
		after, err := ParseCursor(req.Cursor)
		if err != nil {
			return RunListing{}, err
		}
		if below.Before(after) {
			below = after
		}
	}
	return RunListing{Tenant: req.Tenant, State: req.State, Operation: req.Operation, From: req.CreatedFrom, Below: below, Limit: req.Limit}, nil
}

package history

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestReadsNoClockIsWhatSpecSays holds the harness's clock rule to SPEC.md
// ("For porters"): a write reads the clock before any check, so every
// answer of a write needs a reading, a refusal as much as a success, except
// unavailable, an unknown outcome its caller cut short, an empty batch and a
// batch over spec.MaxBatch members refused whole.
func TestReadsNoClockIsWhatSpecSays(t *testing.T) {
	refused := func(c spec.Code) model.Result { return model.Result{Err: &spec.Error{Code: c}} }
	lease := spec.LeaseRef{Tenant: "t", RunID: "r", Owner: "w", Generation: 1}
	tooMany := make([]spec.CompleteRequest, spec.MaxBatch+1)
	cases := []struct {
		name   string
		req    spec.Request
		res    model.Result
		ctxErr error
		may    bool // may answer without a reading
	}{
		{"create_run admitted", spec.CreateRunRequest{Tenant: "t"}, model.Result{}, nil, false},
		{"create_run refused as invalid", spec.CreateRunRequest{Tenant: "-t"}, refused(spec.CodeInvalidArgument), nil, false},
		{"create_run refused as a conflict", spec.CreateRunRequest{Tenant: "t"}, refused(spec.CodeIdempotencyConflict), nil, false},
		{"create_run refused as existing", spec.CreateRunRequest{Tenant: "t"}, refused(spec.CodeAlreadyExists), nil, false},
		{"complete refused for a stale lease", spec.CompleteRequest{Lease: lease}, refused(spec.CodeLostLease), nil, false},
		{"cancel of a missing run", spec.CancelRequest{Tenant: "t", RunID: "r"}, refused(spec.CodeNotFound), nil, false},
		{"a write that was unavailable", spec.CreateRunRequest{Tenant: "t"}, refused(spec.CodeUnavailable), nil, true},
		{"an unknown outcome", spec.CompleteRequest{Lease: lease}, refused(spec.CodeUnknownOutcome), nil, false},
		{"an unknown outcome its caller cut short", spec.CompleteRequest{Lease: lease}, refused(spec.CodeUnknownOutcome), context.Canceled, true},
		{"an empty complete_batch", spec.CompleteBatchRequest{}, model.Result{}, nil, true},
		{"an empty create_runs", spec.CreateRunsRequest{}, model.Result{}, nil, true},
		{"a complete_batch", spec.CompleteBatchRequest{Requests: tooMany[:1]}, model.Result{}, nil, false},
		{"a complete_batch with every member refused", spec.CompleteBatchRequest{Requests: tooMany[:2]}, model.Result{}, nil, false},
		{"a complete_batch over the limit", spec.CompleteBatchRequest{Requests: tooMany}, refused(spec.CodeInvalidArgument), nil, true},
		{"a create_runs over the limit", spec.CreateRunsRequest{Requests: make([]spec.CreateRunRequest, spec.MaxBatch+1)}, refused(spec.CodeInvalidArgument), nil, true},
	}
	for _, c := range cases {
		if got := readsNoClock(model.Op{Req: c.req}, c.res, c.ctxErr); got != c.may {
			t.Errorf("%s: may answer without reading the clock %v, SPEC.md says %v", c.name, got, c.may)
		}
	}
}

// TestReadsNoClock: the writes that may return without a clock reading, and
// those that may not (Caller.Run reports the latter as a breach).
func TestReadsNoClock(t *testing.T) {
	purge := model.Op{Req: spec.PurgeRunsRequest{Tenant: "t1"}}
	failed := func(code spec.Code) model.Result { return model.Result{Err: spec.Errorf(code, "x")} }
	for _, c := range []struct {
		name   string
		op     model.Op
		res    model.Result
		ctxErr error
		want   bool
	}{
		{"a success", purge, model.Result{Value: []string{}}, nil, false},
		{"unavailable", purge, failed(spec.CodeUnavailable), nil, true},
		{"unknown outcome", purge, failed(spec.CodeUnknownOutcome), nil, false},
		{"unknown outcome after the context ended", purge, failed(spec.CodeUnknownOutcome), context.Canceled, true},
		{"another error after the context ended", purge, failed(spec.CodeInvalidArgument), context.Canceled, false},
		{"an empty batch completion", model.Op{Req: spec.CompleteBatchRequest{}}, model.Result{Value: []spec.BatchOutcome{}}, nil, true},
		{"an empty bulk admission", model.Op{Req: spec.CreateRunsRequest{}}, model.Result{Value: []spec.CreateOutcome{}}, nil, true},
	} {
		if got := readsNoClock(c.op, c.res, c.ctxErr); got != c.want {
			t.Errorf("%s: readsNoClock = %v, want %v", c.name, got, c.want)
		}
	}
}

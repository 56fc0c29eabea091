package validate

import (
	"math"
	"testing"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestWaitedForLock: an observation of an operation blocked on a lock is
// the race waited_for_lock only while that operation was in flight and
// another client's operation was held at before_commit.
func TestWaitedForLock(t *testing.T) {
	cancel := history.Entry{Actor: "api", Op: model.Op{Req: spec.CancelRequest{Tenant: "acme", RunID: "r1"}}, Call: 3, Return: 9}
	hold := history.Hold{Actor: "A", Op: spec.OpComplete, Point: spec.BeforeCommit, From: 2, To: 6}
	at := func(tick int64) history.Block { return history.Block{Actor: "api", Op: spec.OpCancel, At: tick} }
	for _, tc := range []struct {
		name  string
		holds []history.Hold
		block history.Block
		want  int
	}{
		{"blocked while the holder's transaction is open", []history.Hold{hold}, at(4), 1},
		{"seen after the holder was released", []history.Hold{hold}, at(7), 0},
		{"seen before the operation was called", []history.Hold{{Actor: "A", Op: spec.OpComplete, Point: spec.BeforeCommit, From: 1, To: 6}}, at(2), 0},
		{"the holder had committed (after_commit)", []history.Hold{{Actor: "A", Op: spec.OpComplete, Point: spec.AfterCommit, From: 2, To: 6}}, at(4), 0},
		{"the only holder is the blocked client itself", []history.Hold{{Actor: "api", Op: spec.OpCreateRun, Point: spec.BeforeCommit, From: 2, To: 6}}, at(4), 0},
		{"another operation of the client", []history.Hold{hold}, history.Block{Actor: "api", Op: spec.OpRetry, At: 4}, 0},
		{"nothing held", nil, at(4), 0},
	} {
		h := &history.History{Entries: []history.Entry{cancel}, Holds: tc.holds, Blocks: []history.Block{tc.block}}
		if got := RacesIn(h)[RaceWaitedForLock]; got != tc.want {
			t.Errorf("%s: waited_for_lock %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestAdmissionVsPurge: an admission is the race admission_vs_purge when it
// overlapped a purge of its tenant that deleted the run its key's record
// named when it was called (a bulk admission's members counted one by one),
// and not when the purge came after it, deleted nothing, another key's run
// or an older run of its key, or was another tenant's, nor when the
// admission's outcome is unknown or it never reached the store.
func TestAdmissionVsPurge(t *testing.T) {
	create := func(key, runID string, replayed bool, call, ret int64) history.Entry {
		req := spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: key, RunID: runID}
		res := spec.CreateRunResult{Run: spec.Run{Tenant: "acme", ID: runID}, Replayed: replayed}
		return history.Entry{Op: model.Op{Req: req}, Out: history.Observed{Result: model.Result{Value: res}}, Call: call, Return: ret}
	}
	refused := func(e history.Entry, code spec.Code) history.Entry {
		e.Out.Result = model.Result{Err: spec.Errorf(code, "refused")}
		return e
	}
	unknown := func(e history.Entry) history.Entry {
		e.Out, e.Return = history.Observed{Unknown: true}, math.MaxInt64
		return e
	}
	purge := func(tenant string, call, ret int64, deleted ...string) history.Entry {
		return history.Entry{Op: model.Op{Req: spec.PurgeRunsRequest{Tenant: tenant, Limit: 3}},
			Out: history.Observed{Result: model.Result{Value: deleted}}, Call: call, Return: ret}
	}
	bulk := history.Entry{Op: model.Op{Req: spec.CreateRunsRequest{Requests: []spec.CreateRunRequest{
		{Tenant: "acme", Operation: "work", IdempotencyKey: "k1", RunID: "r9"},
		{Tenant: "acme", Operation: "work", IdempotencyKey: "k2", RunID: "r8"},
	}}}, Out: history.Observed{Result: model.Result{Value: []spec.CreateOutcome{{Result: spec.CreateRunResult{Run: spec.Run{ID: "r1"}, Replayed: true}}, {Result: spec.CreateRunResult{Run: spec.Run{ID: "r8"}}}}}},
		Call: 20, Return: 30}
	for _, tc := range []struct {
		name    string
		entries []history.Entry
		want    int
	}{
		{"a retry overlapping the purge of its key's run", []history.Entry{create("k1", "r1", false, 1, 2), create("k1", "r2", true, 10, 20), purge("acme", 15, 25, "r1")}, 1},
		{"a new run of the key while its old one is purged", []history.Entry{create("k1", "r1", false, 1, 2), create("k1", "r2", false, 10, 20), purge("acme", 15, 25, "r1")}, 1},
		{"a conflict overlapping the purge", []history.Entry{create("k1", "r1", false, 1, 2), refused(create("k1", "r2", false, 10, 20), spec.CodeIdempotencyConflict), purge("acme", 15, 25, "r1")}, 1},
		{"two purges overlapping one admission", []history.Entry{create("k1", "r1", false, 1, 2), create("k1", "r2", true, 10, 20), purge("acme", 11, 25, "r1"), purge("acme", 12, 25, "r1")}, 1},
		{"the purge after the admission returned", []history.Entry{create("k1", "r1", false, 1, 2), create("k1", "r2", true, 10, 20), purge("acme", 21, 25, "r1")}, 0},
		{"the purge deleted nothing", []history.Entry{create("k1", "r1", false, 1, 2), create("k1", "r2", true, 10, 20), purge("acme", 15, 25)}, 0},
		{"another key's run", []history.Entry{create("k1", "r1", false, 1, 2), create("k2", "r2", false, 10, 20), purge("acme", 15, 25, "r1")}, 0},
		{"an older run of the key", []history.Entry{create("k1", "r1", false, 1, 2), create("k1", "r2", false, 3, 4), create("k1", "r3", true, 10, 20), purge("acme", 15, 25, "r1")}, 0},
		{"the key's run created while the admission ran", []history.Entry{create("k1", "r1", false, 1, 12), create("k1", "r2", true, 10, 20), purge("acme", 15, 25, "r1")}, 0},
		{"another tenant's purge", []history.Entry{create("k1", "r1", false, 1, 2), create("k1", "r2", true, 10, 20), purge("other", 15, 25, "r1")}, 0},
		{"an admission with an unknown outcome", []history.Entry{create("k1", "r1", false, 1, 2), unknown(create("k1", "r2", true, 10, 20)), purge("acme", 30, 35, "r1")}, 0},
		{"an admission refused unavailable", []history.Entry{create("k1", "r1", false, 1, 2), refused(create("k1", "r2", true, 10, 20), spec.CodeUnavailable), purge("acme", 15, 25, "r1")}, 0},
		{"an admission refused invalid_argument", []history.Entry{create("k1", "r1", false, 1, 2), refused(create("k1", "r2", true, 10, 20), spec.CodeInvalidArgument), purge("acme", 15, 25, "r1")}, 0},
		{"one member of a bulk admission", []history.Entry{create("k1", "r1", false, 1, 2), bulk, purge("acme", 25, 35, "r1")}, 1},
	} {
		h := &history.History{Entries: tc.entries}
		if got := RacesIn(h)[RaceAdmissionVsPurge]; got != tc.want {
			t.Errorf("%s: admission_vs_purge %d, want %d", tc.name, got, tc.want)
		}
	}
}

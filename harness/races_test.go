package harness

import (
	"testing"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestWaitedForLock: an observation of an operation blocked on a lock is
// the race waited_for_lock only while that operation was in flight and
// another client's operation was held at before_commit.
func TestWaitedForLock(t *testing.T) {
	cancel := Entry{Actor: "api", Op: model.Op{Req: spec.CancelRequest{Tenant: "acme", RunID: "r1"}}, Call: 3, Return: 9}
	hold := Hold{Actor: "A", Op: spec.OpComplete, Point: spec.BeforeCommit, From: 2, To: 6}
	at := func(tick int64) Block { return Block{Actor: "api", Op: spec.OpCancel, At: tick} }
	for _, tc := range []struct {
		name  string
		holds []Hold
		block Block
		want  int
	}{
		{"blocked while the holder's transaction is open", []Hold{hold}, at(4), 1},
		{"seen after the holder was released", []Hold{hold}, at(7), 0},
		{"seen before the operation was called", []Hold{{Actor: "A", Op: spec.OpComplete, Point: spec.BeforeCommit, From: 1, To: 6}}, at(2), 0},
		{"the holder had committed (after_commit)", []Hold{{Actor: "A", Op: spec.OpComplete, Point: spec.AfterCommit, From: 2, To: 6}}, at(4), 0},
		{"the only holder is the blocked client itself", []Hold{{Actor: "api", Op: spec.OpCreateRun, Point: spec.BeforeCommit, From: 2, To: 6}}, at(4), 0},
		{"another operation of the client", []Hold{hold}, Block{Actor: "api", Op: spec.OpRetry, At: 4}, 0},
		{"nothing held", nil, at(4), 0},
	} {
		h := &History{Entries: []Entry{cancel}, Holds: tc.holds, Blocks: []Block{tc.block}}
		if got := h.Races()[RaceWaitedForLock]; got != tc.want {
			t.Errorf("%s: waited_for_lock %d, want %d", tc.name, got, tc.want)
		}
	}
}

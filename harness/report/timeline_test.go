package report

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestTimelinesShowAStaleWrite: w1 claims generation 1, its lease expires,
// w2 claims generation 2, then w1 completes with generation 1. Accepted
// (a store that ignores the generation), the run comes first with the
// write marked STALE, ACCEPTED; refused, it says stale, refused. A run
// claimed once and completed is left out.
func TestTimelinesShowAStaleWrite(t *testing.T) {
	recorded := func(staleAccepted bool) *history.History {
		claim := func(now int64, owner string, gen int64, run string) history.Entry {
			return history.Entry{Op: model.Op{Now: now, Req: spec.ClaimRequest{Tenant: "t1", Worker: owner, LeaseMs: 30_000, Limit: 1}},
				Out: history.Observed{Result: model.Result{Value: []spec.Lease{{Tenant: "t1", RunID: run, Owner: owner, Generation: gen, ExpiresAt: now + 30_000}}}}}
		}
		complete := func(now int64, owner string, gen int64, run string, err *spec.Error) history.Entry {
			out := history.Observed{Result: model.Result{Value: spec.Run{Tenant: "t1", ID: run}}}
			if err != nil {
				out = history.Observed{Result: model.Result{Err: err}}
			}
			return history.Entry{Op: model.Op{Now: now, Req: spec.CompleteRequest{Lease: spec.LeaseRef{Tenant: "t1", RunID: run, Owner: owner, Generation: gen}}}, Out: out}
		}
		var stale *spec.Error
		if !staleAccepted {
			stale = &spec.Error{Code: spec.CodeLostLease}
		}
		return &history.History{Entries: []history.Entry{
			claim(1_000, "w0", 1, "calm"), complete(2_000, "w0", 1, "calm", nil),
			claim(3_000, "w1", 1, "r1"), claim(40_000, "w2", 2, "r1"), complete(41_000, "w1", 1, "r1", stale),
		}}
	}
	for _, c := range []struct {
		accepted bool
		verdict  string
	}{{true, "STALE, ACCEPTED"}, {false, "stale, refused"}} {
		secs := Timelines(recorded(c.accepted))
		if len(secs) != 1 || secs[0].Heading != "run r1 of tenant t1" {
			t.Fatalf("stale write accepted=%v: sections %+v, want run r1 only", c.accepted, secs)
		}
		tl := secs[0].Timeline
		if len(tl.Generations) != 2 || len(tl.Writes) != 1 || tl.Verdict(tl.Writes[0]) != c.verdict {
			t.Fatalf("stale write accepted=%v: %+v, want two generations and one write %s", c.accepted, tl, c.verdict)
		}
		h, _ := tl.HTML()
		if !strings.Contains(string(h), "<td>"+strings.ReplaceAll(c.verdict, ",", ",")+"</td>") {
			t.Fatalf("the drawing does not say %s:\n%s", c.verdict, h)
		}
	}
}

package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestViolationWritesReport proves the failure path: a real history with one
// claim's reply doctored (a generation skipped, as a claim that bumped it
// twice would show) is judged not linearizable, the report files are
// written, and the saved history re-checks to the same verdict.
func TestViolationWritesReport(t *testing.T) {
	w := Workload{Factory: sqlitetest.Factory, Config: TestConfig(), Seed: 7, Tenants: []string{"t1"},
		Workers: 2, APIs: 1, Ops: 300}
	scope := &scopedTB{TB: t}
	defer scope.close()
	h, err := w.Record(t.Context(), scope)
	if err != nil {
		t.Fatal(err)
	}
	m := model.Model{Config: w.Config}
	j := validate.Judgement{Partition: true, Timeout: hang.PhasePatience(), Drained: true}
	if v := validate.Judge(m, h, j); v.Violations() != 0 {
		t.Fatalf("the untouched history should pass, got %s and %q", v.Linearizable, v.Accounting)
	}
	doctored, doctoredCall := false, int64(0)
	for i, e := range h.Entries {
		if leases, ok := e.Out.Result.Value.([]spec.Lease); ok && len(leases) > 0 && e.Op.Kind() == spec.OpClaim {
			bad := append([]spec.Lease(nil), leases...)
			bad[0].Generation++
			h.Entries[i].Out = history.Observed{Result: model.Result{Value: bad}}
			doctored, doctoredCall = true, e.Call
			break
		}
	}
	if !doctored {
		t.Fatal("the workload claimed nothing, so there was no claim to doctor")
	}
	h.Provider.Call("t1/x/charge/charge-x", 1)
	h.Provider.Call("t1/x/charge/charge-x", 1)
	v := validate.Judge(m, h, j)
	if v.Linearizable != porcupine.Illegal {
		t.Fatalf("a history where a claim skipped a generation must be Illegal, got %s", v.Linearizable)
	}
	if len(v.Accounting) == 0 || !strings.Contains(strings.Join(v.Accounting, "\n"), "duplicated: effect t1/x/charge/charge-x was applied 2 times") {
		t.Fatalf("accounting should report the duplicated effect, got %q", v.Accounting)
	}
	v.Explain(m, h, hang.PhasePatience())
	if v.Culprit == nil || v.Culprit.Last.Call < doctoredCall {
		t.Fatalf("the culprit should be the doctored claim or an operation called after it (call %d), got %v", doctoredCall, v.Culprit)
	}
	dir := filepath.Join(t.TempDir(), "report")
	if err := report.WriteReport(dir, m, h, v, j, "sqlite", w.Seed, w.Config, "replay-command"); err != nil {
		t.Fatal(err)
	}
	if md, _ := os.ReadFile(filepath.Join(dir, "verdict.md")); !strings.Contains(string(md), "## Where it goes wrong") {
		t.Error("verdict.md does not say where the history goes wrong")
	}
	for _, name := range []string{"history.html", "history.json", "verdict.md"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Size() == 0 {
			t.Fatalf("the report has no %s (err %v)", name, err)
		}
	}
	if tl, err := os.ReadFile(filepath.Join(dir, "timeline.html")); err != nil || !strings.Contains(string(tl), `class="generations"`) {
		t.Errorf("the report has no timeline of its leases (err %v)", err)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "history.html"))
	if !strings.Contains(string(html), "clock +") {
		t.Error("history.html does not carry the clock-move annotations")
	}
	data, _ := os.ReadFile(filepath.Join(dir, "history.json"))
	again, file, err := history.Decode(data)
	if err != nil {
		t.Fatalf("the saved history does not decode: %v", err)
	}
	if len(again.Entries) != len(h.Entries) || file.Seed != w.Seed {
		t.Fatalf("decoded %d entries (seed %d), want %d (seed %d)", len(again.Entries), file.Seed, len(h.Entries), w.Seed)
	}
	if v2 := validate.Judge(model.Model{Config: file.Config}, again, validate.Judgement{Partition: file.Partitioned, Timeout: hang.PhasePatience(), Drained: file.Drained}); v2.Linearizable != porcupine.Illegal || len(v2.Accounting) != len(v.Accounting) {
		t.Fatalf("re-checking the saved history gave %s and %q, want Illegal and %q", v2.Linearizable, v2.Accounting, v.Accounting)
	}
}

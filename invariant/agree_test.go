package invariant

import (
	"testing"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestModelAgreesOnBrokenSnapshots holds the model's Check (model/check.go)
// and this package's Check to the same verdict on the healthy snapshot and
// on every broken one of TestEachInvariantCatchesItsBreak, the snapshot
// taken into the model's State by model.FromSnapshot. Where the two cannot
// agree, the case is listed below with the reason; a listed case that does
// agree fails too, so the lists stay exactly as long as they must.
// (model's TestCheckAgreesWithInvariant holds them to the same verdict on
// every state the explorer reaches.)
func TestModelAgreesOnBrokenSnapshots(t *testing.T) {
	// A State keeps every row under its run, with one job: these breaks
	// cannot be put in one, so only this package can see them.
	unrepresentable := map[string]string{
		"duplicated job":               "a run has one job",
		"job without a run":            "an orphan: a job is kept under its run",
		"run without a job":            "a run has one job",
		"event without a run":          "an orphan: an event is kept under its run",
		"orphan attempt":               "an orphan: an attempt is kept under its run",
		"effect without a job":         "an orphan: an effect is kept under its run",
		"outbox message without a run": "an orphan: a message is kept under its run",
	}
	// Breaks only this package's Check reports, with why the model cannot.
	onlyHere := map[string]string{
		"effects out of order": "the break puts one run's effect before another run's; a State groups rows by run, " +
			"so only the order within a run survives into it",
	}
	m := model.Model{Config: spec.DefaultConfig()}
	judge := func(name string, snap spec.Snapshot) {
		st, err := model.FromSnapshot(snap)
		reason, listed := unrepresentable[name]
		switch {
		case err != nil && !listed:
			t.Errorf("%s: the model cannot hold this snapshot (%v); list it in unrepresentable with the reason", name, err)
			return
		case err != nil:
			return
		case listed:
			t.Errorf("%s: listed as unrepresentable (%s), but the model holds it: take it off the list", name, reason)
		}
		here, there := Check(snap), m.Check(st)
		why, only := onlyHere[name]
		switch {
		case (len(here) == 0) == (there == nil) && only:
			t.Errorf("%s: listed as seen only by invariant.Check (%s), but both agree: take it off the list", name, why)
		case len(here) > 0 && there == nil && !only:
			t.Errorf("%s: invariant.Check reports %v, model.Check nothing", name, here)
		case len(here) == 0 && there != nil:
			t.Errorf("%s: model.Check reports %v, invariant.Check nothing", name, there)
		}
	}
	judge("healthy", healthy())
	judge("empty", spec.Snapshot{})
	for _, b := range breaks() {
		s := healthy()
		b.break_(&s)
		judge(b.name, s)
	}
}

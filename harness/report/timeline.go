package report

import (
	"cmp"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/timeline"
)

// maxTimelines bounds the runs timeline.html draws (the most telling first).
const maxTimelines = 20

// Timelines returns, for the runs of h whose leases tell something (a
// re-claim, a refused or stale write), who held which generation when and
// where each write under a lease came, on the store's clock (Op.Now): the
// same picture `leasehold ui` draws for a run. Runs with a stale write the
// store accepted come first, then those with a stale write refused, then
// the rest; at most maxTimelines.
func Timelines(h *history.History) []timeline.Section {
	type run struct{ tenant, id string }
	type lane struct {
		run  run
		gens map[int64]*timeline.Generation
		tl   timeline.Timeline
	}
	lanes := map[run]*lane{}
	get := func(r run) *lane {
		if lanes[r] == nil {
			lanes[r] = &lane{run: r, gens: map[int64]*timeline.Generation{}, tl: timeline.Timeline{Unit: "ms (the store's clock)"}}
		}
		return lanes[r]
	}
	var at int64
	for _, e := range h.Entries {
		if e.Op.Now != 0 {
			at = e.Op.Now
		}
		res := e.Out.Result
		if leases, ok := res.Value.([]spec.Lease); ok && e.Op.Kind() == spec.OpClaim {
			for _, l := range leases {
				get(run{l.Tenant, l.RunID}).gens[l.Generation] = &timeline.Generation{Generation: l.Generation, Owner: l.Owner, From: at, To: l.ExpiresAt, Seq: e.Return}
			}
		}
		outcomes, _ := res.Value.([]spec.BatchOutcome)
		for i, ref := range e.Op.Req.Leases() {
			l := get(run{ref.Tenant, ref.RunID})
			// A write is after a grant at its time only if it was called after
			// the claim returned.
			w := timeline.Write{At: at, Generation: ref.Generation, Owner: ref.Owner, Op: string(e.Op.Kind()), Seq: e.Call}
			switch {
			case e.Out.Unknown:
				w.Detail = "outcome unknown"
			case res.Err != nil:
				w.Detail = string(res.Err.Code)
			case i < len(outcomes) && outcomes[i].Err != nil:
				w.Detail = string(spec.CodeOf(outcomes[i].Err))
			default:
				w.Accepted = true
			}
			l.tl.Writes = append(l.tl.Writes, w)
			g := l.gens[ref.Generation]
			if !w.Accepted || g == nil {
				continue
			}
			switch v := res.Value.(type) {
			case spec.Lease:
				g.To = v.ExpiresAt // a renewal
			default:
				g.Outcome, g.To = w.Op, min(g.To, at)
			}
		}
	}
	type ranked struct {
		sec                 timeline.Section
		bad, stale, refused int
	}
	var out []ranked
	for _, l := range lanes {
		for _, g := range l.gens {
			l.tl.Generations = append(l.tl.Generations, *g)
		}
		r := ranked{sec: timeline.Section{Heading: "run " + l.run.id + " of tenant " + l.run.tenant, Timeline: l.tl}}
		for _, w := range l.tl.Writes {
			switch stale := l.tl.Stale(w); {
			case stale && w.Accepted:
				r.bad++
			case stale:
				r.stale++
			case !w.Accepted:
				r.refused++
			}
		}
		if len(l.tl.Generations) > 1 || r.bad+r.stale+r.refused > 0 {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.bad, a.bad), cmp.Compare(b.stale, a.stale), cmp.Compare(b.refused, a.refused),
			cmp.Compare(a.sec.Heading, b.sec.Heading))
	})
	secs := []timeline.Section{}
	for _, r := range out[:min(len(out), maxTimelines)] {
		secs = append(secs, r.sec)
	}
	return secs
}

// writeTimelines writes dir/timeline.html (Timelines), when a run has one.
func writeTimelines(dir string, h *history.History) error {
	secs := Timelines(h)
	if len(secs) == 0 {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, "timeline.html"))
	if err != nil {
		return err
	}
	werr := timeline.WritePage(f, "Leases of the failing history",
		"Who held which generation of each run's lease when (bars, on the store's clock), and where each write under a lease came: "+
			"green accepted, amber refused, red a stale write the store accepted (a generation newer than the writer's had been granted). "+
			"Runs with a stale write accepted come first.", secs)
	return errors.Join(werr, f.Close())
}

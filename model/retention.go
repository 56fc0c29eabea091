package model

import (
	"cmp"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// Run retention (PurgeRuns). A replay lineage is an original run and the
// chain of its replays (each run is replayed at most once, so it is a
// chain); its leaf is the one run of it nobody replayed. Lineages are
// deleted whole: deleting an original whose replay stays would leave the
// replay's replay_of dangling, and deleting a replay whose original stays
// would let the original be replayed a second time.

// finishedAt returns when a terminal run finished (its terminal event, the
// last), and false for a run that is not terminal.
func finishedAt(r *runRow) (int64, bool) {
	if !r.run.State.Terminal() || len(r.events) == 0 {
		return 0, false
	}
	return r.events[len(r.events)-1].At, true
}

// retired reports whether PurgeRuns may delete r, given by = now -
// RunRetentionMs and the runs live idempotency records name (held, by run
// id, in r's tenant): terminal, finished at or before by, not held (a
// retried request must still get the run back), and with every outbox
// message delivered (a pending one would be lost).
func (m Model) retired(r *runRow, by int64, held map[string]bool) bool {
	at, terminal := finishedAt(r)
	return terminal && at <= by && (!held[r.run.ID] || m.bug == bugPurgeRunsIgnoresRecords) &&
		(!r.pendingOutbox() || m.bug == bugPurgeRunsDropsPendingOutbox)
}

// purgeableLineages returns the tenant's lineages every run of which is
// retired at now, each leaf first and then up its replay_of links, in
// (leaf's finishing time, leaf's run id) order: the order PurgeRuns deletes
// them in.
func (m Model) purgeableLineages(s State, tenant string, by, now int64) [][]*runRow {
	held := map[string]bool{}
	for _, rec := range s.idem {
		if rec.Tenant == tenant && rec.ExpiresAt > now {
			held[rec.RunID] = true
		}
	}
	replayed := map[string]bool{}
	for _, r := range s.runs {
		if r.run.Tenant == tenant && r.run.ReplayOf != "" {
			replayed[r.run.ReplayOf] = true
		}
	}
	var out [][]*runRow
	for _, r := range s.runs {
		if r.run.Tenant != tenant || replayed[r.run.ID] || !m.retired(r, by, held) {
			continue
		}
		lineage := []*runRow{r}
		for up := r; up.run.ReplayOf != ""; {
			if up = s.row(tenant, up.run.ReplayOf); up == nil { // unreachable in a state that passes Check
				break
			}
			lineage = append(lineage, up)
		}
		if m.bug == bugPurgeRunsSplitsLineage {
			lineage = lineage[:1]
		}
		if !slices.ContainsFunc(lineage, func(x *runRow) bool { return !m.retired(x, by, held) }) {
			out = append(out, lineage)
		}
	}
	slices.SortStableFunc(out, func(a, b []*runRow) int {
		at, _ := finishedAt(a[0])
		bt, _ := finishedAt(b[0])
		return cmp.Or(cmp.Compare(at, bt), strings.Compare(a[0].run.ID, b[0].run.ID))
	})
	return out
}

// purgeRuns is PurgeRuns: delete up to Limit purgeable lineages of the
// tenant, oldest first, each run with every row that belongs to it and the
// (expired) idempotency records that name it; return the run ids deleted,
// each lineage leaf first. With retention off nothing is purgeable.
func (m Model) purgeRuns(s State, now int64, req spec.PurgeRunsRequest) (State, Result) {
	if err := m.Config.CheckPurgeRuns(req, now); err != nil {
		return s, failed(err)
	}
	by, on := m.Config.RetiredBy(now)
	if !on {
		return s, ok([]string{})
	}
	lineages := m.purgeableLineages(s, req.Tenant, by, now)
	lineages = lineages[:min(len(lineages), req.Limit)]
	gone := map[string]bool{}
	ids := []string{}
	for _, l := range lineages {
		for _, r := range l {
			gone[r.run.ID] = true
			ids = append(ids, r.run.ID)
		}
	}
	if len(ids) == 0 {
		return s, ok(ids)
	}
	next := s
	next.runs = slices.DeleteFunc(slices.Clone(s.runs), func(r *runRow) bool { return r.run.Tenant == req.Tenant && gone[r.run.ID] })
	next = next.withoutIdempotency(func(rec spec.IdempotencyRecord) bool { return rec.Tenant == req.Tenant && gone[rec.RunID] })
	return next, ok(ids)
}

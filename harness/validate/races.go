package validate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/spec"
)

// Race names a race a recorded history can contain. Linearizability runs and
// scenarios share this one vocabulary, and each race has one detector
// (Races), so "the race happened" means the same wherever it is claimed.
type Race string

// The races.
const (
	// RaceStaleWriteRefused: a guarded write presented a lease that a claim
	// which had already returned superseded, or whose expiry (as the last
	// claim or renewal that had returned gave it) was not after the write's
	// time, and was refused lost_lease.
	RaceStaleWriteRefused Race = "stale_write_refused"
	// RaceLeaseReclaimed: a lease expired and a claim took its job over:
	// the claim of generation g came after lease g-1's last known expiry,
	// and nothing had given g-1 back.
	RaceLeaseReclaimed Race = "lease_reclaimed"
	// RaceCancelVsFinish: a cancel and a complete, fail or retry of one run
	// raced: the finishing write was refused cancelled, or the two
	// overlapped in time and the cancel was told the finish had won.
	RaceCancelVsFinish Race = "cancel_vs_finish"
	// RaceUnknownOutcome: an operation's outcome was unknown (the reply to
	// its commit was lost).
	RaceUnknownOutcome Race = "unknown_outcome"
	// RaceFaultRolledBack: an operation rolled back and returned
	// unavailable.
	RaceFaultRolledBack Race = "fault_rolled_back"
	// RaceContended: a writing operation was called while another client's
	// operation was held at before_commit, inside its open transaction.
	RaceContended Race = "contended"
	// RaceCommittedNotReturned: a writing operation was called while
	// another client's operation was held at after_commit: committed, not
	// returned.
	RaceCommittedNotReturned Race = "committed_not_returned"
	// RaceWaitedForLock: an operation was seen blocked on a lock (its
	// store said so, spec.LockWaitReporter) while it was in flight and
	// another client's operation was held at before_commit, its
	// transaction open and its locks held.
	RaceWaitedForLock Race = "waited_for_lock"
	// RaceAdmissionVsPurge: an admission (CreateRun, or a member of
	// CreateRuns) of an idempotency key, which returned and reached the
	// store, overlapped in time a purge of runs that deleted the run its
	// key's record named when it was called.
	RaceAdmissionVsPurge Race = "admission_vs_purge"
)

// raceDetectors is every race with its meaning and its detector, in the
// order reports list them.
var raceDetectors = []struct {
	race    Race
	meaning string
	count   func(*history.History) int
}{
	{RaceStaleWriteRefused, "a write through a superseded or expired lease was refused lost_lease", staleRefused},
	{RaceLeaseReclaimed, "a lease expired and another claim took its job over", leaseReclaimed},
	{RaceCancelVsFinish, "a cancel raced a completion, failure or retry of the same run", cancelVsFinish},
	{RaceUnknownOutcome, "an operation's outcome was unknown", func(h *history.History) int {
		return h.Count(func(e history.Entry) bool { return e.Out.Unknown })
	}},
	{RaceFaultRolledBack, "an operation rolled back and returned unavailable", func(h *history.History) int {
		return h.Count(func(e history.Entry) bool { return e.Code() == spec.CodeUnavailable })
	}},
	{RaceContended, "a write was called while another client's operation was held at before_commit", func(h *history.History) int {
		return calledDuring(h, spec.BeforeCommit)
	}},
	{RaceCommittedNotReturned, "a write was called while another client's operation was held at after_commit", func(h *history.History) int {
		return calledDuring(h, spec.AfterCommit)
	}},
	{RaceWaitedForLock, "an operation was seen blocked on a lock while another client's operation was held at before_commit", waitedForLock},
	{RaceAdmissionVsPurge, "an admission of a key overlapped a purge of runs that deleted the run its key's record named", admissionVsPurge},
}

// AllRaces lists every race, in report order.
func AllRaces() []Race {
	out := make([]Race, len(raceDetectors))
	for i, d := range raceDetectors {
		out[i] = d.race
	}
	return out
}

// Meaning says what r counts ("" for a name that is not a race).
func (r Race) Meaning() string {
	for _, d := range raceDetectors {
		if d.race == r {
			return d.meaning
		}
	}
	return ""
}

// Races counts how often each race happened in a history.
type Races map[Race]int

// RacesIn runs every detector on h.
func RacesIn(h *history.History) Races {
	out := Races{}
	for _, d := range raceDetectors {
		out[d.race] = d.count(h)
	}
	return out
}

// Add adds o's counts to r.
func (r Races) Add(o Races) {
	for k, n := range o {
		r[k] += n
	}
}

// String lists the races seen, in report order: "stale_write_refused×3, …".
func (r Races) String() string {
	var parts []string
	for _, race := range AllRaces() {
		if n := r[race]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s×%d", race, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

type runKey struct{ tenant, id string }

// staleRefused counts guarded writes refused lost_lease whose lease, at the
// write's call, a returned claim had superseded or whose last known expiry
// was not after the write's time.
func staleRefused(h *history.History) int {
	type leaseKey struct {
		run runKey
		gen int64
	}
	type known struct {
		ret, expires int64
	}
	type claimed struct {
		ret, gen int64
	}
	leases := map[leaseKey][]known{} // every expiry a returned claim or renewal gave the lease
	claims := map[runKey][]claimed{} // per run: every returned claim's generation
	for _, e := range h.Entries {
		if e.Out.Unknown || e.Out.Result.Err != nil {
			continue
		}
		switch v := e.Out.Result.Value.(type) {
		case []spec.Lease:
			for _, l := range v {
				k := leaseKey{runKey{l.Tenant, l.RunID}, l.Generation}
				leases[k] = append(leases[k], known{e.Return, l.ExpiresAt})
				claims[k.run] = append(claims[k.run], claimed{e.Return, l.Generation})
			}
		case spec.Lease:
			k := leaseKey{runKey{v.Tenant, v.RunID}, v.Generation}
			leases[k] = append(leases[k], known{e.Return, v.ExpiresAt})
		}
	}
	n := 0
	for _, e := range h.Entries {
		for _, ref := range refusedLeases(e, spec.CodeLostLease) {
			run := runKey{ref.Tenant, ref.RunID}
			superseded := slices.ContainsFunc(claims[run], func(c claimed) bool { return c.ret < e.Call && c.gen > ref.Generation })
			var expires int64 = -1
			for _, k := range leases[leaseKey{run, ref.Generation}] {
				if k.ret < e.Call {
					expires = max(expires, k.expires)
				}
			}
			if superseded || expires >= 0 && expires <= e.Op.Now {
				n++
				break
			}
		}
	}
	return n
}

// refusedLeases returns the leases of e's guarded writes that were refused
// with code: the operation's lease when it failed so, and for a batch each
// member refused so.
func refusedLeases(e history.Entry, code spec.Code) []spec.LeaseRef {
	if e.Out.Unknown {
		return nil
	}
	if outs, isBatch := e.Out.Result.Value.([]spec.BatchOutcome); isBatch {
		var refs []spec.LeaseRef
		for i, m := range e.Op.Req.(spec.CompleteBatchRequest).Requests {
			if i < len(outs) && spec.CodeOf(outs[i].Err) == code {
				refs = append(refs, m.Lease)
			}
		}
		return refs
	}
	if e.Code() == code {
		return e.Op.Req.Leases()
	}
	return nil
}

// leaseReclaimed counts claims that took a job over from an expired lease:
// a claim of generation g of a run whose lease g-1 a claim had handed out,
// that no retry or release had given back before the claim was called, and
// whose last known expiry was not after the claim's time.
func leaseReclaimed(h *history.History) int {
	type leaseKey struct {
		run runKey
		gen int64
	}
	type seen struct{ ret, expires int64 }
	expiries := map[leaseKey][]seen{}
	givenBack := map[leaseKey]int64{} // -> return of the retry or release that requeued it
	for _, e := range h.Entries {
		if e.Out.Unknown || e.Out.Result.Err != nil {
			continue
		}
		switch v := e.Out.Result.Value.(type) {
		case []spec.Lease:
			for _, l := range v {
				k := leaseKey{runKey{l.Tenant, l.RunID}, l.Generation}
				expiries[k] = append(expiries[k], seen{e.Return, l.ExpiresAt})
			}
		case spec.Lease:
			k := leaseKey{runKey{v.Tenant, v.RunID}, v.Generation}
			expiries[k] = append(expiries[k], seen{e.Return, v.ExpiresAt})
		case spec.Job:
			if v.State == spec.JobQueued {
				ref := e.Op.Req.Leases()
				if len(ref) == 1 {
					givenBack[leaseKey{runKey{ref[0].Tenant, ref[0].RunID}, ref[0].Generation}] = e.Return
				}
			}
		}
	}
	n := 0
	for _, e := range h.Entries {
		leases, isClaim := e.Out.Result.Value.([]spec.Lease)
		if !isClaim || e.Out.Unknown {
			continue
		}
		for _, l := range leases {
			prev := leaseKey{runKey{l.Tenant, l.RunID}, l.Generation - 1}
			if ret, requeued := givenBack[prev]; requeued && ret < e.Call {
				continue
			}
			var expires int64 = -1
			for _, x := range expiries[prev] {
				if x.ret < e.Call {
					expires = max(expires, x.expires)
				}
			}
			if expires >= 0 && expires <= e.Op.Now {
				n++
			}
		}
	}
	return n
}

// cancelVsFinish counts cancels that raced a complete, fail or retry of the
// same run: the finishing write was refused cancelled (the worker was still
// running when the cancel won), or the two overlapped in time and the cancel
// was told the finish had won.
func cancelVsFinish(h *history.History) int {
	finishes := func(e history.Entry) bool {
		switch e.Op.Req.(type) {
		case spec.CompleteRequest, spec.FailRequest, spec.RetryRequest:
			return !e.Out.Unknown
		}
		return false
	}
	n := h.Count(func(e history.Entry) bool { return finishes(e) && e.Code() == spec.CodeCancelled })
	for _, c := range h.Entries {
		cancel, isCancel := c.Op.Req.(spec.CancelRequest)
		if !isCancel || c.Code() != spec.CodeAlreadyTerminal {
			continue
		}
		for _, f := range h.Entries {
			if !finishes(f) || f.Out.Result.Err != nil {
				continue
			}
			ref := f.Op.Req.Leases()[0]
			if ref.Tenant == cancel.Tenant && ref.RunID == cancel.RunID && c.Call <= f.Return && f.Call <= c.Return {
				n++
			}
		}
	}
	return n
}

// admissionVsPurge counts the admissions (a bulk admission's members one
// by one) that overlapped a purge of runs which deleted the run their
// key's record named when they were called: the run created last under
// the key by an admission that returned before. Only admissions that
// returned and reached the store count (not unknown_outcome, unavailable
// or invalid_argument): the witness is an admission that read that run's
// row while the purge could delete it.
func admissionVsPurge(h *history.History) int {
	type scope struct{ tenant, operation, key string }
	type member struct {
		scope
		entry int
	}
	type creation struct {
		runID string
		at    int64 // the admission's return
	}
	var admissions []member
	created := map[scope][]creation{}
	for i, e := range h.Entries {
		var reqs []spec.CreateRunRequest
		var outs []spec.CreateOutcome
		switch r := history.Committed(e.Op.Req).(type) {
		case spec.CreateRunRequest:
			reqs = []spec.CreateRunRequest{r}
			res, _ := e.Out.Result.Value.(spec.CreateRunResult)
			outs = []spec.CreateOutcome{{Result: res}}
			if e.Out.Result.Err != nil { // a nil *spec.Error is not a nil error
				outs[0].Err = e.Out.Result.Err
			}
		case spec.CreateRunsRequest:
			reqs = r.Requests
			if outs, _ = e.Out.Result.Value.([]spec.CreateOutcome); e.Out.Result.Err != nil {
				outs = nil
			}
		default:
			continue
		}
		if e.Out.Unknown || len(outs) != len(reqs) {
			continue
		}
		for m, req := range reqs {
			sc := scope{req.Tenant, req.Operation, req.IdempotencyKey}
			switch spec.CodeOf(outs[m].Err) {
			case spec.CodeInvalidArgument, spec.CodeUnavailable:
				continue
			}
			admissions = append(admissions, member{sc, i})
			if outs[m].Err == nil && !outs[m].Result.Replayed {
				created[sc] = append(created[sc], creation{outs[m].Result.Run.ID, e.Return})
			}
		}
	}
	n := 0
	for _, a := range admissions {
		e := h.Entries[a.entry]
		named, latest := "", int64(-1)
		for _, c := range created[a.scope] {
			if c.at < e.Call && c.at > latest {
				named, latest = c.runID, c.at
			}
		}
		if named == "" {
			continue
		}
		for _, p := range h.Entries {
			purge, isPurge := p.Op.Req.(spec.PurgeRunsRequest)
			deleted, _ := p.Out.Result.Value.([]string)
			if isPurge && !p.Out.Unknown && purge.Tenant == a.tenant && p.Call <= e.Return && e.Call <= p.Return &&
				slices.Contains(deleted, named) {
				n++
				break
			}
		}
	}
	return n
}

// calledDuring counts writes called while another client's operation was
// held at point.
func calledDuring(h *history.History, point spec.HookPoint) int {
	n := 0
	for _, e := range h.Entries {
		if !spec.OperationOf(e.Op.Req).Writes {
			continue
		}
		for _, x := range h.Holds {
			if x.Point == point && x.Actor != e.Actor && x.From < e.Call && e.Call < x.To {
				n++
				break
			}
		}
	}
	return n
}

// waitedForLock counts observations of an operation blocked on a lock made
// while that operation was in flight (its client had an entry called
// before and returned after) and another client's operation was held at
// before_commit. Only holders at before_commit count: after commit, nothing
// of the holder's is locked.
func waitedForLock(h *history.History) int {
	n := 0
	for _, b := range h.Blocks {
		inFlight := slices.ContainsFunc(h.Entries, func(e history.Entry) bool {
			return e.Actor == b.Actor && spec.OperationOf(e.Op.Req).Op == b.Op && e.Call < b.At && b.At < e.Return
		})
		held := slices.ContainsFunc(h.Holds, func(x history.Hold) bool {
			return x.Point == spec.BeforeCommit && x.Actor != b.Actor && x.From < b.At && b.At < x.To
		})
		if inFlight && held {
			n++
		}
	}
	return n
}

// Package ledger is the workload of the power-loss checks and its ledger:
// it drives a store with admissions, claims and completions, hands every
// write the store acknowledged to the caller, and checks a store's snapshot
// after a power loss against them: every acknowledged write present, every
// invariant (package invariant) holding.
//
// The workload is deterministic: round r admits runs "r<r>-<i>" in order,
// claims them in one claim and completes every other lease, so that a
// check's power loss falls at the same point of the same writes in every
// run.
package ledger

import (
	"context"
	"fmt"
	"sort"

	"github.com/leasehold/leasehold/invariant"
	"github.com/leasehold/leasehold/spec"
)

// Tenant is the tenant every run of the workload belongs to.
const Tenant = "powerloss"

// Operation is the workload's one operation.
const Operation = "work"

// Config is the store configuration the workload needs.
func Config() spec.Config { return spec.DefaultConfig() }

// The kinds of acknowledged write.
const (
	Admit    = "admit"    // CreateRun returned the run, newly admitted
	Claim    = "claim"    // Claim returned a lease at Generation
	Complete = "complete" // Complete returned under the lease at Generation
)

// Ack is one write the store acknowledged.
type Ack struct {
	Op         string `json:"op"`
	RunID      string `json:"run_id"`
	Generation int64  `json:"generation,omitempty"`
}

func (a Ack) String() string {
	if a.Op == Admit {
		return "admission of run " + a.RunID
	}
	return fmt.Sprintf("%s of run %s at generation %d", a.Op, a.RunID, a.Generation)
}

// leaseMs outlives any check: a lease the workload took is never reclaimed
// by the clock.
const leaseMs = 3_600_000

// Round makes round r's writes: n admissions, one claim of up to n jobs,
// then the completion of every other lease it got, each acknowledged write
// handed to ack as it returns. It stops at the first error.
func Round(ctx context.Context, s spec.Store, r, n int, ack func(Ack)) error {
	for i := range n {
		a, err := admit(ctx, s, fmt.Sprintf("r%d-%d", r, i))
		if err != nil {
			return err
		}
		ack(a)
	}
	leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: Tenant, Worker: "powerloss", LeaseMs: leaseMs, Limit: n})
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	sort.Slice(leases, func(i, j int) bool { return leases[i].RunID < leases[j].RunID })
	for _, l := range leases {
		ack(Ack{Op: Claim, RunID: l.RunID, Generation: l.Generation})
	}
	for i, l := range leases {
		if i%2 == 1 {
			continue
		}
		if _, err := s.Complete(ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"ok":true}`)}); err != nil {
			return fmt.Errorf("complete %s: %w", l.RunID, err)
		}
		ack(Ack{Op: Complete, RunID: l.RunID, Generation: l.Generation})
	}
	return nil
}

// InFlight is the write a check's power loss interrupts: round r's one more
// admission.
func InFlight(ctx context.Context, s spec.Store, r int) (Ack, error) {
	return admit(ctx, s, fmt.Sprintf("r%d-inflight", r))
}

func admit(ctx context.Context, s spec.Store, id string) (Ack, error) {
	res, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: Tenant, Operation: Operation, IdempotencyKey: id, RunID: id,
		Payload: []byte(`{"run":"` + id + `"}`)})
	if err != nil {
		return Ack{}, fmt.Errorf("admit %s: %w", id, err)
	}
	if res.Replayed {
		return Ack{}, fmt.Errorf("admit %s: replayed an earlier admission; the workload admits each run once", id)
	}
	return Ack{Op: Admit, RunID: id}, nil
}

// Missing returns the acknowledged writes snap does not hold: a run not
// there, a claim whose attempt is not there, a completion whose run is not
// completed.
func Missing(snap spec.Snapshot, acks []Ack) []Ack {
	runs := map[string]spec.Run{}
	for _, r := range snap.Runs {
		if r.Tenant == Tenant {
			runs[r.ID] = r
		}
	}
	type attempt struct {
		run string
		gen int64
	}
	attempts := map[attempt]bool{}
	for _, a := range snap.Attempts {
		if a.Tenant == Tenant {
			attempts[attempt{a.RunID, a.Generation}] = true
		}
	}
	var out []Ack
	for _, a := range acks {
		r, ok := runs[a.RunID]
		switch {
		case !ok,
			a.Op == Claim && !attempts[attempt{a.RunID, a.Generation}],
			a.Op == Complete && r.State != spec.RunCompleted:
			out = append(out, a)
		}
	}
	return out
}

// Violations are the invariants snap breaks.
func Violations(snap spec.Snapshot) []invariant.Violation { return invariant.Check(snap) }

// Tracker keeps the writes a store acknowledged across power losses and
// what the checks after them found.
type Tracker struct {
	acked []Ack // acknowledged and not found missing yet

	Acked      int      // writes acknowledged
	Lost       int      // acknowledged writes found missing
	LostChecks int      // checks that found some missing
	Examples   []string // the first missing ones, described
	Violations []string // broken invariants, described
}

// Ack records an acknowledged write.
func (t *Tracker) Ack(a Ack) {
	t.acked = append(t.acked, a)
	t.Acked++
}

// Check checks snap, taken after the event named after, against every write
// acknowledged so far. A write found missing is counted once: the workload
// goes on from what the store holds.
func (t *Tracker) Check(snap spec.Snapshot, after string) {
	for _, v := range Violations(snap) {
		t.Violations = append(t.Violations, after+": invariant "+v.String())
	}
	missing := Missing(snap, t.acked)
	if len(missing) == 0 {
		return
	}
	t.LostChecks++
	t.Lost += len(missing)
	gone := map[Ack]bool{}
	for _, m := range missing {
		gone[m] = true
		if len(t.Examples) < 5 {
			t.Examples = append(t.Examples, after+": the "+m.String())
		}
	}
	kept := t.acked[:0]
	for _, a := range t.acked {
		if !gone[a] {
			kept = append(kept, a)
		}
	}
	t.acked = kept
}

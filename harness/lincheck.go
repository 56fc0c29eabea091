package harness

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// OpSnapshot is the harness's own read operation: it returns every row of one
// tenant (or of all tenants) and is legal exactly when the model's state holds
// the same rows. Appended after the workers drain, it makes "the tables match
// a state some linearization reaches" part of the linearizability check.
const OpSnapshot spec.Op = "snapshot"

// SnapshotRequest is the Req of an OpSnapshot: the tenant whose rows it
// compares, or "" for all.
type SnapshotRequest struct{ Tenant string }

// Observed is what a client saw of one operation.
type Observed struct {
	Result model.Result
	// Unknown: the connection failed after COMMIT was sent. The operation has
	// no return in the history, and the model accepts it applied or not.
	Unknown bool
}

// PorcupineModel is the porcupine model of the contract, built from model/:
// Step is model.Observe (claims and reaps may take any eligible subset; an
// unavailable error changed nothing), an unknown outcome is model.Unknown
// (applied in any allowed way, or not at all), and OpSnapshot compares rows.
// Equal and Hash use State.Key, never ==. With partition set, the history is
// checked per tenant, which is sound because every operation but
// PurgeIdempotency reads and writes one tenant's rows only: Partition refuses
// to split a history that contains a purge.
func PorcupineModel(m model.Model, partition bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{m.Init()} },
		StepContext: func(ctx context.Context, state, input, output any) []any {
			if ctx.Err() != nil {
				return nil
			}
			s, op, out := state.(model.State), input.(model.Op), output.(Observed)
			if op.Kind == OpSnapshot {
				want := snapshotOf(m.Snapshot(s), op.Req.(SnapshotRequest).Tenant)
				if got, isSnap := out.Result.Value.(spec.Snapshot); isSnap && DiffSnapshots(want, got) == "" {
					return []any{s}
				}
				return nil
			}
			if out.Unknown {
				states := m.Unknown(s, op)
				next := make([]any, len(states))
				for i := range states {
					next[i] = states[i]
				}
				return next
			}
			next, ok := m.Observe(s, op, out.Result)
			if !ok {
				return nil
			}
			return []any{next}
		},
		Equal: func(a, b any) bool { return a.(model.State).Key() == b.(model.State).Key() },
		Hash: func(s any) uint64 {
			h := fnv.New64a()
			h.Write([]byte(s.(model.State).Key()))
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			op, out := input.(model.Op), output.(Observed)
			if op.Kind == OpSnapshot {
				return fmt.Sprintf("snapshot %q", op.Req.(SnapshotRequest).Tenant)
			}
			res := out.Result.String()
			if out.Unknown {
				res = "unknown outcome"
			}
			return fmt.Sprintf("@%d %s -> %s", op.Now, op, res)
		},
		DescribeState: func(state any) string { return describeState(m, state.(model.State)) },
	}
	if partition {
		nm.Partition = partitionByTenant
	}
	return nm.ToModel()
}

// partitionByTenant splits a history by the tenant each operation names; a
// history with a purge (which crosses tenants) stays whole.
func partitionByTenant(history []porcupine.Operation) [][]porcupine.Operation {
	byTenant := map[string][]porcupine.Operation{}
	for _, o := range history {
		op := o.Input.(model.Op)
		tenant, ok := TenantOf(op)
		if !ok {
			return [][]porcupine.Operation{history}
		}
		byTenant[tenant] = append(byTenant[tenant], o)
	}
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	out := make([][]porcupine.Operation, 0, len(tenants))
	for _, t := range tenants {
		out = append(out, byTenant[t])
	}
	return out
}

// TenantOf returns the one tenant whose rows op may read or write; false for
// an operation that crosses tenants (purge, an all-tenants snapshot).
func TenantOf(op model.Op) (string, bool) {
	switch r := op.Req.(type) {
	case spec.CreateRunRequest:
		return r.Tenant, true
	case spec.ClaimRequest:
		return r.Tenant, true
	case spec.RenewRequest:
		return r.Lease.Tenant, true
	case spec.CompleteRequest:
		return r.Lease.Tenant, true
	case spec.RetryRequest:
		return r.Lease.Tenant, true
	case spec.FailRequest:
		return r.Lease.Tenant, true
	case spec.CancelRequest:
		return r.Tenant, true
	case spec.ReleaseRequest:
		return r.Lease.Tenant, true
	case spec.ReapRequest:
		return r.Tenant, true
	case spec.ReplayRequest:
		return r.Tenant, true
	case spec.ReserveEffectRequest:
		return r.Lease.Tenant, true
	case spec.RecordEffectRequest:
		return r.Lease.Tenant, true
	case SnapshotRequest:
		return r.Tenant, r.Tenant != ""
	}
	return "", false
}

// snapshotOf keeps one tenant's rows ("" keeps all).
func snapshotOf(s spec.Snapshot, tenant string) spec.Snapshot {
	if tenant == "" {
		return s
	}
	return spec.Snapshot{
		Runs:        keep(s.Runs, func(r spec.Run) bool { return r.Tenant == tenant }),
		Events:      keep(s.Events, func(r spec.Event) bool { return r.Tenant == tenant }),
		Jobs:        keep(s.Jobs, func(r spec.Job) bool { return r.Tenant == tenant }),
		Attempts:    keep(s.Attempts, func(r spec.Attempt) bool { return r.Tenant == tenant }),
		Idempotency: keep(s.Idempotency, func(r spec.IdempotencyRecord) bool { return r.Tenant == tenant }),
		Effects:     keep(s.Effects, func(r spec.Effect) bool { return r.Tenant == tenant }),
	}
}

func keep[T any](rows []T, ok func(T) bool) []T {
	out := []T{}
	for _, r := range rows {
		if ok(r) {
			out = append(out, r)
		}
	}
	return out
}

// describeState summarizes a state for the visualization: each run's state,
// job state and generation.
func describeState(m model.Model, s model.State) string {
	snap := m.Snapshot(s)
	parts := make([]string, 0, len(snap.Jobs))
	for i, j := range snap.Jobs {
		run := snap.Runs[i]
		parts = append(parts, fmt.Sprintf("%s/%s:%s/%s g%d a%d", j.Tenant, j.RunID, run.State, j.State, j.Generation, j.Attempts))
	}
	if len(parts) == 0 {
		return "(empty)"
	}
	return strings.Join(parts, " ")
}

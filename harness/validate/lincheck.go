package validate

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/model"
)

// PorcupineModel is the porcupine model of the contract, built from model/:
// Step is model.Observe (claims and reaps may take any eligible subset; an
// unavailable error changed nothing; a snapshot must hold exactly the
// model's rows), and an unknown outcome is model.Unknown (applied in any
// allowed way, or not at all). Equal and Hash use State.Key, never ==. With
// partition set, the history is checked per tenant, which is sound because
// every operation whose request is tenant-scoped (spec.Request.TenantScope)
// reads and writes that tenant's rows only: Partition refuses to split a
// history that contains one that is not (a purge, an all-tenant snapshot).
func PorcupineModel(m model.Model, partition bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{m.Init()} },
		StepContext: func(ctx context.Context, state, input, output any) []any {
			if ctx.Err() != nil {
				return nil
			}
			s, op, out := state.(model.State), input.(model.Op), output.(history.Observed)
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
			op, out := input.(model.Op), output.(history.Observed)
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
// history with an operation that crosses tenants stays whole.
func partitionByTenant(history []porcupine.Operation) [][]porcupine.Operation {
	byTenant := map[string][]porcupine.Operation{}
	for _, o := range history {
		tenant, scoped := o.Input.(model.Op).Req.TenantScope()
		if !scoped {
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

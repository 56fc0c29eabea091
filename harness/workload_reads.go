package harness

import (
	"context"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// read is an API client's read of the table: a run's row, its job, events,
// attempts or effects (of a run it knows of, or one no client made), or a
// page of the tenant's runs where the store lists them. The history judges
// it like any other operation: its answer must fit the order the writes
// around it took.
func (c *client) read(ctx context.Context, tenant string) error {
	id := "nobody"
	if ref, ok := c.runs.pick(c.r); ok {
		tenant, id = ref.tenant, ref.id
	}
	reqs := runReads(tenant, id)
	if spec.OperationOf(spec.ListRunsRequest{}).Supports(c.Store) {
		reqs = append(reqs, spec.ListRunsRequest{Tenant: tenant, Limit: 1 + c.r.IntN(3)})
	}
	_, err := c.do(ctx, model.Op{Req: reqs[c.r.IntN(len(reqs))]})
	return err
}

// runReads are the reads of one run's rows through the operation table,
// the ones rapid's read action and the workload's client both draw from.
func runReads(tenant, id string) []spec.Request {
	return []spec.Request{
		spec.GetRunRequest{Tenant: tenant, RunID: id},
		spec.GetJobRequest{Tenant: tenant, RunID: id},
		spec.EventsRequest{Tenant: tenant, RunID: id},
		spec.AttemptsRequest{Tenant: tenant, RunID: id},
		spec.EffectsRequest{Tenant: tenant, RunID: id},
	}
}

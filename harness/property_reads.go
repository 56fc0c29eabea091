package harness

import (
	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// readActions are the reads of the operation table, compared with the
// model's like every write (the check after every step reads the whole
// store through Snapshot directly; these go through the table's rows, with
// their validation): a run's row, its job, events, attempts or effects, of
// a run the tenant has or not, or one tenant's snapshot.
func (m *machine) readActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"read": func(t *rapid.T) {
			tenant := m.tenant(t)
			id := m.runID(t, tenant)
			reqs := append(runReads(tenant, id), spec.SnapshotRequest{Tenant: tenant})
			m.do(t, model.Op{Req: rapid.SampledFrom(reqs).Draw(t, "read")})
		},
	}
}

package harness

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

var linPayloads = []string{`{"n":1,"tags":["a","b"]}`, `{ "tags" : ["a","b"], "n" : 1.0 }`, `{"n":2,"tags":["a","b"]}`}

// apiStep is one operation of an API client: mostly admissions (with keys
// reused so that replays and conflicts happen; one in five scheduled, with
// a delay from a short list, so that a retry repeats its schedule or
// conflicts with another; some in bulk, and, on a store that admits in the
// application's transaction, one in four in such a transaction), and cancels, replays, reaps, purges of
// idempotency records and of retired runs, reads, and clock moves.
func (c *client) apiStep(ctx context.Context) error {
	r := c.r
	tenant := c.w.Tenants[r.IntN(len(c.w.Tenants))]
	var op model.Op
	switch p := r.IntN(100); {
	case p < 45 && r.IntN(6) == 0 && spec.OperationOf(spec.CreateRunsRequest{}).Supports(c.Store):
		return c.createRuns(ctx, tenant)
	case p < 45 && spec.OperationOf(spec.CreateRunTxRequest{}).Supports(c.Store) && r.IntN(4) == 0:
		// In the application's transaction, which rolls back one time in
		// three.
		op = model.Op{Req: spec.CreateRunTxRequest{Request: c.newCreate(tenant), Rollback: r.IntN(3) == 0}}
	case p < 45:
		op = model.Op{Req: c.newCreate(tenant)}
	case p < 60:
		book := c.runs
		if r.IntN(2) == 0 {
			book = c.active
		}
		ref, ok := book.pick(r)
		if !ok {
			return nil
		}
		op = model.Op{Req: spec.CancelRequest{Tenant: ref.tenant, RunID: ref.id}}
	case p < 67:
		ref, ok := c.runs.pick(r)
		if !ok {
			return nil
		}
		id := fmt.Sprintf("%s-%d", c.Name, c.created)
		c.created++
		op = model.Op{Req: spec.ReplayRequest{Tenant: ref.tenant, RunID: ref.id, NewRunID: id, Actor: c.Name}}
	case p < 77:
		op = model.Op{Req: spec.ReapRequest{Tenant: tenant, Limit: 3}}
	case p < 81 && c.w.Purge:
		op = model.Op{Req: spec.PurgeRequest{Limit: 5}}
	case p < 85:
		op = model.Op{Req: spec.PurgeRunsRequest{Tenant: tenant, Limit: 3}}
	case p < 93:
		return c.relay(ctx, tenant)
	case p < 96:
		return c.read(ctx, tenant)
	default:
		return c.advance()
	}
	res, err := c.do(ctx, op)
	if err != nil {
		return err
	}
	switch v := res.Value.(type) {
	case spec.CreateRunResult:
		if tx, inTx := op.Req.(spec.CreateRunTxRequest); !v.Replayed && (!inTx || !tx.Rollback) {
			c.runs.add(v.Run.Tenant, v.Run.ID)
		}
	case spec.Run:
		if op.Kind() == spec.OpReplay {
			c.runs.add(v.Tenant, v.ID)
		}
	}
	return nil
}

// newCreate is an admission of tenant under one of twelve keys (so that
// replays and conflicts happen), with a run id of its own; one in five
// scheduled, one in four with an outbox message.
func (c *client) newCreate(tenant string) spec.CreateRunRequest {
	r := c.r
	id := fmt.Sprintf("%s-%d", c.Name, c.created)
	c.created++
	create := spec.CreateRunRequest{Tenant: tenant, Operation: "work",
		IdempotencyKey: fmt.Sprintf("k%d", r.IntN(12)), RunID: id, Payload: []byte(linPayloads[r.IntN(len(linPayloads))])}
	if r.IntN(5) == 0 {
		create.DelayMs = []int64{5, 20, 60}[r.IntN(3)]
	}
	if r.IntN(4) == 0 {
		create.Outbox = []spec.Message{{Subject: "orders.created", Payload: []byte(fmt.Sprintf(`{"key":%q}`, create.IdempotencyKey))}}
	}
	return create
}

// createRuns is a bulk admission of 1–4 members of one tenant (so that the
// history can be checked per tenant), with keys from apiStep's twelve, so
// that members replay or conflict with earlier admissions and with each
// other, and now and then a member that proposes an earlier member's run id
// under another key (already_exists).
func (c *client) createRuns(ctx context.Context, tenant string) error {
	r := c.r
	var reqs []spec.CreateRunRequest
	for range 1 + r.IntN(4) {
		if len(reqs) > 0 && r.IntN(5) == 0 {
			dup := reqs[r.IntN(len(reqs))]
			dup.IdempotencyKey = fmt.Sprintf("k%d", r.IntN(12))
			reqs = append(reqs, dup)
			continue
		}
		id := fmt.Sprintf("%s-%d", c.Name, c.created)
		c.created++
		m := spec.CreateRunRequest{Tenant: tenant, Operation: "work",
			IdempotencyKey: fmt.Sprintf("k%d", r.IntN(12)), RunID: id, Payload: []byte(linPayloads[r.IntN(len(linPayloads))])}
		if r.IntN(5) == 0 {
			m.DelayMs = []int64{5, 20, 60}[r.IntN(3)]
		}
		if r.IntN(4) == 0 {
			m.Outbox = []spec.Message{{Subject: "orders.created", Payload: []byte(fmt.Sprintf(`{"key":%q}`, m.IdempotencyKey))}}
		}
		reqs = append(reqs, m)
	}
	res, err := c.do(ctx, model.Op{Req: spec.CreateRunsRequest{Requests: reqs}})
	if err != nil {
		return err
	}
	outs, _ := res.Value.([]spec.CreateOutcome)
	for _, o := range outs {
		if o.Err == nil && !o.Result.Replayed {
			c.runs.add(o.Result.Run.Tenant, o.Result.Run.ID)
		}
	}
	return nil
}

// advance moves the shared clock forward by 1–25 ms.
func (c *client) advance() error {
	d := 1 + c.r.Int64N(25)
	now, err := c.shared.Advance(d)
	if err != nil {
		return err
	}
	c.Rec.Note(c.ID, fmt.Sprintf("%s: clock +%d ms -> %d", c.Name, d, now))
	return nil
}

// workerStep is one operation of a worker: claim, or act on a lease it holds
// (renew, the effect protocol, complete, retry, fail, release, or nothing —
// a pause that lets the lease expire), or, now and then, a write with a lease
// it no longer holds.
func (c *client) workerStep(ctx context.Context) error {
	r := c.r
	if len(c.held) == 0 || r.IntN(100) < 25 {
		tenant := c.w.Tenants[r.IntN(len(c.w.Tenants))]
		res, err := c.do(ctx, model.Op{Req: spec.ClaimRequest{Tenant: tenant, Worker: c.Name,
			LeaseMs: 10 + r.Int64N(50), Limit: 1 + r.IntN(2)}})
		if err == nil {
			if leases, ok := res.Value.([]spec.Lease); ok {
				c.held = append(c.held, leases...)
				for _, l := range leases {
					c.active.add(l.Tenant, l.RunID)
				}
			}
		}
		return err
	}
	stale := len(c.old) > 0 && r.IntN(100) < 8
	var l spec.Lease
	i := -1
	if stale {
		l = c.old[r.IntN(len(c.old))]
	} else {
		i = r.IntN(len(c.held))
		l = c.held[i]
	}
	ref := l.Ref()
	var op model.Op
	switch p := r.IntN(100); {
	case p < 15:
		op = model.Op{Req: spec.RenewRequest{Lease: ref, LeaseMs: 10 + r.Int64N(50)}}
	case p < 35:
		return c.effect(ctx, l, i)
	case p < 60 && !stale && len(c.held) > 1 && r.IntN(3) == 0 && spec.OperationOf(spec.CompleteBatchRequest{}).Supports(c.Store):
		return c.completeBatch(ctx)
	case p < 60:
		op = model.Op{Req: spec.CompleteRequest{Lease: ref, Result: []byte(`{"ok":true}`), Outbox: c.messages(l)}}
	case p < 75:
		op = model.Op{Jitter: r.Int64N(c.w.Config.Backoff.JitterMs + 1),
			Req: spec.RetryRequest{Lease: ref, ErrorCode: "transient", RetryAfterMs: r.Int64N(2) * r.Int64N(30)}}
	case p < 80:
		op = model.Op{Req: spec.FailRequest{Lease: ref, ErrorCode: "bad_input"}}
	case p < 85:
		op = model.Op{Req: spec.ReleaseRequest{Lease: ref}}
	default:
		return nil // a pause: the lease may expire meanwhile
	}
	res, err := c.do(ctx, op)
	if err != nil || i < 0 {
		return err
	}
	if lease, renewed := res.Value.(spec.Lease); renewed {
		c.held[i] = lease
	} else {
		c.drop(i)
	}
	return nil
}

// completeBatch completes every lease the worker holds in one batch (with,
// now and then, one it no longer holds), as the runtime's batched completion
// does: the members it holds are either completed or refused, so all of
// them move to the stale pile.
//
// A batch holds one tenant's leases only: a batch across tenants is legal,
// but it would keep the history from being checked per tenant.
func (c *client) completeBatch(ctx context.Context) error {
	tenant := c.held[0].Tenant
	var reqs []spec.CompleteRequest
	var kept, sent []spec.Lease
	for _, l := range c.held {
		if l.Tenant != tenant {
			kept = append(kept, l)
			continue
		}
		sent = append(sent, l)
		reqs = append(reqs, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"batched":true}`), Outbox: c.messages(l)})
	}
	if n := len(c.old); n > 0 && c.old[n-1].Tenant == tenant && c.r.IntN(4) == 0 {
		reqs = append(reqs, spec.CompleteRequest{Lease: c.old[n-1].Ref()})
	}
	res, err := c.do(ctx, model.Op{Req: spec.CompleteBatchRequest{Requests: reqs}})
	if err != nil {
		return err
	}
	if res.Err == nil || res.Err.Code != spec.CodeUnavailable {
		c.old = append(c.old, sent...)
		c.held = kept
	}
	return nil
}

// messages returns, one time in three, the outbox messages a completion of
// l writes: they name its generation, so a stale one's would be told apart.
func (c *client) messages(l spec.Lease) []spec.Message {
	if c.r.IntN(3) != 0 {
		return nil
	}
	return []spec.Message{{Subject: "orders.done", Payload: []byte(fmt.Sprintf(`{"generation":%d}`, l.Generation))}}
}

// relay is one round of an outbox relay: claim some messages (of the
// tenant, or of every tenant when the history is checked whole), then,
// usually, mark them delivered; otherwise the claim expires (a relay that
// died between its publish and its mark) and the messages are claimed
// again.
func (c *client) relay(ctx context.Context, tenant string) error {
	claim := spec.ClaimOutboxRequest{Tenant: tenant, Relay: c.Name, LeaseMs: 5 + c.r.Int64N(30), Limit: 1 + c.r.IntN(3)}
	if c.w.Purge && c.r.IntN(2) == 0 {
		claim.Tenant = ""
	}
	res, err := c.do(ctx, model.Op{Req: claim})
	if err != nil || c.r.IntN(5) == 0 {
		return err
	}
	return c.mark(ctx, res)
}

// mark marks delivered the messages a claim returned, if any.
func (c *client) mark(ctx context.Context, claimed model.Result) error {
	msgs, _ := claimed.Value.([]spec.OutboxMessage)
	if len(msgs) == 0 {
		return nil
	}
	keys := make([]spec.OutboxKey, len(msgs))
	for i, m := range msgs {
		keys[i] = m.Key()
	}
	_, err := c.do(ctx, model.Op{Req: spec.MarkDeliveredRequest{Messages: keys}})
	return err
}

// drop moves held lease i to the stale pile.
func (c *client) drop(i int) {
	c.old = append(c.old, c.held[i])
	c.held = append(c.held[:i], c.held[i+1:]...)
}

// effect runs the effect-ledger protocol for one external call of lease l:
// reserve; on proceed call the provider (fenced by generation) and record the
// outcome — sometimes as unknown, as if the provider's reply was lost; on
// reconcile ask the provider and reconcile; on done do nothing.
func (c *client) effect(ctx context.Context, l spec.Lease, held int) error {
	ref := l.Ref()
	step, key := "charge", "charge-"+l.RunID
	res, err := c.do(ctx, model.Op{Req: spec.ReserveEffectRequest{Lease: ref, Step: step, Key: key}})
	if err != nil {
		return err
	}
	if res.Err != nil {
		if held >= 0 && res.Err.Code != spec.CodeUnavailable {
			c.drop(held)
		}
		return nil
	}
	providerKey := l.Tenant + "/" + l.RunID + "/" + step + "/" + key
	record := spec.RecordEffectRequest{Lease: ref, Step: step, Key: key}
	reconcile := false
	switch res.Value.(spec.EffectReservation).Decision {
	case spec.DecisionDone:
		return nil
	case spec.DecisionProceed:
		switch {
		case !c.provider.Call(providerKey, l.Generation):
			record.State = spec.EffectFailed // fenced off: definitely not applied
		case c.r.IntN(100) < 15:
			record.State = spec.EffectUnknown
		default:
			record.State, record.ProviderRef = spec.EffectSucceeded, fmt.Sprintf("ch_%s_%d", l.RunID, l.Generation)
		}
	case spec.DecisionReconcile:
		reconcile, record.State = true, spec.EffectFailed
		if c.provider.Status(providerKey) {
			record.State, record.ProviderRef = spec.EffectSucceeded, "reconciled"
		}
	}
	var req spec.Request = record
	if reconcile {
		req = spec.ReconcileEffectRequest(record)
	}
	_, err = c.do(ctx, model.Op{Req: req})
	return err
}

// drain finishes every run: it moves the clock past every lease and backoff,
// reaps what cannot be claimed, claims and completes the rest, and relays
// every outbox message, until every run in the store is terminal and every
// message delivered. It injects no faults. Runs it cannot finish
// in 20 rounds are left for the accounting to report as lost.
func (c *client) drain(ctx context.Context) error {
	cfg := c.w.Config
	step := cfg.MaxLeaseMs + cfg.Backoff.CapMs + cfg.Backoff.JitterMs + cfg.Backoff.RetryAfterCapMs + 1
	for round := 0; round < 20; round++ {
		now, err := c.shared.Advance(step)
		if err != nil {
			return err
		}
		c.Rec.Note(c.ID, fmt.Sprintf("drain: clock +%d ms -> %d", step, now))
		for _, tenant := range c.w.Tenants {
			if _, err := c.do(ctx, model.Op{Req: spec.ReapRequest{Tenant: tenant, Limit: spec.MaxBatch}}); err != nil {
				return err
			}
			res, err := c.do(ctx, model.Op{Req: spec.ClaimRequest{Tenant: tenant, Worker: c.Name,
				LeaseMs: cfg.MaxLeaseMs, Limit: spec.MaxBatch}})
			if err != nil {
				return err
			}
			leases, _ := res.Value.([]spec.Lease)
			for _, l := range leases {
				if _, err := c.do(ctx, model.Op{Req: spec.CompleteRequest{Lease: l.Ref()}}); err != nil {
					return err
				}
			}
		}
		for _, tenant := range c.w.Tenants {
			for {
				res, err := c.do(ctx, model.Op{Req: spec.ClaimOutboxRequest{Tenant: tenant, Relay: c.Name, LeaseMs: cfg.MaxLeaseMs, Limit: spec.MaxBatch}})
				if err != nil {
					return err
				}
				if msgs, _ := res.Value.([]spec.OutboxMessage); len(msgs) == 0 {
					break
				}
				if err := c.mark(ctx, res); err != nil {
					return err
				}
			}
		}
		snap, err := readSnapshot(ctx, c.Store)
		if err != nil {
			return err
		}
		open := 0
		for _, r := range snap.Runs {
			if !r.State.Terminal() {
				open++
			}
		}
		for _, m := range snap.Outbox {
			if m.State != spec.OutboxDelivered {
				open++
			}
		}
		if open == 0 {
			return nil
		}
	}
	c.Rec.Note(c.ID, "drain: runs still not terminal after 20 rounds")
	return nil
}

package model

import (
	"cmp"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// The transactional outbox. A run's messages live in its row (runRow.outbox,
// by seq), so a message can only be written where the run is: by CreateRun
// with the new run, and by Complete under the lease guard, in the same step.
// ClaimOutbox and MarkDelivered change nothing but the messages' claim and
// delivery; PurgeRuns deletes a run's messages with it, and only a run whose
// messages are all delivered is retired.

// writeOutbox appends msgs to the row as pending messages written at now by
// generation gen (0: the admission).
func (r *runRow) writeOutbox(msgs []spec.OutgoingMessage, gen, now int64) {
	if len(msgs) == 0 {
		return
	}
	out := make([]spec.OutboxMessage, 0, len(r.outbox)+len(msgs))
	out = append(out, r.outbox...)
	for _, m := range msgs {
		seq := int64(len(out) + 1)
		out = append(out, spec.OutboxMessage{
			Tenant: r.run.Tenant, RunID: r.run.ID, Seq: seq, ID: spec.OutboxID(r.run.Tenant, r.run.ID, r.run.CreatedAt, seq),
			Subject: m.Subject, Payload: m.Payload, Generation: gen, CreatedAt: now, State: spec.OutboxPending,
		})
	}
	r.outbox = out
}

// pendingOutbox reports whether the run has a message not yet delivered.
func (r *runRow) pendingOutbox() bool {
	return slices.ContainsFunc(r.outbox, func(m spec.OutboxMessage) bool { return m.State == spec.OutboxPending })
}

// outboxOrder is the claim order: (created_at, tenant, run id, seq).
func outboxOrder(a, b spec.OutboxMessage) int {
	return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.Tenant, b.Tenant),
		strings.Compare(a.RunID, b.RunID), cmp.Compare(a.Seq, b.Seq))
}

// claimableMessages returns the messages a claim at now may take (of tenant,
// or of every tenant for ""), in claim order.
func (m Model) claimableMessages(s State, tenant string, now int64) []spec.OutboxMessage {
	var out []spec.OutboxMessage
	for _, r := range s.runs {
		if tenant != "" && r.run.Tenant != tenant {
			continue
		}
		for _, msg := range r.outbox {
			if spec.OutboxClaimable(msg, now) || m.bug == bugClaimOutboxTakesClaimed && msg.State == spec.OutboxPending {
				out = append(out, msg)
			}
		}
	}
	slices.SortFunc(out, outboxOrder)
	return out
}

// claimOutbox is ClaimOutbox, sequentially: the first Limit claimable
// messages.
func (m Model) claimOutbox(s State, now int64, req spec.ClaimOutboxRequest) (State, Result) {
	expires, err := m.Config.CheckClaimOutbox(req, now)
	if err != nil {
		return s, failed(err)
	}
	msgs := m.claimableMessages(s, req.Tenant, now)
	msgs = msgs[:min(len(msgs), req.Limit)]
	next, claimed := claimMessages(s, req.Relay, expires, msgs)
	return next, ok(claimed)
}

// claimMessages claims each of msgs for relay until expires, in order, and
// returns the rows as claimed. The caller has checked that each is
// claimable.
func claimMessages(s State, relay string, expires int64, msgs []spec.OutboxMessage) (State, []spec.OutboxMessage) {
	claimed := make([]spec.OutboxMessage, 0, len(msgs))
	for _, msg := range msgs {
		r := s.row(msg.Tenant, msg.RunID).clone()
		msg.Relay, msg.ClaimExpiresAt = relay, expires
		msg.Claims++
		r.putMessage(msg)
		s = s.put(r)
		claimed = append(claimed, msg)
	}
	return s, claimed
}

// markDelivered is MarkDelivered: each named pending message becomes
// delivered at now, its claim cleared; the result is how many.
func (m Model) markDelivered(s State, now int64, req spec.MarkDeliveredRequest) (State, Result) {
	if err := m.Config.CheckMarkDelivered(req, now); err != nil {
		return s, failed(err)
	}
	marked := 0
	for _, k := range req.Messages {
		old := s.row(k.Tenant, k.RunID)
		if old == nil {
			continue
		}
		msg, found := old.message(k.Seq)
		if !found || msg.State != spec.OutboxPending {
			continue
		}
		r := old.clone()
		msg.State, msg.DeliveredAt, msg.Relay, msg.ClaimExpiresAt = spec.OutboxDelivered, now, "", 0
		r.putMessage(msg)
		s = s.put(r)
		marked++
	}
	return s, ok(marked)
}

// observeClaimOutbox checks an observed successful claim of messages: any
// subset of the claimable ones, of at most Limit, in any order (SKIP
// LOCKED), each exactly as claiming it makes it. Step has accepted op.
func (m Model) observeClaimOutbox(s State, op Op, value any) (State, bool) {
	req := op.Req.(spec.ClaimOutboxRequest)
	got, isList := value.([]spec.OutboxMessage)
	if value != nil && !isList || len(got) > req.Limit {
		return s, false
	}
	claimable := m.claimableMessages(s, req.Tenant, op.Now)
	pick := make([]spec.OutboxMessage, 0, len(got))
	for _, g := range got {
		i := slices.IndexFunc(claimable, func(c spec.OutboxMessage) bool { return c.Key() == g.Key() })
		if i < 0 || slices.ContainsFunc(pick, func(p spec.OutboxMessage) bool { return p.Key() == g.Key() }) {
			return s, false
		}
		pick = append(pick, claimable[i])
	}
	expires, _ := m.Config.CheckClaimOutbox(req, op.Now) // Step accepted op, so no error
	next, claimed := claimMessages(s, req.Relay, expires, pick)
	if len(got) > 0 && !slices.Equal(claimed, got) {
		return s, false
	}
	return next, true
}

// claimOutboxOutcomes returns one outcome per non-empty subset (of at most
// Limit) of the claimable messages, each in claim order.
func (m Model) claimOutboxOutcomes(s State, op Op) []Outcome {
	req := op.Req.(spec.ClaimOutboxRequest)
	expires, _ := m.Config.CheckClaimOutbox(req, op.Now)
	var out []Outcome
	forEachSubset(m.claimableMessages(s, req.Tenant, op.Now), req.Limit, func(pick []spec.OutboxMessage) {
		st, claimed := claimMessages(s, req.Relay, expires, pick)
		out = append(out, Outcome{State: st, Result: ok(claimed)})
	})
	return out
}

// message returns the run's outbox message seq.
func (r *runRow) message(seq int64) (spec.OutboxMessage, bool) {
	i, found := slices.BinarySearchFunc(r.outbox, seq, func(m spec.OutboxMessage, q int64) int { return cmp.Compare(m.Seq, q) })
	if !found {
		return spec.OutboxMessage{}, false
	}
	return r.outbox[i], true
}

// putMessage replaces the run's message of msg.Seq, copying the slice.
func (r *runRow) putMessage(msg spec.OutboxMessage) {
	i, found := slices.BinarySearchFunc(r.outbox, msg.Seq, func(m spec.OutboxMessage, q int64) int { return cmp.Compare(m.Seq, q) })
	r.outbox = putAt(r.outbox, i, found, msg)
}

// checkOutbox checks invariants 14 and 15 for a run's messages (Check).
func checkOutbox(v *Violations, r *runRow) {
	run := r.run
	name := run.Tenant + "/" + run.ID
	completedBy := int64(-1) // the generation whose completion ended the run
	var completedAt int64
	if run.State == spec.RunCompleted && len(r.events) > 0 {
		last := r.events[len(r.events)-1]
		for g := int64(0); g <= r.job.Generation; g++ {
			if last.Payload == spec.CompletedPayload(g) {
				completedBy, completedAt = g, last.At
			}
		}
	}
	for k, m := range r.outbox {
		if m.Seq != int64(k+1) {
			v.add("14", "run %s: outbox message %d has seq %d (seqs are 1..n)", name, k+1, m.Seq)
		}
		if m.Tenant != run.Tenant || m.RunID != run.ID {
			v.add("13", "run %s: outbox message %d belongs to %s/%s", name, m.Seq, m.Tenant, m.RunID)
		}
		if want := spec.OutboxID(run.Tenant, run.ID, run.CreatedAt, m.Seq); m.ID != want {
			v.add("14", "run %s: outbox message %d has id %q, want %q", name, m.Seq, m.ID, want)
		}
		switch m.State {
		case spec.OutboxPending:
			if m.DeliveredAt != 0 {
				v.add("14", "run %s: pending outbox message %d has a delivery time %d", name, m.Seq, m.DeliveredAt)
			}
		case spec.OutboxDelivered:
			if m.DeliveredAt < m.CreatedAt || m.Relay != "" || m.ClaimExpiresAt != 0 || m.Claims < 0 {
				v.add("14", "run %s: delivered outbox message %d: delivered at %d (created %d), claim %q until %d",
					name, m.Seq, m.DeliveredAt, m.CreatedAt, m.Relay, m.ClaimExpiresAt)
			}
		default:
			v.add("14", "run %s: outbox message %d has state %q", name, m.Seq, m.State)
		}
		if (m.Relay == "") != (m.ClaimExpiresAt == 0) || m.Relay != "" && m.Claims < 1 {
			v.add("14", "run %s: outbox message %d has claim %q until %d after %d claims", name, m.Seq, m.Relay, m.ClaimExpiresAt, m.Claims)
		}
		// 15: a message is the admission's or the completing generation's.
		switch {
		case m.Generation == 0 && m.CreatedAt != run.CreatedAt:
			v.add("15", "run %s: outbox message %d of the admission written at %d, the run was admitted at %d", name, m.Seq, m.CreatedAt, run.CreatedAt)
		case m.Generation > 0 && (m.Generation != completedBy || m.CreatedAt != completedAt):
			v.add("15", "run %s (%s): outbox message %d was written by generation %d at %d, but the run was not completed by it then (completed by %d at %d)",
				name, run.State, m.Seq, m.Generation, m.CreatedAt, completedBy, completedAt)
		}
		if k > 0 && r.outbox[k-1].Generation > m.Generation {
			v.add("15", "run %s: outbox message %d of generation %d follows one of generation %d", name, m.Seq, m.Generation, r.outbox[k-1].Generation)
		}
	}
}

// checkOutboxStep checks how op changed a run's messages (CheckStep): only
// a completion appends them (at the lease's generation, checked by invariant
// 15 on the state after), only ClaimOutbox and MarkDelivered change a
// message, and each changes only what it may; a message's content never
// changes, and a delivered one never changes at all.
func checkOutboxStep(v *Violations, op Op, name string, p, n *runRow) {
	kind := op.Kind()
	if len(n.outbox) < len(p.outbox) {
		v.add("14", "run %s: %s deleted outbox messages of a run it kept", name, kind)
		return
	}
	if len(n.outbox) > len(p.outbox) && kind != spec.OpComplete && kind != spec.OpCompleteBatch {
		v.add("14", "run %s: %s wrote %d outbox messages (only a completion, and the admission of a new run, write them)", name, kind, len(n.outbox)-len(p.outbox))
	}
	if kind == spec.OpClaimOutbox || kind == spec.OpMarkDelivered {
		if p.run != n.run || p.job != n.job || !slices.Equal(p.events, n.events) || !slices.Equal(p.attempts, n.attempts) || !slices.Equal(p.effects, n.effects) {
			v.add("14", "run %s: %s changed the run's other rows (it may only change outbox messages)", name, kind)
		}
	}
	for i, a := range p.outbox {
		b := n.outbox[i]
		if a == b {
			continue
		}
		if a.Seq != b.Seq || a.ID != b.ID || a.Subject != b.Subject || a.Payload != b.Payload || a.Generation != b.Generation || a.CreatedAt != b.CreatedAt {
			v.add("14", "run %s: %s rewrote outbox message %d", name, kind, a.Seq)
		}
		if a.State == spec.OutboxDelivered {
			v.add("14", "run %s: %s changed delivered outbox message %d", name, kind, a.Seq)
		}
		switch kind {
		case spec.OpClaimOutbox:
			req := op.Req.(spec.ClaimOutboxRequest)
			if !spec.OutboxClaimable(a, op.Now) || req.Tenant != "" && req.Tenant != a.Tenant {
				v.add("14", "run %s: claim_outbox at %d took message %d, which was not claimable (claimed by %q until %d)", name, op.Now, a.Seq, a.Relay, a.ClaimExpiresAt)
			}
			if b.State != spec.OutboxPending || b.Relay != req.Relay || b.ClaimExpiresAt != op.Now+req.LeaseMs || b.Claims != a.Claims+1 {
				v.add("14", "run %s: claim_outbox left message %d %s by %q until %d after %d claims (want claimed by %q until %d, claim %d)",
					name, a.Seq, b.State, b.Relay, b.ClaimExpiresAt, b.Claims, req.Relay, op.Now+req.LeaseMs, a.Claims+1)
			}
		case spec.OpMarkDelivered:
			named := slices.Contains(op.Req.(spec.MarkDeliveredRequest).Messages, a.Key())
			if !named || b.State != spec.OutboxDelivered || b.DeliveredAt != op.Now || b.Claims != a.Claims {
				v.add("14", "run %s: mark_delivered changed message %d to %s at %d (named %v; want delivered at %d)", name, a.Seq, b.State, b.DeliveredAt, named, op.Now)
			}
		default:
			v.add("14", "run %s: %s changed outbox message %d (only claim_outbox and mark_delivered do)", name, kind, a.Seq)
		}
	}
}

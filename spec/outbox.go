package spec

import (
	"strconv"
	"strings"
)

// The transactional outbox (SPEC.md, Outbox). A completion, and an
// admission that asks for it, writes messages in its own transaction, under
// its own guard; a relay takes pending messages (ClaimOutbox), publishes
// them to a broker with OutboxMessage.ID as the broker's deduplication id,
// and marks them delivered (MarkDelivered).

// Outbox limits. Inputs past them are CodeInvalidArgument.
const (
	// MaxOutboxMessages bounds the messages of one request (a create, a
	// completion, a batch member).
	MaxOutboxMessages = 16
	// MaxSubjectBytes bounds a message's subject.
	MaxSubjectBytes = 255
)

// Message is one outbox message a request asks to write: a subject (NATS
// syntax: tokens of [A-Za-z0-9_-] separated by dots, no wildcards) and a
// JSON payload, stored in RFC 8785 canonical form.
type Message struct {
	Subject string `json:"subject"`
	Payload []byte `json:"payload"`
}

// OutboxState is the state of an outbox message.
type OutboxState string

const (
	// OutboxPending: written, not yet published (or published but not yet
	// marked: a relay that died between its publish and its mark).
	OutboxPending OutboxState = "pending"
	// OutboxDelivered: a relay's publish was acknowledged by the broker;
	// never changes again.
	OutboxDelivered OutboxState = "delivered"
)

// OutboxMessage is one row of the outbox, keyed by (tenant, run id, seq):
// seq counts a run's messages from 1 in the order they were written (the
// admission's first, then the completion's).
type OutboxMessage struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	Seq    int64  `json:"seq"`
	// ID is the message's deduplication id (NATS's Nats-Msg-Id), OutboxID
	// of the row.
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Payload string `json:"payload"` // canonical JSON
	// Generation is the generation of the lease whose completion wrote the
	// message, 0 for a message of the admission.
	Generation int64       `json:"generation"`
	CreatedAt  int64       `json:"created_at"`
	State      OutboxState `json:"state"`
	// Relay and ClaimExpiresAt are the current claim of a pending message
	// ("" and 0 when it was never claimed; a claim that expired stays until
	// the next one replaces it). A delivered message has neither.
	Relay          string `json:"relay"`
	ClaimExpiresAt int64  `json:"claim_expires_at"`
	// Claims counts the claims that took the message: above 1, a relay
	// publishes it again (the broker's deduplication drops the repeat).
	Claims      int   `json:"claims"`
	DeliveredAt int64 `json:"delivered_at"` // 0 while pending
}

// Key returns the row's identity.
func (m OutboxMessage) Key() OutboxKey {
	return OutboxKey{Tenant: m.Tenant, RunID: m.RunID, Seq: m.Seq}
}

// OutboxKey names one outbox message.
type OutboxKey struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	Seq    int64  `json:"seq"`
}

// OutboxID is the deduplication id of message seq of run (tenant, runID)
// created at runCreatedAt: "tenant/run_id/created_at/seq". It is fixed when
// the message is written and the same on every publish of it, so a
// republish within the broker's duplicate window is dropped. The run's
// creation time keeps it unique when a run id is used again after PurgeRuns
// deleted the first run (a later admission, so a later time).
func OutboxID(tenant, runID string, runCreatedAt, seq int64) string {
	return tenant + "/" + runID + "/" + strconv.FormatInt(runCreatedAt, 10) + "/" + strconv.FormatInt(seq, 10)
}

// OutgoingMessage is a validated Message: its subject and canonical payload.
type OutgoingMessage struct {
	Subject string
	Payload string
}

// NormalizeOutbox validates the messages of one request and returns them
// with canonical payloads, in order: at most MaxOutboxMessages, each with a
// valid subject (CheckSubject) and a JSON payload within MaxPayloadBytes.
func NormalizeOutbox(msgs []Message) ([]OutgoingMessage, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if len(msgs) > MaxOutboxMessages {
		return nil, Errorf(CodeInvalidArgument, "%d outbox messages; the limit is %d per request", len(msgs), MaxOutboxMessages)
	}
	out := make([]OutgoingMessage, len(msgs))
	for i, m := range msgs {
		if err := CheckSubject(m.Subject); err != nil {
			return nil, Errorf(CodeInvalidArgument, "outbox message %d: %s", i, err.(*Error).Message)
		}
		p, err := Canonicalize(m.Payload)
		if err != nil {
			return nil, &Error{Code: CodeInvalidArgument, Message: "outbox message " + strconv.Itoa(i) + ": " + err.(*Error).Message, Err: err.(*Error).Err}
		}
		out[i] = OutgoingMessage{Subject: m.Subject, Payload: p}
	}
	return out, nil
}

// outboxFingerprint is the canonical JSON array of the messages, for the
// fingerprint: [{"payload":…,"subject":…}, …].
func outboxFingerprint(msgs []OutgoingMessage) string {
	if len(msgs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"payload":`)
		b.WriteString(m.Payload)
		b.WriteString(`,"subject":`)
		b.Write(appendJSONString(nil, m.Subject))
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.String()
}

// CheckSubject checks a message subject: 1..MaxSubjectBytes bytes of
// dot-separated tokens, each one or more of [A-Za-z0-9_-] (so no empty
// token and no wildcard: a publish needs a literal subject).
func CheckSubject(s string) error {
	if s == "" {
		return Errorf(CodeInvalidArgument, "subject is empty")
	}
	if len(s) > MaxSubjectBytes {
		return Errorf(CodeInvalidArgument, "subject is %d bytes; the limit is %d", len(s), MaxSubjectBytes)
	}
	for i, tok := range strings.Split(s, ".") {
		if tok == "" {
			return Errorf(CodeInvalidArgument, "subject %q has an empty token %d (tokens are separated by single dots)", s, i)
		}
		for j := 0; j < len(tok); j++ {
			if c := tok[j]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return Errorf(CodeInvalidArgument, "subject %q has a byte 0x%02x that is not allowed (tokens are [A-Za-z0-9_-]; wildcards cannot be published to)", s, c)
			}
		}
	}
	return nil
}

// CheckClaimOutbox validates a claim of outbox messages at time now and
// returns the claim's expiry.
func (c Config) CheckClaimOutbox(req ClaimOutboxRequest, now int64) (expiresAt int64, err error) {
	if err := CheckNow(now); err != nil {
		return 0, err
	}
	if req.Tenant != "" {
		if err := c.CheckTenant(req.Tenant); err != nil {
			return 0, err
		}
	}
	if err := checkName("relay", req.Relay, MaxWorkerBytes, isPrintableASCII); err != nil {
		return 0, err
	}
	if err := c.CheckLeaseMs(req.LeaseMs); err != nil {
		return 0, err
	}
	if err := CheckLimit(req.Limit); err != nil {
		return 0, err
	}
	return Deadline(now, req.LeaseMs, "outbox claim expiry")
}

// CheckMarkDelivered validates a mark of delivered messages.
func (c Config) CheckMarkDelivered(req MarkDeliveredRequest, now int64) error {
	if err := CheckNow(now); err != nil {
		return err
	}
	if len(req.Messages) == 0 || len(req.Messages) > MaxBatch {
		return Errorf(CodeInvalidArgument, "%d messages to mark; want 1 to %d", len(req.Messages), MaxBatch)
	}
	for _, k := range req.Messages {
		if err := c.CheckRunRef(k.Tenant, k.RunID); err != nil {
			return err
		}
		if k.Seq < 1 {
			return Errorf(CodeInvalidArgument, "outbox message seq %d: seqs start at 1", k.Seq)
		}
	}
	return nil
}

// OutboxClaimable reports whether a claim at now may take m: pending, and
// never claimed or its claim expired.
func OutboxClaimable(m OutboxMessage, now int64) bool {
	return m.State == OutboxPending && (m.Relay == "" || m.ClaimExpiresAt <= now)
}

// Package relay publishes a leasehold store's outbox to NATS JetStream: it
// claims pending messages (spec.Store.ClaimOutbox), publishes each with its
// message id as Nats-Msg-Id, and marks delivered (spec.Store.MarkDelivered)
// only the messages whose publish the stream acknowledged.
//
// # What it promises, and what that rests on
//
// Every message a committed write made is published at least once: a
// message is marked delivered only after JetStream's acknowledgement, and a
// relay that dies between its publish and its mark leaves its claim to
// expire, after which any relay claims the message and publishes it again.
// Several relays may run at once: a claim takes only messages no live claim
// holds, so two relays do not publish the same batch concurrently.
//
// The stream holds each message once only while JetStream's duplicate
// window drops the republish: every publish of a message carries the same
// Nats-Msg-Id (spec.OutboxID), and JetStream drops a publish whose id it has
// seen within the stream's Duplicates window. So a republish must happen
// within the window of the first publish: the window must be longer than
// the claim (Config.ClaimMs) plus the longest time for which no relay may
// run (an outage of every relay, or of the store). StreamSettings defaults
// to a window of 10 minutes for claims of 30 s; a republish later than the
// window is a second copy in the stream (consumers that must not see one
// deduplicate by the Nats-Msg-Id header, which is also the message id).
//
// An acknowledged publish is durable only as far as the server makes it:
// JetStream acknowledges a message once it is written, and with the
// default lazy fsync (sync_interval 2 minutes) an acknowledged message can
// be lost on a power failure or a kernel crash (Jepsen, NATS 2.12.1). Run
// the server with
//
//	jetstream { store_dir: "/var/lib/nats", sync_interval: always }
//
// (nats-server 2.10 or later; 2.9 has no such setting and fsyncs on its own
// schedule), and use file storage (StreamSettings does), or the relay's
// "delivered" means "acknowledged by a server that may still forget it":
// the power-loss check (powerloss/jetstream, an embedded nats-server on a
// filesystem that loses what was not flushed) finds every message
// acknowledged since the server's last flush gone under the default, none
// under always. The client protocol does not say which setting a server
// has; its monitoring endpoint's /varz does, and ReadServerSync reads it
// (leasehold relay --nats-monitor). A server that is stopped or killed as a
// process keeps what it wrote (the kernel holds it); a restart of it is
// what the fault tests exercise.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/spec"
)

// Headers the relay sets on every message besides Nats-Msg-Id.
const (
	HeaderTenant     = "Leasehold-Tenant"
	HeaderRun        = "Leasehold-Run"
	HeaderSeq        = "Leasehold-Seq"
	HeaderGeneration = "Leasehold-Generation" // 0: the admission's message
)

// Config configures a Relay. Store, JetStream and Stream are required.
type Config struct {
	Store     spec.Store
	JetStream jetstream.JetStream
	// Stream is the stream every message must land in (the publish
	// expects it: a subject no stream, or another stream, captures is an
	// error, not a silent loss).
	Stream string
	// SubjectPrefix, when set, is put before every message's subject
	// (prefix + "." + subject); the stream's subjects must cover it.
	SubjectPrefix string
	// Name is the relay's name in its claims. Default: "relay-" + the host
	// name + "-" + the process id.
	Name string
	// Tenant restricts the relay to one tenant's messages ("": every
	// tenant).
	Tenant string
	// Batch is how many messages one claim takes (1..spec.MaxBatch).
	// Default 100.
	Batch int
	// ClaimMs is how long a claim holds its messages (store time). It
	// bounds how long a killed relay's messages wait before another relay
	// takes them, and must be well inside the stream's duplicate window.
	// Default 30,000.
	ClaimMs int64
	// AckWait bounds one publish's wait for the stream's acknowledgement.
	// Default 5 s.
	AckWait time.Duration
	// RetryBase and RetryCap bound the backoff between tries of a publish,
	// a claim or a mark that failed (doubling, with jitter). Defaults 100
	// ms and 5 s.
	RetryBase, RetryCap time.Duration
	// Idle is how long the relay waits when a claim found nothing. Default
	// 500 ms.
	Idle   time.Duration
	Logger *slog.Logger

	// afterPublish, set by tests only, runs after a batch's publishes were
	// acknowledged and before its mark.
	afterPublish func([]spec.OutboxMessage)
	// broken, set by tests only, selects a deliberately broken relay.
	broken broken
}

// broken names a deliberately broken relay (tests prove the fault test
// catches each).
type broken int

const (
	brokenNone broken = iota
	// brokenNoMsgID publishes without Nats-Msg-Id: a republish is a second
	// copy.
	brokenNoMsgID
	// brokenMarkFirst marks a batch delivered before publishing it: a relay
	// killed in between loses the batch.
	brokenMarkFirst
	// brokenMarkUnpublished marks the whole batch delivered after a publish
	// failed for good within the claim: the messages it did not publish
	// are lost.
	brokenMarkUnpublished
)

// Stats are a relay's counters since New.
type Stats struct {
	Claimed    uint64 // messages claimed
	Published  uint64 // publishes acknowledged as new messages
	Duplicates uint64 // publishes the stream acknowledged as duplicates (republishes)
	Marked     uint64 // messages this relay marked delivered
	Errors     uint64 // failed publishes, claims and marks (each try)
}

// Relay publishes a store's outbox. Run it with Run; it is safe to run
// several, in one process or many.
type Relay struct {
	cfg Config
	log *slog.Logger
	rnd *rand.Rand

	claimed, published, duplicates, marked, errs atomic.Uint64
}

// New checks cfg, fills in its defaults and returns a relay.
func New(cfg Config) (*Relay, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("relay: Config.Store is required")
	case cfg.JetStream == nil:
		return nil, errors.New("relay: Config.JetStream is required")
	case cfg.Stream == "":
		return nil, errors.New("relay: Config.Stream is required")
	}
	if cfg.SubjectPrefix != "" {
		if err := spec.CheckSubject(cfg.SubjectPrefix); err != nil {
			return nil, fmt.Errorf("relay: subject prefix: %w", err)
		}
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = "relay-" + host + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.Batch < 1 || cfg.Batch > spec.MaxBatch {
		return nil, fmt.Errorf("relay: batch %d is out of range [1, %d]", cfg.Batch, spec.MaxBatch)
	}
	if cfg.ClaimMs <= 0 {
		cfg.ClaimMs = 30_000
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 5 * time.Second
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 100 * time.Millisecond
	}
	if cfg.RetryCap < cfg.RetryBase {
		cfg.RetryCap = max(5*time.Second, cfg.RetryBase)
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Relay{cfg: cfg, log: cfg.Logger.With("relay", cfg.Name), rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x72656c6179))}, nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{Claimed: r.claimed.Load(), Published: r.published.Load(), Duplicates: r.duplicates.Load(),
		Marked: r.marked.Load(), Errors: r.errs.Load()}
}

// Run relays until ctx ends, then returns nil: a batch at a time (Once),
// waiting Idle when there was nothing to take and backing off after a
// failure. A message it could not publish stays claimed until its claim
// expires, and is then taken again.
func (r *Relay) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		n, err := r.Once(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			failures++
			r.log.Warn("relay: batch failed; backing off", "err", err, "failures", failures)
			r.sleep(ctx, r.backoff(failures))
		case n == 0:
			failures = 0
			r.sleep(ctx, r.cfg.Idle)
		default:
			failures = 0
		}
	}
	return nil
}

// Once relays one batch: it claims up to Batch messages, publishes each
// (trying again with backoff while its claim lasts), and marks the
// acknowledged ones delivered. It returns how many it marked. An error says
// the claim, a publish or the mark failed for good; whatever was not marked
// is claimed again once the claim expires.
func (r *Relay) Once(ctx context.Context) (int, error) {
	start := time.Now()
	msgs, err := r.cfg.Store.ClaimOutbox(ctx, spec.ClaimOutboxRequest{Tenant: r.cfg.Tenant, Relay: r.cfg.Name,
		LeaseMs: r.cfg.ClaimMs, Limit: r.cfg.Batch})
	if err != nil {
		r.errs.Add(1)
		return 0, fmt.Errorf("claim: %w", err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	r.claimed.Add(uint64(len(msgs)))
	// Publishing stops a margin before the claim ends (by this process's
	// clock), so that the mark is sent while no other relay can hold the
	// messages yet; a mark after that is still correct (marks are
	// idempotent), only its publish may have been repeated by then.
	until := start.Add(time.Duration(r.cfg.ClaimMs) * time.Millisecond * 3 / 4)
	if r.cfg.broken == brokenMarkFirst {
		if err := r.mark(ctx, keys(msgs)); err != nil {
			return 0, err
		}
		if r.cfg.afterPublish != nil {
			r.cfg.afterPublish(msgs) // the point between the two steps
		}
	}
	var acked []spec.OutboxKey
	var pubErr error
	for _, m := range msgs {
		if err := r.publish(ctx, m, until); err != nil {
			pubErr = err
			break // the rest wait for the claim to expire
		}
		acked = append(acked, m.Key())
	}
	if pubErr != nil && r.cfg.broken == brokenMarkUnpublished {
		acked = keys(msgs)
	}
	if r.cfg.afterPublish != nil && len(acked) > 0 && r.cfg.broken != brokenMarkFirst {
		r.cfg.afterPublish(msgs[:len(acked)])
	}
	if len(acked) > 0 && r.cfg.broken != brokenMarkFirst {
		if err := r.mark(ctx, acked); err != nil {
			return 0, err
		}
	}
	return len(acked), pubErr
}

// publish publishes m until the stream acknowledges it or until passes.
func (r *Relay) publish(ctx context.Context, m spec.OutboxMessage, until time.Time) error {
	subject := m.Subject
	if r.cfg.SubjectPrefix != "" {
		subject = r.cfg.SubjectPrefix + "." + subject
	}
	for try := 1; ; try++ {
		msg := &nats.Msg{Subject: subject, Data: []byte(m.Payload), Header: nats.Header{}}
		msg.Header.Set(HeaderTenant, m.Tenant)
		msg.Header.Set(HeaderRun, m.RunID)
		msg.Header.Set(HeaderSeq, strconv.FormatInt(m.Seq, 10))
		msg.Header.Set(HeaderGeneration, strconv.FormatInt(m.Generation, 10))
		opts := []jetstream.PublishOpt{jetstream.WithExpectStream(r.cfg.Stream), jetstream.WithRetryAttempts(0)}
		if r.cfg.broken != brokenNoMsgID {
			opts = append(opts, jetstream.WithMsgID(m.ID))
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.AckWait)
		ack, err := r.cfg.JetStream.PublishMsg(pctx, msg, opts...)
		cancel()
		if err == nil {
			if ack.Duplicate {
				r.duplicates.Add(1)
			} else {
				r.published.Add(1)
			}
			return nil
		}
		r.errs.Add(1)
		wait := r.backoff(try)
		if ctx.Err() != nil || time.Now().Add(wait).After(until) {
			return fmt.Errorf("publish %s to %s (%d tries): %w", m.ID, subject, try, err)
		}
		r.log.Warn("relay: publish failed; trying again", "id", m.ID, "subject", subject, "try", try, "err", err)
		r.sleep(ctx, wait)
	}
}

// mark marks keys delivered, trying again while the store is unavailable.
func (r *Relay) mark(ctx context.Context, ks []spec.OutboxKey) error {
	for try := 1; ; try++ {
		n, err := r.cfg.Store.MarkDelivered(ctx, spec.MarkDeliveredRequest{Messages: ks})
		if err == nil {
			r.marked.Add(uint64(n))
			return nil
		}
		r.errs.Add(1)
		if spec.CodeOf(err) != spec.CodeUnavailable || ctx.Err() != nil || try == 8 {
			// Not marked: the messages are published again after their claim
			// expires, and the duplicate window drops the repeat.
			return fmt.Errorf("mark %d messages delivered (%d tries): %w", len(ks), try, err)
		}
		r.sleep(ctx, r.backoff(try))
	}
}

// backoff is the wait before try n+1: RetryBase doubling to RetryCap, with
// the upper half jittered.
func (r *Relay) backoff(n int) time.Duration {
	d := r.cfg.RetryCap
	if n < 30 && r.cfg.RetryBase<<uint(n-1) < d {
		d = r.cfg.RetryBase << uint(n-1)
	}
	return d/2 + time.Duration(r.rnd.Int64N(int64(d/2)+1))
}

func (r *Relay) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func keys(ms []spec.OutboxMessage) []spec.OutboxKey {
	out := make([]spec.OutboxKey, len(ms))
	for i, m := range ms {
		out[i] = m.Key()
	}
	return out
}

// StreamSettings is the stream a relay publishes to.
type StreamSettings struct {
	Name string
	// Subjects are the subjects the stream captures, e.g. the relay's
	// SubjectPrefix + ".>"; required.
	Subjects []string
	// Duplicates is the duplicate window: longer than a relay's claim plus
	// the longest outage of every relay (see the package doc). Default 10
	// minutes.
	Duplicates time.Duration
	// Replicas is the stream's replica count (default 1; 3 in a cluster
	// that must survive the loss of a server).
	Replicas int
}

// EnsureStream creates the stream, or updates it to s, with file storage:
// a memory stream loses every message when its server restarts.
func EnsureStream(ctx context.Context, js jetstream.JetStream, s StreamSettings) (jetstream.Stream, error) {
	if s.Duplicates <= 0 {
		s.Duplicates = 10 * time.Minute
	}
	if s.Replicas <= 0 {
		s.Replicas = 1
	}
	if s.Name == "" || len(s.Subjects) == 0 {
		return nil, errors.New("relay: a stream needs a name and its subjects")
	}
	return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: s.Name, Subjects: s.Subjects, Storage: jetstream.FileStorage,
		Duplicates: s.Duplicates, Replicas: s.Replicas})
}

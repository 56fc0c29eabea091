package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
)

// maxMsgSize is the stream's message size limit while its publishes must
// fail: the large message is over it, the others under it.
const maxMsgSize = 512

// publishFailingForGood writes three messages in one admission (small,
// large, small) to a stream that refuses messages over maxMsgSize, so that
// the large one's publish fails on every try within the claim (JetStream
// answers "message size exceeds maximum allowed"); then raises the limit,
// and a relay whose store reads a clock past the claim drains the outbox.
// It returns what went wrong: a message not pending after its publish
// failed for good, and the stream's accounting after the drain (every
// committed message once, none pending). b selects a broken relay for the
// first batch.
func publishFailingForGood(t *testing.T, b broken) (problems []string) {
	t.Helper()
	nc := sharedNATS(t)
	f := newFixture(t, nc)
	ctx := context.Background()
	st, err := f.js.Stream(ctx, f.stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = maxMsgSize
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("limit the stream's message size: %v", err)
	}
	s := f.open(nil, nil)
	large := fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 2*maxMsgSize))
	if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-big", RunID: "r-big",
		Payload: []byte(`{}`), Outbox: []spec.Message{
			{Subject: "orders.small", Payload: []byte(`{"n":1}`)},
			{Subject: "orders.large", Payload: []byte(large)},
			{Subject: "orders.small", Payload: []byte(`{"n":3}`)}}}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range snap.Outbox {
		f.want[m.ID] = m
	}

	// The first batch: the large message's publish fails on every try
	// until the relay's claim is nearly over.
	r := f.relay(t, s, "relay-refused", b)
	r.cfg.ClaimMs, r.cfg.RetryBase, r.cfg.RetryCap = 1_000, 20*time.Millisecond, 100*time.Millisecond
	n, err := r.Once(ctx)
	if err == nil || !strings.Contains(err.Error(), "maximum") {
		t.Fatalf("the first batch: %d marked, error %v; want the large message's publish refused for its size", n, err)
	}
	t.Logf("the first batch marked %d and failed after %d failed publishes: %v", n, r.Stats().Errors, err)
	after, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range after.Outbox {
		if m.Seq > 1 && m.State == spec.OutboxDelivered {
			problems = append(problems, fmt.Sprintf("message %s (%s) is marked delivered, but its publish failed (or never happened) within the claim", m.ID, m.Subject))
		}
	}

	// The stream takes the large message now; a relay past the claim
	// delivers what the first left pending.
	cfg.MaxMsgSize = -1
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("lift the stream's message size limit: %v", err)
	}
	later := f.relay(t, f.open(clock.NewManual(time.Now().UnixMilli()+2*claimMs), nil), "relay-later", brokenNone)
	drain(t, later)
	lost, dup, unexpected, pending, found := f.account(f.js)
	t.Logf("after the drain: lost %d, duplicated %d, unexpected %d, pending %d; the later relay published %d", lost, dup, unexpected, pending, later.Stats().Published)
	return append(problems, found...)
}

// TestPublishFailingForGood: a publish that fails on every try within its
// claim leaves its message (and the batch's rest) pending, and a relay
// delivers each exactly once later.
func TestPublishFailingForGood(t *testing.T) {
	for _, p := range publishFailingForGood(t, brokenNone) {
		t.Error(p)
	}
}

// TestPublishFailingForGoodCatchesBrokenRelay: a relay that marks its batch
// delivered after a publish failed for good fails the check of
// TestPublishFailingForGood (the messages it never published are lost).
func TestPublishFailingForGoodCatchesBrokenRelay(t *testing.T) {
	problems := publishFailingForGood(t, brokenMarkUnpublished)
	if len(problems) == 0 {
		t.Fatal("the relay that marks unpublished messages delivered passed the check")
	}
	t.Logf("the broken relay caught: %d findings, the first: %s", len(problems), problems[0])
}

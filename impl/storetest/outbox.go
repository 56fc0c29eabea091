package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// The transactional outbox: messages written by a completion (and by an
// admission that asks), in its transaction and under its guard; claims of
// pending messages by relays, and their delivery.

func init() {
	register("OutboxWrittenWithCompletion", testOutboxWrittenWithCompletion)
	register("OutboxWrittenAtAdmissionOnly", testOutboxWrittenAtAdmissionOnly)
	register("OutboxRefusedWritesWriteNone", testOutboxRefusedWritesWriteNone)
	register("OutboxClaimAndMark", testOutboxClaimAndMark)
	register("OutboxBatchMembers", testOutboxBatchMembers)
	register("OutboxValidation", testOutboxValidation)
	register("OutboxRetention", testOutboxRetention)
	register("ConcurrentOutboxClaims", testConcurrentOutboxClaims)
}

// msgs returns n messages on subject "orders.<tag>" with payloads {"n":i}.
func msgs(tag string, n int) []spec.Message {
	out := make([]spec.Message, n)
	for i := range out {
		out[i] = spec.Message{Subject: "orders." + tag, Payload: []byte(fmt.Sprintf(`{ "n" : %d }`, i+1))}
	}
	return out
}

// wantMessages is the pending rows msgs becomes as messages first..first+n-1
// of run, written at now by generation gen.
func wantMessages(run spec.Run, first int64, gen, now int64, in []spec.Message) []spec.OutboxMessage {
	out := make([]spec.OutboxMessage, len(in))
	for i, m := range in {
		seq := first + int64(i)
		p, err := spec.Canonicalize(m.Payload)
		if err != nil {
			panic(err)
		}
		out[i] = spec.OutboxMessage{Tenant: run.Tenant, RunID: run.ID, Seq: seq, ID: spec.OutboxID(run.Tenant, run.ID, run.CreatedAt, seq),
			Subject: m.Subject, Payload: p, Generation: gen, CreatedAt: now, State: spec.OutboxPending}
	}
	return out
}

// claimOutbox claims outbox messages and fails the test on an error.
func (e *env) claimOutbox(tenant, relay string, leaseMs int64, limit int) []spec.OutboxMessage {
	e.t.Helper()
	got, err := e.s.ClaimOutbox(e.ctx, spec.ClaimOutboxRequest{Tenant: tenant, Relay: relay, LeaseMs: leaseMs, Limit: limit})
	if err != nil {
		e.t.Fatalf("ClaimOutbox(%q, %s, %d ms, limit %d): %v", tenant, relay, leaseMs, limit, err)
	}
	return got
}

// mark marks messages delivered and requires exactly want of them marked.
func (e *env) mark(want int, keys ...spec.OutboxKey) {
	e.t.Helper()
	n, err := e.s.MarkDelivered(e.ctx, spec.MarkDeliveredRequest{Messages: keys})
	mustOK(e.t, "MarkDelivered", err)
	mustEqual(e.t, fmt.Sprintf("messages marked of %v", keys), n, want)
}

// keysOf returns the messages' keys.
func keysOf(ms []spec.OutboxMessage) []spec.OutboxKey {
	out := make([]spec.OutboxKey, len(ms))
	for i, m := range ms {
		out[i] = m.Key()
	}
	return out
}

// claimedAs is ms as a claim by relay until expires makes them.
func claimedAs(ms []spec.OutboxMessage, relay string, expires int64) []spec.OutboxMessage {
	out := slices.Clone(ms)
	for i := range out {
		out[i].Relay, out[i].ClaimExpiresAt = relay, expires
		out[i].Claims++
	}
	return out
}

func testOutboxWrittenWithCompletion(t *testing.T, f Factory) {
	e := newEnv(t, f)
	run := e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 60_000)
	e.set(t0 + 50)
	in := msgs("done", 3)
	done, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"ok":true}`), Outbox: in})
	mustOK(t, "Complete with three messages", err)
	mustEqual(t, "the run", done.State, spec.RunCompleted)
	want := wantMessages(run, 1, l.Generation, t0+50, in)
	mustEqual(t, "outbox after the completion", e.snap().Outbox, want)
	mustEqual(t, "the first message's id", want[0].ID, "acme/r1/1000000/1")
	// A completion without messages writes none.
	e.newRun("acme", "r2")
	e.complete(e.claimOne("acme", "r2", "w", 60_000), "")
	mustEqual(t, "outbox after a completion without messages", e.snap().Outbox, want)
}

func testOutboxWrittenAtAdmissionOnly(t *testing.T, f Factory) {
	e := newEnv(t, f)
	r := req("acme", "r1")
	r.Outbox = msgs("created", 2)
	run := e.create(r)
	admitted := wantMessages(run, 1, 0, t0, r.Outbox)
	mustEqual(t, "outbox after the admission", e.snap().Outbox, admitted)

	// An idempotent replay writes nothing, later too.
	before := e.snap()
	e.set(t0 + 10)
	again := r
	again.RunID = "r1-retry"
	res, err := e.s.CreateRun(e.ctx, again)
	mustOK(t, "the same request again", err)
	mustEqual(t, "the same request again", res, spec.CreateRunResult{Run: run, Replayed: true})
	e.unchanged("a replayed create with messages", before)
	// The messages are part of the fingerprint: others, or none, conflict.
	for name, change := range map[string]func(*spec.CreateRunRequest){
		"other messages":   func(c *spec.CreateRunRequest) { c.Outbox = msgs("other", 2) },
		"one message less": func(c *spec.CreateRunRequest) { c.Outbox = c.Outbox[:1] },
		"no messages":      func(c *spec.CreateRunRequest) { c.Outbox = nil },
	} {
		c := again
		change(&c)
		_, err := e.s.CreateRun(e.ctx, c)
		checkCode(t, "same key, "+name, err, spec.CodeIdempotencyConflict)
	}
	// A taken run id writes nothing either.
	taken := req("acme", "r1")
	taken.IdempotencyKey, taken.Outbox = "k-other", msgs("x", 1)
	_, err = e.s.CreateRun(e.ctx, taken)
	checkCode(t, "a taken run id with messages", err, spec.CodeAlreadyExists)
	e.unchanged("refused creates with messages", before)

	// The completion's messages follow the admission's.
	l := e.claimOne("acme", "r1", "w", 60_000)
	_, err = e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Outbox: msgs("done", 1)})
	mustOK(t, "Complete", err)
	mustEqual(t, "outbox after admission and completion", e.snap().Outbox,
		append(admitted, wantMessages(run, 3, l.Generation, t0+10, msgs("done", 1))...))

	// A replay of a failed run (an operator's Replay) writes none.
	dead := req("acme", "d1")
	dead.Outbox = msgs("created", 1)
	deadRun := e.create(dead)
	e.fail(e.claimOne("acme", "d1", "w", 60_000), "boom")
	_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "d1", NewRunID: "d2", Actor: "ops"})
	mustOK(t, "Replay", err)
	got := filter(e.snap().Outbox, func(m spec.OutboxMessage) bool { return m.RunID == "d1" || m.RunID == "d2" })
	mustEqual(t, "outbox after a replay", got, wantMessages(deadRun, 1, 0, t0+10, dead.Outbox))
}

func testOutboxRefusedWritesWriteNone(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	stale := e.claimOne("acme", "r1", "w1", 100)
	e.set(t0 + 100)
	current := e.claimOne("acme", "r1", "w2", 60_000)
	e.newRun("acme", "c1")
	cancelled := e.claimOne("acme", "c1", "w1", 60_000)
	e.cancel("acme", "c1", "")
	before := e.snap()
	for _, tc := range []struct {
		name string
		req  spec.CompleteRequest
		code spec.Code
	}{
		{"a stale generation", spec.CompleteRequest{Lease: stale.Ref(), Outbox: msgs("stale", 2)}, spec.CodeLostLease},
		{"a cancelled run", spec.CompleteRequest{Lease: cancelled.Ref(), Outbox: msgs("late", 1)}, spec.CodeCancelled},
		{"a bad message", spec.CompleteRequest{Lease: current.Ref(), Outbox: []spec.Message{{Subject: "ok", Payload: []byte(`{}`)},
			{Subject: "bad..subject", Payload: []byte(`{}`)}}}, spec.CodeInvalidArgument},
		{"a bad result", spec.CompleteRequest{Lease: current.Ref(), Result: []byte(`{`), Outbox: msgs("ok", 1)}, spec.CodeInvalidArgument},
	} {
		_, err := e.s.Complete(e.ctx, tc.req)
		checkCode(t, "Complete with messages by "+tc.name, err, tc.code)
	}
	e.unchanged("refused completions with messages", before)
	// An admission with messages whose run id is taken under another key is
	// already_exists and writes none of them.
	taken := req("acme", "r1")
	taken.IdempotencyKey, taken.Outbox = "another-key", msgs("taken", 1)
	_, err := e.s.CreateRun(e.ctx, taken)
	checkCode(t, "CreateRun with messages of a taken run id", err, spec.CodeAlreadyExists)
	e.unchanged("an admission with messages refused already_exists", before)
	// A completion rolled back after its writes (a fault before the commit) writes none.
	e.hook.arm(spec.OpComplete, spec.BeforeCommit)
	_, err = e.s.Complete(e.ctx, spec.CompleteRequest{Lease: current.Ref(), Outbox: msgs("rolled", 1)})
	e.hook.disarm()
	checkCode(t, "Complete rolled back", err, spec.CodeUnavailable)
	e.unchanged("a rolled-back completion with messages", before)
	// The current lease's completion writes its own.
	e.set(t0 + 200)
	_, err = e.s.Complete(e.ctx, spec.CompleteRequest{Lease: current.Ref(), Outbox: msgs("current", 1)})
	mustOK(t, "the current lease's completion", err)
	run := e.getRun("acme", "r1")
	mustEqual(t, "outbox", e.snap().Outbox, wantMessages(run, 1, current.Generation, t0+200, msgs("current", 1)))
}

func testOutboxClaimAndMark(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// Messages written at t0 (b, then a: a's run id sorts first), t0+5 (a
	// second tenant) and t0+9.
	create := func(tenant, id string, n int) spec.Run {
		r := req(tenant, id)
		r.Outbox = msgs(id, n)
		return e.create(r)
	}
	b, a := create("acme", "b", 2), create("acme", "a", 1)
	e.set(t0 + 5)
	o := create("other", "o", 1)
	e.set(t0 + 9)
	c := create("acme", "c", 1)
	mb, ma := wantMessages(b, 1, 0, t0, msgs("b", 2)), wantMessages(a, 1, 0, t0, msgs("a", 1))
	mo, mc := wantMessages(o, 1, 0, t0+5, msgs("o", 1)), wantMessages(c, 1, 0, t0+9, msgs("c", 1))

	// Claim order is (created_at, tenant, run id, seq); a limit counts messages.
	e.set(t0 + 10)
	mustEqual(t, "first claim", e.claimOutbox("", "relay1", 1000, 2), claimedAs([]spec.OutboxMessage{ma[0], mb[0]}, "relay1", t0+1010))
	// A live claim is skipped; another tenant's messages are its own.
	mustEqual(t, "claim of acme only", e.claimOutbox("acme", "relay2", 500, 10), claimedAs([]spec.OutboxMessage{mb[1], mc[0]}, "relay2", t0+510))
	mustEqual(t, "claim of every tenant", e.claimOutbox("", "relay2", 500, 10), claimedAs(mo, "relay2", t0+510))
	if got := e.claimOutbox("", "relay3", 500, 10); len(got) != 0 {
		t.Fatalf("every message is claimed, yet a claim took %+v", got)
	}
	// relay1 publishes and marks its batch; relay2's claims expire (as if
	// it died between its publish and its mark) and are taken again.
	e.mark(2, ma[0].Key(), mb[0].Key())
	e.set(t0 + 510)
	again := e.claimOutbox("", "relay3", 100, 10)
	mustEqual(t, "claim after relay2's claims expired", again,
		claimedAs(claimedAs([]spec.OutboxMessage{mb[1], mo[0], mc[0]}, "relay2", t0+510), "relay3", t0+610))
	mustEqual(t, "claims of a message taken again", again[0].Claims, 2)
	// A mark is idempotent: delivered, missing and repeated keys are passed over.
	e.set(t0 + 600)
	e.mark(1, mb[1].Key(), mb[1].Key(), ma[0].Key(), spec.OutboxKey{Tenant: "acme", RunID: "ghost", Seq: 1}, spec.OutboxKey{Tenant: "acme", RunID: "a", Seq: 9})
	// Any relay may mark a message, whoever holds its claim: the broker
	// acknowledged its publish.
	e.mark(2, mo[0].Key(), mc[0].Key())
	e.set(t0 + 10_000)
	if got := e.claimOutbox("", "relay1", 100, 10); len(got) != 0 {
		t.Fatalf("every message is delivered, yet a claim took %+v", got)
	}
	delivered := func(m spec.OutboxMessage, claims int, at int64) spec.OutboxMessage {
		m.State, m.Claims, m.DeliveredAt = spec.OutboxDelivered, claims, at
		return m
	}
	mustEqual(t, "outbox at the end", e.snap().Outbox, []spec.OutboxMessage{
		delivered(ma[0], 1, t0+10), delivered(mb[0], 1, t0+10), delivered(mb[1], 2, t0+600), delivered(mc[0], 2, t0+600),
		delivered(mo[0], 2, t0+600)})
}

func testOutboxBatchMembers(t *testing.T, f Factory) {
	e := newEnv(t, f)
	bc := e.batcher()
	r1, r2 := e.newRun("acme", "r1"), e.newRun("acme", "r2")
	l1 := e.claimOne("acme", "r1", "w", 60_000)
	stale := e.claimOne("acme", "r2", "w", 100)
	e.set(t0 + 100)
	l2 := e.claimOne("acme", "r2", "w2", 60_000)
	outs, err := bc.CompleteBatch(e.ctx, []spec.CompleteRequest{
		{Lease: l1.Ref(), Outbox: msgs("one", 2)},
		{Lease: stale.Ref(), Outbox: msgs("stale", 1)},
		{Lease: l2.Ref(), Outbox: msgs("two", 1)},
		{Lease: l1.Ref(), Outbox: msgs("repeat", 1)},
	})
	mustOK(t, "CompleteBatch with messages", err)
	codes := make([]spec.Code, len(outs))
	for i, o := range outs {
		codes[i] = spec.CodeOf(o.Err)
	}
	mustEqual(t, "member outcomes", codes, []spec.Code{"", spec.CodeLostLease, "", spec.CodeAlreadyTerminal})
	mustEqual(t, "outbox after the batch", e.snap().Outbox,
		append(wantMessages(r1, 1, l1.Generation, t0+100, msgs("one", 2)), wantMessages(r2, 1, l2.Generation, t0+100, msgs("two", 1))...))
}

func testOutboxValidation(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 60_000)
	before := e.snap()
	tooBig := []byte(`"` + repeat('x', spec.MaxPayloadBytes-1) + `"`)
	for _, m := range [][]spec.Message{
		{{Subject: "", Payload: []byte(`{}`)}},
		{{Subject: "a.", Payload: []byte(`{}`)}},
		{{Subject: ".a", Payload: []byte(`{}`)}},
		{{Subject: "a..b", Payload: []byte(`{}`)}},
		{{Subject: "orders.*", Payload: []byte(`{}`)}},
		{{Subject: "orders.>", Payload: []byte(`{}`)}},
		{{Subject: "a b", Payload: []byte(`{}`)}},
		{{Subject: "é", Payload: []byte(`{}`)}},
		{{Subject: repeat('s', spec.MaxSubjectBytes+1), Payload: []byte(`{}`)}},
		{{Subject: "ok", Payload: nil}},
		{{Subject: "ok", Payload: []byte(`{"a":1,"a":2}`)}},
		{{Subject: "ok", Payload: tooBig}},
		msgs("many", spec.MaxOutboxMessages+1),
	} {
		_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Outbox: m})
		checkCode(t, fmt.Sprintf("Complete with messages %.60q", fmt.Sprint(m)), err, spec.CodeInvalidArgument)
		r := req("acme", "new")
		r.Outbox = m
		_, err = e.s.CreateRun(e.ctx, r)
		checkCode(t, fmt.Sprintf("CreateRun with messages %.60q", fmt.Sprint(m)), err, spec.CodeInvalidArgument)
	}
	for _, c := range []spec.ClaimOutboxRequest{
		{Tenant: "Bad", Relay: "r", LeaseMs: 1, Limit: 1},
		{Relay: "", LeaseMs: 1, Limit: 1},
		{Relay: "r r", LeaseMs: 1, Limit: 1},
		{Relay: "r", LeaseMs: 0, Limit: 1},
		{Relay: "r", LeaseMs: e.cfg.MaxLeaseMs + 1, Limit: 1},
		{Relay: "r", LeaseMs: 1, Limit: 0},
		{Relay: "r", LeaseMs: 1, Limit: spec.MaxBatch + 1},
	} {
		_, err := e.s.ClaimOutbox(e.ctx, c)
		checkCode(t, fmt.Sprintf("ClaimOutbox %+v", c), err, spec.CodeInvalidArgument)
	}
	for _, keys := range [][]spec.OutboxKey{
		nil,
		{{Tenant: "acme", RunID: "r1", Seq: 0}},
		{{Tenant: "", RunID: "r1", Seq: 1}},
		{{Tenant: "acme", RunID: "r/1", Seq: 1}},
		make([]spec.OutboxKey, spec.MaxBatch+1),
	} {
		_, err := e.s.MarkDelivered(e.ctx, spec.MarkDeliveredRequest{Messages: keys})
		checkCode(t, fmt.Sprintf("MarkDelivered of %d keys", len(keys)), err, spec.CodeInvalidArgument)
	}
	e.unchanged("invalid outbox requests", before)
	// At the limits: 16 messages, a 255-byte subject, a 64 KiB payload.
	atLimit := msgs("many", spec.MaxOutboxMessages)
	atLimit[0].Subject = repeat('s', spec.MaxSubjectBytes)
	atLimit[1].Payload = tooBig[:len(tooBig)-1]
	atLimit[1].Payload = append(atLimit[1].Payload[:len(atLimit[1].Payload)-1], '"')
	_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Outbox: atLimit})
	mustOK(t, "Complete with messages at the limits", err)
	mustEqual(t, "messages written", len(e.snap().Outbox), spec.MaxOutboxMessages)
}

func testOutboxRetention(t *testing.T, f Factory) {
	e := newEnv(t, f, retentionConfig)
	// Two finished runs with a message each, and a lineage whose original's
	// message is pending.
	for _, id := range []string{"sent", "unsent"} {
		r := req("acme", id)
		r.Outbox = msgs(id, 1)
		e.create(r)
		e.complete(e.claimOne("acme", id, "w", 60_000), "")
	}
	orig := req("acme", "orig")
	orig.Outbox = msgs("orig", 1)
	e.create(orig)
	e.fail(e.claimOne("acme", "orig", "w", 60_000), "boom")
	_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "orig", NewRunID: "orig-2", Actor: "ops"})
	mustOK(t, "Replay", err)
	e.cancel("acme", "orig-2", "")
	e.mark(1, spec.OutboxKey{Tenant: "acme", RunID: "sent", Seq: 1})
	e.set(t0 + 1<<30)
	// Only the run whose message was delivered goes, with its message; a
	// run with a pending message stays, and with it its lineage.
	e.purgeRuns("acme", 10, "sent")
	e.mark(2, spec.OutboxKey{Tenant: "acme", RunID: "unsent", Seq: 1}, spec.OutboxKey{Tenant: "acme", RunID: "orig", Seq: 1})
	e.purgeRuns("acme", 10, "orig-2", "orig", "unsent") // all finished at t0: by leaf run id
	mustEqual(t, "outbox after the purges", len(e.snap().Outbox), 0)
	// A run id used again after its purge gets new message ids.
	again := req("acme", "sent")
	again.Outbox = msgs("sent", 1)
	run := e.create(again)
	mustEqual(t, "a new run's message id", e.snap().Outbox[0].ID, spec.OutboxID("acme", "sent", run.CreatedAt, 1))
	if run.CreatedAt == t0 {
		t.Fatalf("the new run's creation time %d is the purged run's: their message ids would collide", run.CreatedAt)
	}
}

// testConcurrentOutboxClaims: relays claiming at once, each on its own
// connections, never take a message another's live claim holds, and
// together they take every message.
func testConcurrentOutboxClaims(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const runs, relays = 20, 4
	for i := range runs {
		r := req("acme", fmt.Sprintf("r%02d", i))
		r.Outbox = msgs("x", 2)
		e.create(r)
	}
	stores := e.pools(relays)
	var mu sync.Mutex
	taken := map[spec.OutboxKey]string{}
	var problems []string
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func(relay string, s spec.Store) {
			defer wg.Done()
			for range 2 * runs {
				got, err := s.ClaimOutbox(e.ctx, spec.ClaimOutboxRequest{Relay: relay, LeaseMs: 600_000, Limit: 3})
				mu.Lock()
				switch {
				case spec.CodeOf(err) == spec.CodeUnavailable:
				case err != nil:
					problems = append(problems, fmt.Sprintf("%s: %v", relay, err))
				}
				for _, m := range got {
					if other, dup := taken[m.Key()]; dup {
						problems = append(problems, fmt.Sprintf("%s/%s#%d claimed by %s and %s", m.Tenant, m.RunID, m.Seq, other, relay))
					}
					taken[m.Key()] = relay
				}
				mu.Unlock()
			}
		}(fmt.Sprintf("relay%d", i), s)
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if len(taken) != 2*runs {
		t.Errorf("the relays took %d of %d messages", len(taken), 2*runs)
	}
	for _, m := range e.snap().Outbox {
		if m.Claims != 1 || m.Relay != taken[m.Key()] {
			t.Errorf("%s/%s#%d: %d claims, held by %q; want one claim, by %q", m.Tenant, m.RunID, m.Seq, m.Claims, m.Relay, taken[m.Key()])
		}
	}
}

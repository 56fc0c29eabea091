package storetest

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Admission: CreateRun's idempotency, fingerprints, id collisions and the
// idempotency record's retention.

func init() {
	register("DuplicateRunRollback", testDuplicateRunRollback)
	register("IdempotentReplayAndConflict", testIdempotentReplayAndConflict)
	register("CanonicalFingerprint", testCanonicalFingerprint)
	register("IdempotencyPurgeThenReuse", testIdempotencyPurgeThenReuse)
	register("IdempotencyPurgeOrderAndLimit", testIdempotencyPurgeOrderAndLimit)
}

func testDuplicateRunRollback(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	before := e.snap()

	// A new key proposing a taken id: already_exists, and not even the
	// idempotency record of the new key is written.
	dup := req("acme", "r1")
	dup.IdempotencyKey = "another-key"
	_, err := e.s.CreateRun(e.ctx, dup)
	mustCode(t, "CreateRun with a taken run id", err, spec.CodeAlreadyExists)
	e.unchanged("CreateRun with a taken run id", before)

	// The idempotency check comes first: a live key with the same request is
	// a replay even though its run id is taken, and a live key with another
	// request is a conflict, not already_exists.
	res, err := e.s.CreateRun(e.ctx, req("acme", "r1"))
	mustOK(t, "replay of r1's own request", err)
	if !res.Replayed || res.Run.ID != "r1" {
		t.Fatalf("replay of r1's request: want Replayed r1, got %+v", res)
	}
	other := req("acme", "r1")
	other.Payload = []byte(`{"n":2}`)
	_, err = e.s.CreateRun(e.ctx, other)
	mustCode(t, "live key, other payload, taken id", err, spec.CodeIdempotencyConflict)
	e.unchanged("replay and conflict", before)

	// A taken id where the new key has an expired record, which CreateRun
	// deletes first: the deletion is rolled back with the rest.
	e.newRun("acme", "r2")
	e.set(t0 + e.cfg.IdempotencyRetentionMs + 10) // every record so far has expired
	before = e.snap()
	dup = req("acme", "r1")
	dup.IdempotencyKey = "k-r2" // expired, bound to r2
	_, err = e.s.CreateRun(e.ctx, dup)
	mustCode(t, "CreateRun with an expired key and a taken run id", err, spec.CodeAlreadyExists)
	e.unchanged("CreateRun with an expired key and a taken run id", before)

	// Ids are per tenant: another tenant may use r1.
	e.newRun("other", "r1")
}

func testIdempotentReplayAndConflict(t *testing.T, f Factory) {
	e := newEnv(t, f)
	first := req("acme", "r1")
	first.IdempotencyKey = "order-42"
	created := e.create(first)
	before := e.snap()

	// The same logical request with another proposed run id, later: the
	// original run, Replayed, no writes (no second run_queued event).
	e.set(t0 + 500)
	again := first
	again.RunID = "r1-retry"
	res, err := e.s.CreateRun(e.ctx, again)
	mustOK(t, "replayed CreateRun", err)
	mustEqual(t, "replayed CreateRun", res, spec.CreateRunResult{Run: created, Replayed: true})
	e.unchanged("replayed CreateRun", before)

	// The replay returns the run as it is now, not as it was created.
	l := e.claimOne("acme", "r1", "w1", 10_000)
	done := e.complete(l, `{"ok":true}`)
	res, err = e.s.CreateRun(e.ctx, again)
	mustOK(t, "replay after completion", err)
	mustEqual(t, "replay after completion", res, spec.CreateRunResult{Run: done, Replayed: true})

	// Same key, different request: conflict, whatever differs.
	before = e.snap()
	conflicts := map[string]func(r *spec.CreateRunRequest){
		"payload":      func(r *spec.CreateRunRequest) { r.Payload = []byte(`{"n":2}`) },
		"max attempts": func(r *spec.CreateRunRequest) { r.MaxAttempts = 4 },
		"timeout":      func(r *spec.CreateRunRequest) { r.TimeoutMs = 1000 },
	}
	for name, change := range conflicts {
		r := again
		change(&r)
		_, err := e.s.CreateRun(e.ctx, r)
		checkCode(t, "same key, different "+name, err, spec.CodeIdempotencyConflict)
	}
	e.unchanged("conflicting CreateRuns", before)

	// Defaults are part of the normalized request: spelling the default
	// max attempts (3) and timeout out is the same request.
	explicit := again
	explicit.MaxAttempts, explicit.TimeoutMs = 3, 3_600_000
	res, err = e.s.CreateRun(e.ctx, explicit)
	mustOK(t, "replay with explicit defaults", err)
	if !res.Replayed || res.Run.ID != "r1" {
		t.Fatalf("explicit defaults: want a replay of r1, got %+v", res)
	}

	// Keys are scoped by operation: the same key under another operation is
	// a new run.
	e2 := newEnv(t, f, func(c *spec.Config) {
		c.Operations["mail"] = spec.OperationPolicy{SchemaVersion: 1, DefaultMaxAttempts: 3, MaxMaxAttempts: 5,
			DefaultTimeoutMs: 1000, MaxTimeoutMs: 2000}
	})
	a := req("acme", "ra")
	a.IdempotencyKey = "shared"
	e2.create(a)
	b := req("acme", "rb")
	b.IdempotencyKey, b.Operation = "shared", "mail"
	rb := e2.create(b)
	mustEqual(t, "run under the second operation", rb, e2.wantRun(b, t0))
}

func testCanonicalFingerprint(t *testing.T, f Factory) {
	e := newEnv(t, f)
	r := req("acme", "r1")
	r.Payload = []byte(`{"b":[1,2,{"y":"é","x":1.0}],"a":"x"}`)
	created := e.create(r)
	const canonical = `{"a":"x","b":[1,2,{"x":1,"y":"é"}]}`
	if created.Payload != canonical {
		t.Fatalf("stored payload: want RFC 8785 form %s, got %s", canonical, created.Payload)
	}
	wantFP := spec.Fingerprint(spec.FingerprintInput{Tenant: "acme", Operation: "work", SchemaVersion: 1, MaxAttempts: 3,
		TimeoutMs: 3_600_000, Payload: canonical})
	mustEqual(t, "fingerprint", created.Fingerprint, wantFP)
	before := e.snap()

	// Key order, whitespace, escapes and number spelling do not matter.
	for i, p := range []string{
		` { "a" : "x" , "b" : [ 1 , 2 , { "x" : 1 , "y" : "é" } ] } `,
		"{\n\t\"b\": [1, 2, {\"x\": 1e0, \"y\": \"\\u00e9\"}],\n\t\"a\": \"\\u0078\"\n}",
		canonical,
	} {
		again := r
		again.RunID = "other-id"
		again.Payload = []byte(p)
		res, err := e.s.CreateRun(e.ctx, again)
		mustOK(t, "equivalent payload", err)
		if !res.Replayed || res.Run.ID != "r1" {
			t.Fatalf("equivalent payload %d %q: want a replay of r1, got %+v", i, p, res)
		}
	}
	// A different value is a different request.
	for _, p := range []string{
		`{"a":"x","b":[2,1,{"x":1,"y":"é"}]}`, // array order matters
		`{"a":"x","b":[1,2,{"x":1,"y":"e"}]}`,
		`{"a":"x","b":[1,2,{"x":"1","y":"é"}]}`, // 1 is not "1"
		`{"a":"x"}`,
	} {
		again := r
		again.RunID = "other-id"
		again.Payload = []byte(p)
		_, err := e.s.CreateRun(e.ctx, again)
		checkCode(t, "different payload "+p, err, spec.CodeIdempotencyConflict)
	}
	// Input errors, never canonicalized: duplicate keys, invalid UTF-8,
	// lone surrogates, numbers outside doubles, trailing data, no JSON.
	for name, p := range map[string]string{
		"duplicate keys":  `{"a":"x","a":"x","b":[1,2,{"x":1,"y":"é"}]}`,
		"invalid UTF-8":   "{\"a\":\"\xff\",\"b\":1}",
		"lone surrogate":  `{"a":"\ud800"}`,
		"number too big":  `{"a":1e400}`,
		"trailing data":   `{"a":"x"} {}`,
		"not JSON":        `{a:1}`,
		"empty":           ``,
		"nested dup keys": `{"b":{"x":1,"x":1}}`,
	} {
		again := r
		again.Payload = []byte(p)
		_, err := e.s.CreateRun(e.ctx, again)
		checkCode(t, "payload with "+name, err, spec.CodeInvalidArgument)
	}
	e.unchanged("replays, conflicts and invalid payloads", before)

	// The fingerprint binds the tenant: the same key and payload under
	// another tenant is another run, with another fingerprint.
	o := r
	o.Tenant = "other"
	ro := e.create(o)
	if ro.Fingerprint == created.Fingerprint {
		t.Fatalf("fingerprints of two tenants' identical requests are equal (%s); the tenant must be part of it", ro.Fingerprint)
	}
}

func testIdempotencyPurgeThenReuse(t *testing.T, f Factory) {
	const retention = 10_000
	e := newEnv(t, f, func(c *spec.Config) { c.IdempotencyRetentionMs = retention })
	e.set(t0)
	e.newRun("acme", "r1") // key k-r1 expires at t0+10_000
	e.set(t0 + 1000)
	e.newRun("acme", "r2") // expires t0+11_000
	e.set(t0 + 3000)
	e.newRun("acme", "r3") // expires t0+13_000

	// One millisecond before expiry the record is live: a replay.
	e.set(t0 + retention - 1)
	res, err := e.s.CreateRun(e.ctx, req("acme", "r1"))
	mustOK(t, "CreateRun before expiry", err)
	if !res.Replayed {
		t.Fatalf("CreateRun 1 ms before the key expires: want a replay, got a new run %+v", res.Run)
	}
	n, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 100})
	mustOK(t, "purge before expiry", err)
	mustEqual(t, "records purged before any expiry", n, 0)

	// At t0+11_000 the first two records have expired (expires_at <= now).
	e.set(t0 + 11_000)
	n, err = e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 1})
	mustOK(t, "purge limit 1", err)
	mustEqual(t, "purged with limit 1", n, 1)
	keys := func() []string {
		var out []string
		for _, r := range e.snap().Idempotency {
			out = append(out, r.Key)
		}
		return out
	}
	mustEqual(t, "records left after purging the oldest", keys(), []string{"k-r2", "k-r3"})
	n, err = e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 100})
	mustOK(t, "purge", err)
	mustEqual(t, "purged", n, 1)
	mustEqual(t, "records left", keys(), []string{"k-r3"})
	n, err = e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 100})
	mustOK(t, "purge", err)
	mustEqual(t, "purged again", n, 0)

	// The purged key is free: the same request creates a new run; the old
	// run is untouched.
	old := e.getRun("acme", "r1")
	reuse := req("acme", "r1-new")
	reuse.IdempotencyKey = "k-r1"
	e.create(reuse)
	mustEqual(t, "old run after its key was reused", e.getRun("acme", "r1"), old)

	// An expired but unpurged record frees its key too, and is replaced.
	e.set(t0 + 13_000)
	reuse3 := req("acme", "r3-new")
	reuse3.IdempotencyKey = "k-r3"
	reuse3.Payload = []byte(`{"different":true}`) // a conflict only while the record lives
	created := e.create(reuse3)
	recs := e.snap().Idempotency
	mustEqual(t, "records after reuse", recs, []spec.IdempotencyRecord{
		{Tenant: "acme", Operation: "work", Key: "k-r1", Fingerprint: e.getRun("acme", "r1-new").Fingerprint, RunID: "r1-new",
			CreatedAt: t0 + 11_000, ExpiresAt: t0 + 11_000 + retention},
		{Tenant: "acme", Operation: "work", Key: "k-r3", Fingerprint: created.Fingerprint, RunID: "r3-new",
			CreatedAt: t0 + 13_000, ExpiresAt: t0 + 13_000 + retention},
	})
	// The new record is live: the reused key now replays to the new run.
	res, err = e.s.CreateRun(e.ctx, reuse3)
	mustOK(t, "replay of the reused key", err)
	if !res.Replayed || res.Run.ID != "r3-new" {
		t.Fatalf("replay of reused key: want r3-new replayed, got %+v", res)
	}
}

func testIdempotencyPurgeOrderAndLimit(t *testing.T, f Factory) {
	const retention = 1000
	e := newEnv(t, f, func(c *spec.Config) { c.IdempotencyRetentionMs = retention })
	// Three records expiring at the same time in two tenants, one later.
	for _, tr := range [][2]string{{"tb", "x"}, {"ta", "y"}, {"ta", "x"}} {
		e.newRun(tr[0], tr[1])
	}
	e.set(t0 + 1)
	e.newRun("ta", "late")
	e.set(t0 + retention + 1) // all four have expired
	keyList := func() [][2]string {
		var out [][2]string
		for _, r := range e.snap().Idempotency {
			out = append(out, [2]string{r.Tenant, r.Key})
		}
		return out
	}
	// Order: (expires_at, tenant, operation, key); the snapshot lists the
	// records left in (tenant, operation, key) order.
	want := [][][2]string{
		{{"ta", "k-late"}, {"ta", "k-y"}, {"tb", "k-x"}}, // ta/k-x went first
		{{"ta", "k-late"}, {"tb", "k-x"}},                // then ta/k-y
		{{"ta", "k-late"}},                               // then tb/k-x
		nil,                                              // then the later one
	}
	for i, w := range want {
		n, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 1})
		mustOK(t, "purge", err)
		mustEqual(t, "purge count", n, 1)
		mustEqual(t, fmt.Sprintf("records after purge %d", i+1), keyList(), w)
	}
	// Purging records never touches runs.
	if got := len(e.snap().Runs); got != 4 {
		t.Fatalf("runs after purging: want 4, got %d", got)
	}
}

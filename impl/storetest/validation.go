package storetest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Input validation: every public entry point rejects bad input with
// invalid_argument and writes nothing; limits are exact; times that are
// negative or overflow are rejected; reads read no clock, writes read it once.

func init() {
	register("InvalidArgumentEverywhere", testInvalidArgumentEverywhere)
	register("SizeLimitsAreExact", testSizeLimitsAreExact)
	register("NegativeClockRejected", testNegativeClockRejected)
	register("OverflowingTimesRejected", testOverflowingTimesRejected)
	register("ClockReadOncePerWrite", testClockReadOncePerWrite)
}

var (
	badTenants = []string{"", "Acme", "-acme", "a b", "a.b", "é", repeat('a', spec.MaxTenantBytes+1)}
	badRunIDs  = []string{"", "a/b", ".a", "a b", "a\x00", repeat('r', spec.MaxRunIDBytes+1)}
	badWorkers = []string{"", "-w", "a b", "w\x00", "wé", repeat('w', spec.MaxWorkerBytes+1)}
	badCodes   = []string{"", "Bad", "a-b", "a b", "_x", repeat('c', spec.MaxCodeBytes+1)}
	badKeys    = []string{"", " k", "k k", "k\x7f", "ké", repeat('k', spec.MaxKeyBytes+1)}
	badSteps   = []string{"", "a/b", "-s", "s s", repeat('s', spec.MaxStepBytes+1)}
	badJSON    = []string{"", "{", `{"a":1} x`, `{"a":1,"a":2}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`, `[1e400]`,
		`"` + repeat('x', spec.MaxPayloadBytes-1) + `"`}
)

// call is one request that must fail with invalid_argument.
type call struct {
	name string
	fn   func() error
}

func testInvalidArgumentEverywhere(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.failedRun("acme", "dead")
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 60_000)
	_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1"})
	mustOK(t, "reserve", err)
	e.newRun("acme", "cancelled")
	e.cancel("acme", "cancelled", "")

	var calls []call
	add := func(name string, fn func() error) { calls = append(calls, call{name, fn}) }
	ref := func(mod func(*spec.LeaseRef)) spec.LeaseRef {
		r := l.Ref()
		mod(&r)
		return r
	}
	// Every way a LeaseRef can be malformed, for every guarded write.
	var badRefs []spec.LeaseRef
	for _, v := range badTenants {
		badRefs = append(badRefs, ref(func(r *spec.LeaseRef) { r.Tenant = v }))
	}
	for _, v := range badRunIDs {
		badRefs = append(badRefs, ref(func(r *spec.LeaseRef) { r.RunID = v }))
	}
	for _, v := range badWorkers {
		badRefs = append(badRefs, ref(func(r *spec.LeaseRef) { r.Owner = v }))
	}
	for _, g := range []int64{0, -1, math.MinInt64} {
		badRefs = append(badRefs, ref(func(r *spec.LeaseRef) { r.Generation = g }))
	}
	for i, r := range badRefs {
		n := fmt.Sprintf("bad ref %d %q", i, r.String())
		add("Renew "+n, func() error { _, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: r, LeaseMs: 1000}); return err })
		add("Complete "+n, func() error { _, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: r}); return err })
		add("Retry "+n, func() error { _, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: r, ErrorCode: "x"}); return err })
		add("Fail "+n, func() error { _, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: r, ErrorCode: "x"}); return err })
		add("Release "+n, func() error { _, err := e.s.Release(e.ctx, spec.ReleaseRequest{Lease: r}); return err })
		add("ReserveEffect "+n, func() error {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: r, Step: "charge", Key: "c-2"})
			return err
		})
		add("RecordEffect "+n, func() error {
			_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: r, Step: "charge", Key: "c-1", State: spec.EffectSucceeded})
			return err
		})
		add("ReconcileEffect "+n, func() error {
			_, err := e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: r, Step: "charge", Key: "c-1", State: spec.EffectSucceeded})
			return err
		})
	}

	// CreateRun.
	create := func(name string, mod func(*spec.CreateRunRequest)) {
		r := req("acme", "new")
		mod(&r)
		add("CreateRun "+name, func() error { _, err := e.s.CreateRun(e.ctx, r); return err })
	}
	for _, v := range badTenants {
		create(fmt.Sprintf("tenant %q", v), func(r *spec.CreateRunRequest) { r.Tenant = v })
	}
	for _, v := range []string{"", "nope", "Work", "work "} {
		create(fmt.Sprintf("operation %q", v), func(r *spec.CreateRunRequest) { r.Operation = v })
	}
	for _, v := range badKeys {
		create(fmt.Sprintf("key %q", v), func(r *spec.CreateRunRequest) { r.IdempotencyKey = v })
	}
	for _, v := range badRunIDs {
		create(fmt.Sprintf("run id %q", v), func(r *spec.CreateRunRequest) { r.RunID = v })
	}
	for _, v := range []int{-1, math.MinInt, 26} {
		create(fmt.Sprintf("max attempts %d", v), func(r *spec.CreateRunRequest) { r.MaxAttempts = v })
	}
	for _, v := range []int64{-1, math.MinInt64, 86_400_001} {
		create(fmt.Sprintf("timeout %d", v), func(r *spec.CreateRunRequest) { r.TimeoutMs = v })
	}
	for i, v := range append(badJSON, "\x00") {
		create(fmt.Sprintf("payload %d", i), func(r *spec.CreateRunRequest) { r.Payload = []byte(v) })
	}
	create("nil payload", func(r *spec.CreateRunRequest) { r.Payload = nil })
	// Validation comes before the idempotency lookup: a bad request with a
	// live key is still invalid, not a replay or a conflict.
	create("live key, bad payload", func(r *spec.CreateRunRequest) { r.IdempotencyKey, r.Payload = "k-r1", []byte("{") })
	// A schedule: at most one of its fields, never negative, and before the
	// run's deadline (now + the default timeout of an hour).
	for _, v := range []struct{ at, delay int64 }{
		{t0 + 10, 10}, {-1, 0}, {math.MinInt64, 0}, {0, -1}, {0, math.MinInt64}, {0, math.MaxInt64},
		{0, 3_600_000}, {t0 + 3_600_000, 0}, {math.MaxInt64, 0},
	} {
		create(fmt.Sprintf("available_at %d, delay_ms %d", v.at, v.delay), func(r *spec.CreateRunRequest) { r.AvailableAt, r.DelayMs = v.at, v.delay })
	}
	create("live key, bad schedule", func(r *spec.CreateRunRequest) { r.IdempotencyKey, r.DelayMs = "k-r1", -1 })

	// Claim.
	claim := func(name string, c spec.ClaimRequest) {
		add("Claim "+name, func() error { _, err := e.s.Claim(e.ctx, c); return err })
	}
	okClaim := spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 1000, Limit: 1}
	for _, v := range badTenants {
		c := okClaim
		c.Tenant = v
		claim(fmt.Sprintf("tenant %q", v), c)
	}
	for _, v := range badWorkers {
		c := okClaim
		c.Worker = v
		claim(fmt.Sprintf("worker %q", v), c)
	}
	for _, v := range []int64{0, -1, math.MinInt64, e.cfg.MaxLeaseMs + 1, math.MaxInt64} {
		c := okClaim
		c.LeaseMs = v
		claim(fmt.Sprintf("lease %d ms", v), c)
	}
	for _, v := range []int{0, -1, spec.MaxBatch + 1} {
		c := okClaim
		c.Limit = v
		claim(fmt.Sprintf("limit %d", v), c)
	}

	// The rest of each guarded write's fields.
	for _, v := range []int64{0, -1, e.cfg.MaxLeaseMs + 1} {
		add(fmt.Sprintf("Renew lease %d ms", v), func() error {
			_, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: v})
			return err
		})
	}
	for i, v := range badJSON[1:] { // an empty result means "no result"
		add(fmt.Sprintf("Complete result %d", i), func() error {
			_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(v)})
			return err
		})
		// Validation comes before the lookup: a missing run is still invalid.
		add(fmt.Sprintf("Complete result %d of a missing run", i), func() error {
			_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: spec.LeaseRef{Tenant: "acme", RunID: "ghost", Owner: "w", Generation: 1},
				Result: []byte(v)})
			return err
		})
	}
	for _, v := range badCodes {
		add(fmt.Sprintf("Retry code %q", v), func() error {
			_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: v})
			return err
		})
		add(fmt.Sprintf("Fail code %q", v), func() error {
			_, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: l.Ref(), ErrorCode: v})
			return err
		})
	}
	for _, v := range []int64{-1, math.MinInt64} {
		add(fmt.Sprintf("Retry-After %d", v), func() error {
			_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: "x", RetryAfterMs: v})
			return err
		})
	}

	// Cancel: reasons are codes; validation before existence and state.
	for _, v := range badCodes[1:] { // "" means the default reason
		for _, run := range []string{"r1", "ghost", "cancelled"} {
			add(fmt.Sprintf("Cancel %s reason %q", run, v), func() error {
				_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: run, Reason: v})
				return err
			})
		}
	}
	for _, v := range badTenants {
		add(fmt.Sprintf("Cancel tenant %q", v), func() error {
			_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: v, RunID: "r1"})
			return err
		})
	}
	for _, v := range badRunIDs {
		add(fmt.Sprintf("Cancel run id %q", v), func() error {
			_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: v})
			return err
		})
	}

	// Reap and purge.
	for _, v := range []int{0, -1, spec.MaxBatch + 1} {
		add(fmt.Sprintf("Reap limit %d", v), func() error {
			_, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: "acme", Limit: v})
			return err
		})
		add(fmt.Sprintf("Purge limit %d", v), func() error {
			_, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: v})
			return err
		})
	}
	for _, v := range badTenants {
		add(fmt.Sprintf("Reap tenant %q", v), func() error {
			_, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: v, Limit: 1})
			return err
		})
		add(fmt.Sprintf("PurgeRuns tenant %q", v), func() error {
			_, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: v, Limit: 1})
			return err
		})
	}
	for _, v := range []int{0, -1, spec.MaxBatch + 1} {
		add(fmt.Sprintf("PurgeRuns limit %d", v), func() error {
			_, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: v})
			return err
		})
	}

	// Replay.
	replay := func(name string, r spec.ReplayRequest) {
		add("Replay "+name, func() error { _, err := e.s.Replay(e.ctx, r); return err })
	}
	okReplay := spec.ReplayRequest{Tenant: "acme", RunID: "dead", NewRunID: "dead-r", Actor: "ops"}
	for _, v := range badTenants {
		r := okReplay
		r.Tenant = v
		replay(fmt.Sprintf("tenant %q", v), r)
	}
	for _, v := range badRunIDs {
		r := okReplay
		r.RunID = v
		replay(fmt.Sprintf("run id %q", v), r)
		r = okReplay
		r.NewRunID = v
		replay(fmt.Sprintf("new run id %q", v), r)
	}
	for _, v := range badWorkers {
		r := okReplay
		r.Actor = v
		replay(fmt.Sprintf("actor %q", v), r)
	}

	// Effect ledger fields.
	for _, v := range badSteps {
		add(fmt.Sprintf("ReserveEffect step %q", v), func() error {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: v, Key: "c-1"})
			return err
		})
		add(fmt.Sprintf("RecordEffect step %q", v), func() error {
			_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: v, Key: "c-1", State: spec.EffectSucceeded})
			return err
		})
	}
	for _, v := range badKeys {
		add(fmt.Sprintf("ReserveEffect key %q", v), func() error {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "charge", Key: v})
			return err
		})
		add(fmt.Sprintf("ReconcileEffect key %q", v), func() error {
			_, err := e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: l.Ref(), Step: "charge", Key: v, State: spec.EffectSucceeded})
			return err
		})
	}
	for _, st := range []spec.EffectState{"", spec.EffectReserved, "done", "SUCCEEDED"} {
		add(fmt.Sprintf("RecordEffect state %q", st), func() error {
			_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1", State: st})
			return err
		})
	}
	for _, st := range []spec.EffectState{"", spec.EffectReserved, spec.EffectUnknown} {
		add(fmt.Sprintf("ReconcileEffect state %q", st), func() error {
			_, err := e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1", State: st})
			return err
		})
	}
	for _, v := range []string{repeat('p', spec.MaxProviderBytes+1), "a b", "p\x00", "pé"} {
		add(fmt.Sprintf("RecordEffect provider ref %q", trunc(v)), func() error {
			_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1",
				State: spec.EffectSucceeded, ProviderRef: v})
			return err
		})
		add(fmt.Sprintf("ReconcileEffect provider ref %q", trunc(v)), func() error {
			_, err := e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: l.Ref(), Step: "charge", Key: "c-1",
				State: spec.EffectSucceeded, ProviderRef: v})
			return err
		})
	}

	// Reads.
	reads := map[string]func(tenant, id string) error{
		"GetRun":   func(tn, id string) error { _, err := e.s.GetRun(e.ctx, tn, id); return err },
		"GetJob":   func(tn, id string) error { _, err := e.s.GetJob(e.ctx, tn, id); return err },
		"Events":   func(tn, id string) error { _, err := e.s.Events(e.ctx, tn, id); return err },
		"Attempts": func(tn, id string) error { _, err := e.s.Attempts(e.ctx, tn, id); return err },
		"Effects":  func(tn, id string) error { _, err := e.s.Effects(e.ctx, tn, id); return err },
	}
	for name, read := range reads {
		for _, v := range badTenants {
			add(fmt.Sprintf("%s tenant %q", name, v), func() error { return read(v, "r1") })
		}
		for _, v := range badRunIDs {
			add(fmt.Sprintf("%s run id %q", name, v), func() error { return read("acme", v) })
		}
	}

	before := e.snap()
	for _, c := range calls {
		checkCode(t, c.name, c.fn(), spec.CodeInvalidArgument)
	}
	e.unchanged("invalid requests", before)
	if len(calls) < 300 {
		t.Fatalf("only %d invalid requests were tried; the table lost cases", len(calls))
	}
}

func trunc(s string) string {
	if len(s) > 20 {
		return s[:20] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}

// limitCase is one size limit: the request at the limit succeeds, one byte
// (or unit) past it is invalid_argument and writes nothing.
type limitCase struct {
	name    string
	over    func() error
	atLimit func() error
}

func testSizeLimitsAreExact(t *testing.T, f Factory) {
	e := newEnv(t, f)
	n := 0
	fresh := func() string { n++; return fmt.Sprintf("run-%d", n) }
	createWith := func(mod func(*spec.CreateRunRequest)) func() error {
		return func() error {
			r := req("acme", fresh())
			mod(&r)
			_, err := e.s.CreateRun(e.ctx, r)
			return err
		}
	}
	jsonString := func(total int) []byte { return []byte(`"` + repeat('x', total-2) + `"`) }
	// [1e20,1e20,…] is short, but each 1e20 canonicalizes to 21 digits.
	expanding := func(items int) []byte {
		return []byte("[" + strings.TrimSuffix(strings.Repeat("1e20,", items), ",") + "]")
	}
	cases := []limitCase{
		{"tenant bytes",
			createWith(func(r *spec.CreateRunRequest) { r.Tenant = repeat('t', spec.MaxTenantBytes+1) }),
			createWith(func(r *spec.CreateRunRequest) { r.Tenant = repeat('t', spec.MaxTenantBytes) })},
		{"run id bytes",
			createWith(func(r *spec.CreateRunRequest) { r.RunID = repeat('r', spec.MaxRunIDBytes+1) }),
			createWith(func(r *spec.CreateRunRequest) { r.RunID = repeat('r', spec.MaxRunIDBytes) })},
		{"idempotency key bytes",
			createWith(func(r *spec.CreateRunRequest) { r.IdempotencyKey = repeat('k', spec.MaxKeyBytes+1) }),
			createWith(func(r *spec.CreateRunRequest) { r.IdempotencyKey = repeat('k', spec.MaxKeyBytes) })},
		{"payload bytes",
			createWith(func(r *spec.CreateRunRequest) { r.Payload = jsonString(spec.MaxPayloadBytes + 1) }),
			createWith(func(r *spec.CreateRunRequest) { r.Payload = jsonString(spec.MaxPayloadBytes) })},
		{"payload bytes before canonicalization (whitespace counts)",
			createWith(func(r *spec.CreateRunRequest) { r.Payload = append([]byte(" "), jsonString(spec.MaxPayloadBytes)...) }),
			createWith(func(r *spec.CreateRunRequest) { r.Payload = append([]byte(" "), jsonString(spec.MaxPayloadBytes-1)...) })},
		{"payload bytes after canonicalization",
			// n items are 5n+1 bytes raw and 22n+1 canonical: 3120 items are
			// 15_601 bytes raw but 68_641 canonical; 2978 items are 65_517 canonical.
			createWith(func(r *spec.CreateRunRequest) { r.Payload = expanding(3120) }),
			createWith(func(r *spec.CreateRunRequest) { r.Payload = expanding(2978) })},
		{"max attempts",
			createWith(func(r *spec.CreateRunRequest) { r.MaxAttempts = 26 }),
			createWith(func(r *spec.CreateRunRequest) { r.MaxAttempts = 25 })},
		{"timeout",
			createWith(func(r *spec.CreateRunRequest) { r.TimeoutMs = 86_400_001 }),
			createWith(func(r *spec.CreateRunRequest) { r.TimeoutMs = 86_400_000 })},
		{"claim worker bytes",
			func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: repeat('w', spec.MaxWorkerBytes+1), LeaseMs: 1000, Limit: 1})
				return err
			},
			func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: repeat('w', spec.MaxWorkerBytes), LeaseMs: 1000, Limit: 1})
				return err
			}},
		{"claim lease ms",
			func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: e.cfg.MaxLeaseMs + 1, Limit: 1})
				return err
			},
			func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: e.cfg.MaxLeaseMs, Limit: 1})
				return err
			}},
		{"claim limit",
			func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 1000, Limit: spec.MaxBatch + 1})
				return err
			},
			func() error {
				_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 1000, Limit: spec.MaxBatch})
				return err
			}},
		{"reap limit",
			func() error {
				_, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: "acme", Limit: spec.MaxBatch + 1})
				return err
			},
			func() error {
				_, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: "acme", Limit: spec.MaxBatch})
				return err
			}},
		{"purge limit",
			func() error {
				_, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: spec.MaxBatch + 1})
				return err
			},
			func() error {
				_, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: spec.MaxBatch})
				return err
			}},
		{"purge runs limit",
			func() error {
				_, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: spec.MaxBatch + 1})
				return err
			},
			func() error {
				_, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: spec.MaxBatch})
				return err
			}},
	}
	for _, c := range cases {
		before := e.snap()
		checkCode(t, c.name+": one past the limit", c.over(), spec.CodeInvalidArgument)
		e.unchanged(c.name+": one past the limit", before)
		mustOK(t, c.name+": at the limit", c.atLimit())
	}
	// The payload at the limit is stored and read back byte for byte.
	var big spec.Run
	for _, r := range e.snap().Runs {
		if len(r.Payload) == spec.MaxPayloadBytes {
			big = r
		}
	}
	if big.ID == "" {
		t.Fatalf("no run holds the %d-byte payload", spec.MaxPayloadBytes)
	}
	mustEqual(t, "the largest payload read back", e.getRun("acme", big.ID).Payload, string(jsonString(spec.MaxPayloadBytes)))

	// Limits on guarded writes, on a claimed run.
	e.set(t0 + 1)
	one := req("acme", "zz-limits")
	one.MaxAttempts = 25
	e.create(one)
	ls := e.claim("acme", "w", 60_000, spec.MaxBatch)
	var l spec.Lease
	for _, x := range ls {
		if x.RunID == "zz-limits" {
			l = x
		}
	}
	if l.RunID == "" {
		t.Fatalf("zz-limits was not claimed: %+v", ls)
	}
	guarded := []limitCase{
		{"effect step bytes",
			func() error {
				_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: repeat('s', spec.MaxStepBytes+1), Key: "k"})
				return err
			},
			func() error {
				_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: repeat('s', spec.MaxStepBytes), Key: "k"})
				return err
			}},
		{"effect key bytes",
			func() error {
				_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "s", Key: repeat('k', spec.MaxKeyBytes+1)})
				return err
			},
			func() error {
				_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "s", Key: repeat('k', spec.MaxKeyBytes)})
				return err
			}},
		{"provider ref bytes",
			func() error {
				_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "s", Key: repeat('k', spec.MaxKeyBytes),
					State: spec.EffectSucceeded, ProviderRef: repeat('p', spec.MaxProviderBytes+1)})
				return err
			},
			func() error {
				_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "s", Key: repeat('k', spec.MaxKeyBytes),
					State: spec.EffectSucceeded, ProviderRef: repeat('p', spec.MaxProviderBytes)})
				return err
			}},
		{"renew lease ms",
			func() error {
				_, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: e.cfg.MaxLeaseMs + 1})
				return err
			},
			func() error {
				_, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: e.cfg.MaxLeaseMs})
				return err
			}},
		{"retry error code bytes",
			func() error {
				_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: repeat('e', spec.MaxCodeBytes+1)})
				return err
			},
			func() error {
				_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: repeat('e', spec.MaxCodeBytes)})
				return err
			}},
	}
	for _, c := range guarded {
		before := e.snap()
		checkCode(t, c.name+": one past the limit", c.over(), spec.CodeInvalidArgument)
		e.unchanged(c.name+": one past the limit", before)
		mustOK(t, c.name+": at the limit", c.atLimit())
	}
	mustEqual(t, "stored error code", e.getJob("acme", "zz-limits").LastErrorCode, repeat('e', spec.MaxCodeBytes))

	// Result, fail code, cancel reason and replay actor, each on its own run.
	e.set(t0 + 1_000_000)
	for _, id := range []string{"zz-result", "zz-fail", "zz-reason"} {
		e.newRun("acme", id)
	}
	lease := func(id string) spec.Lease {
		for _, x := range e.claim("acme", "w", 60_000, spec.MaxBatch) {
			if x.RunID == id {
				return x
			}
		}
		t.Fatalf("%s not claimable", id)
		return spec.Lease{}
	}
	lr := lease("zz-result")
	lf := e.getJob("acme", "zz-fail")
	final := []limitCase{
		{"result bytes",
			func() error {
				_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: lr.Ref(), Result: jsonString(spec.MaxPayloadBytes + 1)})
				return err
			},
			func() error {
				_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: lr.Ref(), Result: jsonString(spec.MaxPayloadBytes)})
				return err
			}},
		{"fail code bytes",
			func() error {
				_, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: spec.LeaseRef{Tenant: "acme", RunID: "zz-fail", Owner: "w", Generation: lf.Generation},
					ErrorCode: repeat('e', spec.MaxCodeBytes+1)})
				return err
			},
			func() error {
				_, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: spec.LeaseRef{Tenant: "acme", RunID: "zz-fail", Owner: "w", Generation: lf.Generation},
					ErrorCode: repeat('e', spec.MaxCodeBytes)})
				return err
			}},
		{"cancel reason bytes",
			func() error {
				_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "zz-reason", Reason: repeat('r', spec.MaxCodeBytes+1)})
				return err
			},
			func() error {
				_, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "zz-reason", Reason: repeat('r', spec.MaxCodeBytes)})
				return err
			}},
		{"replay actor bytes",
			func() error {
				_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "zz-fail", NewRunID: "zz-fail-r", Actor: repeat('a', spec.MaxWorkerBytes+1)})
				return err
			},
			func() error {
				_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "zz-fail", NewRunID: "zz-fail-r", Actor: repeat('a', spec.MaxWorkerBytes)})
				return err
			}},
	}
	for _, c := range final {
		before := e.snap()
		checkCode(t, c.name+": one past the limit", c.over(), spec.CodeInvalidArgument)
		e.unchanged(c.name+": one past the limit", before)
		mustOK(t, c.name+": at the limit", c.atLimit())
	}
	mustEqual(t, "stored result", e.getRun("acme", "zz-result").Result, string(jsonString(spec.MaxPayloadBytes)))
	mustEqual(t, "stored reason", e.getRun("acme", "zz-reason").ErrorCode, repeat('r', spec.MaxCodeBytes))
	mustEqual(t, "stored replay audit", e.events("acme", "zz-fail-r")[0].Payload,
		spec.QueuedPayload("zz-fail", repeat('a', spec.MaxWorkerBytes), 1))
}

// writes returns one valid call of every writing operation, for a store with
// a failed run "dead" and run "r1" claimed by l. Run in order, every call
// gets past validation; the later lease writes find the lease requeued.
func writes(e *env, l spec.Lease) []call {
	return []call{
		{"CreateRun", func() error { _, err := e.s.CreateRun(e.ctx, req("acme", "fresh")); return err }},
		{"Claim", func() error {
			_, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 1000, Limit: 1})
			return err
		}},
		{"Renew", func() error { _, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 1000}); return err }},
		{"ReserveEffect", func() error {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: l.Ref(), Step: "s", Key: "k"})
			return err
		}},
		{"RecordEffect", func() error {
			_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "s", Key: "k", State: spec.EffectUnknown})
			return err
		}},
		{"ReconcileEffect", func() error {
			_, err := e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: l.Ref(), Step: "s", Key: "k", State: spec.EffectFailed})
			return err
		}},
		{"Retry", func() error {
			_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: "x"})
			return err
		}},
		{"Release", func() error { _, err := e.s.Release(e.ctx, spec.ReleaseRequest{Lease: l.Ref()}); return err }},
		{"Complete", func() error { _, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref()}); return err }},
		{"Fail", func() error { _, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: l.Ref(), ErrorCode: "x"}); return err }},
		{"Cancel", func() error { _, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1"}); return err }},
		{"Reap", func() error { _, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: "acme", Limit: 1}); return err }},
		{"PurgeIdempotency", func() error { _, err := e.s.PurgeIdempotency(e.ctx, spec.PurgeRequest{Limit: 1}); return err }},
		{"PurgeRuns", func() error {
			_, err := e.s.PurgeRuns(e.ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 1})
			return err
		}},
		{"Replay", func() error {
			_, err := e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "dead", NewRunID: "dead-r", Actor: "ops"})
			return err
		}},
		{"ClaimOutbox", func() error {
			_, err := e.s.ClaimOutbox(e.ctx, spec.ClaimOutboxRequest{Relay: "relay", LeaseMs: 1000, Limit: 1})
			return err
		}},
		{"MarkDelivered", func() error {
			_, err := e.s.MarkDelivered(e.ctx, spec.MarkDeliveredRequest{Messages: []spec.OutboxKey{{Tenant: "acme", RunID: "r1", Seq: 1}}})
			return err
		}},
	}
}

func testNegativeClockRejected(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.failedRun("acme", "dead")
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 60_000)
	before := e.snap()
	for _, now := range []int64{-1, math.MinInt64} {
		e.set(now)
		for _, c := range writes(e, l) {
			checkCode(t, fmt.Sprintf("%s at now %d", c.name, now), c.fn(), spec.CodeInvalidArgument)
		}
	}
	e.unchanged("writes with a negative clock", before)
	// Reads take no clock reading, so they still work.
	mustEqual(t, "GetRun with a negative clock", e.getRun("acme", "r1"), before.Runs[1])
}

func testOverflowingTimesRejected(t *testing.T, f Factory) {
	// A short retention so that a run can be admitted near the end of time.
	e := newEnv(t, f, func(c *spec.Config) { c.IdempotencyRetentionMs = 1000 })
	const end = math.MaxInt64
	base := int64(end - 10_000)

	e.set(base)
	before := e.snap()
	// now + timeout overflows.
	_, err := e.s.CreateRun(e.ctx, req("acme", "r0"))
	mustCode(t, "CreateRun whose deadline overflows", err, spec.CodeInvalidArgument)
	e.set(end)
	r := req("acme", "r0")
	r.TimeoutMs = 1
	_, err = e.s.CreateRun(e.ctx, r)
	mustCode(t, "CreateRun at MaxInt64", err, spec.CodeInvalidArgument)
	e.unchanged("overflowing creates", before)

	// now + delay overflows, and so does the deadline it must come before.
	e.set(base)
	r = req("acme", "r0")
	r.TimeoutMs, r.DelayMs = 9_000, math.MaxInt64-base+1
	_, err = e.s.CreateRun(e.ctx, r)
	mustCode(t, "CreateRun whose available time overflows", err, spec.CodeInvalidArgument)
	e.unchanged("overflowing creates", before)

	// Admitted with a deadline 1 s before the end of time.
	e.set(base)
	r = req("acme", "r1")
	r.TimeoutMs = 9_000
	run := e.create(r)
	mustEqual(t, "deadline near the end of time", run.DeadlineAt, int64(end-1000))

	before = e.snap()
	_, err = e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 10_001, Limit: 1})
	mustCode(t, "Claim whose expiry overflows", err, spec.CodeInvalidArgument)
	e.unchanged("overflowing claim", before)
	l := e.claimOne("acme", "r1", "w", 9_999) // expires MaxInt64-1
	mustEqual(t, "lease expiry", l.ExpiresAt, int64(end-1))

	e.set(base + 5_000)
	before = e.snap()
	_, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 5_001})
	mustCode(t, "Renew whose expiry overflows", err, spec.CodeInvalidArgument)
	// Not overflowing, but past the deadline.
	_, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 4_001})
	mustCode(t, "Renew past a deadline near the end of time", err, spec.CodeDeadlineExceeded)
	// The lease is still valid at MaxInt64-1000, but now + backoff overflows.
	e.set(end - 1000)
	_, err = e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: "flaky", RetryAfterMs: 2000})
	mustCode(t, "Retry whose available_at overflows", err, spec.CodeInvalidArgument)
	e.unchanged("overflowing lease writes", before)

	// Fail needs no arithmetic; then the replay's deadline overflows.
	e.fail(l, "bad")
	before = e.snap()
	_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "r1", NewRunID: "r2", Actor: "ops"})
	mustCode(t, "Replay whose deadline overflows", err, spec.CodeInvalidArgument)
	e.unchanged("overflowing replay", before)

	// With the default retention (a day), the idempotency expiry overflows
	// even when the deadline does not.
	e2 := newEnv(t, f)
	e2.set(end - 100_000)
	r = req("acme", "r1")
	r.TimeoutMs = 1000
	_, err = e2.s.CreateRun(e2.ctx, r)
	mustCode(t, "CreateRun whose idempotency expiry overflows", err, spec.CodeInvalidArgument)
	mustEqual(t, "runs after an overflowing create", len(e2.snap().Runs), 0)
}

func testClockReadOncePerWrite(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.failedRun("acme", "dead")
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w", 60_000)
	check := func(name string, fn func() error, want int64) {
		t.Helper()
		_, before := e.rec.Last()
		err := fn()
		_, after := e.rec.Last()
		if after-before != want {
			t.Errorf("%s (result %v): read the clock %d times, want %d", name, err, after-before, want)
		}
	}
	// Successful writes, and writes refused after validation, read it once.
	for _, c := range writes(e, l) {
		check(c.name, c.fn, 1)
	}
	stale := l.Ref()
	stale.Generation = 99
	check("refused Complete", func() error {
		_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: stale})
		return err
	}, 1)
	// Reads never read it.
	check("GetRun", func() error { _, err := e.s.GetRun(e.ctx, "acme", "r1"); return err }, 0)
	check("GetJob", func() error { _, err := e.s.GetJob(e.ctx, "acme", "r1"); return err }, 0)
	check("Events", func() error { _, err := e.s.Events(e.ctx, "acme", "r1"); return err }, 0)
	check("Attempts", func() error { _, err := e.s.Attempts(e.ctx, "acme", "r1"); return err }, 0)
	check("Effects", func() error { _, err := e.s.Effects(e.ctx, "acme", "r1"); return err }, 0)
	check("Snapshot", func() error { _, err := e.s.Snapshot(e.ctx); return err }, 0)
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
)

// t0 is where every test's manual clock starts: far enough from zero that
// "now - something" never goes negative by accident, small enough to read.
const t0 = 1_000_000

// env is one test's store with the clock, random source and hook it was
// opened with. Every expectation in the suite is computed from these, so
// every expectation is exact.
type env struct {
	t     testing.TB
	ctx   context.Context
	h     Handle
	s     spec.Store
	cfg   spec.Config
	clock *clock.Manual
	rec   *clock.Recorder
	rnd   *scriptedRandom
	hook  *hookSwitch
	// rawWrites is set by tests that insert rows past the contract (through
	// Exec); the end-of-test invariant check would rightly reject them.
	rawWrites bool
}

// newEnv opens a fresh store under DefaultConfig as changed by mods, with a
// manual clock at t0, a scripted random source and a switchable hook. When the
// test ends it checks every snapshot invariant and that Snapshot agrees with
// the per-run reads.
func newEnv(t testing.TB, f Factory, mods ...func(*spec.Config)) *env {
	t.Helper()
	cfg := spec.DefaultConfig()
	for _, m := range mods {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("storetest: bad test config: %v", err)
	}
	manual := clock.NewManual(t0)
	e := &env{
		t:     t,
		ctx:   context.Background(),
		cfg:   cfg,
		clock: manual,
		rec:   &clock.Recorder{Source: manual},
		rnd:   &scriptedRandom{},
		hook:  &hookSwitch{},
	}
	e.h = f(t, Options{Config: cfg, Clock: e.rec, Random: e.rnd, Hook: e.hook.call})
	e.s = e.h.Store
	// Registered after the factory's cleanups, so it runs before the store closes.
	t.Cleanup(func() {
		if !e.rawWrites {
			e.verify()
		}
	})
	return e
}

// verify checks the invariants of SPEC.md on a snapshot and that Snapshot
// returns exactly what the per-run reads return.
func (e *env) verify() {
	e.t.Helper()
	snap, err := e.s.Snapshot(e.ctx)
	if err != nil {
		e.t.Errorf("final Snapshot: %v", err)
		return
	}
	for _, v := range invariantViolations(snap) {
		e.t.Errorf("invariant violated in the final snapshot: %s", v)
	}
	e.checkReadsMatch(snap)
}

// set moves the test clock.
func (e *env) set(now int64) { e.clock.Set(now) }

// now reads the test clock without counting it as a store read.
func (e *env) now() int64 { return e.clock.Now() }

// snap returns a snapshot or fails the test.
func (e *env) snap() spec.Snapshot {
	e.t.Helper()
	s, err := e.s.Snapshot(e.ctx)
	if err != nil {
		e.t.Fatalf("Snapshot: %v", err)
	}
	return s
}

// unchanged fails the test if the store's rows differ from before.
func (e *env) unchanged(what string, before spec.Snapshot) {
	e.t.Helper()
	if d := diff(e.snap(), before); d != "" {
		e.t.Errorf("%s: the store changed, but nothing should have been written:\n%s", what, d)
	}
}

// req is a valid CreateRunRequest for operation "work" with key "k-"+runID.
func req(tenant, runID string) spec.CreateRunRequest {
	return spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: "k-" + runID, RunID: runID,
		Payload: []byte(`{"n":1}`)}
}

// create admits req and fails the test unless a new run was created.
func (e *env) create(r spec.CreateRunRequest) spec.Run {
	e.t.Helper()
	res, err := e.s.CreateRun(e.ctx, r)
	if err != nil {
		e.t.Fatalf("CreateRun(%s/%s, key %q): want a new run, got error %v", r.Tenant, r.RunID, r.IdempotencyKey, err)
	}
	if res.Replayed {
		e.t.Fatalf("CreateRun(%s/%s, key %q): want a new run, got a replay of %s", r.Tenant, r.RunID, r.IdempotencyKey, res.Run.ID)
	}
	return res.Run
}

// newRun creates run id for tenant with req's defaults.
func (e *env) newRun(tenant, id string) spec.Run {
	e.t.Helper()
	return e.create(req(tenant, id))
}

// claim claims up to limit jobs and fails the test on an error.
func (e *env) claim(tenant, worker string, leaseMs int64, limit int) []spec.Lease {
	e.t.Helper()
	ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: leaseMs, Limit: limit})
	if err != nil {
		e.t.Fatalf("Claim(%s, %s, %d ms, limit %d): %v", tenant, worker, leaseMs, limit, err)
	}
	return ls
}

// claimOne claims exactly one job, which must be runID's.
func (e *env) claimOne(tenant, runID, worker string, leaseMs int64) spec.Lease {
	e.t.Helper()
	ls := e.claim(tenant, worker, leaseMs, 1)
	if len(ls) != 1 || ls[0].RunID != runID {
		e.t.Fatalf("Claim(%s, %s): want exactly run %s, got %+v", tenant, worker, runID, ls)
	}
	return ls[0]
}

// claimNone asserts that a claim finds nothing.
func (e *env) claimNone(tenant, worker string) {
	e.t.Helper()
	if ls := e.claim(tenant, worker, 10_000, spec.MaxBatch); len(ls) != 0 {
		e.t.Fatalf("Claim(%s, %s) at %d: want no lease, got %+v", tenant, worker, e.now(), ls)
	}
}

func (e *env) getRun(tenant, id string) spec.Run {
	e.t.Helper()
	r, err := e.s.GetRun(e.ctx, tenant, id)
	if err != nil {
		e.t.Fatalf("GetRun(%s, %s): %v", tenant, id, err)
	}
	return r
}

func (e *env) getJob(tenant, id string) spec.Job {
	e.t.Helper()
	j, err := e.s.GetJob(e.ctx, tenant, id)
	if err != nil {
		e.t.Fatalf("GetJob(%s, %s): %v", tenant, id, err)
	}
	return j
}

func (e *env) events(tenant, id string) []spec.Event {
	e.t.Helper()
	ev, err := e.s.Events(e.ctx, tenant, id)
	if err != nil {
		e.t.Fatalf("Events(%s, %s): %v", tenant, id, err)
	}
	return ev
}

func (e *env) attempts(tenant, id string) []spec.Attempt {
	e.t.Helper()
	a, err := e.s.Attempts(e.ctx, tenant, id)
	if err != nil {
		e.t.Fatalf("Attempts(%s, %s): %v", tenant, id, err)
	}
	return a
}

func (e *env) effects(tenant, id string) []spec.Effect {
	e.t.Helper()
	a, err := e.s.Effects(e.ctx, tenant, id)
	if err != nil {
		e.t.Fatalf("Effects(%s, %s): %v", tenant, id, err)
	}
	return a
}

// complete completes under l and fails the test on an error.
func (e *env) complete(l spec.Lease, result string) spec.Run {
	e.t.Helper()
	var b []byte
	if result != "" {
		b = []byte(result)
	}
	r, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: b})
	if err != nil {
		e.t.Fatalf("Complete(%s): %v", l.Ref(), err)
	}
	return r
}

// fail fails the run under l with code.
func (e *env) fail(l spec.Lease, code string) spec.Run {
	e.t.Helper()
	r, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: l.Ref(), ErrorCode: code})
	if err != nil {
		e.t.Fatalf("Fail(%s): %v", l.Ref(), err)
	}
	return r
}

// retry reports a retryable failure under l.
func (e *env) retry(l spec.Lease, code string, retryAfterMs int64) spec.Job {
	e.t.Helper()
	j, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: l.Ref(), ErrorCode: code, RetryAfterMs: retryAfterMs})
	if err != nil {
		e.t.Fatalf("Retry(%s): %v", l.Ref(), err)
	}
	return j
}

// cancel cancels a run.
func (e *env) cancel(tenant, id, reason string) spec.Run {
	e.t.Helper()
	r, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: tenant, RunID: id, Reason: reason})
	if err != nil {
		e.t.Fatalf("Cancel(%s, %s): %v", tenant, id, err)
	}
	return r
}

// failedRun creates run id, claims it and fails it with code "boom".
func (e *env) failedRun(tenant, id string) spec.Run {
	e.t.Helper()
	e.newRun(tenant, id)
	l := e.claimOne(tenant, id, "w-setup", 10_000)
	return e.fail(l, "boom")
}

// wantRun is the run CreateRun must commit for r (with default policy
// fields) at now.
func (e *env) wantRun(r spec.CreateRunRequest, now int64) spec.Run {
	e.t.Helper()
	n, err := e.cfg.NormalizeCreate(r, now)
	if err != nil {
		e.t.Fatalf("wantRun: %v", err)
	}
	return spec.Run{Tenant: n.Tenant, ID: n.RunID, Operation: n.Operation, State: spec.RunQueued, Version: 1, LastSeq: 1,
		Payload: n.Payload, Fingerprint: n.Fingerprint, MaxAttempts: n.MaxAttempts, CreatedAt: now, DeadlineAt: n.DeadlineAt}
}

// scriptedRandom is a deterministic spec.Random: it returns its script in a
// cycle (0 when the script is empty), reduced into [0, n), and records every
// bound it was asked for. It is safe for concurrent use.
type scriptedRandom struct {
	mu     sync.Mutex
	script []int64
	next   int
	bounds []int64
}

// Int64N implements spec.Random.
func (r *scriptedRandom) Int64N(n int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bounds = append(r.bounds, n)
	if len(r.script) == 0 || n <= 0 {
		return 0
	}
	v := r.script[r.next%len(r.script)]
	r.next++
	return v % n
}

// setScript replaces the script and forgets the recorded bounds.
func (r *scriptedRandom) setScript(vals ...int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.script, r.next, r.bounds = vals, 0, nil
}

// calls returns the bounds asked for since the last setScript.
func (r *scriptedRandom) calls() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.bounds...)
}

// errInjected is what an armed hook returns.
var errInjected = errors.New("storetest: injected failure")

// hookSwitch is a spec.Hook that fails one (op, point) while armed.
type hookSwitch struct {
	mu    sync.Mutex
	armed bool
	op    spec.Op
	point spec.HookPoint
	fired int
}

func (h *hookSwitch) call(_ context.Context, op spec.Op, point spec.HookPoint) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed && op == h.op && point == h.point {
		h.fired++
		return errInjected
	}
	return nil
}

// arm makes the hook fail op at point until disarm.
func (h *hookSwitch) arm(op spec.Op, point spec.HookPoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.op, h.point, h.fired = true, op, point, 0
}

// disarm turns the hook off and returns how often it fired.
func (h *hookSwitch) disarm() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = false
	return h.fired
}

// mustOK fails the test if err is not nil.
func mustOK(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: want success, got %v", what, err)
	}
}

// mustCode fails the test unless err carries code (a *spec.Error).
func mustCode(t testing.TB, what string, err error, code spec.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: want error %s, got success", what, code)
	}
	var se *spec.Error
	if !errors.As(err, &se) {
		t.Fatalf("%s: want a *spec.Error with code %s, got untyped error %T: %v", what, code, err, err)
	}
	if se.Code != code {
		t.Fatalf("%s: want code %s, got %s (%v)", what, code, se.Code, err)
	}
}

// mustCodeState is mustCode that also checks Error.State.
func mustCodeState(t testing.TB, what string, err error, code spec.Code, state spec.RunState) {
	t.Helper()
	mustCode(t, what, err, code)
	if got := spec.StateOf(err); got != state {
		t.Fatalf("%s: want error state %q, got %q (%v)", what, state, got, err)
	}
}

// checkCode is mustCode without stopping the test, for tables.
func checkCode(t testing.TB, what string, err error, code spec.Code) bool {
	t.Helper()
	if got := spec.CodeOf(err); got != code {
		t.Errorf("%s: want code %q, got %q (err: %v)", what, code, got, err)
		return false
	}
	return true
}

// mustEqual fails the test, naming every differing field, unless got equals want.
func mustEqual(t testing.TB, what string, got, want any) {
	t.Helper()
	if d := diff(got, want); d != "" {
		t.Fatalf("%s: not as expected:\n%s", what, d)
	}
}

// checkEqual is mustEqual without stopping the test.
func checkEqual(t testing.TB, what string, got, want any) {
	t.Helper()
	if d := diff(got, want); d != "" {
		t.Errorf("%s: not as expected:\n%s", what, d)
	}
}

// diff describes how got differs from want, field by field and element by
// element, or returns "" when they are equal. Nil and empty slices are equal:
// the contract says only that a read may return an empty list.
func diff(got, want any) string {
	var b strings.Builder
	diffValue(&b, "", reflect.ValueOf(got), reflect.ValueOf(want))
	return b.String()
}

func diffValue(b *strings.Builder, path string, got, want reflect.Value) {
	if !got.IsValid() || !want.IsValid() {
		if got.IsValid() != want.IsValid() {
			fmt.Fprintf(b, "  %s: got %v, want %v\n", pathOr(path), got, want)
		}
		return
	}
	if got.Type() != want.Type() {
		fmt.Fprintf(b, "  %s: got type %s, want %s\n", pathOr(path), got.Type(), want.Type())
		return
	}
	switch got.Kind() {
	case reflect.Struct:
		for i := 0; i < got.NumField(); i++ {
			diffValue(b, path+"."+got.Type().Field(i).Name, got.Field(i), want.Field(i))
		}
	case reflect.Slice:
		if got.Len() != want.Len() {
			fmt.Fprintf(b, "  %s: got %d elements, want %d\n    got:  %+v\n    want: %+v\n",
				pathOr(path), got.Len(), want.Len(), got.Interface(), want.Interface())
			return
		}
		for i := 0; i < got.Len(); i++ {
			diffValue(b, fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i))
		}
	default:
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			fmt.Fprintf(b, "  %s: got %#v, want %#v\n", pathOr(path), got.Interface(), want.Interface())
		}
	}
}

func pathOr(p string) string {
	if p == "" {
		return "value"
	}
	return strings.TrimPrefix(p, ".")
}

// repeat returns n copies of c.
func repeat(c byte, n int) string { return strings.Repeat(string(c), n) }

package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// Admission inside the application's transaction (spec.TxAdmitter, the
// table's create_run_tx). Each test is not applicable (CapCreateRunTx) when
// the store does not implement it.

func init() {
	register("AdmitInTxEqualsCreateRun", testAdmitInTxEqualsCreateRun)
	register("AdmitInTxRollback", testAdmitInTxRollback)
	register("AdmitInTxAtomicity", testAdmitInTxAtomicity)
	register("ConcurrentAdmitInTx", testConcurrentAdmitInTx)
}

// txAdmitter returns the env's store as a spec.TxAdmitter, or stops the
// test as not applicable.
func (e *env) txAdmitter() spec.TxAdmitter {
	e.t.Helper()
	e.need(CapCreateRunTx)
	return e.s.(spec.TxAdmitter)
}

// testAdmitInTxEqualsCreateRun admits one request with CreateRun and an
// identical one (other key and run id, an outbox message, a delay) in a
// transaction that commits, at the same time, and compares every row; then
// the transaction's replay, conflict and already_exists are CreateRun's.
func testAdmitInTxEqualsCreateRun(t *testing.T, f Factory) {
	e := newEnv(t, f)
	a := e.txAdmitter()
	mk := func(id string) spec.CreateRunRequest {
		r := req("acme", id)
		r.DelayMs, r.Outbox = 500, []spec.Message{{Subject: "orders.created", Payload: []byte(`{"id":1}`)}}
		return r
	}
	e.set(t0 + 50)
	single, err := e.s.CreateRun(e.ctx, mk("a_single"))
	mustOK(t, "CreateRun", err)
	_, readsBefore := e.rec.Last()
	res, err := a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: mk("b_tx")})
	mustOK(t, "AdmitInTx of a new key, committed", err)
	if _, reads := e.rec.Last(); reads-readsBefore != 1 {
		t.Errorf("AdmitInTx read the clock %d times, want exactly once", reads-readsBefore)
	}
	mustEqual(t, "AdmitInTx's result", res, spec.CreateRunResult{Run: e.wantRun(mk("b_tx"), t0+50)})
	mustEqual(t, "CreateRun's result", single, spec.CreateRunResult{Run: e.wantRun(mk("a_single"), t0+50)})
	snap := e.snap()
	rows := func(id string) ([]any, spec.Job) {
		var out []any
		for _, ev := range snap.Events {
			if ev.RunID == id {
				ev.RunID = "x"
				out = append(out, ev)
			}
		}
		for _, m := range snap.Outbox {
			if m.RunID == id {
				m.RunID, m.ID = "x", ""
				out = append(out, m)
			}
		}
		for _, r := range snap.Idempotency {
			if r.RunID == id {
				r.RunID, r.Key = "x", ""
				out = append(out, r)
			}
		}
		job := e.getJob("acme", id)
		job.RunID = "x"
		return out, job
	}
	wantRows, wantJob := rows("a_single")
	gotRows, gotJob := rows("b_tx")
	mustEqual(t, "events, outbox and record (in a transaction vs CreateRun)", gotRows, wantRows)
	mustEqual(t, "job (in a transaction vs CreateRun)", gotJob, wantJob)

	before := e.snap()
	again := mk("b_tx")
	again.RunID = "b_again"
	res, err = a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: again})
	mustOK(t, "AdmitInTx of the same request again", err)
	mustEqual(t, "its replay", res, spec.CreateRunResult{Run: e.wantRun(mk("b_tx"), t0+50), Replayed: true})
	other := again
	other.Payload = []byte(`{"n":2}`)
	_, err = a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: other})
	mustCode(t, "AdmitInTx of another request under the key", err, spec.CodeIdempotencyConflict)
	_, err = a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: withKey(mk("a_single"), "k-fresh")})
	mustCode(t, "AdmitInTx of a taken run id under another key", err, spec.CodeAlreadyExists)
	bad := mk("c_bad")
	bad.Payload = []byte(`{"a":1,"a":2}`)
	_, err = a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: bad})
	mustCode(t, "AdmitInTx of an invalid payload", err, spec.CodeInvalidArgument)
	e.unchanged("a replay and three refusals in transactions", before)
}

// testAdmitInTxRollback: an admission whose transaction rolls back answers
// exactly what CreateRun would (the run it would create) and leaves no run,
// no event, no job, no record and no message; a later admission of the key
// creates the run. A rolled-back replay changes nothing either.
func testAdmitInTxRollback(t *testing.T, f Factory) {
	e := newEnv(t, f)
	a := e.txAdmitter()
	r := req("acme", "r1")
	r.Outbox = []spec.Message{{Subject: "orders.created", Payload: []byte(`{"id":1}`)}}
	before := e.snap()
	e.set(t0 + 10)
	res, err := a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: r, Rollback: true})
	mustOK(t, "AdmitInTx rolled back", err)
	mustEqual(t, "the rolled-back admission's answer", res, spec.CreateRunResult{Run: e.wantRun(r, t0+10)})
	e.unchanged("an admission whose transaction rolled back", before)

	e.set(t0 + 20)
	r2 := r
	r2.RunID = "r2"
	created, err := e.s.CreateRun(e.ctx, r2)
	mustOK(t, "CreateRun of the key after the rollback", err)
	mustEqual(t, "CreateRun of the key after the rollback", created, spec.CreateRunResult{Run: e.wantRun(r2, t0+20)})

	before = e.snap()
	res, err = a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: r, Rollback: true})
	mustOK(t, "a replay in a transaction that rolls back", err)
	mustEqual(t, "the rolled-back replay's answer", res, spec.CreateRunResult{Run: created.Run, Replayed: true})
	e.unchanged("a replay whose transaction rolled back", before)
}

// testAdmitInTxAtomicity: a failure after the admission, before the commit
// (the hook at before_commit), rolls the whole transaction back and is the
// hook's error; one after the commit (after_commit) is unknown_outcome,
// the admission committed, and its retry replays it.
func testAdmitInTxAtomicity(t *testing.T, f Factory) {
	e := newEnv(t, f, retentionConfig)
	a := e.txAdmitter()
	e.need(CapHooks)
	e.create(withKey(req("acme", "old"), "k-old"))
	e.set(t0 + 6_000) // k-old expired: the admission deletes it
	r := withKey(req("acme", "r1"), "k-old")
	before := e.snap()
	e.hook.arm(spec.OpCreateRunTx, spec.BeforeCommit)
	_, err := a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: r})
	if fired := e.hook.disarm(); fired != 1 {
		t.Fatalf("the before_commit hook of create_run_tx fired %d times, want 1", fired)
	}
	if !errors.Is(err, errInjected) {
		t.Fatalf("AdmitInTx failed before commit: want the hook's error, got %v", err)
	}
	e.unchanged("AdmitInTx rolled back before commit", before)

	e.hook.arm(spec.OpCreateRunTx, spec.AfterCommit)
	_, err = a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: r})
	e.hook.disarm()
	mustCode(t, "AdmitInTx whose answer was lost after commit", err, spec.CodeUnknownOutcome)
	mustEqual(t, "run r1 after the lost answer", e.getRun("acme", "r1").State, spec.RunQueued)
	res, err := a.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: r})
	mustOK(t, "AdmitInTx retried after the lost answer", err)
	mustEqual(t, "the retry", res.Replayed && res.Run.ID == "r1", true)
}

// testConcurrentAdmitInTx holds an admission of a key inside its
// transaction (before_commit), starts a CreateRun of the key on a second
// store, which must wait for it (it reports a lock wait), and then ends the
// transaction: committed, the CreateRun replays its run or conflicts with
// it; rolled back, the CreateRun creates the run under its own id.
func testConcurrentAdmitInTx(t *testing.T, f Factory) {
	probe := newEnv(t, f)
	probe.txAdmitter()
	probe.need(CapHooks)
	probe.need(CapLockWaits)
	for _, c := range []struct {
		name     string
		rollback bool
		payload  string
		wantCode spec.Code
		wantRun  string
		replay   bool
	}{
		{name: "committed, the same request: replay", payload: `{"n":1}`, wantRun: "a", replay: true},
		{name: "committed, another request: idempotency_conflict", payload: `{"n":2}`, wantCode: spec.CodeIdempotencyConflict},
		{name: "rolled back: created", rollback: true, payload: `{"n":2}`, wantRun: "b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, f)
			arrived, release := make(chan struct{}), make(chan struct{})
			var arrive, let sync.Once
			letGo := func() { let.Do(func() { close(release) }) }
			defer letGo()
			hold := func(ctx context.Context, op spec.Op, point spec.HookPoint) error {
				if op != spec.OpCreateRunTx || point != spec.BeforeCommit {
					return nil
				}
				arrive.Do(func() { close(arrived) })
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			holder := e.h.OpenWith(t, Options{Config: e.cfg, Clock: e.rec, Random: e.rnd, Hook: hold}).(spec.TxAdmitter)
			waiter := e.h.OpenWith(t, Options{Config: e.cfg, Clock: e.rec, Random: e.rnd})
			first := withKey(req("acme", "a"), "one-key")
			admitted := make(chan error, 1)
			go func() {
				res, err := holder.AdmitInTx(e.ctx, spec.CreateRunTxRequest{Request: first, Rollback: c.rollback})
				if err == nil && (res.Replayed || res.Run.ID != "a") {
					err = errors.New("the held admission did not create run a")
				}
				admitted <- err
			}()
			select {
			case <-arrived:
			case err := <-admitted:
				t.Fatalf("AdmitInTx returned (%v) without reaching before_commit", err)
			case <-time.After(hang.Patience()):
				t.Fatal(hang.Message("AdmitInTx to reach before_commit", hang.Patience()))
			}
			second := withKey(req("acme", "b"), "one-key")
			second.Payload = []byte(c.payload)
			type outcome struct {
				res spec.CreateRunResult
				err error
			}
			created := make(chan outcome, 1)
			go func() {
				res, err := waiter.CreateRun(e.ctx, second)
				created <- outcome{res, err}
			}()
			hang.Until(t, "the second admission to wait for the open transaction", func() bool {
				n, err := waiter.(spec.LockWaitReporter).LockWaits(e.ctx)
				mustOK(t, "LockWaits of the second admission's store", err)
				select {
				case o := <-created:
					t.Fatalf("CreateRun of the key returned (%+v, %v) while its admission in a transaction was open", o.res, o.err)
				default:
				}
				return n == 1
			})
			letGo()
			mustOK(t, "the held admission", <-admitted)
			o := <-created
			checkCode(t, "the second admission", o.err, c.wantCode)
			if c.wantCode == "" && (o.res.Run.ID != c.wantRun || o.res.Replayed != c.replay) {
				t.Errorf("the second admission: %+v, want run %s, replayed %v", o.res, c.wantRun, c.replay)
			}
			var ids []string
			for _, r := range e.snap().Runs {
				ids = append(ids, r.ID)
			}
			want := []string{"a"}
			if c.rollback {
				want = []string{"b"}
			}
			mustEqual(t, "runs", ids, want)
		})
	}
}

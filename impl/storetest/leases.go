package storetest

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Leases: claim, expiry and reclaim, fencing of stale generations, renewal,
// release, and the generation's monotonicity.

func init() {
	register("ExpiredLeaseRecoveryAndStaleFencing", testExpiredLeaseRecoveryAndStaleFencing)
	register("SameWorkerStaleGeneration", testSameWorkerStaleGeneration)
	register("CurrentGenerationRenewal", testCurrentGenerationRenewal)
	register("ClaimOrderAndBatch", testClaimOrderAndBatch)
	register("ClaimEligibility", testClaimEligibility)
	register("Release", testRelease)
	register("GenerationNeverDecreases", testGenerationNeverDecreases)
	register("GuardedWritesOnMissingRun", testGuardedWritesOnMissingRun)
}

// guardedWrites returns every write made under a lease, each as a call
// through ref, for tests that check they all refuse alike.
func guardedWrites(e *env, ref spec.LeaseRef) map[string]func() error {
	return map[string]func() error{
		"Renew": func() error { _, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: ref, LeaseMs: 1000}); return err },
		"Complete": func() error {
			_, err := e.s.Complete(e.ctx, spec.CompleteRequest{Lease: ref, Result: []byte(`{"by":"stale"}`)})
			return err
		},
		"Retry": func() error {
			_, err := e.s.Retry(e.ctx, spec.RetryRequest{Lease: ref, ErrorCode: "flaky"})
			return err
		},
		"Fail":    func() error { _, err := e.s.Fail(e.ctx, spec.FailRequest{Lease: ref, ErrorCode: "bad"}); return err },
		"Release": func() error { _, err := e.s.Release(e.ctx, spec.ReleaseRequest{Lease: ref}); return err },
		"ReserveEffect": func() error {
			_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: ref, Step: "charge", Key: "fresh-key"})
			return err
		},
		"RecordEffect": func() error {
			_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: ref, Step: "charge", Key: "c-1",
				State: spec.EffectSucceeded, ProviderRef: "stale"})
			return err
		},
		"ReconcileEffect": func() error {
			_, err := e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: ref, Step: "charge", Key: "c-1",
				State: spec.EffectSucceeded, ProviderRef: "stale"})
			return err
		},
	}
}

// allRefused checks that every guarded write through ref fails with code
// (and state) and that none of them writes anything.
func allRefused(e *env, what string, ref spec.LeaseRef, code spec.Code, state spec.RunState) {
	e.t.Helper()
	before := e.snap()
	for name, call := range guardedWrites(e, ref) {
		err := call()
		if checkCode(e.t, what+": "+name, err, code) && spec.StateOf(err) != state {
			e.t.Errorf("%s: %s: want error state %q, got %q", what, name, state, spec.StateOf(err))
		}
	}
	e.unchanged(what, before)
}

func testExpiredLeaseRecoveryAndStaleFencing(t *testing.T, f Factory) {
	e := newEnv(t, f)
	created := e.newRun("acme", "r1")
	a := e.claimOne("acme", "r1", "worker-a", 10_000)
	mustEqual(t, "A's lease", a, spec.Lease{Tenant: "acme", RunID: "r1", Operation: "work", Owner: "worker-a", Generation: 1,
		ExpiresAt: t0 + 10_000, Attempt: 1, MaxAttempts: 3, Payload: `{"n":1}`, DeadlineAt: created.DeadlineAt})
	// A reserves an effect it then never records (it pauses).
	res, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: a.Ref(), Step: "charge", Key: "c-1"})
	mustOK(t, "A reserves", err)
	mustEqual(t, "A's decision", res.Decision, spec.DecisionProceed)

	// One millisecond before expiry the lease still holds: nobody else can claim.
	e.set(t0 + 9_999)
	e.claimNone("acme", "worker-b")
	// At expiry (expires_at <= now) B claims generation 2, attempt 2.
	e.set(t0 + 10_000)
	b := e.claimOne("acme", "r1", "worker-b", 10_000)
	mustEqual(t, "B's lease", b, spec.Lease{Tenant: "acme", RunID: "r1", Operation: "work", Owner: "worker-b", Generation: 2,
		ExpiresAt: t0 + 20_000, Attempt: 2, MaxAttempts: 3, Payload: `{"n":1}`, DeadlineAt: created.DeadlineAt})
	mustEqual(t, "attempts after the reclaim", e.attempts("acme", "r1"), []spec.Attempt{
		{Tenant: "acme", RunID: "r1", Generation: 1, Number: 1, Worker: "worker-a", ClaimedAt: t0, RenewedAt: t0,
			FinishedAt: t0 + 10_000, Outcome: spec.AttemptExpired},
		{Tenant: "acme", RunID: "r1", Generation: 2, Number: 2, Worker: "worker-b", ClaimedAt: t0 + 10_000, RenewedAt: t0 + 10_000,
			Outcome: spec.AttemptRunning},
	})
	mustEqual(t, "run after the reclaim", e.getRun("acme", "r1").Version, int64(2)) // queued->running once, reclaim changes nothing

	// A resumes: every write it makes is lost_lease and changes nothing.
	e.set(t0 + 10_001)
	allRefused(e, "stale generation 1 while B holds generation 2", a.Ref(), spec.CodeLostLease, "")
	// A forging B's generation under its own name is still refused.
	forged := b.Ref()
	forged.Owner = "worker-a"
	allRefused(e, "A with B's generation", forged, spec.CodeLostLease, "")

	// B completes: the only terminal event, naming generation 2.
	done := e.complete(b, `{"by":"b"}`)
	want := created
	want.State, want.Version, want.LastSeq, want.Result = spec.RunCompleted, 3, 2, `{"by":"b"}`
	mustEqual(t, "run completed by B", done, want)
	mustEqual(t, "events", e.events("acme", "r1"), []spec.Event{
		{Tenant: "acme", RunID: "r1", Seq: 1, Kind: spec.EventRunQueued, At: t0, Payload: "{}"},
		{Tenant: "acme", RunID: "r1", Seq: 2, Kind: spec.EventRunCompleted, At: t0 + 10_001, Payload: spec.CompletedPayload(2)},
	})
	mustEqual(t, "job", e.getJob("acme", "r1"), spec.Job{Tenant: "acme", RunID: "r1", Operation: "work", State: spec.JobCompleted,
		AvailableAt: t0, Generation: 2, Attempts: 2, MaxAttempts: 3})
	// After B's completion A is still lost_lease (a different generation
	// wins over the terminal state), and B itself sees the terminal state.
	allRefused(e, "stale generation 1 after completion", a.Ref(), spec.CodeLostLease, "")
	_, err = e.s.Complete(e.ctx, spec.CompleteRequest{Lease: b.Ref()})
	mustCodeState(t, "B completes twice", err, spec.CodeAlreadyTerminal, spec.RunCompleted)
	// A's reservation is still there, untouched, with A's generation.
	mustEqual(t, "effects", e.effects("acme", "r1"), []spec.Effect{{Tenant: "acme", RunID: "r1", Step: "charge", Key: "c-1",
		State: spec.EffectReserved, Generation: 1, UpdatedAt: t0}})
}

// testSameWorkerStaleGeneration: a worker that reclaims its own expired
// lease holds two leases that differ only in their generation; the old one
// must be refused like anyone's (a guard on the owner alone lets a
// worker's delayed write land on its own newer attempt).
func testSameWorkerStaleGeneration(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	old := e.claimOne("acme", "r1", "w", 1_000)
	_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: old.Ref(), Step: "charge", Key: "c-1"})
	mustOK(t, "reserve under generation 1", err)
	e.set(t0 + 1_000)
	cur := e.claimOne("acme", "r1", "w", 10_000)
	mustEqual(t, "the same worker's new lease", []any{cur.Owner, cur.Generation, cur.Attempt}, []any{"w", int64(2), 2})
	allRefused(e, "the same worker's superseded generation 1", old.Ref(), spec.CodeLostLease, "")
	e.complete(cur, `{"by":"generation 2"}`)
	allRefused(e, "generation 1 after generation 2 completed", old.Ref(), spec.CodeLostLease, "")
}

func testCurrentGenerationRenewal(t *testing.T, f Factory) {
	e := newEnv(t, f)
	r := req("acme", "r1")
	r.TimeoutMs = 30_000 // deadline t0+30_000
	created := e.create(r)
	l := e.claimOne("acme", "r1", "w1", 10_000) // expires t0+10_000

	e.set(t0 + 4_000)
	renewed, err := e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 10_000})
	mustOK(t, "Renew", err)
	want := l
	want.ExpiresAt = t0 + 14_000
	mustEqual(t, "renewed lease", renewed, want)
	mustEqual(t, "job after renewal", e.getJob("acme", "r1"), spec.Job{Tenant: "acme", RunID: "r1", Operation: "work",
		State: spec.JobLeased, AvailableAt: t0, LeaseOwner: "w1", LeaseExpiresAt: t0 + 14_000, Generation: 1, Attempts: 1, MaxAttempts: 3})
	mustEqual(t, "attempt after renewal", e.attempts("acme", "r1"), []spec.Attempt{{Tenant: "acme", RunID: "r1", Generation: 1,
		Number: 1, Worker: "w1", ClaimedAt: t0, RenewedAt: t0 + 4_000, Outcome: spec.AttemptRunning}})
	// The renewed lease holds past the original expiry.
	e.set(t0 + 12_000)
	e.claimNone("acme", "w2")

	// Renewing to exactly the deadline is allowed; one past it is
	// deadline_exceeded and the lease keeps its expiry.
	renewed, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 18_000})
	mustOK(t, "Renew to exactly the deadline", err)
	mustEqual(t, "expiry at the deadline", renewed.ExpiresAt, created.DeadlineAt)
	e.set(t0 + 13_000)
	before := e.snap()
	_, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 17_001})
	mustCode(t, "Renew one ms past the deadline", err, spec.CodeDeadlineExceeded)
	e.unchanged("Renew past the deadline", before)

	// Only the current (owner, generation) may renew.
	other := l.Ref()
	other.Owner = "w2"
	_, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: other, LeaseMs: 1000})
	mustCode(t, "Renew by another owner", err, spec.CodeLostLease)
	next := l.Ref()
	next.Generation = 2
	_, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: next, LeaseMs: 1000})
	mustCode(t, "Renew with a future generation", err, spec.CodeLostLease)
	// Lease errors win over the deadline: a stale renewal past the deadline
	// is lost_lease, not deadline_exceeded.
	_, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: other, LeaseMs: 3_600_000})
	mustCode(t, "stale Renew past the deadline", err, spec.CodeLostLease)
	e.unchanged("refused renewals", before)

	// At the expiry instant the lease is gone: lost_lease, even for its owner.
	e.set(created.DeadlineAt)
	_, err = e.s.Renew(e.ctx, spec.RenewRequest{Lease: l.Ref(), LeaseMs: 1})
	mustCode(t, "Renew at the expiry instant", err, spec.CodeLostLease)
}

func testClaimOrderAndBatch(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// available_at is the creation time; ids are chosen against it so that
	// claim order (eligible since, then run id) differs from both creation
	// and id order.
	at := map[string]int64{"c": t0, "b": t0, "e": t0 + 10, "a": t0 + 20, "d": t0 + 40}
	for _, id := range []string{"c", "b", "e", "a", "d"} {
		e.set(at[id])
		e.newRun("acme", id)
	}
	// Give "e" history: claimed and released, so its next claim is generation 2.
	e.set(t0 + 30)
	le := e.claim("acme", "w0", 1000, 3) // b, c (t0) then e (t0+10)
	mustEqual(t, "claim order", []string{le[0].RunID, le[1].RunID, le[2].RunID}, []string{"b", "c", "e"})
	for _, l := range le {
		if l.Generation != 1 || l.Attempt != 1 || l.ExpiresAt != t0+1030 || l.Owner != "w0" {
			t.Fatalf("lease %+v: want generation 1, attempt 1, owner w0, expiry %d", l, t0+1030)
		}
	}
	_, err := e.s.Release(e.ctx, spec.ReleaseRequest{Lease: le[2].Ref()}) // e available again at t0+30
	mustOK(t, "release e", err)
	// b and c expire at t0+1030. At that instant the eligible jobs, by the
	// time each became claimable: a (t0+20), e (t0+30, its release), d
	// (t0+40), then the expired leases b and c (t0+1030), whatever their
	// available_at.
	e.set(t0 + 1030)
	batch := e.claim("acme", "w1", 5000, 4)
	gens := map[string]int64{}
	var ids []string
	for _, l := range batch {
		ids = append(ids, l.RunID)
		gens[l.RunID] = l.Generation
		if l.Owner != "w1" || l.ExpiresAt != t0+6030 {
			t.Fatalf("batch lease %+v: want owner w1 and expiry %d", l, t0+6030)
		}
	}
	mustEqual(t, "batch claim order (Limit 4)", ids, []string{"a", "e", "d", "b"})
	mustEqual(t, "batch generations", gens, map[string]int64{"a": 1, "e": 2, "d": 1, "b": 2})
	mustEqual(t, "b's lease", batch[3], spec.Lease{Tenant: "acme", RunID: "b", Operation: "work", Owner: "w1", Generation: 2,
		ExpiresAt: t0 + 6030, Attempt: 2, MaxAttempts: 3, Payload: `{"n":1}`, DeadlineAt: t0 + 3_600_000})
	mustEqual(t, "e's lease attempt (release refunded one)", batch[1].Attempt, 1)
	// The one left comes next; then nothing.
	rest := e.claim("acme", "w2", 5000, 10)
	if len(rest) != 1 || rest[0].RunID != "c" || rest[0].Generation != 2 {
		t.Fatalf("last claim: want only c at generation 2, got %+v", rest)
	}
	e.claimNone("acme", "w3")
}

func testClaimEligibility(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// Not yet available: a job created in the future.
	e.set(t0 + 100)
	e.newRun("acme", "future")
	e.set(t0 + 99)
	e.claimNone("acme", "w")
	e.set(t0 + 100)
	e.claimOne("acme", "future", "w", 1000)
	// A job whose budget is spent is not claimable even after its lease
	// expires: it waits for Reap.
	one := req("acme", "spent")
	one.MaxAttempts = 1
	e.create(one)
	e.claimOne("acme", "spent", "w", 1000)
	e.set(t0 + 100_000)
	got := e.claim("acme", "w2", 1000, 10)
	if len(got) != 1 || got[0].RunID != "future" || got[0].Generation != 2 {
		t.Fatalf("claim after expiry: want only 'future' at generation 2 (spent has no attempts left), got %+v", got)
	}
	// Terminal jobs are never claimable.
	e.complete(got[0], "")
	e.newRun("acme", "cancelled")
	e.cancel("acme", "cancelled", "")
	e.set(t0 + 200_000)
	e.claimNone("acme", "w3")
	// A claim of a tenant with no runs is empty, not an error.
	e.claimNone("nobody", "w3")
}

func testRelease(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	l := e.claimOne("acme", "r1", "w1", 10_000)
	e.set(t0 + 500)
	job, err := e.s.Release(e.ctx, spec.ReleaseRequest{Lease: l.Ref()})
	mustOK(t, "Release", err)
	wantJob := spec.Job{Tenant: "acme", RunID: "r1", Operation: "work", State: spec.JobQueued, AvailableAt: t0 + 500,
		Generation: 1, Attempts: 0, MaxAttempts: 3}
	mustEqual(t, "released job", job, wantJob)
	mustEqual(t, "job read back", e.getJob("acme", "r1"), wantJob)
	run := e.getRun("acme", "r1")
	if run.State != spec.RunRunning || run.Version != 2 || run.LastSeq != 1 {
		t.Fatalf("run after release: want running, version 2, last seq 1 (unchanged), got %+v", run)
	}
	mustEqual(t, "attempt after release", e.attempts("acme", "r1"), []spec.Attempt{{Tenant: "acme", RunID: "r1", Generation: 1,
		Number: 1, Worker: "w1", ClaimedAt: t0, RenewedAt: t0, FinishedAt: t0 + 500, Outcome: spec.AttemptReleased}})
	// Released means no longer owned: a second release (and any other
	// write) by the old lease is lost_lease.
	allRefused(e, "writes after release", l.Ref(), spec.CodeLostLease, "")
	// The next claim is generation 2 with attempt number 1 again (refunded).
	l2 := e.claimOne("acme", "r1", "w2", 10_000)
	if l2.Generation != 2 || l2.Attempt != 1 {
		t.Fatalf("claim after release: want generation 2, attempt 1, got %+v", l2)
	}
	// Release after the lease expired: lost_lease, nothing changes (the
	// lease is left for expiry-based recovery).
	e.set(t0 + 500 + 10_000)
	allRefused(e, "writes after expiry", l2.Ref(), spec.CodeLostLease, "")
}

func testGenerationNeverDecreases(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	gen := func(id string) int64 { return e.getJob("acme", id).Generation }
	mustEqual(t, "generation at admission", gen("r1"), int64(0))

	l1 := e.claimOne("acme", "r1", "w", 1000)
	mustEqual(t, "generation after claim 1", l1.Generation, int64(1))
	j := e.retry(l1, "flaky", 0) // available at t0+1000+jitter(0)
	mustEqual(t, "generation after retry", j.Generation, int64(1))

	e.set(t0 + 1000)
	l2 := e.claimOne("acme", "r1", "w", 1000)
	mustEqual(t, "generation after claim 2", l2.Generation, int64(2))
	j, err := e.s.Release(e.ctx, spec.ReleaseRequest{Lease: l2.Ref()})
	mustOK(t, "release", err)
	mustEqual(t, "generation after release", j.Generation, int64(2))
	mustEqual(t, "attempts after release (refunded)", j.Attempts, 1)

	l3 := e.claimOne("acme", "r1", "w", 1000)
	mustEqual(t, "generation after claim 3", l3.Generation, int64(3))
	mustEqual(t, "attempt after claim 3", l3.Attempt, 2)
	e.set(t0 + 2000) // l3 expires
	l4 := e.claimOne("acme", "r1", "w", 1000)
	mustEqual(t, "generation after reclaim", l4.Generation, int64(4))
	e.fail(l4, "bad")
	mustEqual(t, "generation of the dead job", gen("r1"), int64(4))

	// Replay: the new job starts at the original's generation, and its
	// first claim is one more, although its attempts start from 0.
	_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "acme", RunID: "r1", NewRunID: "r1-replay", Actor: "ops"})
	mustOK(t, "replay", err)
	mustEqual(t, "replayed job", e.getJob("acme", "r1-replay"), spec.Job{Tenant: "acme", RunID: "r1-replay", Operation: "work",
		State: spec.JobQueued, AvailableAt: t0 + 2000, Generation: 4, Attempts: 0, MaxAttempts: 3})
	l5 := e.claimOne("acme", "r1-replay", "w", 1000)
	if l5.Generation != 5 || l5.Attempt != 1 {
		t.Fatalf("first claim of the replay: want generation 5, attempt 1, got %+v", l5)
	}
	mustEqual(t, "the replay's first attempt row", e.attempts("acme", "r1-replay"), []spec.Attempt{{Tenant: "acme",
		RunID: "r1-replay", Generation: 5, Number: 1, Worker: "w", ClaimedAt: t0 + 2000, RenewedAt: t0 + 2000, Outcome: spec.AttemptRunning}})
	// Cancelling keeps the generation too.
	e.cancel("acme", "r1-replay", "")
	mustEqual(t, "generation after cancel", gen("r1-replay"), int64(5))
	// Every generation the original ever had is on its attempt rows, each once.
	var gens []int64
	for _, a := range e.attempts("acme", "r1") {
		gens = append(gens, a.Generation)
	}
	mustEqual(t, "the original's attempt generations", gens, []int64{1, 2, 3, 4})
}

func testGuardedWritesOnMissingRun(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	// A run that does not exist: not_found, for every guarded write.
	allRefused(e, "guarded writes on a missing run", spec.LeaseRef{Tenant: "acme", RunID: "ghost", Owner: "w", Generation: 1},
		spec.CodeNotFound, "")
	// A queued, never-claimed job: generation 0 differs from any valid ref.
	allRefused(e, "guarded writes on a never-claimed job", spec.LeaseRef{Tenant: "acme", RunID: "r1", Owner: "w", Generation: 1},
		spec.CodeLostLease, "")
	// Effect rows that do not exist: not_found for record and reconcile.
	l := e.claimOne("acme", "r1", "w", 1000)
	_, err := e.s.RecordEffect(e.ctx, spec.RecordEffectRequest{Lease: l.Ref(), Step: "s", Key: "nope", State: spec.EffectSucceeded})
	mustCode(t, "RecordEffect of an unreserved key", err, spec.CodeNotFound)
	_, err = e.s.ReconcileEffect(e.ctx, spec.ReconcileEffectRequest{Lease: l.Ref(), Step: "s", Key: "nope", State: spec.EffectFailed})
	mustCode(t, "ReconcileEffect of an unreserved key", err, spec.CodeNotFound)
}

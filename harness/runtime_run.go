package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness/faults"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// RuntimeConfig is the policy of the runtime runs: leases of a few hundred
// milliseconds of the manual clock, a three-attempt budget, idempotency
// records and finished runs that expire within the run (so housekeeping
// purges them), and a short backoff.
func RuntimeConfig() spec.Config {
	return spec.Config{
		Operations: map[string]spec.OperationPolicy{
			"work": {SchemaVersion: 1, DefaultMaxAttempts: 3, MaxMaxAttempts: 5, DefaultTimeoutMs: 600_000, MaxTimeoutMs: 600_000},
		},
		IdempotencyRetentionMs: 2_000,
		RunRetentionMs:         3_000,
		MaxLeaseMs:             5_000,
		MaxReplays:             1,
		Backoff:                spec.Backoff{BaseMs: 20, CapMs: 200, JitterMs: 10, RetryAfterCapMs: 500},
	}
}

// The runtime run's shape, in the manual clock's milliseconds.
const (
	runtimeLeaseMs = 300
	runtimeFaultMs = 12_000 // the fault phase
	// runtimeLivenessMs bounds the liveness phase: every acknowledged run
	// terminal this long after the faults stop. A run's slowest way to its
	// end from there is about three attempts of a pause in flight (2 leases
	// and 100 ms), a lease's expiry, a slow handler (2 leases) and a
	// backoff (at most 500 ms): under 6 s; the bound leaves room for a
	// loaded machine's store calls, which the manual clock does not slow.
	runtimeLivenessMs = 10_000
	runtimeRuns       = 36
	runtimeWorkers    = 3
)

// runtimeRaces are the races every runtime run must contain.
var runtimeRaces = []validate.Race{validate.RaceLeaseReclaimed, validate.RaceStaleWriteRefused, validate.RaceFaultRolledBack}

// RunRuntime runs the worker runtime (package worker: several workers with
// real goroutines, renewals, batched completion, housekeeping, self-fencing
// effects) on the store f opens, records every store call it makes as a
// history through RecordingStores, and judges the history against the model
// with the accounting. Faults are injected between the workers and the
// store: rolled-back transactions, lost commit replies, and pauses of a
// worker past its lease right after its claim, right after an effect
// reservation, and right before its completion goes out (a zombie that
// publishes late). Then the faults stop, and the liveness phase must see every
// acknowledged run terminal within runtimeLivenessMs of the manual clock,
// with no Reap but the workers' own. One run in a plain go test (up to
// runtimeMaxHistories while the runs have not shown everything
// runtimeVacuity asks for); more until LEASEHOLD_BUDGET is spent under
// leasehold verify; LEASEHOLD_SEED pins the first seed (one run). The faults are injected at the store's hook points, so a store
// without hooks is not applicable; a store without batch completion is
// driven one completion at a time.
func RunRuntime(t *testing.T, store string, f storetest.Factory) {
	RunRuntimeOn(t, Target{Name: store, Factory: f})
}

// RunRuntimeOn is RunRuntime on a Target: its replay command carries the
// target's environment and build tags.
func RunRuntimeOn(t *testing.T, target Target) {
	store := target.Name
	offered := storetest.Declared(t, target.Factory)
	if len(storetest.Missing(offered, storetest.CapHooks)) > 0 {
		storetest.NotApplicable(t, storetest.CapHooks, "the runtime run (its faults are injected at hook points)")
	}
	batches := len(storetest.Missing(offered, storetest.CapCompleteBatch)) == 0
	leftOut(t, offered, "the runtime run", storetest.CapCompleteBatch)
	seed, pinned := FirstSeed(t)
	rounds := newRounds(Budget(t, 0), pinned)
	start := time.Now()
	total, injected, byKind := validate.Races{}, int64(0), map[string]int64{}
	var ops, histories, violations, maxRecovery int64
	var stats worker.Stats
	for i := uint64(0); ; i++ {
		r := runtimeOnce(t, target, seed+i)
		if r.failure != "" {
			t.Error(r.failure)
		}
		histories++
		ops += int64(len(r.history.Entries))
		violations += int64(r.verdict.Violations()) + int64(len(r.liveness))
		total.Add(r.verdict.Races)
		for kind, n := range r.faults {
			injected += n
			byKind[kind] += n
		}
		maxRecovery = max(maxRecovery, r.recoveryMs)
		stats = addStats(stats, r.stats)
		// A run that has not yet shown every race and every part of the
		// runtime gets another history, up to runtimeMaxHistories: a
		// history's schedule is the machine's as much as the seed's (on a
		// slow store the batching workers can finish none of a history's
		// runs).
		if !rounds.next(!pinned && i+1 < runtimeMaxHistories && len(runtimeVacuity(total, stats, byKind, batches)) > 0) {
			break
		}
	}
	t.Logf("%d runtime histories, %d operations, first seed %d, races %s, worker stats %+v, faults injected %d, %s",
		histories, ops, seed, total, stats, injected, time.Since(start).Round(time.Millisecond))
	metrics.Report(t, metrics.Line{Check: "runtime", Store: store, Operations: ops, Histories: histories, Violations: violations,
		Rounds: histories, MinRounds: rounds.min(), Seed: strconv.FormatUint(seed, 10), Replay: replayLin(t, target, seed),
		Faults: &metrics.Faults{Injected: injected, MaxRecoveryMs: maxRecovery}})
	for _, problem := range runtimeVacuity(total, stats, byKind, batches) {
		t.Errorf("vacuous run: %s in %d runtime histories (seed %d)", problem, histories, seed)
	}
}

// runtimeMaxHistories bounds the histories a runtime run records while it
// is vacuous (runtimeVacuity).
const runtimeMaxHistories = 3

// runtimeVacuity returns what a runtime run has not shown yet, if anything:
// a race of runtimeRaces, a housekeeping reap or purge, a completed run, a
// lost lease, a purged run and, where the store completes in batches
// (batches), a batch and a batch held past its lease.
func runtimeVacuity(total validate.Races, stats worker.Stats, byKind map[string]int64, batches bool) []string {
	var problems []string
	for _, race := range runtimeRaces {
		if total[race] == 0 {
			problems = append(problems, fmt.Sprintf("no %s (%s) happened", race, race.Meaning()))
		}
	}
	type shown struct {
		what string
		n    uint64
	}
	want := []shown{
		{"housekeeping reap or purge", stats.Reaped + stats.Purged},
		{"completed run", stats.Completed},
		{"lost lease", stats.Lost},
		{"finished run purged", stats.PurgedRuns},
	}
	if batches {
		want = append(want, shown{"batch of completions", stats.Batches},
			shown{"batch completion held past its lease (a zombie's late batch)", uint64(byKind["pause_before_"+string(spec.OpCompleteBatch)])})
	}
	for _, w := range want {
		if w.n == 0 {
			problems = append(problems, "no "+w.what)
		}
	}
	return problems
}

func addStats(a, b worker.Stats) worker.Stats {
	a.Claimed += b.Claimed
	a.Completed += b.Completed
	a.Retried += b.Retried
	a.Failed += b.Failed
	a.Released += b.Released
	a.Lost += b.Lost
	a.Cancelled += b.Cancelled
	a.AlreadyTerminal += b.AlreadyTerminal
	a.Abandoned += b.Abandoned
	a.Batches += b.Batches
	a.Batched += b.Batched
	a.Reaped += b.Reaped
	a.Purged += b.Purged
	a.PurgedRuns += b.PurgedRuns
	return a
}

// runtimeResult is what one runtime run found.
type runtimeResult struct {
	history    *history.History
	verdict    validate.Verdict
	liveness   []string // runs not terminal within the bound
	faults     map[string]int64
	recoveryMs int64 // manual-clock ms from the faults' end until every run was terminal
	stats      worker.Stats
	// failure says what was wrong, with the report and the replay
	// command; "" when the run passed.
	failure string
}

// runtimeJob is what a run's payload asks the handler to do.
type runtimeJob struct {
	Kind string `json:"kind"` // ok, effect, retry, fail, slow
}

var runtimeKinds = []string{"ok", "ok", "effect", "effect", "effect", "retry", "fail", "slow"}

// runtimeOnce records and judges one runtime run, writing a report on a
// violation (res.failure says where).
func runtimeOnce(t *testing.T, target Target, seed uint64) runtimeResult {
	t.Helper()
	store := target.Name
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	scope := &scopedTB{TB: t}
	defer scope.close()
	cfg := RuntimeConfig()
	clk := clock.NewManual(1_000)
	h := target.Factory(scope, storetest.Options{Config: cfg, Clock: clk, Random: &history.ScriptedRandom{}})
	provider := history.NewProvider()
	rec := history.NewRecorder(provider)
	plan := &faults.Faults{Aborts: 0.02, MaxUnknown: 2, Pauses: 0.15, PauseMs: 2*runtimeLeaseMs + 100,
		Pause: []spec.Op{spec.OpClaim, spec.OpReserveEffect}, PauseBefore: []spec.Op{spec.OpComplete, spec.OpCompleteBatch},
		PauseFirst: []spec.Op{spec.OpCompleteBatch}, Clock: clk}
	r := rand.New(rand.NewPCG(seed, 0x72756e74696d65))

	// The clock moves in real time, faster than the wall clock, so that
	// leases expire, renewals race expiry and paused workers wake late.
	stopClock := make(chan struct{})
	var clockDone sync.WaitGroup
	clockDone.Go(func() {
		for {
			select {
			case <-stopClock:
				return
			case <-time.After(time.Millisecond):
				clk.Advance(2)
			}
		}
	})
	defer func() { close(stopClock); clockDone.Wait() }()

	workerCtx, stopWorkers := context.WithCancel(ctx)
	var workers []*worker.Worker
	var stores []*faults.RecordingStore
	var running sync.WaitGroup
	for i := range runtimeWorkers {
		rs := faults.NewRecordingStore(scope, h, cfg, clk, rec, fmt.Sprintf("worker-%d", i+1), 8, seed+uint64(100+i), plan)
		stores = append(stores, rs)
		wc := worker.Config{Store: rs.Store(), Tenants: []string{"t1", "t2"}, Handler: runtimeHandler(clk, provider),
			ID: fmt.Sprintf("w%d", i+1), Lease: runtimeLeaseMs * time.Millisecond, Concurrency: 3,
			Idle: 20 * time.Millisecond, ShutdownGrace: 200 * time.Millisecond, Timers: clk,
			StoreRetry:  worker.StoreRetry{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond},
			Maintenance: worker.MaintenancePolicy{Every: 300 * time.Millisecond, Batch: 5, PurgeRuns: true},
			Random:      rand.New(rand.NewPCG(seed, uint64(200+i))), Logger: slog.New(slog.DiscardHandler)}
		if i < 2 {
			wc.Batch = worker.BatchPolicy{Size: 4, Linger: 20 * time.Millisecond}
		}
		w, err := worker.New(wc)
		if err != nil {
			t.Fatalf("seed %d: worker: %v", seed, err)
		}
		workers = append(workers, w)
		running.Go(func() { w.Run(workerCtx) })
	}

	// The API: admissions (a key now and then repeated, with the same or
	// another payload) and cancels, each retried by the client after an
	// unavailable or unknown outcome, as a client of a real API would.
	api := faults.NewRecordingStore(scope, h, cfg, clk, rec, "api", 2, seed+1, plan)
	stores = append(stores, api)
	var created []runRef
	for i := range runtimeRuns {
		tenant := []string{"t1", "t2"}[i%2]
		key, kind := fmt.Sprintf("k%d", i), runtimeKinds[r.IntN(len(runtimeKinds))]
		if i > 0 && r.IntN(8) == 0 {
			key = fmt.Sprintf("k%d", i-1)
		}
		payload, _ := json.Marshal(runtimeJob{Kind: kind})
		req := spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: key, RunID: fmt.Sprintf("r%d", i), Payload: payload}
		if res, err := retrying(ctx, func() (spec.CreateRunResult, error) { return api.CreateRun(ctx, req) }); err == nil && !res.Replayed {
			created = append(created, runRef{res.Run.Tenant, res.Run.ID})
		}
		if i%4 != 3 {
			continue // bursts of four: workers claim several at once and complete them in batches
		}
		waitClock(ctx, clk, int64(200+r.IntN(800)))
		if len(created) > 0 && r.IntN(7) == 0 {
			c := created[r.IntN(len(created))]
			retrying(ctx, func() (spec.Run, error) { return api.Cancel(ctx, spec.CancelRequest{Tenant: c.tenant, RunID: c.id}) })
		}
	}
	waitClock(ctx, clk, runtimeFaultMs-(clk.Now()-1_000))

	// Liveness: no more faults; every run must end, with no reaper but the
	// workers' own housekeeping.
	plan.Off.Store(true)
	faultsEnd := clk.Now()
	reader := h.OpenWith(scope, storetest.Options{Config: cfg, Clock: clk, Random: &history.ScriptedRandom{}})
	var open []string
	for {
		snap, err := readSnapshot(ctx, reader)
		if err != nil {
			t.Fatalf("seed %d: reading the runs: %v", seed, err)
		}
		open = open[:0]
		for _, run := range snap.Runs {
			if !run.State.Terminal() {
				open = append(open, fmt.Sprintf("%s/%s is %s", run.Tenant, run.ID, run.State))
			}
		}
		if len(open) == 0 || clk.Now()-faultsEnd > runtimeLivenessMs || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	res := runtimeResult{faults: plan.Injected(), recoveryMs: clk.Now() - faultsEnd}
	for _, o := range open {
		res.liveness = append(res.liveness, fmt.Sprintf("liveness: run %s %d ms after the faults stopped (bound %d ms)", o, res.recoveryMs, runtimeLivenessMs))
	}
	stopWorkers()
	running.Wait()
	for _, s := range stores {
		for _, b := range s.Breaches() {
			res.liveness = append(res.liveness, "breach: "+b.Error())
		}
	}
	for _, w := range workers {
		res.stats = addStats(res.stats, w.Stats())
	}

	// The final scan, as an operation of the history.
	final := history.NewCaller(rec, "final-scan", reader, &clock.Recorder{Source: clk}, &history.ScriptedRandom{})
	if _, err := final.Do(ctx, model.Op{Req: spec.SnapshotRequest{}}); err != nil {
		t.Fatalf("seed %d: final scan: %v", seed, err)
	}
	res.history = rec.History()
	m := model.Model{Config: cfg}
	j := validate.Judgement{Timeout: hang.PhasePatience(), Drained: true}
	res.verdict = validate.Judge(m, res.history, j)
	t.Logf("seed %d: %d operations, %s in %s, races %s, faults %v, every run terminal %d ms after the faults stopped",
		seed, len(res.history.Entries), res.verdict.Linearizable, res.verdict.CheckTime.Round(time.Millisecond), res.verdict.Races,
		res.faults, res.recoveryMs)
	if res.verdict.Violations() == 0 && len(res.liveness) == 0 {
		return res
	}
	res.verdict.Explain(m, res.history, hang.PhasePatience())
	res.verdict.Accounting = append(res.verdict.Accounting, res.liveness...)
	dir := reportDir(t, fmt.Sprintf("lin/%s-%s-seed%d", t.Name(), store, seed))
	if err := report.WriteReport(dir, m, res.history, res.verdict, j, store, seed, cfg, replayLin(t, target, seed)); err != nil {
		t.Errorf("writing the report: %v", err)
	}
	if res.verdict.Culprit != nil {
		t.Logf("seed %d: %s", seed, res.verdict.Culprit)
	}
	res.failure = fmt.Sprintf("seed %d: linearizability %s; accounting %q\nreport: %s\nreplay: %s", seed, res.verdict.Linearizable,
		res.verdict.Accounting, dir, replayLin(t, target, seed))
	return res
}

// runtimeHandler does what each run's payload asks: complete, charge the
// provider through the effect ledger, fail retryably on its first attempt,
// fail for good, or run longer than a lease (so that renewals keep it).
func runtimeHandler(clk *clock.Manual, provider *history.Provider) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, job *worker.Job) ([]byte, error) {
		var p runtimeJob
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return nil, worker.Terminal("bad_payload", err)
		}
		switch p.Kind {
		case "effect":
			key := "charge-" + job.RunID
			providerKey := job.Tenant + "/" + job.RunID + "/charge/" + key
			ref, err := job.Effect(ctx, worker.Effect{Step: "charge", Key: key,
				Call: func(_ context.Context, r worker.EffectRequest) (string, error) {
					if !provider.Call(providerKey, r.Generation) {
						return "", errors.New("the provider fenced off an older generation")
					}
					return fmt.Sprintf("ch_%s_%d", job.RunID, r.Generation), nil
				},
				Status: func(context.Context, worker.EffectRequest) (worker.EffectStatus, error) {
					if provider.Status(providerKey) {
						return worker.EffectStatus{State: spec.EffectSucceeded, ProviderRef: "reconciled"}, nil
					}
					return worker.EffectStatus{State: spec.EffectFailed}, nil
				}})
			if err != nil {
				return nil, err
			}
			return json.Marshal(map[string]string{"charge": ref})
		case "retry":
			if job.Attempt == 1 {
				return nil, worker.Retryable(errors.New("a dependency is busy"), 0)
			}
		case "fail":
			return nil, worker.Terminal("bad_input", errors.New("the request cannot be done"))
		case "slow":
			t := clk.NewTimer(2 * runtimeLeaseMs)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return nil, context.Cause(ctx)
			}
		}
		return []byte(`{"done":true}`), nil
	})
}

// retrying calls f until it returns something other than unavailable or
// unknown_outcome (a client retrying a request it cannot know the fate of),
// at most ten times.
func retrying[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var v T
	var err error
	for range 10 {
		v, err = f()
		if c := spec.CodeOf(err); (c != spec.CodeUnavailable && c != spec.CodeUnknownOutcome) || ctx.Err() != nil {
			break
		}
	}
	return v, err
}

// waitClock waits until the manual clock has moved d ms.
func waitClock(ctx context.Context, clk *clock.Manual, d int64) {
	until := clk.Now() + d
	for clk.Now() < until && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

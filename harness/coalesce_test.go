package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// TestCoalescedAdmissionsLinearizable: concurrent CreateRun calls on ONE
// PostgreSQL store that merges them into shared bulk admissions
// (postgres.Options.CoalesceCreateRun), judged against the model by
// porcupine. The linearizability workload gives every client a store of its
// own, so it never puts two calls in one batch; this does, with keys,
// fingerprints and run ids drawn from small pools (replays, conflicts and
// run ids taken under other keys within one batch and across concurrent
// ones), in phases between which every record expires (the next phase's
// admissions delete them).
func TestCoalescedAdmissionsLinearizable(t *testing.T) {
	first, pinned := FirstSeed(t)
	rounds := 5
	if pinned {
		rounds = 1
	}
	var retried int64
	for seed := first; seed < first+uint64(rounds); seed++ {
		failure, r := coalescedAdmissions(t, seed)
		if failure != "" {
			t.Fatalf("seed %d: %s\nreplay: %s", seed, failure, report.TestCommand(map[string]string{"LEASEHOLD_SEED": strconv.FormatUint(seed, 10)}, "", t.Name()))
		}
		retried += r
	}
	if retried == 0 && !pinned {
		t.Fatalf("vacuous: no admission of %d rounds raced a concurrent one and ran again under the locks", rounds)
	}
	metrics.Report(t, metrics.Line{Check: "coalesced-admissions", Store: "postgres", Operations: int64(rounds * coalescedCalls), Histories: int64(rounds)})
}

// The coalesced admissions' check: callers on one store, calls of each in a
// phase, phases, and calls in all.
const (
	coalescedCallers, coalescedPerPhase, coalescedPhases = 8, 16, 4
	coalescedCalls                                       = coalescedCallers * coalescedPerPhase * coalescedPhases
)

// coalescedAdmissions runs the check of TestCoalescedAdmissionsLinearizable
// with seed and returns what it found wrong ("" for nothing) and how many
// admission attempts raced and ran again.
func coalescedAdmissions(t *testing.T, seed uint64) (failure string, retried int64) {
	failf := func(format string, a ...any) (string, int64) { return fmt.Sprintf(format, a...), 0 }
	const (
		callers, perPhase, phases, keys = coalescedCallers, coalescedPerPhase, coalescedPhases, 8
		start                           = int64(1_000)
	)
	cfg := TestConfig()
	clk := clock.NewManual(start)
	h := pgtest.FactoryWith(postgres.Options{MaxConns: 8, CoalesceCreateRun: 2})(t, storetest.Options{Config: cfg, Clock: clk})
	store := h.Store.(*postgres.Store)
	rec := history.NewRecorder(history.NewProvider())
	ctx := context.Background()

	var mu sync.Mutex
	counts := map[string]int{}
	var unexpected []string
	for phase := range phases {
		now := start + int64(phase)*(cfg.IdempotencyRetentionMs+50)
		clk.Set(now)
		var wg sync.WaitGroup
		for c := range callers {
			rnd := rand.New(rand.NewPCG(seed, uint64(phase*callers+c)))
			wg.Go(func() {
				for range perPhase {
					req := spec.CreateRunRequest{
						Tenant:         fmt.Sprintf("t%d", rnd.IntN(2)),
						Operation:      "work",
						IdempotencyKey: fmt.Sprintf("k%d", rnd.IntN(keys)),
						RunID:          fmt.Sprintf("p%d-r%d", phase, rnd.IntN(keys+2)),
						Payload:        []byte(fmt.Sprintf(`{"v":%d}`, rnd.IntN(2))),
					}
					op := model.Op{Now: now, Req: req}
					call := rec.Tick()
					res, err := history.Execute(ctx, store, op)
					e := history.Entry{Client: c, Actor: fmt.Sprintf("caller-%d", c), Op: op, Out: history.Observed{Result: res}, Call: call, Return: rec.Tick()}
					mu.Lock()
					switch {
					case err != nil:
						unexpected = append(unexpected, err.Error())
					case res.Err != nil:
						counts[string(res.Err.Code)]++
					case res.Value.(spec.CreateRunResult).Replayed:
						counts["replayed"]++
					default:
						counts["created"]++
					}
					mu.Unlock()
					rec.Add(e)
				}
			})
		}
		wg.Wait()
	}
	if len(unexpected) > 0 {
		return failf("untyped errors: %v", unexpected)
	}
	st := store.AdmissionStats()
	calls, txns := st.Coalesced, st.SharedTransactions
	t.Logf("seed %d: %d calls in %d transactions, %d attempts run again; outcomes %v", seed, calls, txns, st.Retried, counts)
	for _, c := range []string{"created", "replayed", string(spec.CodeIdempotencyConflict), string(spec.CodeAlreadyExists)} {
		if counts[c] == 0 {
			return failf("vacuous: no call ended %s (outcomes %v)", c, counts)
		}
	}
	if want := int64(callers * perPhase * phases); calls != want || float64(calls) < 1.2*float64(txns) {
		return failf("vacuous: %d calls in %d transactions, want %d calls, at least 1.2 per transaction", calls, txns, want)
	}
	for code := range counts {
		if code != "created" && code != "replayed" && code != string(spec.CodeIdempotencyConflict) && code != string(spec.CodeAlreadyExists) {
			return failf("a call ended %s (outcomes %v)", code, counts)
		}
	}
	// The final scan, as the linearizability workload's: the rows judged
	// with the history, per tenant.
	snap, err := readSnapshot(ctx, store)
	if err != nil {
		return failf("final snapshot: %v", err)
	}
	call, ret := rec.Tick(), rec.Tick()
	for i, tenant := range []string{"t0", "t1"} {
		rec.Add(history.Entry{Client: callers + i, Actor: "final-scan", Op: model.Op{Req: spec.SnapshotRequest{Tenant: tenant}},
			Out: history.Observed{Result: model.Result{Value: snap.Of(tenant)}}, Call: call, Return: ret})
	}
	m, hist := model.Model{Config: cfg}, rec.History()
	v := validate.Judge(m, hist, validate.Judgement{Partition: true, Timeout: hang.PhasePatience()})
	if v.Linearizable != porcupine.Ok || len(v.Accounting) > 0 {
		v.Explain(m, hist, hang.PhasePatience())
		why := ""
		if v.Culprit != nil {
			why = "\n" + v.Culprit.String() + sameScope(hist, v.Culprit.Last)
		}
		return failf("the coalesced admissions are not linearizable against the model (%s; accounting %v)%s", v.Linearizable, v.Accounting, why)
	}
	return "", st.Retried
}

// sameScope lists the history's admissions of last's idempotency scope and
// of its run id, for a failure's report.
func sameScope(h *history.History, last history.Entry) string {
	req, ok := last.Op.Req.(spec.CreateRunRequest)
	if !ok {
		return ""
	}
	var b strings.Builder
	b.WriteString("admissions of its scope or run id:\n")
	for _, e := range h.Entries {
		if r, ok := e.Op.Req.(spec.CreateRunRequest); ok && r.Tenant == req.Tenant && (r.IdempotencyKey == req.IdempotencyKey || r.RunID == req.RunID) {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	return b.String()
}

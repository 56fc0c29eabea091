package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// EnvKeepHistory, set to 1, keeps every history of a linearizability run
// under reports/lin/, the passing ones too (`leasehold verify
// --keep-histories` sets it); a failing history is always kept.
const EnvKeepHistory = "LEASEHOLD_KEEP_HISTORY"

// linOps is the size of each history's concurrent phase.
const linOps = 2500

// linMaxHistories bounds the histories a linearizability run records while
// it is vacuous (linVacuity).
const linMaxHistories = 6

// linRaces are the races every linearizability run must contain.
var linRaces = []validate.Race{validate.RaceStaleWriteRefused, validate.RaceLeaseReclaimed, validate.RaceCancelVsFinish, validate.RaceUnknownOutcome, validate.RaceAdmissionVsPurge}

// RunLinearizable records concurrent histories against the store f opens
// and judges each against the model: two histories in a plain go test (one
// split by tenant, one with idempotency purges, checked whole), more until
// LEASEHOLD_BUDGET is spent under leasehold verify, and more while the run
// is vacuous, up to linMaxHistories. LEASEHOLD_SEED pins the first seed. A
// violation writes a report under reports/lin/ and fails with the replay
// commands; a run in which a race of linRaces never happened fails as
// vacuous. The store must offer hooks (storetest.CapHooks: the faults
// are injected through them); without them the check is not applicable.
// store names the store in reports.
func RunLinearizable(t *testing.T, store string, f storetest.Factory) {
	RunLinearizableOn(t, Target{Name: store, Factory: f})
}

// RunLinearizableOn is RunLinearizable on a Target: its replay command
// carries the target's environment and build tags.
func RunLinearizableOn(t *testing.T, target Target) {
	store, f := target.Name, target.Factory
	offered := storetest.Declared(t, f)
	if missing := storetest.Missing(offered, storetest.CapHooks); len(missing) > 0 {
		storetest.NotApplicable(t, storetest.CapHooks, "the linearizability check (its faults are injected through the hooks)")
	}
	leftOut(t, offered, "the concurrent histories", storetest.CapCompleteBatch, storetest.CapCreateRuns)
	seed, pinned := FirstSeed(t)
	rounds := newRounds(Budget(t, 0), pinned)
	start := time.Now()
	total := validate.Races{}
	bulkCap := len(storetest.Missing(offered, storetest.CapCreateRuns)) == 0
	txCap := len(storetest.Missing(offered, storetest.CapCreateRunTx)) == 0
	var tx txCounts
	var ops, histories, violations, scheduled, purged, delivered, refusedMsgs, bulk int64
	for i := 0; ; i++ {
		// Every odd seed adds purges and so must be checked whole, which costs
		// far more than per tenant: it is kept shorter, and has no unknown
		// outcomes. An operation pending to the end doubles the states the
		// checker carries until its effect is overwritten, and in a whole
		// history that took it past its two-minute timeout now and then
		// (an unknown claim, purge, effect reservation or record). The seed
		// alone decides, so that
		// replaying one seed replays its kind of history.
		purge := (seed+uint64(i))%2 == 1
		w := Workload{Factory: f, Config: TestConfig(), Seed: seed + uint64(i), Tenants: []string{"t1", "t2", "t3"},
			Workers: 4, APIs: 2, Ops: linOps, Purge: purge, MaxUnknown: 2, Aborts: 0.01}
		if purge {
			w.Ops, w.MaxUnknown = linOps/2, 0
		}
		v, h := checkOne(t, target, w)
		histories++
		ops += int64(len(h.Entries))
		s, p := retention(h)
		scheduled, purged = scheduled+s, purged+p
		bulk += bulkAdmissions(h)
		tx.add(txAdmissions(h))
		d, r := outboxCounts(h)
		delivered, refusedMsgs = delivered+d, refusedMsgs+r
		violations += int64(v.Violations())
		total.Add(v.Races)
		// A plain go test (and a replay) records two histories, one of each
		// kind; a budgeted run never fewer (each kind lacks something the
		// other has, and a caller's own checks, such as a fault run's, count
		// on the plain run's length), then goes on until its budget is spent.
		// A run that has not yet shown everything linVacuity asks for gets
		// more, up to linMaxHistories (unless its seed is pinned): whether a
		// fault lands on an operation whose outcome it hides is the
		// machine's timing as much as the seed's.
		shown := len(linVacuity(total, histories, seed, bulk, bulkCap, delivered, refusedMsgs, scheduled, purged, tx, txCap)) == 0
		if !rounds.next(i < 1 || !pinned && !shown && histories < linMaxHistories) {
			break
		}
	}
	t.Logf("%d histories, %d operations, first seed %d, races %s, %s", histories, ops, seed, total, time.Since(start).Round(time.Millisecond))
	metrics.Report(t, metrics.Line{Check: "linearizability", Store: store, Operations: ops, Histories: histories, Violations: violations,
		Rounds: histories, MinRounds: rounds.min(), Seed: strconv.FormatUint(seed, 10), Replay: replayLin(t, target, seed)})
	t.Logf("%d scheduled runs admitted, %d runs purged, %d outbox messages delivered, %d writes with messages refused, %d bulk admissions, %s",
		scheduled, purged, delivered, refusedMsgs, bulk, tx)
	for _, problem := range linVacuity(total, histories, seed, bulk, bulkCap, delivered, refusedMsgs, scheduled, purged, tx, txCap) {
		t.Error(problem)
	}
}

// leftOut reports, as a not-applicable subtest each, the optional
// operations (caps) the store does not offer and so the check's workload
// leaves out (a batch of completions becomes single completions, a bulk
// admission single ones): said, never passed over silently.
func leftOut(t *testing.T, offered []storetest.Capability, where string, caps ...storetest.Capability) {
	for _, c := range storetest.Missing(offered, caps...) {
		t.Run(string(c), func(t *testing.T) { storetest.NotApplicable(t, c, string(c)+" in "+where) })
	}
}

// linVacuity returns why a linearizability run proved nothing, if it did
// not: a race of linRaces that never happened, no bulk admission though the
// store admits in bulk (bulkCap), no outbox message delivered or refused, no
// scheduled run admitted or run purged, and, from a store that admits in
// the application's transaction (txCap), no such admission committed, rolled
// back, or overlapped by another admission of its key.
func linVacuity(total validate.Races, histories int64, seed uint64, bulk int64, bulkCap bool, delivered, refusedMsgs, scheduled, purged int64,
	tx txCounts, txCap bool) []string {
	var problems []string
	for _, race := range linRaces {
		if total[race] == 0 {
			problems = append(problems, fmt.Sprintf("vacuous run: no %s (%s) happened in %d histories (seed %d)", race, race.Meaning(), histories, seed))
		}
	}
	if bulk == 0 && bulkCap {
		problems = append(problems, fmt.Sprintf("vacuous run: no bulk admission in %d histories (seed %d), though the store admits in bulk", histories, seed))
	}
	if delivered == 0 || refusedMsgs == 0 {
		problems = append(problems, fmt.Sprintf("vacuous run: %d outbox messages delivered and %d writes with messages refused in %d histories (seed %d); want some of each",
			delivered, refusedMsgs, histories, seed))
	}
	if txCap && (tx.committed == 0 || tx.rolledBack == 0 || tx.contended == 0) {
		problems = append(problems, fmt.Sprintf("vacuous run: %s in %d histories (seed %d), though the store admits in the application's transaction; want some of each",
			tx, histories, seed))
	}
	if scheduled == 0 || purged == 0 {
		problems = append(problems, fmt.Sprintf("vacuous run: %d scheduled runs admitted and %d runs purged in %d histories (seed %d); want some of each",
			scheduled, purged, histories, seed))
	}
	return problems
}

// bulkAdmissions counts the create_runs a history acknowledged.
func bulkAdmissions(h *history.History) (n int64) {
	for _, e := range h.Entries {
		if _, isBulk := e.Op.Req.(spec.CreateRunsRequest); isBulk && !e.Out.Unknown && e.Out.Result.Err == nil {
			n++
		}
	}
	return n
}

// txCounts counts a history's admissions in the application's transaction
// (create_run_tx): those that returned a run and committed, those that
// returned a run and rolled back, and those that returned CreateRun's
// answer (a run, or its refusal but invalid_argument) while another
// admission of the key, by another client, overlapped them in time
// (contended).
type txCounts struct{ committed, rolledBack, contended int64 }

func (c *txCounts) add(o txCounts) {
	c.committed, c.rolledBack, c.contended = c.committed+o.committed, c.rolledBack+o.rolledBack, c.contended+o.contended
}

func (c txCounts) String() string {
	return fmt.Sprintf("%d admissions in transactions committed, %d rolled back, %d contended", c.committed, c.rolledBack, c.contended)
}

// txAdmissions counts h's admissions in transactions (txCounts).
func txAdmissions(h *history.History) txCounts {
	type scope struct{ tenant, operation, key string }
	var c txCounts
	byScope := map[scope][]history.Entry{}
	for _, e := range h.Entries {
		for _, r := range admissionRequests(e.Op.Req) {
			sc := scope{r.Tenant, r.Operation, r.IdempotencyKey}
			byScope[sc] = append(byScope[sc], e)
		}
	}
	for _, e := range h.Entries {
		tx, inTx := e.Op.Req.(spec.CreateRunTxRequest)
		if !inTx || e.Out.Unknown || e.Code() == spec.CodeUnavailable || e.Code() == spec.CodeInvalidArgument {
			continue
		}
		switch {
		case e.Out.Result.Err != nil:
		case tx.Rollback:
			c.rolledBack++
		default:
			c.committed++
		}
		for _, o := range byScope[scope{tx.Request.Tenant, tx.Request.Operation, tx.Request.IdempotencyKey}] {
			if o.Client != e.Client && o.Call < e.Return && e.Call < o.Return {
				c.contended++
				break
			}
		}
	}
	return c
}

// admissionRequests returns the admissions req makes: a CreateRun's, the
// members of CreateRuns, the admission of create_run_tx.
func admissionRequests(req spec.Request) []spec.CreateRunRequest {
	switch r := req.(type) {
	case spec.CreateRunRequest:
		return []spec.CreateRunRequest{r}
	case spec.CreateRunsRequest:
		return r.Requests
	case spec.CreateRunTxRequest:
		return []spec.CreateRunRequest{r.Request}
	}
	return nil
}

// retention counts the scheduled runs a history admitted and the runs its
// purges of runs deleted.
func retention(h *history.History) (scheduled, purged int64) {
	for _, e := range h.Entries {
		if e.Out.Unknown || e.Out.Result.Err != nil {
			continue
		}
		switch req := history.Committed(e.Op.Req).(type) {
		case spec.CreateRunRequest:
			if req.DelayMs != 0 && !e.Out.Result.Value.(spec.CreateRunResult).Replayed {
				scheduled++
			}
		case spec.CreateRunsRequest:
			for i, o := range e.Out.Result.Value.([]spec.CreateOutcome) {
				if req.Requests[i].DelayMs != 0 && o.Err == nil && !o.Result.Replayed {
					scheduled++
				}
			}
		case spec.PurgeRunsRequest:
			purged += int64(len(e.Out.Result.Value.([]string)))
		}
	}
	return scheduled, purged
}

// outboxCounts counts the delivered messages of a history's final scans and
// its writes with messages that were refused.
func outboxCounts(h *history.History) (delivered, refused int64) {
	for _, s := range h.FinalScans() {
		for _, m := range s.Outbox {
			if m.State == spec.OutboxDelivered {
				delivered++
			}
		}
	}
	for _, e := range h.Entries {
		if !e.Out.Unknown && e.Out.Result.Err != nil && e.Out.Result.Err.Code != spec.CodeUnavailable && carriesMessages(e.Op.Req) {
			refused++
		}
	}
	return delivered, refused
}

// checkOne records and judges one history, writing a report on violation.
func checkOne(t *testing.T, target Target, w Workload) (validate.Verdict, *history.History) {
	t.Helper()
	store := target.Name
	ctx, cancel := context.WithTimeout(context.Background(), hang.PhasePatience())
	defer cancel()
	scope := &scopedTB{TB: t}
	defer scope.close()
	h, err := w.Record(ctx, scope)
	if err != nil {
		// A store that breaks the harness's rules (an untyped error, a write
		// that read no clock, a protocol finding) stops the recording.
		replay := replayLin(t, target, w.Seed)
		metrics.Report(t, metrics.Line{Check: "linearizability", Store: store, Violations: 1,
			Seed: strconv.FormatUint(w.Seed, 10), Replay: replay})
		t.Fatalf("seed %d: recording the history: %v\nreplay: %s", w.Seed, err, replay)
	}
	m := model.Model{Config: w.Config}
	j := validate.Judgement{Partition: !w.Purge, Timeout: hang.PhasePatience(), Drained: true}
	v := validate.Judge(m, h, j)
	t.Logf("seed %d: %d operations, %s in %s (partitioned %v), races %s", w.Seed, len(h.Entries), v.Linearizable,
		v.CheckTime.Round(time.Millisecond), !w.Purge, v.Races)
	if v.Violations() == 0 {
		if os.Getenv(EnvKeepHistory) == "1" {
			dir := reportDir(t, fmt.Sprintf("lin/%s-%s-seed%d", report.SafeName(t.Name()), store, w.Seed))
			if err := report.WriteReport(dir, m, h, v, j, store, w.Seed, w.Config, replayLin(t, target, w.Seed)); err != nil {
				t.Errorf("keeping the history: %v", err)
			} else {
				t.Logf("seed %d: history kept (%s=1) in %s", w.Seed, EnvKeepHistory, dir)
			}
		}
		return v, h
	}
	// The report directory does not outlive a CI run: the log must say
	// where the history goes wrong.
	v.Explain(m, h, hang.PhasePatience())
	if v.Culprit != nil {
		t.Logf("seed %d: %s", w.Seed, v.Culprit)
	}
	dir := reportDir(t, fmt.Sprintf("lin/%s-%s-seed%d", report.SafeName(t.Name()), store, w.Seed))
	replay := replayLin(t, target, w.Seed)
	if err := report.WriteReport(dir, m, h, v, j, store, w.Seed, w.Config, replay); err != nil {
		t.Errorf("writing the report: %v", err)
	}
	why := string(v.Linearizable)
	if v.Linearizable == porcupine.Unknown {
		why = hang.Message("the linearizability checker to decide", j.Timeout) + ": the history proves nothing, which counts as a failure"
	}
	t.Errorf("seed %d: linearizability %s; accounting %q\nreport: %s\nreplay: %s", w.Seed, why, v.Accounting, dir, replay)
	return v, h
}

// replayLin is the command that records the history of seed again, with
// the target's environment.
func replayLin(t *testing.T, target Target, seed uint64) string {
	return report.TestCommand(withSeed(target.Env, seed), target.Tags, t.Name())
}

func reportDir(t *testing.T, name string) string {
	reports, err := report.ReportsDir()
	if err != nil {
		t.Fatalf("reports directory: %v", err)
	}
	return filepath.Join(reports, name)
}

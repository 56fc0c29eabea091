package invariant

import (
	"slices"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// healthy is a snapshot of two tenants with a queued, a leased and a
// completed run (with an effect, an admission's outbox message delivered and
// the completion's claimed by a relay), and the queued run's admission
// message, as a store writes them.
func healthy() spec.Snapshot {
	var s spec.Snapshot
	for _, tn := range []string{"ta", "tb"} {
		s.Runs = append(s.Runs,
			spec.Run{Tenant: tn, ID: "done", Operation: "work", State: spec.RunCompleted, Version: 3, LastSeq: 2, MaxAttempts: 3},
			spec.Run{Tenant: tn, ID: "leased", Operation: "work", State: spec.RunRunning, Version: 2, LastSeq: 1, MaxAttempts: 3},
			spec.Run{Tenant: tn, ID: "queued", Operation: "work", State: spec.RunQueued, Version: 1, LastSeq: 1, MaxAttempts: 3})
		s.Events = append(s.Events,
			spec.Event{Tenant: tn, RunID: "done", Seq: 1, Kind: spec.EventRunQueued},
			spec.Event{Tenant: tn, RunID: "done", Seq: 2, Kind: spec.EventRunCompleted, At: 9, Payload: spec.CompletedPayload(1)},
			spec.Event{Tenant: tn, RunID: "leased", Seq: 1, Kind: spec.EventRunQueued},
			spec.Event{Tenant: tn, RunID: "queued", Seq: 1, Kind: spec.EventRunQueued})
		s.Jobs = append(s.Jobs,
			spec.Job{Tenant: tn, RunID: "done", Operation: "work", State: spec.JobCompleted, Generation: 1, Attempts: 1, MaxAttempts: 3},
			spec.Job{Tenant: tn, RunID: "leased", Operation: "work", State: spec.JobLeased, LeaseOwner: "w", LeaseExpiresAt: 50,
				Generation: 2, Attempts: 2, MaxAttempts: 3},
			spec.Job{Tenant: tn, RunID: "queued", Operation: "work", State: spec.JobQueued, MaxAttempts: 3})
		s.Attempts = append(s.Attempts,
			spec.Attempt{Tenant: tn, RunID: "done", Generation: 1, Number: 1, Worker: "w", FinishedAt: 9, Outcome: spec.AttemptCompleted},
			spec.Attempt{Tenant: tn, RunID: "leased", Generation: 1, Number: 1, Worker: "w", FinishedAt: 9, Outcome: spec.AttemptExpired},
			spec.Attempt{Tenant: tn, RunID: "leased", Generation: 2, Number: 2, Worker: "w", Outcome: spec.AttemptRunning})
		s.Idempotency = append(s.Idempotency,
			spec.IdempotencyRecord{Tenant: tn, Operation: "work", Key: "k-done", RunID: "done"},
			spec.IdempotencyRecord{Tenant: tn, Operation: "work", Key: "k-leased", RunID: "leased"},
			spec.IdempotencyRecord{Tenant: tn, Operation: "work", Key: "k-queued", RunID: "queued"})
		s.Effects = append(s.Effects, spec.Effect{Tenant: tn, RunID: "done", Step: "s", Key: "k", State: spec.EffectSucceeded, Generation: 1})
		s.Outbox = append(s.Outbox,
			spec.OutboxMessage{Tenant: tn, RunID: "done", Seq: 1, ID: spec.OutboxID(tn, "done", 0, 1), Subject: "a", Payload: "{}",
				State: spec.OutboxDelivered, Claims: 1, DeliveredAt: 5},
			spec.OutboxMessage{Tenant: tn, RunID: "done", Seq: 2, ID: spec.OutboxID(tn, "done", 0, 2), Subject: "b", Payload: "{}",
				Generation: 1, CreatedAt: 9, State: spec.OutboxPending, Relay: "r", ClaimExpiresAt: 20, Claims: 1},
			spec.OutboxMessage{Tenant: tn, RunID: "queued", Seq: 1, ID: spec.OutboxID(tn, "queued", 0, 1), Subject: "c", Payload: "{}",
				State: spec.OutboxPending})
	}
	return s
}

func TestHealthySnapshot(t *testing.T) {
	if v := Check(healthy()); len(v) != 0 {
		t.Fatalf("a healthy snapshot has violations: %v", v)
	}
	if v := Check(spec.Snapshot{}); len(v) != 0 {
		t.Fatalf("an empty snapshot has violations: %v", v)
	}
}

// aBreak is one way to break healthy(): the violations Check must report,
// in order.
type aBreak struct {
	name   string
	break_ func(s *spec.Snapshot)
	want   []string
}

// breaks are the broken snapshots: one per check of Check.
func breaks() []aBreak {
	idx := func(list []spec.Job, run string) int {
		return slices.IndexFunc(list, func(j spec.Job) bool { return j.Tenant == "ta" && j.RunID == run })
	}
	return []aBreak{
		{"runs out of order", func(s *spec.Snapshot) { s.Runs[0], s.Runs[1] = s.Runs[1], s.Runs[0] },
			[]string{"Snapshot"}},
		{"duplicated job", func(s *spec.Snapshot) { s.Jobs = slices.Insert(s.Jobs, 1, s.Jobs[1]) },
			[]string{"Snapshot", "7"}},
		{"events out of order", func(s *spec.Snapshot) { s.Events[0], s.Events[1] = s.Events[1], s.Events[0] },
			[]string{"Snapshot", "1", "2", "3", "1", "2", "15"}},
		{"attempts out of order", func(s *spec.Snapshot) { s.Attempts[1], s.Attempts[2] = s.Attempts[2], s.Attempts[1] },
			[]string{"Snapshot"}},
		{"idempotency out of order", func(s *spec.Snapshot) { s.Idempotency[0], s.Idempotency[1] = s.Idempotency[1], s.Idempotency[0] },
			[]string{"Snapshot"}},
		{"effects out of order", func(s *spec.Snapshot) { s.Effects[0], s.Effects[1] = s.Effects[1], s.Effects[0] },
			[]string{"Snapshot"}},
		{"sequence gap", func(s *spec.Snapshot) { s.Events[1].Seq = 3 }, []string{"1"}},
		{"last seq ahead of the events", func(s *spec.Snapshot) { s.Runs[1].LastSeq = 2 }, []string{"1"}},
		{"run_queued not first", func(s *spec.Snapshot) { s.Events[1].Kind = spec.EventRunQueued }, []string{"2", "3"}},
		{"terminal event of a running run", func(s *spec.Snapshot) {
			s.Events = slices.Insert(s.Events, 3, spec.Event{Tenant: "ta", RunID: "leased", Seq: 2, Kind: spec.EventRunFailed})
			s.Runs[1].LastSeq = 2
		}, []string{"3", "3"}},
		{"terminal event of the wrong kind", func(s *spec.Snapshot) { s.Events[1].Kind = spec.EventRunFailed }, []string{"3"}},
		{"run and job disagree", func(s *spec.Snapshot) { s.Jobs[idx(s.Jobs, "queued")].State = spec.JobCancelled },
			[]string{"4", "4"}},
		{"terminal run, job of another end", func(s *spec.Snapshot) { s.Jobs[idx(s.Jobs, "done")].State = spec.JobDead },
			[]string{"4"}},
		{"queued run with an attempt", func(s *spec.Snapshot) {
			s.Attempts = slices.Insert(s.Attempts, 3, spec.Attempt{Tenant: "ta", RunID: "queued", Outcome: spec.AttemptReleased})
		}, []string{"4", "11"}},
		{"attempts over the budget", func(s *spec.Snapshot) { s.Jobs[idx(s.Jobs, "done")].Attempts = 4 }, []string{"6"}},
		{"job without a run", func(s *spec.Snapshot) {
			s.Jobs = slices.Insert(s.Jobs, 3, spec.Job{Tenant: "ta", RunID: "r", State: spec.JobQueued, MaxAttempts: 1})
		}, []string{"7"}},
		{"run without a job", func(s *spec.Snapshot) {
			s.Jobs = slices.Delete(s.Jobs, 2, 3) // ta/queued's, which has no attempts
		}, []string{"7"}},
		{"event without a run", func(s *spec.Snapshot) {
			s.Events = slices.Insert(s.Events, 4, spec.Event{Tenant: "ta", RunID: "r", Seq: 1, Kind: spec.EventRunQueued})
		}, []string{"7"}},
		{"orphan attempt", func(s *spec.Snapshot) {
			s.Attempts = slices.Insert(s.Attempts, 3, spec.Attempt{Tenant: "ta", RunID: "r", Generation: 1, Outcome: spec.AttemptExpired})
		}, []string{"7"}},
		{"effect without a job", func(s *spec.Snapshot) { s.Effects[0].RunID = "a" }, []string{"7"}},
		{"idempotency record of a missing run", func(s *spec.Snapshot) { s.Idempotency[0].RunID = "ghost" }, []string{"7"}},
		{"idempotency record of another tenant's run", func(s *spec.Snapshot) { s.Idempotency[0].Tenant = "tc" },
			[]string{"Snapshot", "7"}},
		{"leased job without an owner", func(s *spec.Snapshot) { s.Jobs[idx(s.Jobs, "leased")].LeaseOwner = "" }, []string{"8"}},
		{"queued job with an expiry", func(s *spec.Snapshot) { s.Jobs[idx(s.Jobs, "queued")].LeaseExpiresAt = 5 }, []string{"8"}},
		{"record for another operation", func(s *spec.Snapshot) { s.Idempotency[0].Operation = "aa" }, []string{"9"}},
		{"two records for one key", func(s *spec.Snapshot) { s.Idempotency[1].Key = "k-done" }, []string{"Snapshot", "9"}},
		{"generation behind its attempts", func(s *spec.Snapshot) { s.Jobs[idx(s.Jobs, "done")].Generation = 0 },
			[]string{"12", "11"}},
		{"leased job, no running attempt", func(s *spec.Snapshot) { s.Attempts[2].Outcome = spec.AttemptExpired }, []string{"11"}},
		{"running attempt of an older generation", func(s *spec.Snapshot) { s.Attempts[1].Outcome = spec.AttemptRunning },
			[]string{"11", "11"}},
		{"attempt of generation 0", func(s *spec.Snapshot) { s.Attempts[0].Generation = 0 }, []string{"11"}},
		{"admission message after the completion's", func(s *spec.Snapshot) {
			s.Outbox = slices.Insert(s.Outbox, 2, spec.OutboxMessage{Tenant: "ta", RunID: "done", Seq: 3, ID: spec.OutboxID("ta", "done", 0, 3),
				Subject: "d", Payload: "{}", State: spec.OutboxPending})
		}, []string{"15"}},
		{"effect ahead of its job", func(s *spec.Snapshot) { s.Effects[0].Generation = 2 }, []string{"12"}},
		{"outbox out of order", func(s *spec.Snapshot) { s.Outbox[0], s.Outbox[1] = s.Outbox[1], s.Outbox[0] },
			[]string{"Snapshot", "14", "14", "15"}},
		{"outbox message without a run", func(s *spec.Snapshot) { s.Outbox[len(s.Outbox)-1].RunID = "zz" }, []string{"7"}},
		{"delivered message still claimed", func(s *spec.Snapshot) { s.Outbox[0].Relay, s.Outbox[0].ClaimExpiresAt = "r", 30 },
			[]string{"14"}},
		{"claim without an expiry", func(s *spec.Snapshot) { s.Outbox[1].ClaimExpiresAt = 0 }, []string{"14"}},
		{"message id not its run's", func(s *spec.Snapshot) { s.Outbox[2].ID = "ta/queued/0/2" }, []string{"14"}},
		{"message of a generation that did not complete", func(s *spec.Snapshot) { s.Outbox[1].Generation = 2 }, []string{"15"}},
		{"admission message written after the admission", func(s *spec.Snapshot) { s.Outbox[2].CreatedAt = 5 }, []string{"15"}},
	}
}

// TestEachInvariantCatchesItsBreak breaks a healthy snapshot in one way per
// case and expects exactly the violations that break shows, so every check
// of Check is shown to fire.
func TestEachInvariantCatchesItsBreak(t *testing.T) {
	for _, tc := range breaks() {
		t.Run(tc.name, func(t *testing.T) {
			s := healthy()
			tc.break_(&s)
			var got []string
			for _, v := range Check(s) {
				got = append(got, v.Invariant)
				if _, ok := Titles[v.Invariant]; !ok {
					t.Errorf("violation %s has no title in Titles", v)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("want violations of %v, got:\n%v", tc.want, Check(s))
			}
		})
	}
}

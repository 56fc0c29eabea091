package model

import "strconv"

// Key returns the canonical encoding of the state: two states are equal (hold
// the same rows with the same values) if and only if their keys are equal. The
// explorer hashes it to deduplicate states and a linearizability checker uses
// it for Equal and Hash. The encoding is self-delimiting (every string is
// length-prefixed, every list counted), which is what makes it injective.
func (s State) Key() string {
	e := encoder(make([]byte, 0, 512*len(s.runs)+96*len(s.idem)+16))
	e.int(int64(len(s.runs)))
	for _, r := range s.runs {
		r.encode(&e)
	}
	e.int(int64(len(s.idem)))
	for _, rec := range s.idem {
		e.str(rec.Tenant)
		e.str(rec.Operation)
		e.str(rec.Key)
		e.str(rec.Fingerprint)
		e.str(rec.RunID)
		e.int(rec.CreatedAt)
		e.int(rec.ExpiresAt)
	}
	return string(e)
}

// encode appends the row's canonical encoding: every field of the run, its
// job, events, attempts, effects and outbox messages, the lists counted. Rows are not cached
// with their encoding: the explorer keeps millions of rows, and the encoding
// would double their size.
func (r *runRow) encode(e *encoder) {
	u := r.run
	e.str(u.Tenant)
	e.str(u.ID)
	e.str(u.Operation)
	e.str(string(u.State))
	e.int(u.Version)
	e.int(u.LastSeq)
	e.str(u.Payload)
	e.str(u.Fingerprint)
	e.int(int64(u.MaxAttempts))
	e.str(u.ErrorCode)
	e.str(u.Result)
	e.int(u.CreatedAt)
	e.int(u.DeadlineAt)
	e.str(u.ReplayOf)
	e.int(int64(u.ReplayDepth))

	j := r.job
	e.str(j.Tenant)
	e.str(j.RunID)
	e.str(j.Operation)
	e.str(string(j.State))
	e.int(j.AvailableAt)
	e.str(j.LeaseOwner)
	e.int(j.LeaseExpiresAt)
	e.int(j.Generation)
	e.int(int64(j.Attempts))
	e.int(int64(j.MaxAttempts))
	e.str(j.LastErrorCode)

	e.int(int64(len(r.events)))
	for _, ev := range r.events {
		e.str(ev.Tenant)
		e.str(ev.RunID)
		e.int(ev.Seq)
		e.str(string(ev.Kind))
		e.int(ev.At)
		e.str(ev.Payload)
	}
	e.int(int64(len(r.attempts)))
	for _, a := range r.attempts {
		e.str(a.Tenant)
		e.str(a.RunID)
		e.int(a.Generation)
		e.int(int64(a.Number))
		e.str(a.Worker)
		e.int(a.ClaimedAt)
		e.int(a.RenewedAt)
		e.int(a.FinishedAt)
		e.str(string(a.Outcome))
		e.str(a.ErrorCode)
		e.str(string(a.ErrorClass))
		e.int(a.RetryAt)
	}
	e.int(int64(len(r.effects)))
	for _, f := range r.effects {
		e.str(f.Tenant)
		e.str(f.RunID)
		e.str(f.Step)
		e.str(f.Key)
		e.str(string(f.State))
		e.str(f.ProviderRef)
		e.int(f.Generation)
		e.int(f.UpdatedAt)
	}
	e.int(int64(len(r.outbox)))
	for _, m := range r.outbox {
		e.str(m.Tenant)
		e.str(m.RunID)
		e.int(m.Seq)
		e.str(m.ID)
		e.str(m.Subject)
		e.str(m.Payload)
		e.int(m.Generation)
		e.int(m.CreatedAt)
		e.str(string(m.State))
		e.str(m.Relay)
		e.int(m.ClaimExpiresAt)
		e.int(int64(m.Claims))
		e.int(m.DeliveredAt)
	}
}

// encoder appends self-delimiting fields: "len:bytes" for strings and
// "digits;" for integers.
type encoder []byte

func (e *encoder) str(s string) {
	*e = strconv.AppendInt(*e, int64(len(s)), 10)
	*e = append(*e, ':')
	*e = append(*e, s...)
}

func (e *encoder) int(v int64) {
	*e = strconv.AppendInt(*e, v, 10)
	*e = append(*e, ';')
}

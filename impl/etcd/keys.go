package etcd

import (
	"fmt"
	"math"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/spec"
)

// sep separates the parts of a key. It sorts below every byte a name may
// hold (tenants, run ids, operations, keys and steps are printable ASCII),
// so that key order is the order of the tuples the key spells, as SPEC.md's
// byte-wise id order needs.
const sep = '\x00'

// key joins the store's prefix, a family and its parts.
func (s *Store) key(family string, parts ...string) string {
	var b strings.Builder
	b.WriteString(s.prefix)
	b.WriteByte(sep)
	b.WriteString(family)
	for _, p := range parts {
		b.WriteByte(sep)
		b.WriteString(p)
	}
	return b.String()
}

// under is the prefix of every key of family whose parts start with parts.
func (s *Store) under(family string, parts ...string) string {
	return s.key(family, parts...) + string(sep)
}

// end is the first key past every key that starts with p.
func end(p string) string { return clientv3.GetPrefixRangeEnd(p) }

// num is a time, sequence or generation as a fixed-width decimal, so that
// key order is numeric order (every one is >= 0).
func num(n int64) string { return fmt.Sprintf("%020d", n) }

// The families (SPEC.md's records, and the indexes that let operations find
// them by range reads). See the package doc for the invariants.
const (
	famRun        = "run"    // run/<tenant>/<run>: runRecord
	famJob        = "job"    // job/<tenant>/<run>: spec.Job
	famLease      = "lease"  // lease/<tenant>/<run>: fence value, present iff the job is leased
	famEvent      = "event"  // event/<tenant>/<run>/<seq>: spec.Event
	famAttempt    = "att"    // att/<tenant>/<run>/<generation>: spec.Attempt
	famEffect     = "eff"    // eff/<tenant>/<run>/<step>/<key>: spec.Effect
	famIdem       = "idem"   // idem/<tenant>/<operation>/<key>: spec.IdempotencyRecord
	famIdemExpiry = "idemx"  // idemx/<expires_at>/<tenant>/<operation>/<key>: ""
	famClaimable  = "ready"  // ready/<tenant>/<eligible_at>/<run>: "" (queued, or leased with budget left)
	famReapable   = "reap"   // reap/<tenant>/<lease_expires_at>/<run>: "" (leased, budget spent)
	famFinished   = "done"   // done/<tenant>/<finished_at>/<run>: "" (terminal runs)
	famCreated    = "made"   // made/<tenant>/<newest(created_at, run)>: the run id (ListRuns' order)
	famReplayedBy = "replay" // replay/<tenant>/<original>: the replay's run id
	famOutbox     = "out"    // out/<tenant>/<run>/<seq>: spec.OutboxMessage
	famPending    = "pend"   // pend/<created_at>/<tenant>/<run>/<seq>: "" (pending messages)
	famPendingOf  = "pendt"  // pendt/<tenant>/<created_at>/<run>/<seq>: "" (the same, by tenant)
	famClock      = "clock"  // clock: the cluster clock (ClusterClock)
	famMarker     = "commit" // commit/<random>: a write's commit marker, on an expiring etcd lease (resolve)
)

// runRecord is a run as stored: the run, the idempotency record that names
// it (operation and key; "" for a replay) and how many outbox messages it
// has (the next message's seq is Outbox+1).
type runRecord struct {
	spec.Run
	IdemOperation string `json:"idem_operation,omitempty"`
	IdemKey       string `json:"idem_key,omitempty"`
	Outbox        int64  `json:"outbox_count,omitempty"`
	// FinishedAt is the time of the terminal event (0 while not terminal):
	// the run's entry in the finished index.
	FinishedAt int64 `json:"finished_at,omitempty"`
}

func (s *Store) runKey(t, r string) string   { return s.key(famRun, t, r) }
func (s *Store) jobKey(t, r string) string   { return s.key(famJob, t, r) }
func (s *Store) leaseKey(t, r string) string { return s.key(famLease, t, r) }
func (s *Store) eventKey(t, r string, seq int64) string {
	return s.key(famEvent, t, r, num(seq))
}
func (s *Store) attemptKey(t, r string, gen int64) string {
	return s.key(famAttempt, t, r, num(gen))
}
func (s *Store) effectKey(t, r, step, k string) string { return s.key(famEffect, t, r, step, k) }
func (s *Store) idemKey(t, op, k string) string        { return s.key(famIdem, t, op, k) }
func (s *Store) idemExpiryKey(rec spec.IdempotencyRecord) string {
	return s.key(famIdemExpiry, num(rec.ExpiresAt), rec.Tenant, rec.Operation, rec.Key)
}
func (s *Store) finishedKey(t string, at int64, r string) string {
	return s.key(famFinished, t, num(at), r)
}

// createdKey is the run's entry in the listing index: under its tenant, at
// newest(created_at, run id), so that ascending key order (the only order
// etcd reads a range in without reading all of it) is the listing's order.
func (s *Store) createdKey(t string, at int64, r string) string {
	return s.key(famCreated, t) + string(sep) + newest(spec.RunPosition{CreatedAt: at, RunID: r})
}

// newest spells a listing position so that byte order is the listing's
// order, newest first: math.MaxInt64 - created_at as 20 digits, then each
// byte of the run id complemented and 0xff after them ("" is the least id:
// its 0xff sorts after every complemented byte, so (t, "") is spelled after
// every run created at t, as spec.RunPosition orders it).
func newest(p spec.RunPosition) string {
	b := []byte(num(math.MaxInt64 - p.CreatedAt))
	for i := 0; i < len(p.RunID); i++ {
		b = append(b, ^p.RunID[i])
	}
	return string(append(b, 0xff))
}

func (s *Store) replayedByKey(t, r string) string { return s.key(famReplayedBy, t, r) }
func (s *Store) outboxKey(t, r string, seq int64) string {
	return s.key(famOutbox, t, r, num(seq))
}
func (s *Store) pendingKeys(m spec.OutboxMessage) [2]string {
	return [2]string{s.key(famPending, num(m.CreatedAt), m.Tenant, m.RunID, num(m.Seq)),
		s.key(famPendingOf, m.Tenant, num(m.CreatedAt), m.RunID, num(m.Seq))}
}

// indexKey is the one index entry of a job that is not terminal: claimable
// from eligible_at (available_at when queued, the lease's expiry when
// leased) while budget remains, reapable from the expiry once it is spent;
// "" for a terminal job.
func (s *Store) indexKey(j spec.Job) string {
	switch {
	case j.State == spec.JobQueued:
		return s.key(famClaimable, j.Tenant, num(j.AvailableAt), j.RunID)
	case j.State == spec.JobLeased && j.Attempts < j.MaxAttempts:
		return s.key(famClaimable, j.Tenant, num(j.LeaseExpiresAt), j.RunID)
	case j.State == spec.JobLeased:
		return s.key(famReapable, j.Tenant, num(j.LeaseExpiresAt), j.RunID)
	}
	return ""
}

// fence is the lease key's value for a lease: generation and owner. The
// key's value is fence + the expiry, so the lease guard is two compares on
// it (leaseGuard).
func fence(generation int64, owner string) string {
	return num(generation) + string(sep) + owner + string(sep)
}

// leaseGuard is the predicate of every write made under a lease (renew,
// complete, retry, fail, release, the effect ledger's writes), as compares
// in the write's Txn: the lease key exists (the job is leased, so not
// terminal), its value starts with the caller's generation and owner, and
// the expiry that follows is after now. A value v has that prefix and an
// expiry > now exactly when fence+num(now) < v < fence+":" (':' sorts just
// past the digits).
func (s *Store) leaseGuard(ref spec.LeaseRef, now int64) []clientv3.Cmp {
	k, f := s.leaseKey(ref.Tenant, ref.RunID), fence(ref.Generation, ref.Owner)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(k), ">", f+num(now)),
		clientv3.Compare(clientv3.Value(k), "<", f+":"),
	}
}

// putJob stages a job's new value with its index entry and lease key, given
// the value it had (nil: a new job).
func (w *wtx) putJob(old *spec.Job, j spec.Job) {
	s := w.s
	nk := s.indexKey(j)
	if old != nil {
		if ok := s.indexKey(*old); ok != "" && ok != nk {
			w.del(ok)
		}
	}
	if nk != "" {
		w.put(nk, "")
	}
	lk := s.leaseKey(j.Tenant, j.RunID)
	switch {
	case j.State == spec.JobLeased:
		w.put(lk, fence(j.Generation, j.LeaseOwner)+num(j.LeaseExpiresAt))
	case old != nil && old.State == spec.JobLeased:
		w.del(lk)
	}
	w.put(s.jobKey(j.Tenant, j.RunID), j)
}

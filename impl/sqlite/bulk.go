package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCreator = (*Store)(nil)

// CreateRuns implements spec.BatchCreator: one BEGIN IMMEDIATE transaction,
// one clock reading, and every member decided in request order as CreateRun
// decides it, each seeing the members before it (admit).
func (s *Store) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	if len(reqs) == 0 {
		return []spec.CreateOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d admissions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	var outcomes []spec.CreateOutcome
	err := s.write(ctx, spec.OpCreateRuns, func(tx *txn, now int64) error {
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		var err error
		outcomes, err = s.admit(ctx, tx, reqs, now, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// pieceMax is the most members one multi-row admission statement carries.
// A batch is cut into pieces of pieceMax, then of powers of two (pieces), so
// that each statement has one text per piece size: a few prepared statements
// per connection, never one per batch size.
const pieceMax = 128

// pieces cuts n members into piece sizes: pieceMax as often as it fits,
// then the powers of two of the rest, largest first.
func pieces(n int) []int {
	var out []int
	for ; n >= pieceMax; n -= pieceMax {
		out = append(out, pieceMax)
	}
	for size := pieceMax / 2; size > 0; size /= 2 {
		if n >= size {
			out = append(out, size)
			n -= size
		}
	}
	return out
}

// multiRow is head followed by k copies of row, comma-separated, with tail
// after them (the texts of admissionLookups, insertAdmittedRuns and
// insertAdmittedJobs, built once per piece size).
func multiRow(head, row, tail string, k int) string {
	return head + strings.TrimSuffix(strings.Repeat(row+", ", k), ", ") + tail
}

// admissionTexts are the multi-row admission statements of each piece size.
var admissionTexts = func() map[int][3]string {
	texts := map[int][3]string{}
	for size := pieceMax; size > 0; size /= 2 {
		texts[size] = [3]string{
			multiRow(selectAdmissionRecords, scopeRow, selectAdmissionTakenHead, size) +
				multiRow("", runIDRow, ")", size),
			multiRow(insertAdmittedRunsHead, admittedRunRow, "", size),
			multiRow(insertAdmittedJobsHead, admittedJobRow, "", size),
		}
	}
	return texts
}()

// storedRecord is a live or expired idempotency record of the database, or
// (member >= 0) the one a member of this batch created.
type storedRecord struct {
	fingerprint, runID string
	expiresAt          int64
	member             int
}

type scopeKey struct{ tenant, operation, key string }
type runKey struct{ tenant, runID string }

// admit decides and writes the admissions reqs at now inside tx, the
// writer lock held, so what it reads cannot change before it writes. It
// reads the scopes' records and the proposed run ids taken in one statement
// per piece, decides each member in request order (a live record: replay,
// or idempotency_conflict on another fingerprint; a run id taken, in the
// database or by an earlier member: already_exists; else created, replacing
// an expired record), then writes the created members with one run and one
// job statement per piece. A member refused by a contract check gets its
// error in its outcome and writes nothing; bulk says which operation it is
// (the mutants differ). Any other error fails the whole admission.
func (s *Store) admit(ctx context.Context, tx *txn, reqs []spec.CreateRunRequest, now int64, bulk bool) ([]spec.CreateOutcome, error) {
	outcomes := make([]spec.CreateOutcome, len(reqs))
	norm := make([]spec.NormalizedCreate, len(reqs))
	var valid []int
	for i, req := range reqs {
		n, err := s.cfg.NormalizeCreate(req, now)
		if err != nil {
			if !isSpecError(err) {
				return nil, err
			}
			outcomes[i].Err = err
			continue
		}
		norm[i] = n
		valid = append(valid, i)
	}
	records, taken, err := lookupAdmissions(ctx, tx, norm, valid)
	if err != nil {
		return nil, err
	}

	var created, replaced []int       // members created; those of them replacing an expired record
	storedReplays := map[int]runKey{} // member replaying a run of the database → that run
	replays := map[int]int{}          // member replaying an earlier member → that member
	for _, i := range valid {
		n := norm[i]
		scope := scopeKey{n.Tenant, n.Operation, n.Key}
		rec, found := records[scope]
		if found && rec.expiresAt > now {
			ignore := mutant.On(mutant.IdempotencyIgnoresFingerprint) || bulk && mutant.On(mutant.BulkIgnoresFingerprint)
			if rec.fingerprint != n.Fingerprint && !ignore {
				outcomes[i].Err = spec.IdempotencyConflict(n.Key, n.Operation, rec.fingerprint)
				continue
			}
			outcomes[i].Result.Replayed = true
			if rec.member >= 0 {
				replays[i] = rec.member
			} else {
				storedReplays[i] = runKey{n.Tenant, rec.runID}
			}
			continue
		}
		k := runKey{n.Tenant, n.RunID}
		if taken[k] {
			outcomes[i].Err = spec.RunExists(n.Tenant, n.RunID)
			continue
		}
		taken[k] = true
		if found {
			replaced = append(replaced, i) // expired but not yet purged: the key is free again
		}
		records[scope] = storedRecord{fingerprint: n.Fingerprint, expiresAt: n.ExpiresAt, member: i}
		created = append(created, i)
		outcomes[i].Result.Run = n.QueuedRun(now)
	}

	for i, k := range storedReplays {
		run, err := getRun(ctx, tx, k.tenant, k.runID)
		if err != nil {
			return nil, err
		}
		outcomes[i].Result.Run = run
	}
	for i, first := range replays {
		outcomes[i].Result.Run = outcomes[first].Result.Run
	}
	if err := writeAdmissions(ctx, tx, norm, created, replaced, now); err != nil {
		return nil, err
	}
	return outcomes, nil
}

// lookupAdmissions reads the records of the scopes of members valid and
// which of their proposed run ids are taken, one statement per piece.
func lookupAdmissions(ctx context.Context, tx *txn, norm []spec.NormalizedCreate, valid []int) (map[scopeKey]storedRecord, map[runKey]bool, error) {
	records := map[scopeKey]storedRecord{}
	taken := map[runKey]bool{}
	off := 0
	for _, size := range pieces(len(valid)) {
		part := valid[off : off+size]
		off += size
		a := make([]any, 0, 5*size)
		for _, i := range part {
			a = append(a, norm[i].Tenant, norm[i].Operation, norm[i].Key)
		}
		for _, i := range part {
			a = append(a, norm[i].Tenant, norm[i].RunID)
		}
		rows, err := tx.QueryContext(ctx, admissionTexts[size][0], a...)
		if err != nil {
			return nil, nil, err
		}
		for rows.Next() {
			var isRecord bool
			var s scopeKey
			var rec storedRecord
			var runID string
			if err := rows.Scan(&isRecord, &s.tenant, &s.operation, &s.key, &rec.fingerprint, &runID, &rec.expiresAt); err != nil {
				rows.Close()
				return nil, nil, err
			}
			if isRecord {
				rec.runID, rec.member = runID, -1
				records[s] = rec
			} else {
				taken[runKey{s.tenant, runID}] = true
			}
		}
		if err := rows.Close(); err != nil {
			return nil, nil, err
		}
	}
	return records, taken, nil
}

// writeAdmissions writes the members created: first the deletion of each
// expired record one replaces (its scope's unique index holds one record),
// then their runs and their jobs, one statement of each per piece, then
// their outbox messages. Every write must touch exactly the rows decided:
// anything else fails the admission.
func writeAdmissions(ctx context.Context, tx *txn, norm []spec.NormalizedCreate, created, replaced []int, now int64) error {
	for _, i := range replaced {
		n := norm[i]
		a := args{"tenant": n.Tenant, "operation": n.Operation, "key": n.Key, "now": now}
		if deleted, err := exec(ctx, tx, deleteIdempotency, a); err != nil || deleted != 1 {
			if err == nil {
				err = fmt.Errorf("sqlite: the expired idempotency record #%s of operation %q was read but not deleted", spec.ShortHash(n.Key), n.Operation)
			}
			return err
		}
	}
	off := 0
	for _, size := range pieces(len(created)) {
		part := created[off : off+size]
		off += size
		runs := make([]any, 0, 10*size)
		jobs := make([]any, 0, 5*size)
		for _, i := range part {
			n := norm[i]
			runs = append(runs, n.Tenant, n.RunID, n.Operation, n.Payload, n.Fingerprint, n.MaxAttempts, now, n.DeadlineAt, n.Key, n.ExpiresAt)
			jobs = append(jobs, n.Tenant, n.RunID, n.Operation, n.AvailableAt, n.MaxAttempts)
		}
		for j, a := range [][]any{runs, jobs} {
			res, err := tx.ExecContext(ctx, admissionTexts[size][j+1], a...)
			if err != nil {
				return err
			}
			if inserted, err := res.RowsAffected(); err != nil || inserted != int64(size) {
				if err == nil {
					err = fmt.Errorf("sqlite: an admission inserted %d of the %d rows it decided", inserted, size)
				}
				return err
			}
		}
	}
	for _, i := range created {
		n := norm[i]
		if err := writeOutbox(ctx, tx, n.Tenant, n.RunID, now, 0, now, n.Outbox); err != nil {
			return err
		}
	}
	return nil
}

func isSpecError(err error) bool {
	var se *spec.Error
	return errors.As(err, &se)
}

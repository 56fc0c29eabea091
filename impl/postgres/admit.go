package postgres

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCreator = (*Store)(nil)

// CreateRun implements spec.Store: admit with one member, its refusal the
// call's error.
func (s *Store) CreateRun(ctx context.Context, req spec.CreateRunRequest) (spec.CreateRunResult, error) {
	if err := s.precheck(func(now int64) error { _, err := s.cfg.NormalizeCreate(req, now); return err }); err != nil {
		return spec.CreateRunResult{}, err
	}
	if s.admissions != nil {
		out, err := s.admissions.Do(ctx, req)
		if err != nil {
			// The batch's error (typed), or the caller's context ended
			// before its call joined one: nothing was written for it.
			return spec.CreateRunResult{}, typed(ctx, err)
		}
		return out.Result, out.Err
	}
	return s.createRun(ctx, req)
}

// createRun is CreateRun in a transaction of its own: a fresh admission
// first (createFresh), and when that was not tried or raced a concurrent
// admission or purge, the admission decided from the scope's record under
// its admission lock (admitAll).
func (s *Store) createRun(ctx context.Context, req spec.CreateRunRequest) (spec.CreateRunResult, error) {
	res, tried, err := s.createFresh(ctx, req)
	switch {
	case tried && raced(err) && ctx.Err() == nil:
		s.retried.Add(1)
	case tried:
		return res, err
	}
	outs, err := s.admitAll(ctx, spec.OpCreateRun, []spec.CreateRunRequest{req}, false)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	return outs[0].Result, nil
}

// createFresh admits req when its scope has no record and its run id no
// run, the common case, in one statement (insertFresh) and two round trips
// with the commit, where admitAll takes seven statements in three. Like
// admitAll it holds the scope's admission lock to the commit, so a locked
// admission of the scope (a CreateRun, a bulk admission's later attempt)
// waits for it; it decides from the records and run ids of the
// statement's snapshot, taken before the lock, with the clock read after
// the lock, and meets what was admitted since in the unique indexes.
// When the statement wrote nothing (the scope has a record: a replay, a
// conflict or an expired record to replace; the run id is taken; either
// was being written; the clock is outside what the request's times can be
// added to), the request is decided in the same transaction, under the
// lock the statement took, exactly as admitAll decides it from there: the
// record read again, then the clock. tried is false when the request was
// not tried: one whose times are not the clock plus fixed offsets (an
// absolute AvailableAt), one with outbox messages, or one NormalizeCreate
// refuses at time 0. A raced err asks the caller to run it again.
func (s *Store) createFresh(ctx context.Context, req spec.CreateRunRequest) (res spec.CreateRunResult, tried bool, err error) {
	if s.lockedOnly || req.AvailableAt != 0 || len(req.Outbox) > 0 || !sqlText(req.Tenant, req.Operation, req.IdempotencyKey, req.RunID) {
		return res, false, nil
	}
	// At time 0 a created run's times are the offsets from its admission.
	in, err := s.cfg.NormalizeCreate(req, 0)
	if err != nil {
		return res, false, nil
	}
	fresh := false
	queue := func(b *pgx.Batch) { b.Queue(insertFresh, s.freshArgs(in)) }
	err = s.writePipelined(ctx, spec.OpCreateRun, queue, func(t *txn, br pgx.BatchResults) error {
		var now int64
		var locked bool
		switch err := br.QueryRow().Scan(&now, &t.xid, &locked); {
		case errors.Is(err, pgx.ErrNoRows):
			// Nothing written, the lock held: decide under it.
			res, err = s.decideLocked(t, br, req)
			return err
		case err != nil:
			return err
		}
		fresh = true
		out, err := s.admittedFresh(t, br, req, in, now)
		res = out
		return err
	})
	if err != nil {
		return spec.CreateRunResult{}, true, err
	}
	if fresh {
		s.fresh.Add(1)
	}
	return res, true, nil
}

// freshArgs is insertFresh's arguments for in, normalized at time 0: an
// injected clock is read here, before the statement.
func (s *Store) freshArgs(in spec.NormalizedCreate) args {
	var now *int64
	if s.clock != nil {
		v := s.clock.Now()
		now = &v
	}
	return args{"scope": s.admissionScope(in.Tenant, in.Operation, in.Key), "now": now,
		"latest": math.MaxInt64 - max(in.DeadlineAt, in.ExpiresAt, in.AvailableAt),
		"tenant": in.Tenant, "run_id": in.RunID, "operation": in.Operation, "key": in.Key, "payload": in.Payload,
		"fingerprint": in.Fingerprint, "max_attempts": in.MaxAttempts, "deadline_in": in.DeadlineAt,
		"expires_in": in.ExpiresAt, "available_in": in.AvailableAt}
}

// decideLocked decides req after a fresh statement that wrote nothing, in
// its transaction t and under the admission lock it took, as admitAll
// decides it: the record read again, then the clock.
func (s *Store) decideLocked(t *txn, br pgx.BatchResults, req spec.CreateRunRequest) (spec.CreateRunResult, error) {
	if err := br.Close(); err != nil {
		return spec.CreateRunResult{}, err
	}
	reqs := []spec.CreateRunRequest{req}
	p := s.planAdmission(reqs, false, false)
	var b pgx.Batch
	p.queueReads(&b)
	outs, err := s.admit(t, t.SendBatch(t.ctx, &b), p, reqs)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	return outs[0].Result, outs[0].Err
}

// admittedFresh ends a fresh statement that wrote req's run at now (in,
// req normalized at time 0): the times it wrote must be req's at now.
func (s *Store) admittedFresh(t *txn, br pgx.BatchResults, req spec.CreateRunRequest, in spec.NormalizedCreate, now int64) (spec.CreateRunResult, error) {
	if err := br.Close(); err != nil {
		return spec.CreateRunResult{}, err
	}
	t.now, t.timed, t.marked = now, true, true
	n, err := s.cfg.NormalizeCreate(req, now)
	if err != nil || n.DeadlineAt != now+in.DeadlineAt || n.ExpiresAt != now+in.ExpiresAt || n.AvailableAt != now+in.AvailableAt {
		return spec.CreateRunResult{}, fmt.Errorf("postgres: a fresh admission at %d wrote times its request does not have (NormalizeCreate: %v)", now, err)
	}
	return spec.CreateRunResult{Run: n.QueuedRun(now)}, s.notify(t, spec.NotifyRunCreated, n.Tenant, n.RunID, 0)
}

// admitGroup admits a group of concurrent CreateRun calls
// (Options.CoalesceCreateRun): alone, as CreateRun; together, as one bulk
// admission whose members are decided in order, as CreateRun calls one
// after another would be. A bulk admission that still raced concurrent
// ones at its last attempt (admitAll) wrote nothing; each member is then
// admitted on its own, so that each gets its own CreateRun outcome, not
// its neighbours' abort.
func (s *Store) admitGroup(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	if len(reqs) > 1 {
		outs, err := s.admitAll(ctx, spec.OpCreateRun, reqs, true)
		if !raced(err) {
			return outs, err
		}
	}
	outs := make([]spec.CreateOutcome, len(reqs))
	for i, req := range reqs {
		outs[i].Result, outs[i].Err = s.createRun(ctx, req)
	}
	return outs, nil
}

// coalescedBatch is the most CreateRun calls one shared transaction takes.
// A shared transaction that raced a concurrent admission runs again
// holding an advisory lock per call until its commit (admitAll), and
// PostgreSQL's shared lock table is small (max_locks_per_transaction, 64
// by default, times max_connections).
const coalescedBatch = 128

// abandonedAdmission is the error of a coalesced CreateRun whose context
// ended while its shared transaction ran.
func abandonedAdmission(ctxErr error) error {
	return &spec.Error{Code: spec.CodeUnknownOutcome,
		Message: "the caller's context ended while the admission's shared transaction ran; it may have committed: read the run back, or retry with the same idempotency key", Err: ctxErr}
}

// CreateRuns implements spec.BatchCreator: admit with every member, in one
// READ COMMITTED transaction of three round trips whatever the batch's
// size.
func (s *Store) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	if len(reqs) == 0 {
		return []spec.CreateOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d admissions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	return s.admitAll(ctx, spec.OpCreateRuns, reqs, true)
}

// admitAll runs admit as operation op, its first round trip carrying the
// transaction's BEGIN (writePipelined). With one member (bulk false) the
// member's refusal is the operation's error, and rolls it back.
//
// A bulk admission first runs without the admission locks (one per scope,
// held to the commit, would fill PostgreSQL's shared lock table under a
// few concurrent batches of a thousand). A concurrent admission of one of
// its scopes or run ids, or a purge of a run it depends on, then shows as
// a write that finds the row gone or the key taken, or as a replayed run
// missing (raced): the transaction rolls back having written nothing, and
// the admission runs again under the locks. A member refused
// already_exists is the exception that no write reveals: its scope is held
// from before the writes to the commit, against every other admission,
// locked or not (holdRefused). CreateRun always holds its lock, and runs
// again when such an unlocked batch raced it. Every
// attempt reads the clock after what it decides from; after
// maxAdmissionAttempts the last attempt's error (unavailable) is returned
// (for a CreateRun, attempts after its fresh one, see createRun).
func (s *Store) admitAll(ctx context.Context, op spec.Op, reqs []spec.CreateRunRequest, bulk bool) (outcomes []spec.CreateOutcome, err error) {
	for attempt := 1; ; attempt++ {
		p := s.planAdmission(reqs, bulk, !bulk || attempt > 1)
		err = s.writePipelined(ctx, op, p.queueReads, func(t *txn, br pgx.BatchResults) error {
			outcomes, err = s.admit(t, br, p, reqs)
			if err == nil && !bulk {
				err = outcomes[0].Err
			}
			return err
		})
		if err == nil {
			return outcomes, nil
		}
		if !raced(err) || attempt == maxAdmissionAttempts || ctx.Err() != nil {
			return nil, err
		}
		s.retried.Add(1)
	}
}

// maxAdmissionAttempts bounds the attempts of one admission that raced
// concurrent ones (admitAll).
const maxAdmissionAttempts = 3

// scopeKey is an idempotency scope.
type scopeKey struct{ tenant, operation, key string }

// admitted is what an admission found, or decided, for one scope: the
// record's fingerprint, expiry and run (in the database, or created by
// member of this batch).
type admitted struct {
	fingerprint string
	expiresAt   int64
	runID       string
	member      int // -1: the record was in the database
}

// admit is the admission of reqs (CreateRun's, or a bulk admission's
// members in order) inside t, in two pipelined round trips:
//
//  1. The admission locks of every member's scope (sorted: one global
//     order; none on a bulk admission's first attempt, see admitAll;
//     CreateRun's taken already when it follows a fresh statement), then
//     the records of those scopes (and, for a bulk admission, in the same
//     statement and so from the same snapshot, which proposed run ids are
//     taken), then the clock. The server runs a batch's statements in
//     order, so the clock is read after every lock is held and after what
//     the admission decides from. A concurrent purge of runs takes none of
//     these locks: what it deletes after that snapshot is found gone by
//     the statements that depend on it (errRaced): the read of the runs
//     replayed (each must still hold the record read: the run id may
//     have been admitted again since) and, for a batch that writes
//     nothing, of every run it decided from (readDecided); the guarded
//     deletion of an expired record; and a bulk admission's lock of the
//     runs it decided from (writeAdmissions), which then keeps the purge
//     waiting until it commits. An admission that finds a purged run's
//     record gone is one after the purge.
//  2. Each member is decided in Go, in order, exactly as CreateRun decides
//     it, from what was read and from the members before it: invalid, a
//     replay or a conflict of a live record, already_exists, or created
//     (an expired record of its scope is then deleted). A refused member
//     writes nothing, but a bulk admission holds the scope of one refused
//     already_exists (holdRefused). The created members are written in one
//     pipelined batch: the scopes held, the locks of the runs decided from,
//     the deletions, the rows (one statement), their outbox messages and
//     the commit marker (markCommit). Their notifications
//     are announced once the transaction commits (listen.go).
//
// With one member (CreateRun, bulk false) the run's insert is ON CONFLICT
// DO NOTHING: a run id taken by a concurrent admission under another key
// is already_exists. A bulk admission checks the run ids it read instead;
// one taken meanwhile aborts the whole batch (unavailable).
func (s *Store) admit(t *txn, br pgx.BatchResults, p *admissionPlan, reqs []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	records := map[scopeKey]admitted{}
	taken := map[jobKey]bool{}
	now, err := t.readAdmissions(br, p, records, taken)
	if err != nil {
		return nil, err
	}
	if p.bulk {
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return nil, err
		}
	}
	outcomes := make([]spec.CreateOutcome, len(reqs))
	w, err := s.decide(p, reqs, now, records, taken, outcomes)
	if err != nil {
		return nil, err
	}
	if len(w.members) == 0 {
		if err := t.placeUnwritten(w, outcomes); err != nil {
			return nil, err
		}
		return outcomes, nil
	}
	if err := s.writeAdmissions(t, w, p.bulk, now, outcomes); err != nil {
		return nil, err
	}
	for _, r := range w.replays {
		outcomes[r[0]].Result.Run = outcomes[r[1]].Result.Run
	}
	return outcomes, nil
}

// decide decides the members of reqs in order at now, each exactly as
// CreateRun decides it, from what the lookups found (records, taken) and
// from the members before it: a refusal or a replay into outcomes, a
// member created into the write it returns. A member that reaches no SQL
// must be refused whatever the time (planAdmission); an error that is not
// a refusal ends the admission.
func (s *Store) decide(p *admissionPlan, reqs []spec.CreateRunRequest, now int64, records map[scopeKey]admitted, taken map[jobKey]bool, outcomes []spec.CreateOutcome) (*admissionWrite, error) {
	w := &admissionWrite{}
	var refused []scopeKey        // the scopes of members refused already_exists
	creating := map[jobKey]bool{} // the run ids of the members created
	for i, req := range reqs {
		n, err := s.cfg.NormalizeCreate(req, now)
		if err == nil && !p.reach[i] {
			err = fmt.Errorf("postgres: admission of a request with names PostgreSQL cannot store passed validation")
		}
		if err != nil {
			if !isSpecError(err) {
				return nil, err
			}
			outcomes[i].Err = err
			continue
		}
		scope := scopeKey{n.Tenant, n.Operation, n.Key}
		rec, found := records[scope]
		if found && rec.expiresAt > now {
			outcomes[i] = w.fromRecord(i, n, scope, rec, p.bulk)
			continue
		}
		k := jobKey{n.Tenant, n.RunID}
		if taken[k] || creating[k] {
			outcomes[i].Err = spec.RunExists(n.Tenant, n.RunID)
			refused = append(refused, scope)
			if taken[k] {
				w.decidedFrom = append(w.decidedFrom, decidedRun{jobKey: k, lock: lockTaken})
			}
			continue
		}
		creating[k] = true
		records[scope] = admitted{fingerprint: n.Fingerprint, expiresAt: n.ExpiresAt, member: i}
		w.add(i, n, now, found, rec.runID)
	}
	if p.bulk {
		w.holdRefused(refused, records)
	}
	return w, nil
}

// fromRecord decides member i, n, whose scope has the live record rec: an
// idempotency conflict when the fingerprints differ, a replay of the
// record's run when they agree (a run created earlier in the batch, or a
// stored one, read later: readDecided, writeAdmissions). A stored run
// decided from is added to what w checks or locks.
func (w *admissionWrite) fromRecord(i int, n spec.NormalizedCreate, scope scopeKey, rec admitted, bulk bool) spec.CreateOutcome {
	ignore := mutant.On(mutant.IdempotencyIgnoresFingerprint) || bulk && mutant.On(mutant.BulkIgnoresFingerprint)
	stored := decidedRun{jobKey{n.Tenant, rec.runID}, lockRecord, scope, rec.expiresAt}
	if rec.fingerprint != n.Fingerprint && !ignore {
		if rec.member < 0 {
			w.decidedFrom = append(w.decidedFrom, stored)
		}
		return spec.CreateOutcome{Err: spec.IdempotencyConflict(n.Key, n.Operation, rec.fingerprint)}
	}
	if rec.member >= 0 {
		w.replays = append(w.replays, [2]int{i, rec.member})
	} else {
		w.stored = append(w.stored, i)
		w.storedRuns = append(w.storedRuns, stored)
	}
	return spec.CreateOutcome{Result: spec.CreateRunResult{Replayed: true}}
}

// placeUnwritten ends an admission that creates no member at its single
// point: the scopes of its members refused already_exists held
// (holdScopes), one statement that checks every stored run it decided
// from and reads those it replays (readDecided), the scopes released.
func (t *txn) placeUnwritten(w *admissionWrite, outcomes []spec.CreateOutcome) error {
	var ctids []pgtype.TID
	if len(w.hold) > 0 {
		var err error
		if ctids, err = t.holdScopes(w.hold); err != nil {
			return err
		}
	}
	if err := t.readDecided(w.stored, w.storedRuns, w.decidedFrom, outcomes); err != nil {
		return err
	}
	if len(w.hold) == 0 {
		// Nothing written (an advisory lock assigns no transaction
		// id; a fresh statement's insertion that met a conflict may
		// have had one, and wrote nothing), so the commit needs no
		// marker.
		t.marked = true
		return nil
	}
	return t.releaseScopes(ctids)
}

// scopeArgs is scopes as the bulk statements' parallel arrays (tenants,
// operations, keys).
func scopeArgs(scopes []scopeKey) args {
	ts, os, ks := make([]string, len(scopes)), make([]string, len(scopes)), make([]string, len(scopes))
	for i, sc := range scopes {
		ts[i], os[i], ks[i] = sc.tenant, sc.operation, sc.key
	}
	return args{"tenants": ts, "operations": os, "keys": ks}
}

// readDecided reads, in one statement (selectDecidedRuns), the runs the
// members at index replay (runs) and the runs others were refused against
// (refusedAgainst: a record conflicted with, a run id taken), each only
// while it still is what the lookups found; one missing is errRaced. A
// purge of runs, which takes no admission lock (lockPurged), may have
// deleted one since (a record read live at an earlier time than the
// purge's, when it expired), and an admission under another key may have
// taken its run id again. The statement is then a point at which every
// decision of these members holds (and the runs replayed are read there):
// an admission that writes nothing is placed at it. One that writes holds
// what it decided from until its commit instead, and reads the runs it
// replays after it locked them (writeAdmissions).
func (t *txn) readDecided(index []int, runs, refusedAgainst []decidedRun, outcomes []spec.CreateOutcome) error {
	check := strongest(slices.Concat(runs, refusedAgainst))
	if len(check) == 0 {
		return nil
	}
	rows, err := t.Query(t.ctx, selectDecidedRuns, decidedArgs(check))
	if err != nil {
		return err
	}
	return collectDecided(rows, len(check), index, runs, outcomes)
}

// collectDecided reads the rows of selectDecidedRuns, which was asked for
// want runs, and fills in the outcomes of the members at index with the
// runs they replay (runs).
func collectDecided(rows pgx.Rows, want int, index []int, runs []decidedRun, outcomes []spec.CreateOutcome) error {
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (spec.Run, error) { return scanRun(row) })
	if err != nil {
		return err
	}
	if len(list) != want {
		return fmt.Errorf("%w: found %d of the %d runs its members were decided from as they were read", errRaced, len(list), want)
	}
	byKey := make(map[jobKey]spec.Run, len(list))
	for _, r := range list {
		byKey[jobKey{r.Tenant, r.ID}] = r
	}
	for n, i := range index {
		outcomes[i].Result.Run = byKey[runs[n].jobKey]
	}
	return nil
}

// decidedArgs is runs as the parallel arrays of lockDecidedRuns and
// selectDecidedRuns.
func decidedArgs(runs []decidedRun) args {
	n := len(runs)
	tenants, runIDs, operations, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	modes, expires := make([]int32, n), make([]int64, n)
	for i, r := range runs {
		tenants[i], runIDs[i], operations[i], keys[i] = r.tenant, r.runID, r.scope.operation, r.scope.key
		modes[i], expires[i] = int32(r.lock), r.expiresAt
	}
	return args{"tenants": tenants, "run_ids": runIDs, "operations": operations, "keys": keys, "modes": modes, "expires": expires}
}

// sqlText reports whether every name is text PostgreSQL accepts as a
// parameter (valid UTF-8 without NUL).
func sqlText(names ...string) bool {
	for _, n := range names {
		if !utf8.ValidString(n) || strings.IndexByte(n, 0) >= 0 {
			return false
		}
	}
	return true
}

// admissionPlan is what an admission's first round trip asks for: the
// members that reach SQL, the scopes whose locks it takes, in order, and
// the scopes and run ids it looks up.
type admissionPlan struct {
	// locked: the admission locks are taken first (CreateRun, but after a
	// fresh admission's statement, which took it; a bulk admission on its
	// second attempt, see admitAll).
	bulk, locked, dbClock             bool
	reach                             []bool
	scopes                            []string
	tenants, operations, keys, runIDs []string
}

// planAdmission plans the admission of reqs. Only members whose names are
// text PostgreSQL accepts reach SQL; the others are refused by
// NormalizeCreate, whatever the time.
func (s *Store) planAdmission(reqs []spec.CreateRunRequest, bulk, locked bool) *admissionPlan {
	p := &admissionPlan{bulk: bulk, locked: locked, dbClock: s.clock == nil, reach: make([]bool, len(reqs))}
	for i, r := range reqs {
		if !sqlText(r.Tenant, r.Operation, r.IdempotencyKey, r.RunID) {
			continue
		}
		p.reach[i] = true
		p.scopes = append(p.scopes, s.admissionScope(r.Tenant, r.Operation, r.IdempotencyKey))
		p.tenants, p.operations = append(p.tenants, r.Tenant), append(p.operations, r.Operation)
		p.keys, p.runIDs = append(p.keys, r.IdempotencyKey), append(p.runIDs, r.RunID)
	}
	slices.Sort(p.scopes)
	p.scopes = slices.Compact(p.scopes)
	return p
}

// queueReads queues admit's first round trip after the BEGIN: the locks
// (but on a bulk admission's first attempt), the lookups, then the clock.
func (p *admissionPlan) queueReads(b *pgx.Batch) {
	switch {
	case p.bulk && p.locked:
		b.Queue(lockAdmissions, args{"scopes": p.scopes})
	case !p.bulk && p.locked && len(p.scopes) == 1:
		b.Queue(lockAdmission, args{"scope": p.scopes[0]})
	}
	switch {
	case p.bulk:
		b.Queue(selectAdmissionLookups, args{"tenants": p.tenants, "operations": p.operations, "keys": p.keys, "run_ids": p.runIDs})
	case len(p.scopes) == 1:
		b.Queue(selectIdempotency, args{"tenant": p.tenants[0], "operation": p.operations[0], "key": p.keys[0]})
	}
	if p.dbClock {
		b.Queue(clockQuery)
	}
}

// readAdmissions reads the results of queueReads from br (and closes it):
// the records and taken run ids into records and taken. It returns the
// operation's time.
func (t *txn) readAdmissions(br pgx.BatchResults, p *admissionPlan, records map[scopeKey]admitted, taken map[jobKey]bool) (int64, error) {
	defer br.Close()
	if p.locked && (p.bulk || len(p.scopes) == 1) {
		if _, err := br.Exec(); err != nil {
			return 0, err
		}
	}
	if !p.bulk && len(p.scopes) == 0 {
		// A CreateRun whose names SQL cannot hold: refused at any time.
		// Nothing was queued but the database clock, if any.
		if !p.dbClock {
			if err := br.Close(); err != nil {
				return 0, err
			}
		}
		return t.readNow(br, p)
	}
	if err := p.scanLookups(br, records, taken); err != nil {
		return 0, err
	}
	// After the reads the admission decides from (and after the locks).
	return t.readNow(br, p)
}

// scanLookups reads the lookups' rows (a bulk admission's
// selectAdmissionLookups: records and taken run ids; CreateRun's
// selectIdempotency: its one scope's record) into records and taken.
func (p *admissionPlan) scanLookups(br pgx.BatchResults, records map[scopeKey]admitted, taken map[jobKey]bool) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		sk := scopeKey{p.tenants[0], p.operations[0], p.keys[0]} // selectIdempotency's one scope
		rec := admitted{member: -1}
		dest := []any{&rec.fingerprint, &rec.runID, &rec.expiresAt}
		isRecord := true
		if p.bulk {
			dest = append([]any{&isRecord, &sk.tenant, &sk.operation, &sk.key}, dest...)
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return err
		}
		if isRecord {
			records[sk] = rec
		} else {
			taken[jobKey{sk.tenant, rec.runID}] = true
		}
	}
	return rows.Err()
}

// readNow reads the admission's time, queued last (clockQuery) with the
// database clock, else from the injected clock, and closes br.
func (t *txn) readNow(br pgx.BatchResults, p *admissionPlan) (int64, error) {
	if p.dbClock {
		var now int64
		if err := br.QueryRow().Scan(&now); err != nil {
			return 0, err
		}
		t.now, t.timed = now, true
		return now, br.Close()
	}
	now, err := t.clock()
	if err != nil {
		return 0, err
	}
	return now, br.Close()
}

// admissionWrite is the members an admission creates, as insertAdmissions'
// arrays, with the expired records it deletes, the members that replay
// one created earlier in the batch ([replaying member, creating member]),
// those that replay a stored run (stored, with their runs) and the stored
// runs it refused other members against (decidedFrom: a conflict with a
// run's record, a run id taken).
type admissionWrite struct {
	members                                                   []int
	norm                                                      []spec.NormalizedCreate
	tenants, runIDs, operations, payloads, fingerprints, keys []string
	maxAttempts                                               []int32
	deadlines, available, expires                             []int64
	expired                                                   []expiredRecord
	replays                                                   [][2]int
	stored                                                    []int
	storedRuns, decidedFrom                                   []decidedRun
	hold                                                      []scopeKey // refused scopes with no record (holdRefused)
}

// holdRefused makes a bulk admission hold, until its commit, the scopes of
// its members refused already_exists (refused): such a refusal rests on its
// scope having no live record, which no write of the batch otherwise
// guards, and an admission of the scope committed between the batch's
// reads and its commit would place the batch both before that admission
// (the refusal) and after it (the batch's created runs, visible only at the
// commit). A scope the batch itself admits (a later member) is held by its
// record; one whose expired record the lookups found is held by that
// record's row (lockRecord: a replacement of the record waits for it);
// any other is held by a placeholder in the scope's unique index
// (w.hold, holdScopes).
func (w *admissionWrite) holdRefused(refused []scopeKey, records map[scopeKey]admitted) {
	for _, sc := range refused {
		switch rec, found := records[sc]; {
		case found && rec.member >= 0:
		case found:
			w.decidedFrom = append(w.decidedFrom, decidedRun{jobKey{sc.tenant, rec.runID}, lockRecord, sc, rec.expiresAt})
		default:
			w.hold = append(w.hold, sc)
		}
	}
	slices.SortFunc(w.hold, func(a, b scopeKey) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.operation, b.operation), strings.Compare(a.key, b.key))
	})
	w.hold = slices.Compact(w.hold)
}

// holdArgs is the arguments of holdScopes for scopes: each a placeholder
// run, its id one no admitted run can have (run ids start with a letter or
// a digit) and the same for every holder of the scope, so two holders
// conflict on it too.
func holdArgs(scopes []scopeKey) args {
	ids := make([]string, len(scopes))
	for i, sc := range scopes {
		sum := sha256.Sum256([]byte(sc.operation + "\x00" + sc.key))
		ids[i] = "#scope:" + hex.EncodeToString(sum[:16])
	}
	return scopeArgs(scopes).with(args{"run_ids": ids})
}

// holdScopes inserts the placeholders of scopes (sorted; see holdRefused)
// and returns their ctids, for releaseScopes. One not inserted is a record
// of its scope, or another holder, committed since the lookups: errRaced.
func (t *txn) holdScopes(scopes []scopeKey) ([]pgtype.TID, error) {
	rows, err := t.Query(t.ctx, holdScopes, holdArgs(scopes))
	if err != nil {
		return nil, err
	}
	return readHeld(rows, len(scopes))
}

// releaseScopes deletes the placeholders holdScopes inserted (ctids), all
// of them or the transaction fails: one left would commit.
func (t *txn) releaseScopes(ctids []pgtype.TID) error {
	n, err := t.exec(releaseScopes, args{"ctids": ctids})
	if err != nil {
		return err
	}
	if n != int64(len(ctids)) {
		return fmt.Errorf("postgres: deleted %d of the %d placeholders that held refused scopes", n, len(ctids))
	}
	return nil
}

// readHeld reads holdScopes' ctids from rows, wanting n.
func readHeld(rows pgx.Rows, n int) ([]pgtype.TID, error) {
	ctids, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.TID])
	if err != nil {
		return nil, err
	}
	if len(ctids) != n {
		return nil, fmt.Errorf("%w: held %d of the %d scopes of members refused already_exists: a record of one was admitted since the lookups", errRaced, len(ctids), n)
	}
	return ctids, nil
}

// decidedRun is a stored run an admission decided a member from, and how
// lockDecidedRuns locks it.
type decidedRun struct {
	jobKey
	lock      lockMode
	scope     scopeKey // the record's scope (but lockTaken)
	expiresAt int64    // the record's expiry (lockRecord, lockReplayed)
}

// lockMode is how lockDecidedRuns locks a decided run; its value is the
// statement's m.mode, and a larger one is the stronger lock of a row
// (strongest).
type lockMode int32

const (
	// lockTaken: a member was refused its run id (FOR KEY SHARE: the row
	// stays).
	lockTaken lockMode = iota
	// lockRecord: a member replayed or conflicted with the run's live
	// record (FOR SHARE: the row and that record stay).
	lockRecord
	// lockExpired: the batch replaces the run's expired record (FOR NO KEY
	// UPDATE, the lock its deletion takes).
	lockExpired
	// lockReplayed: a member of a batch that writes replays the run's
	// record (lockRecord, and FOR NO KEY UPDATE on its job row: the run it
	// returns cannot move before the commit). Never with lockExpired on
	// one row: a record is live or expired at the batch's time.
	lockReplayed
)

// add adds member i, n; expired says that it replaces the expired record
// of its scope, held by the run recordRun.
func (w *admissionWrite) add(i int, n spec.NormalizedCreate, now int64, expired bool, recordRun string) {
	w.members, w.norm = append(w.members, i), append(w.norm, n)
	w.tenants, w.runIDs, w.operations = append(w.tenants, n.Tenant), append(w.runIDs, n.RunID), append(w.operations, n.Operation)
	w.payloads, w.fingerprints, w.keys = append(w.payloads, n.Payload), append(w.fingerprints, n.Fingerprint), append(w.keys, n.Key)
	w.maxAttempts = append(w.maxAttempts, int32(n.MaxAttempts))
	w.deadlines, w.available, w.expires = append(w.deadlines, n.DeadlineAt), append(w.available, n.AvailableAt), append(w.expires, n.ExpiresAt)
	if expired {
		w.expired = append(w.expired, expiredRecord{scopeKey{n.Tenant, n.Operation, n.Key}, recordRun})
	}
}

// decided is the stored runs w's members were decided from (replayed,
// refused against, holding an expired record w deletes), each once with
// the strongest lock it needs, in (tenant, run id) order: the order in
// which a purge locks run rows (lockPurged) and every bulk admission
// locks them, so that they wait for each other without a deadlock (but
// for a purge's later rounds, see lockPurged). Each row is locked once,
// never upgraded: two batches holding one row in a shared mode and both
// upgrading it would deadlock.
func (w *admissionWrite) decided() []decidedRun {
	runs := slices.Clone(w.decidedFrom)
	for _, r := range w.storedRuns {
		r.lock = lockReplayed
		runs = append(runs, r)
	}
	for _, e := range w.expired {
		runs = append(runs, decidedRun{jobKey{e.tenant, e.runID}, lockExpired, e.scopeKey, 0})
	}
	return strongest(runs)
}

// strongest sorts runs by (tenant, run id) and keeps each run once, with
// its strongest lockMode (whose predicate implies the weaker ones': a row
// has one record). It reuses runs' array.
func strongest(runs []decidedRun) []decidedRun {
	slices.SortFunc(runs, func(a, b decidedRun) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.runID, b.runID), cmp.Compare(b.lock, a.lock))
	})
	return slices.CompactFunc(runs, func(a, b decidedRun) bool { return a.jobKey == b.jobKey })
}

// expiredRecord is the expired record of a scope that an admission
// replaces, and the run that holds it.
type expiredRecord struct {
	scopeKey
	runID string
}

// writeAdmissions is admit's second round trip: w's writes, their outbox
// messages, notifications and the commit marker, pipelined; it fills in
// the created members' outcomes. A bulk admission first locks the stored
// runs its members were decided from (lockDecidedRuns), so that no purge
// deletes one, and no deletion of a record removes one it replayed or
// conflicted with, and no worker moves a run it replays, before this
// commits: its created runs, visible only then, and its outcomes decided
// from those rows would fall on the two sides of that write, at no single
// point. One of them changed already is errRaced. The runs replayed are
// read once locked. (CreateRun needs no such lock: when it writes, it was decided
// from no run but the one whose expired record it deletes, which locks
// that row.)
func (s *Store) writeAdmissions(t *txn, w *admissionWrite, bulk bool, now int64, outcomes []spec.CreateOutcome) (err error) {
	r := &writeRound{w: w, bulk: bulk, now: now}
	var b pgx.Batch
	r.queue(&b)
	for _, n := range w.norm {
		if err := s.notify(t, spec.NotifyRunCreated, n.Tenant, n.RunID, 0); err != nil {
			return err
		}
	}
	var held []pgtype.TID
	if len(w.hold) > 0 {
		// The placeholders are inserted first in the batch; their ctids are
		// known only once read, so the release goes after this batch.
		defer func() {
			if err == nil {
				err = t.releaseScopes(held)
			}
		}()
	}
	br := t.SendBatch(t.ctx, &b)
	defer br.Close()
	if held, err = r.readLocks(br, outcomes); err != nil {
		return err
	}
	if err := r.readExpired(br); err != nil {
		return err
	}
	if bulk {
		err = r.readBulkInsert(br, outcomes)
	} else {
		err = r.readInsert(t, br, outcomes)
	}
	if err != nil {
		return err
	}
	if err := r.readOutbox(br); err != nil {
		return err
	}
	if err := t.readMark(br); err != nil {
		return err
	}
	if t.xid == "" {
		return errors.New("postgres: an admission that wrote rows has no transaction id")
	}
	return nil
}

// writeRound is writeAdmissions' batch: what it queued, so that its
// answers are read in the order queue queued them.
type writeRound struct {
	w    *admissionWrite
	bulk bool
	now  int64
	// decided is what lockDecidedRuns locks, replayed what
	// selectDecidedRuns reads (a bulk admission's only).
	decided, replayed []decidedRun
	ow                outboxWrite
}

// queue queues the round's statements: the placeholders of held scopes,
// a bulk admission's locks of the runs it decided from and its read of
// the runs it replays, the deletions of expired records, the insertion,
// the outbox messages, the commit marker.
func (r *writeRound) queue(b *pgx.Batch) {
	w := r.w
	if len(w.hold) > 0 {
		b.Queue(holdScopes, holdArgs(w.hold))
	}
	if r.bulk {
		if r.decided = w.decided(); len(r.decided) > 0 {
			b.Queue(lockDecidedRuns, decidedArgs(r.decided).with(args{"now": r.now}))
		}
		// The runs replayed, read once locked.
		if r.replayed = strongest(slices.Clone(w.storedRuns)); len(r.replayed) > 0 {
			b.Queue(selectDecidedRuns, decidedArgs(r.replayed))
		}
	}
	r.queueExpired(b)
	r.queueInsert(b)
	for _, n := range w.norm {
		r.ow.add(n.QueuedRun(r.now), 0, n.Outbox)
	}
	if len(r.ow.tenants) > 0 {
		b.Queue(insertOutbox, r.ow.args(r.now))
	}
	b.Queue(markCommitQuery)
}

// queueExpired queues the deletion of the expired records the round's
// members replace: a bulk admission's in (tenant, run id) order, the
// order of its run locks.
func (r *writeRound) queueExpired(b *pgx.Batch) {
	w := r.w
	switch {
	case len(w.expired) == 0:
	case r.bulk:
		slices.SortFunc(w.expired, func(a, b expiredRecord) int {
			return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.runID, b.runID))
		})
		scopes := make([]scopeKey, len(w.expired))
		for i, e := range w.expired {
			scopes[i] = e.scopeKey
		}
		b.Queue(deleteExpiredRecords, scopeArgs(scopes).with(args{"now": r.now}))
	default:
		e := w.expired[0]
		b.Queue(deleteIdempotency, args{"tenant": e.tenant, "operation": e.operation, "key": e.key, "now": r.now})
	}
}

// queueInsert queues the insertion of the created members: a bulk
// admission's every member in one statement (insertAdmissions),
// CreateRun's one (insertAdmission).
func (r *writeRound) queueInsert(b *pgx.Batch) {
	w := r.w
	if r.bulk {
		b.Queue(insertAdmissions, args{"tenants": w.tenants, "run_ids": w.runIDs, "operations": w.operations,
			"payloads": w.payloads, "fingerprints": w.fingerprints, "max_attempts": w.maxAttempts, "deadlines": w.deadlines,
			"available": w.available, "keys": w.keys, "expires": w.expires, "now": r.now})
		return
	}
	n := w.norm[0]
	b.Queue(insertAdmission, args{"tenant": n.Tenant, "run_id": n.RunID, "operation": n.Operation, "payload": n.Payload,
		"fingerprint": n.Fingerprint, "max_attempts": n.MaxAttempts, "now": r.now, "deadline_at": n.DeadlineAt,
		"available_at": n.AvailableAt, "key": n.Key, "expires_at": n.ExpiresAt})
}

// readLocks reads the answers of the placeholders (their ctids, for
// releaseScopes), of the runs locked (each one decided from, or errRaced)
// and of the runs replayed (into outcomes).
func (r *writeRound) readLocks(br pgx.BatchResults, outcomes []spec.CreateOutcome) (held []pgtype.TID, err error) {
	if len(r.w.hold) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		if held, err = readHeld(rows, len(r.w.hold)); err != nil {
			return nil, err
		}
	}
	if len(r.decided) > 0 {
		var locked int
		if err := br.QueryRow().Scan(&locked); err != nil {
			return nil, err
		}
		if locked != len(r.decided) {
			return nil, fmt.Errorf("%w: locked %d of the %d runs its members were decided from", errRaced, locked, len(r.decided))
		}
	}
	if len(r.replayed) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		if err := collectDecided(rows, len(r.replayed), r.w.stored, r.w.storedRuns, outcomes); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// readExpired reads the answer of the deletion of expired records: each
// one deleted, or errRaced.
func (r *writeRound) readExpired(br pgx.BatchResults) error {
	if len(r.w.expired) == 0 {
		return nil
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(len(r.w.expired)) {
		// A concurrent admission or purge that did not wait for this
		// one's locks (an unlocked bulk admission's, see admitAll)
		// deleted one first.
		return fmt.Errorf("%w: deleted %d expired idempotency records of %d", errRaced, tag.RowsAffected(), len(r.w.expired))
	}
	return nil
}

// readBulkInsert reads insertAdmissions' counts, each every member, and
// fills in the created members' outcomes.
func (r *writeRound) readBulkInsert(br pgx.BatchResults, outcomes []spec.CreateOutcome) error {
	w := r.w
	var counts [2]int64
	if err := br.QueryRow().Scan(&counts[0], &counts[1]); err != nil {
		return err
	}
	for _, c := range counts {
		if c != int64(len(w.members)) {
			return fmt.Errorf("postgres: a bulk admission of %d runs wrote %v rows (runs with their records, jobs)", len(w.members), counts)
		}
	}
	for k, i := range w.members {
		outcomes[i].Result = spec.CreateRunResult{Run: w.norm[k].QueuedRun(r.now)}
	}
	return nil
}

// readInsert reads insertAdmission's run into CreateRun's outcome. No run
// is a run id taken (ON CONFLICT DO NOTHING): already_exists, or errRaced
// when the scope's record appeared with it.
func (r *writeRound) readInsert(t *txn, br pgx.BatchResults, outcomes []spec.CreateOutcome) error {
	run, err := scanRun(br.QueryRow())
	if errors.Is(err, pgx.ErrNoRows) {
		n := r.w.norm[0]
		// The run id is taken. By an unlocked bulk admission of this
		// very scope (admitAll) that committed after the record was
		// read? Then this is a replay or a conflict: run again.
		if err := br.Close(); err != nil {
			return err
		}
		switch err := t.QueryRow(t.ctx, selectIdempotency, args{"tenant": n.Tenant, "operation": n.Operation, "key": n.Key}).Scan(new(string), new(string), new(int64)); {
		case err == nil:
			return fmt.Errorf("%w: the record of run %s's scope appeared with its run id", errRaced, n.RunID)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		return spec.RunExists(n.Tenant, n.RunID)
	}
	if err != nil {
		return err
	}
	outcomes[r.w.members[0]].Result = spec.CreateRunResult{Run: run}
	return nil
}

// readOutbox reads the answer of the outbox messages' insertion: every
// one written.
func (r *writeRound) readOutbox(br pgx.BatchResults) error {
	if len(r.ow.tenants) == 0 {
		return nil
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(len(r.ow.tenants)) {
		return fmt.Errorf("postgres: wrote %d outbox messages of %d", tag.RowsAffected(), len(r.ow.tenants))
	}
	return nil
}

// AdmissionStats counts what this Store's admissions did.
type AdmissionStats struct {
	// Coalesced is the CreateRun calls that went through coalescing
	// (Options.CoalesceCreateRun), SharedTransactions the transactions
	// that admitted them; both zero without it.
	Coalesced, SharedTransactions int64
	// Retried is the admission attempts that raced a concurrent admission
	// or purge of runs, rolled back and ran again under the admission
	// locks (see admitAll).
	Retried int64
	// Fresh is the CreateRun calls admitted by the fresh admission's one
	// statement (createFresh); every other CreateRun was decided from its
	// scope's record, read under its lock.
	Fresh int64
}

// AdmissionStats returns the Store's admission counters.
func (s *Store) AdmissionStats() AdmissionStats {
	st := AdmissionStats{Retried: s.retried.Load(), Fresh: s.fresh.Load()}
	if s.admissions != nil {
		st.Coalesced, st.SharedTransactions = s.admissions.Stats()
	}
	return st
}

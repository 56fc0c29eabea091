package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCompleter = (*Store)(nil)

// CompleteBatch implements spec.BatchCompleter: one READ COMMITTED
// transaction that first locks every member's job row, in (tenant, run id)
// order, then reads the clock once, then decides and applies every member's
// guarded completion — a handful of statements for the whole batch, not
// Complete's statements once per member.
//
// Locking all the jobs before the clock keeps Complete's lock-then-clock
// rule for every member: the time is no earlier than the commit of any
// writer a member waited for. Taking them in one global order means two
// batches with overlapping members cannot deadlock each other, and since
// the batch holds a member's job lock before it touches that member's run
// (like every other transaction), it cannot deadlock with single-run
// operations either.
//
// With every job row locked, nothing but this transaction can change them,
// so the outcome of each member, in request order, follows from the locked
// rows: a member whose lease is current completes (and its job row is then
// completed for any later member of the same run, e.g. a repeat, which gets
// already_terminal); any other member gets spec.LeaseError from the row as
// the members before it left it, exactly what Complete would have said in
// that order. The members that complete are then written by ONE statement
// (completeBatchSQL) whose job update still carries the full lease guard
// (tenant, run id, leased, owner, generation, unexpired at now) for each
// member: if it updates any other set than the one decided here, the
// transaction is aborted with an error, never committed.
//
// A member refused by a contract check (lease not current, run missing,
// invalid result) writes nothing: it gets its *spec.Error and the others go
// on. Any database error aborts the whole batch.
//
// (Profiled by `leasehold bench`: the per-member form ran five statements
// per member, 150–250 statements per batch; see reports/bench.md.)
func (s *Store) CompleteBatch(ctx context.Context, reqs []spec.CompleteRequest) (outcomes []spec.BatchOutcome, err error) {
	if len(reqs) == 0 {
		return []spec.BatchOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d completions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	// Validation before any database access: a malformed member never
	// reaches SQL (its outcome is decided here and never locked).
	invalid := make([]error, len(reqs))
	var lockList []jobKey
	for i, r := range reqs {
		if _, err := s.cfg.CheckComplete(r, 0); err != nil {
			invalid[i] = err
			continue
		}
		lockList = append(lockList, jobKey{r.Lease.Tenant, r.Lease.RunID})
	}
	slices.SortFunc(lockList, func(a, b jobKey) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.runID, b.runID))
	})
	lockList = slices.Compact(lockList)

	if mutant.On(mutant.CompleteIgnoresGeneration) {
		// The mutant lives in Complete's statements (finish): keep the
		// batch on them so that it is broken the same way.
		err = s.write(ctx, spec.OpCompleteBatch, func(t *txn) error {
			return s.mutantCompleteBatch(t, reqs, invalid, lockList, &outcomes)
		})
		if err != nil {
			return nil, err
		}
		return outcomes, nil
	}
	// Two round trips and the COMMIT: BEGIN, the lock and the clock in one
	// pipelined batch (the clock's statement starts after the lock's has
	// taken every lock), the write and the commit marker in another.
	first := func(b *pgx.Batch) { queueLockJobs(b, lockList, s.clock == nil) }
	err = s.writePipelined(ctx, spec.OpCompleteBatch, first, func(t *txn, br pgx.BatchResults) error {
		jobs, err := t.readLockJobs(br, len(lockList))
		if err != nil {
			return err
		}
		now, err := t.clock()
		if err != nil {
			return err
		}
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		outcomes = make([]spec.BatchOutcome, len(reqs))
		var apply completeSet
		for i, req := range reqs {
			if invalid[i] != nil {
				outcomes[i].Err = invalid[i]
				continue
			}
			result, err := s.cfg.CheckComplete(req, now)
			if err != nil {
				outcomes[i].Err = err
				continue
			}
			k := jobKey{req.Lease.Tenant, req.Lease.RunID}
			job, found := jobs[k]
			if !found {
				// No job: no run of this tenant. refused reads the row (none)
				// and says not_found, as Complete does.
				outcomes[i].Err = s.refused(t, spec.OpComplete, req.Lease, now)
				if !isSpecError(outcomes[i].Err) {
					return outcomes[i].Err
				}
				continue
			}
			ref := req.Lease
			if mutant.On(mutant.BatchIgnoresGeneration) {
				ref.Generation, ref.Owner = job.Generation, job.LeaseOwner // whoever holds the job now
			}
			if e := spec.LeaseError(job.Job, ref, now); e != nil {
				s.log.DebugContext(ctx, "guarded write refused", "op", spec.OpComplete, "tenant", req.Lease.Tenant,
					"run_id", req.Lease.RunID, "generation", req.Lease.Generation, "code", e.Code)
				outcomes[i].Err = e
				continue
			}
			apply.add(i, ref, result, job.ctid)
			apply.outbox = apply.outbox || len(req.Outbox) > 0
			// What a later member of the same run will find.
			job.State, job.LeaseOwner, job.LeaseExpiresAt = spec.JobCompleted, "", 0
		}
		if len(apply.index) == 0 {
			return nil
		}
		a := apply.args(now)
		// The write runs its generic plan (set by queueLockJobs). The
		// commit marker joins its round trip unless outbox messages are
		// still to be written after it, planned for their arguments.
		var b pgx.Batch
		b.Queue(completeBatchSQL, a)
		marks := !apply.outbox
		if marks {
			b.Queue(markCommitQuery)
		} else {
			b.Queue(customPlans)
		}
		br = t.SendBatch(ctx, &b)
		defer br.Close()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		runs, err := pgx.AppendRows(make([]spec.Run, 0, len(apply.index)), rows, func(row pgx.CollectableRow) (spec.Run, error) { return scanRun(row) })
		if err != nil {
			return err
		}
		if marks {
			if err := t.readMark(br); err != nil {
				return err
			}
		} else {
			if _, err := br.Exec(); err != nil {
				return err
			}
			if err := br.Close(); err != nil {
				return err
			}
		}
		if len(runs) != len(apply.index) {
			return fmt.Errorf("postgres: batch completion wrote %d runs for %d members whose leases were current under lock", len(runs), len(apply.index))
		}
		byKey := make(map[jobKey]int, len(runs))
		for n, r := range runs {
			byKey[jobKey{r.Tenant, r.ID}] = n
		}
		var w outboxWrite
		for n, i := range apply.index {
			k := apply.keys[n]
			j, ok := byKey[k]
			if !ok {
				return fmt.Errorf("postgres: batch completion did not write run %s/%s although its lease was current under lock", k.tenant, k.runID)
			}
			r := runs[j]
			outcomes[i].Run = r
			outbox, _ := spec.NormalizeOutbox(reqs[i].Outbox) // CheckComplete checked them
			w.add(r, reqs[i].Lease.Generation, outbox)
		}
		return t.writeOutbox(w, now)
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// jobKey identifies a job.
type jobKey struct{ tenant, runID string }

func isSpecError(err error) bool {
	var se *spec.Error
	return errors.As(err, &se)
}

// lockedJob is a job row this transaction has locked, with its ctid: the
// row cannot move while the lock is held, so a later statement of the
// transaction can address it directly.
type lockedJob struct {
	spec.Job
	ctid pgtype.TID
}

// queueLockJobs queues, after the batch's BEGIN, the plan setting of the
// statements after it, the lock of the job rows of keys (sorted, distinct)
// in one statement, in (tenant, run_id) order, and, with the database clock
// (dbClock), the clock: read after every lock is held. The lock and the
// write, in the next round trip, run their generic plans (genericPlans):
// the lock looks each key up by itself, the write finds its rows by ctid
// (a TID scan) and their runs by key, so neither leaves the planner a join
// to order from statistics that a growing queue outdates
// (TestBatchPlansAfterGrowth, bench/findings.md §9); nothing else of
// CompleteBatch is planned.
func queueLockJobs(b *pgx.Batch, keys []jobKey, dbClock bool) {
	tenants, runIDs := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], runIDs[i] = k.tenant, k.runID
	}
	b.Queue(genericPlans)
	b.Queue(lockJobsSQL, args{"tenants": tenants, "run_ids": runIDs})
	if dbClock {
		b.Queue(clockQuery)
	}
}

// readLockJobs reads the answers of queueLockJobs for n keys from br, and
// closes it: the locked job rows that exist, and with the database clock
// the operation's one clock reading.
func (t *txn) readLockJobs(br pgx.BatchResults, n int) (map[jobKey]*lockedJob, error) {
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	list, err := pgx.AppendRows(make([]lockedJob, 0, n), rows, func(row pgx.CollectableRow) (lockedJob, error) {
		var j lockedJob
		var err error
		j.Job, err = scanJob(withCtid{row, &j.ctid})
		return j, err
	})
	if err != nil {
		return nil, err
	}
	jobs := make(map[jobKey]*lockedJob, len(list))
	for i := range list {
		jobs[jobKey{list[i].Tenant, list[i].RunID}] = &list[i]
	}
	return jobs, t.readClock(br)
}

// withCtid scans a row's leading ctid column into ctid and the rest as row's
// scanner would.
type withCtid struct {
	row  scanner
	ctid *pgtype.TID
}

func (w withCtid) Scan(dest ...any) error { return w.row.Scan(append([]any{w.ctid}, dest...)...) }

// completeSet is the members a batch completes: their rows' ctids and, in
// the same order, their leases, results and event payloads
// (completeBatchSQL's arrays); index maps them back to request positions.
type completeSet struct {
	// outbox: some member has outbox messages to write.
	outbox                    bool
	index                     []int
	keys                      []jobKey
	ctids                     []pgtype.TID
	owners, results, payloads []string
	generations               []int64
}

func (c *completeSet) add(i int, ref spec.LeaseRef, result string, ctid pgtype.TID) {
	c.index = append(c.index, i)
	c.keys = append(c.keys, jobKey{ref.Tenant, ref.RunID})
	c.ctids = append(c.ctids, ctid)
	c.owners = append(c.owners, ref.Owner)
	c.generations = append(c.generations, ref.Generation)
	c.results = append(c.results, result)
	c.payloads = append(c.payloads, spec.CompletedPayload(ref.Generation))
}

func (c *completeSet) args(now int64) args {
	tenants, runIDs := make([]string, len(c.keys)), make([]string, len(c.keys))
	for i, k := range c.keys {
		tenants[i], runIDs[i] = k.tenant, k.runID
	}
	return args{"ctids": c.ctids, "tenants": tenants, "run_ids": runIDs, "owners": c.owners,
		"generations": c.generations, "results": c.results, "payloads": c.payloads, "now": now}.with(terminal{
		run: spec.RunCompleted, outcome: spec.AttemptCompleted}.args())
}

// lockJobsSQL locks a batch's job rows, one key at a time in the order
// given (a function scan returns an array's elements in order, and each
// lateral lookup takes its lock as it runs), so every batch, its keys
// sorted, takes its locks in the same global order. OFFSET 0 keeps the
// lookup from being flattened into a join: each is a primary-key lookup
// whatever the statistics say.
const lockJobsSQL = `SELECT x.* FROM unnest(@tenants::text[], @run_ids::text[]) AS m(tenant, run_id)
	CROSS JOIN LATERAL (SELECT ctid, ` + jobColumns + ` FROM jobs WHERE tenant = m.tenant AND run_id = m.run_id
		OFFSET 0 FOR NO KEY UPDATE) AS x`

// memberGuard is leaseGuard with the member's lease (m, completeBatchSQL's
// row of arrays) in place of the one lease's parameters: the same
// predicate, per member.
var memberGuard = strings.NewReplacer("@tenant", "m.m_tenant", "@run_id", "m.m_run_id", "@owner", "m.m_owner",
	"@generation", "m.m_generation").Replace(leaseGuard)

// memberRunEnds is runEnds with the member's result (an empty string for
// none) and event payload.
var memberRunEnds = strings.NewReplacer("@result", "nullif(m.m_result, '')", "@payload", "m.m_payload").Replace(runEnds)

// completeBatchSQL is Complete's write for every member at once: each job
// row (under memberGuard) with its run, its run_completed event and its
// attempt, as finishJob writes them. It returns the completed runs.
//
// The members' rows are found by the ctids lockJobs returned: the
// restriction ctid = ANY (@ctids) leaves no plan but TID lookups for jobs
// (the plan test holds it to that from empty tables on), and each row is
// paired with its member's row of the arrays by ctid. Without the
// restriction the pairing alone was a join the planner could make by
// reading jobs whole, and its generic plan did once the table grew
// (TestBatchPlansAfterGrowth). A join of the members to jobs by key was
// ordered from the statistics, which describe the job states of the last
// ANALYZE, and a queue's states change faster than that: analyzed while
// every job was queued, the planner expected one leased job, scanned jobs
// and compared every leased job with every member (bench/findings.md §9).
var completeBatchSQL = returningRun(`UPDATE jobs SET state = 'completed', lease_owner = NULL, lease_expires_at = NULL,
	` + memberRunEnds + `, ` + attemptEnds + `
	FROM unnest(@ctids::tid[], @tenants::text[], @run_ids::text[], @owners::text[], @generations::bigint[],
		@results::text[], @payloads::text[]) AS m(m_ctid, m_tenant, m_run_id, m_owner, m_generation, m_result, m_payload)
	WHERE jobs.ctid = ANY (@ctids::tid[]) AND jobs.ctid = m.m_ctid AND ` + memberGuard)

// mutantCompleteBatch is the per-member batch (Complete's statements, so
// mutant.CompleteIgnoresGeneration applies to it as to Complete).
func (s *Store) mutantCompleteBatch(t *txn, reqs []spec.CompleteRequest, invalid []error, lockList []jobKey, outcomes *[]spec.BatchOutcome) error {
	for _, k := range lockList {
		if _, _, err := t.lockJob(k.tenant, k.runID); err != nil {
			return err
		}
	}
	now, err := t.clock()
	if err != nil {
		return err
	}
	if err := spec.CheckNow(now); err != nil {
		return err
	}
	*outcomes = make([]spec.BatchOutcome, len(reqs))
	for i, req := range reqs {
		if invalid[i] != nil {
			(*outcomes)[i].Err = invalid[i]
			continue
		}
		run, err := s.completeIn(t, req, now)
		switch {
		case err == nil:
			(*outcomes)[i].Run = run
		case isSpecError(err):
			(*outcomes)[i].Err = err
		default:
			return err
		}
	}
	return nil
}

// completeIn is Complete's body after the lock and the clock: check the
// request at now, then the guarded terminal transition and its outbox
// messages.
func (s *Store) completeIn(t *txn, req spec.CompleteRequest, now int64) (spec.Run, error) {
	result, err := s.cfg.CheckComplete(req, now)
	if err != nil {
		return spec.Run{}, err
	}
	run, err := s.finish(t, spec.OpComplete, req.Lease, now, terminal{job: spec.JobCompleted, run: spec.RunCompleted,
		payload: spec.CompletedPayload(req.Lease.Generation), result: result, outcome: spec.AttemptCompleted})
	if err != nil {
		return spec.Run{}, err
	}
	var w outboxWrite
	outbox, _ := spec.NormalizeOutbox(req.Outbox) // CheckComplete checked them
	w.add(run, req.Lease.Generation, outbox)
	return run, t.writeOutbox(w, now)
}

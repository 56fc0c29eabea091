// Package etcd is leasehold's store on an etcd v3 cluster (client v3.7):
// the whole spec.Store contract, spec.BatchCompleter, spec.BatchCreator and
// spec.RunLister, built only on the porting kit's public API (spec's pure
// functions, proven by leaseholdtest) as an outside port would be.
//
// # Transactions
//
// Every operation is one etcd Txn. An attempt reads the clock once, then
// reads what it decides on at one revision (the first read's: a consistent
// snapshot), stages its writes in an overlay that its later reads see, and
// commits them in one Txn whose compares hold exactly while everything it
// read is as it read it: ModRevision = the read's for a key that existed,
// CreateRevision = 0 for one that did not, and for the range reads whose
// completeness matters (the purges) ModRevision < revision+1 over the range
// read. A failed compare means another writer got there first: the attempt
// is made again from scratch (a new clock reading, fresh reads), at most
// Options.MaxConflicts times, then CodeUnavailable. A refusal (any
// *spec.Error) is decided on the snapshot and linearizes at its revision; an
// attempt that staged nothing (a replayed admission, an empty claim) sends
// no Txn. Options.Hook runs at before_commit (after the staging, before the
// Txn is sent: an error there writes nothing) and at after_commit (an error
// there is unknown_outcome).
//
// # The lease guard
//
// Every write made under a lease carries the guard as two compares on the
// job's lease key, whose value is generation/owner/expiry and which exists
// exactly while the job is leased (leaseGuard): the key's value lies
// strictly between generation/owner/now and generation/owner/":", that is
// it exists (leased, so not terminal), has the caller's generation and
// owner, and an expiry after now. The job key's ModRevision compare makes
// the rest of the job as read current too. When the guard does not hold on
// the snapshot, spec.LeaseError names the reason from the job as read.
//
// # Claims without one hot key
//
// Claim reads candidates from a range read of the tenant's claimable index
// (ready/<tenant>/<eligible_at>/<run>, eligible_at <= now, in claim order),
// skips those this process's writers hold (tryLock, the counterpart of SKIP
// LOCKED), re-checks each on its job and commits one Txn that compares each
// taken candidate's job. Workers conflict only when they take the same job;
// the loser's attempt is made again and reads the index afresh, so it takes
// other candidates. Reap does the same on the reapable index, ClaimOutbox
// on the pending messages' index. Batch claims take up to Limit candidates
// in the one Txn; CompleteBatch completes its members in one Txn, and
// CreateRuns admits its members in one Txn, each member CreateRun's checks
// and writes on the attempt's overlay (it sees the members before it) and
// every key a member's decision read compared.
//
// # Key layout
//
// Keys are <prefix>/<family>/<part>/..., every "/" being a NUL byte, which
// sorts below every byte a name may hold, so key order is the order of the
// tuples (SPEC.md's byte-wise id order); numbers are 20-digit decimals. The
// prefix is the database: stores on one prefix share every record.
//
//	run/<tenant>/<run>                 the run (spec.Run), its idempotency scope, outbox count, finishing time
//	job/<tenant>/<run>                 the job (spec.Job)
//	lease/<tenant>/<run>               generation/owner/expiry; present iff the job is leased
//	event/<tenant>/<run>/<seq>         the run's events
//	att/<tenant>/<run>/<generation>    the attempts
//	eff/<tenant>/<run>/<step>/<key>    the effect ledger
//	idem/<tenant>/<operation>/<key>    the idempotency record
//	idemx/<expires_at>/<tenant>/<operation>/<key>   expiry index of the records (PurgeIdempotency)
//	ready/<tenant>/<eligible_at>/<run> claimable: queued (at available_at), or leased with budget left (at the expiry)
//	reap/<tenant>/<expires_at>/<run>   reapable: leased with the budget spent (at the expiry)
//	done/<tenant>/<finished_at>/<run>  terminal runs by finishing time (PurgeRuns)
//	made/<tenant>/<newest>             every run, by newest(created_at, run): ListRuns' order as key order
//	replay/<tenant>/<run>              the run that replays run (each run is replayed once)
//	out/<tenant>/<run>/<seq>           the outbox messages
//	pend/<created_at>/<tenant>/<run>/<seq>, pendt/<tenant>/<created_at>/<run>/<seq>   pending messages, all and by tenant
//	commit/<random>                    a write's commit marker, on an etcd lease that expires it
//	clock                              the cluster clock (ClusterClock)
//
// Invariants, kept by every write (putJob stages a job with its index and
// lease keys): a job that is not terminal has exactly one index entry,
// ready or reap, at the key its state gives (indexKey), and a terminal job
// has none; the lease key exists iff the job is leased and spells its
// generation, owner and expiry; a terminal run has exactly one done entry,
// at its terminal event's time; every run has exactly one made entry, at
// its creation time, naming it (runs admitted on a prefix by a version
// before the listing have none, and are not listed); replay/<t>/<r>
// exists iff a run with ReplayOf = r exists; an idemx entry exists iff its
// record does, at the record's expiry; a pend and a pendt entry exist iff
// the message is pending; a run's outbox count is its highest message seq. Every record of
// a run is under keys that name its tenant, so no key of one tenant's run
// is reachable through another's.
//
// # Lost answers
//
// Every Txn also creates its own commit marker (compare: absent), on an
// etcd lease of a few minutes. When the answer to a Txn is lost (a cut
// connection, a member killed, a timeout), the store races a fence against
// it: a Txn that creates the marker if it is still absent. Raft applies one
// of the two first, so the fence either proves the write never applies
// (CodeUnavailable, nothing written) or finds the marker the write created
// (success). Only when the fence gets no answer within its window is the
// result CodeUnknownOutcome. The markers cost one key per write, which its
// lease deletes.
//
// # In-process queue
//
// With Options.SharedLocks, the stores of one process on one prefix take
// in-process locks of the runs (idempotency scopes, messages) an operation
// writes before it reads, released when it has committed: a writer held
// inside its transaction (a test's barrier at before_commit) makes the
// others of its process wait, as a row lock would, and claims skip what is
// held. The locks never decide correctness; across processes only the
// compares order writers.
//
// # Time
//
// Options.Clock, when set, is the only source of "now" (tests own a manual
// clock), read once per attempt after the in-process locks are held. In
// production (no Options.Clock) the store reads the cluster clock, a key of
// its prefix advanced by one elected ticker (RunClock: an etcd election on a
// lease, so a dead ticker is replaced within the lease's TTL and a stopped
// one, which revokes its lease, at once; the value only goes forward,
// max(its value, the ticker's wall clock), in a Txn that holds only while
// the ticker is still elected). So no worker's wall clock decides an
// expiry: one clock does, the ticker's, with the resolution of its
// interval. What it costs: one linearizable read (a ReadIndex round trip
// through the leader) per write attempt, one write per tick in the raft log,
// and a clock that stands still during a ticker's failover (at most the
// election lease's TTL) and while a new ticker's wall clock is behind the
// last value. Leases must be much longer than the interval plus the TTL. A
// failed clock read returns -1, which every operation refuses as an invalid
// clock reading (invalid_argument), writing nothing.
//
// # Limits
//
// etcd bounds what one Txn may carry: --max-txn-ops (128 by default; the
// test members run with 16384) bounds a batch claim (about six operations
// per job), a CompleteBatch (about seven per member plus two per outbox
// message) and a CreateRuns (seven writes and two compares per created
// member, three writes per outbox message, two more writes for an expired
// record it replaces, and one commit marker per Txn; etcd counts compares
// and writes apart, so 18 members without messages fit the default), and
// --max-request-bytes (1.5 MiB by default; the test members run with 8 MiB)
// bounds the payloads a first claim rewrites with their runs, the results a
// batch completes and the payloads a batch admits. A Txn past either is
// refused before it is proposed (CodeUnavailable, nothing written, the
// message naming the limits; trying it again cannot succeed): size batches
// to them. A batch is never split into several Txns: the contract
// makes each batch one transaction. The
// backend quota (--quota-backend-bytes, 2 GiB by default) bounds the whole
// store, with every revision kept until etcd compacts: run the cluster with
// auto-compaction, or the quota's NOSPACE alarm stops every write.
package etcd

// Package doctor diagnoses a live leasehold database and repairs what the
// contract's own operations can repair (`leasehold doctor`).
//
// Diagnose reads a Target (a SQLite or PostgreSQL store: OpenSQLite,
// OpenPostgres, or New for a store already open) and returns a Report,
// rendered as Markdown (WriteMarkdown) or JSON (WriteJSON). Its checks:
//
//   - invariants: every contract invariant that fails, on a snapshot of
//     every row — the same list the conformance suite checks after every
//     test (package invariant). The snapshot is one read of the whole
//     database, so it runs only up to Options.MaxRuns runs (default
//     100,000); past that the check is reported as not checked, never as
//     a pass. Every other check is a bounded query through the indexes the
//     store itself uses, and runs at any size.
//   - expired_leases: leases expired with attempts left that no claim took
//     over, per tenant, with their age;
//   - reapable: jobs leased with no attempts left whose lease expired (no
//     claim can ever take them), and those still unexpired;
//   - lease_expiry: the distribution of leased jobs' expiries relative to
//     now, and the owners holding them;
//   - clock: PostgreSQL's clock_timestamp() against this host's clock;
//   - idempotency: records past retention not yet purged (count, oldest);
//   - outbox: messages pending too long, when the database has an outbox
//     table (else "not applicable", said so);
//   - claim_plan: the plan of the store's claim statement, with a warning
//     when it does not read its indexes;
//   - blockers (PostgreSQL): sessions holding locks on the jobs table, and
//     those idle in transaction or in a long transaction;
//   - integrity (SQLite): PRAGMA quick_check of the file; damage is called
//     corrupt (and OpenSQLite says so of a file too damaged to open),
//     rows past the schema's constraints are told apart from it;
//   - horizon (PostgreSQL): sessions of the database holding a snapshot or
//     a transaction id, which keep VACUUM from removing any row that died
//     since, with how many transactions back and for how long;
//   - dead_tuples (PostgreSQL): dead rows piling up in the store's tables.
//
// A finding older than its threshold (Options.Thresholds) fails its check.
// The verdict is healthy (no check failed and every check ran), unhealthy
// or incomplete; `leasehold doctor` exits 0 only when healthy. Diagnose
// writes nothing: OpenSQLite and OpenPostgres refuse a database they would
// have to create or migrate.
//
// Repair applies only invariant-preserving repairs, each through the
// store's own guarded operation, each recorded with its actor in the
// leasehold_doctor_audit table: Store.Reap for what can never be claimed,
// and Store.Release of the unexpired leases of owners the operator names
// as dead (Options.ReleaseOwners). It edits no row and rewrites no
// history. Without Repair, the report's Repairs is the dry run: what
// Repair would do now.
//
// Each check is its own read, measured against one "now" read first; on a
// busy database they are moments apart, so counts of one kind of row may
// differ slightly between sections. The invariants are one consistent
// snapshot.
//
// Times are the store's: PostgreSQL's findings are measured against the
// database clock, SQLite's against this host's clock (its store reads its
// process's clock), unless Options.Clock is injected.
package doctor

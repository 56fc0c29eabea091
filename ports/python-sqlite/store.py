#!/usr/bin/env python3
"""A leasehold store in Python on the standard library's sqlite3, speaking the
leasehold store protocol (docs/PROTOCOL.md) on stdin and stdout.

    leasehold verify --store-cmd 'python3 ports/python-sqlite/store.py'

One process is one session: it opens the database directory the harness
gives it (a SQLite file in it, shared by every session of the database) and
runs every operation of the contract (spec/SPEC.md) as one SQLite
transaction: BEGIN IMMEDIATE behind a cross-process writer lock, then one
clock reading (the harness's, by callback), the contract's checks in order,
the writes, the before_commit hook, COMMIT, the after_commit hook. Reads are
one deferred (snapshot) transaction and read no clock.

LEASEHOLD_PY_BUG names a deliberately broken variant (see BUGS), which
`leasehold verify --store-cmd` must catch.
"""

import base64
import binascii
import contextlib
import fcntl
import json
import os
import sqlite3
import sys
import traceback

import contract
from contract import ContractError

STORE_NAME = "python-sqlite"
PROTOCOL = 1

# The deliberately broken variants, by LEASEHOLD_PY_BUG.
BUGS = {
    "complete_ignores_generation": "Complete's guard does not compare the generation: a stale worker completes the run",
    "idempotency_ignores_fingerprint": "a live idempotency key replays its run whatever the request's fingerprint",
    "cancel_leaves_claimable": "Cancel terminalizes the run but leaves its job claimable",
    "fingerprint_not_canonical": "the fingerprint hashes the payload as sent, not its canonical form",
    "hook_fault_commits": "a fault at before_commit is reported as unavailable, but the transaction commits anyway",
}
BUG = os.environ.get("LEASEHOLD_PY_BUG", "")
if BUG and BUG not in BUGS:
    sys.exit("store.py: LEASEHOLD_PY_BUG=%r is not a known variant (%s)" % (BUG, ", ".join(sorted(BUGS))))

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, operation TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    version INTEGER NOT NULL, last_seq INTEGER NOT NULL, payload TEXT NOT NULL, fingerprint TEXT NOT NULL,
    max_attempts INTEGER NOT NULL, error_code TEXT NOT NULL DEFAULT '', result TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL, deadline_at INTEGER NOT NULL,
    replay_of TEXT NOT NULL DEFAULT '', replay_depth INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, run_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    at INTEGER NOT NULL, payload TEXT NOT NULL,
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jobs (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, operation TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'completed', 'dead', 'cancelled')),
    available_at INTEGER NOT NULL, lease_owner TEXT NOT NULL DEFAULT '', lease_expires_at INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL, attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
    last_error_code TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id),
    CHECK (attempts <= max_attempts)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (tenant, available_at, run_id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS jobs_leased ON jobs (tenant, lease_expires_at, run_id) WHERE state = 'leased';
CREATE TABLE IF NOT EXISTS idempotency (
    tenant TEXT NOT NULL, operation TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
    run_id TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation, key),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (expires_at, tenant, operation, key);
CREATE TABLE IF NOT EXISTS attempts (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, generation INTEGER NOT NULL, number INTEGER NOT NULL,
    worker TEXT NOT NULL, claimed_at INTEGER NOT NULL, renewed_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL DEFAULT 0, outcome TEXT NOT NULL, error_code TEXT NOT NULL DEFAULT '',
    error_class TEXT NOT NULL DEFAULT '', retry_at INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, run_id, generation),
    FOREIGN KEY (tenant, run_id) REFERENCES jobs (tenant, run_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, subject TEXT NOT NULL,
    payload TEXT NOT NULL, generation INTEGER NOT NULL, created_at INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered')),
    relay TEXT NOT NULL DEFAULT '', claim_expires_at INTEGER NOT NULL DEFAULT 0, claims INTEGER NOT NULL DEFAULT 0,
    delivered_at INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (created_at, tenant, run_id, seq) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS effects (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, step TEXT NOT NULL, key TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'succeeded', 'failed', 'unknown')),
    provider_ref TEXT NOT NULL DEFAULT '', generation INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, run_id, step, key),
    FOREIGN KEY (tenant, run_id) REFERENCES jobs (tenant, run_id)
) WITHOUT ROWID;
"""

RUN_COLUMNS = ("tenant", "run_id", "operation", "state", "version", "last_seq", "payload", "fingerprint",
               "max_attempts", "error_code", "result", "created_at", "deadline_at", "replay_of", "replay_depth")
JOB_COLUMNS = ("tenant", "run_id", "operation", "state", "available_at", "lease_owner", "lease_expires_at",
               "generation", "attempts", "max_attempts", "last_error_code")
EVENT_COLUMNS = ("tenant", "run_id", "seq", "kind", "at", "payload")
ATTEMPT_COLUMNS = ("tenant", "run_id", "generation", "number", "worker", "claimed_at", "renewed_at", "finished_at",
                   "outcome", "error_code", "error_class", "retry_at")
IDEMPOTENCY_COLUMNS = ("tenant", "operation", "key", "fingerprint", "run_id", "created_at", "expires_at")
EFFECT_COLUMNS = ("tenant", "run_id", "step", "key", "state", "provider_ref", "generation", "updated_at")
OUTBOX_COLUMNS = ("tenant", "run_id", "seq", "id", "subject", "payload", "generation", "created_at", "state", "relay",
                  "claim_expires_at", "claims", "delivered_at")

# The lease guard: the one predicate of every write made under a lease.
LEASE_GUARD = ("tenant = :tenant AND run_id = :run_id AND state = 'leased' AND lease_owner = :owner "
               "AND generation = :generation AND lease_expires_at > :now")
if BUG == "complete_ignores_generation":
    COMPLETE_GUARD = ("tenant = :tenant AND run_id = :run_id AND state = 'leased' AND lease_owner = :owner "
                      "AND lease_expires_at > :now")
else:
    COMPLETE_GUARD = LEASE_GUARD
# The claim predicate of an outbox message: pending, never claimed or its
# claim expired.
OUTBOX_CLAIMABLE = "state = 'pending' AND (relay = '' OR claim_expires_at <= :now)"
# The claim predicate (spec.GuardClaimable).
CLAIMABLE = ("tenant = :tenant AND available_at <= :now AND attempts < max_attempts "
             "AND (state = 'queued' OR (state = 'leased' AND lease_expires_at <= :now))")
CLAIM_CANDIDATES = """
SELECT run_id FROM (
    SELECT run_id, eligible_at FROM (SELECT run_id, available_at AS eligible_at FROM jobs
        WHERE tenant = :tenant AND state = 'queued' AND available_at <= :now AND attempts < max_attempts
        ORDER BY available_at, run_id LIMIT :limit)
    UNION ALL
    SELECT run_id, eligible_at FROM (SELECT run_id, lease_expires_at AS eligible_at FROM jobs
        WHERE tenant = :tenant AND state = 'leased' AND lease_expires_at <= :now
            AND available_at <= :now AND attempts < max_attempts
        ORDER BY lease_expires_at, run_id LIMIT :limit))
ORDER BY eligible_at, run_id LIMIT :limit"""
# A run is retired (SPEC.md, PurgeRuns) when its terminal event is at or
# before :by, no live idempotency record names it and none of its outbox
# messages is pending (it would be lost).
RUN_RETIRED = ("e.tenant = :tenant AND e.kind IN ('run_completed', 'run_failed', 'run_cancelled') AND e.at <= :by "
               "AND NOT EXISTS (SELECT 1 FROM idempotency AS k WHERE k.tenant = e.tenant AND k.run_id = e.run_id "
               "AND k.expires_at > :now) "
               "AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.tenant = e.tenant AND o.run_id = e.run_id "
               "AND o.state = 'pending')")
# The tenant's retired runs nobody replayed (lineage leaves), in finishing order.
RETIRED_LEAVES = ("SELECT e.run_id, r.replay_of FROM events AS e JOIN runs AS r ON r.tenant = e.tenant AND r.run_id = e.run_id "
                  "WHERE " + RUN_RETIRED + " AND NOT EXISTS (SELECT 1 FROM runs AS x WHERE x.tenant = e.tenant "
                  "AND x.replay_of = e.run_id) ORDER BY e.at, e.run_id")
# The original of :run_id when the run is retired; no row when it is not.
RETIRED_RUN = ("SELECT r.replay_of FROM events AS e JOIN runs AS r ON r.tenant = e.tenant AND r.run_id = e.run_id "
               "WHERE " + RUN_RETIRED + " AND e.run_id = :run_id")


class HookFault(Exception):
    """The harness failed a hook: inject this fault."""


class ProtocolError(Exception):
    """The harness broke the protocol; the session cannot go on."""


def log(msg):
    sys.stderr.write("store.py[%d]: %s\n" % (os.getpid(), msg))
    sys.stderr.flush()


class Wire:
    """The protocol's framing: one JSON object per line."""

    def __init__(self):
        self.inp = sys.stdin.buffer
        self.out = sys.stdout.buffer
        self.next_callback = 0

    def read(self):
        line = self.inp.readline()
        if not line:
            return None
        try:
            m = json.loads(line)
        except ValueError as e:
            raise ProtocolError("not JSON: %s" % e)
        if not isinstance(m, dict):
            raise ProtocolError("a message is a JSON object")
        return m

    def send(self, m):
        self.out.write(json.dumps(m, separators=(",", ":")).encode("ascii") + b"\n")
        self.out.flush()

    def call(self, name, params=None):
        """A callback to the harness; returns its result, raises HookFault for an error."""
        self.next_callback += 1
        cid = self.next_callback
        m = {"id": cid, "call": name}
        if params is not None:
            m["params"] = params
        self.send(m)
        r = self.read()
        if r is None:
            raise ProtocolError("the harness closed the session during callback %s" % name)
        if r.get("in_reply_to") != cid:
            raise ProtocolError("want the reply to callback %d, got %r" % (cid, r))
        if "error" in r:
            raise HookFault((r["error"] or {}).get("message", "fault"))
        return r.get("result") or {}


def b64(s):
    """A []byte field of a request: base64 in JSON (absent: empty)."""
    if s is None or s == "":
        return b""
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        raise ContractError("invalid_argument", "a bytes field is not base64")


def messages_of(j):
    """The outbox messages of a request: [{subject, payload (base64)}]."""
    return [{"subject": m.get("subject", ""), "payload": b64(m.get("payload"))} for m in (j or [])]


def ref_of(j):
    j = j or {}
    return {"tenant": j.get("tenant", ""), "run_id": j.get("run_id", ""), "owner": j.get("owner", ""),
            "generation": j.get("generation", 0)}


def lease_args(ref, now):
    return {"tenant": ref["tenant"], "run_id": ref["run_id"], "owner": ref["owner"],
            "generation": ref["generation"], "now": now}


class Store:
    def __init__(self, wire, params):
        self.wire = wire
        self.cfg = contract.Config(params.get("config") or {})
        self.cfg.validate()
        self.hooks = bool(params.get("hooks"))
        directory = params["database"]
        self.db = sqlite3.connect(os.path.join(directory, "leasehold.db"), timeout=30, isolation_level=None)
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("PRAGMA foreign_keys = ON")
        # Writers from every session queue on this lock before they ask
        # SQLite for its write lock: SQLite's busy handler sleeps and polls,
        # and under contention its writers starve each other.
        self.lock_fd = os.open(os.path.join(directory, "writer.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        with self.writer():
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("BEGIN IMMEDIATE")
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    self.db.execute(stmt)
            self.db.execute("COMMIT")

    # Transactions.

    @contextlib.contextmanager
    def writer(self):
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def hook(self, op, point):
        if self.hooks:
            self.wire.call("hook", {"op": op, "point": point})

    def write(self, op, fn):
        """Run fn(now) in one immediate transaction with the operation's one
        clock reading, then the hooks and the commit."""
        with self.writer():
            self.db.execute("BEGIN IMMEDIATE")
            try:
                now = self.wire.call("now")["now"]
                result = fn(now)
                try:
                    self.hook(op, "before_commit")
                except HookFault as f:
                    if BUG == "hook_fault_commits":
                        self.db.execute("COMMIT")
                        raise ContractError("unavailable", "injected fault before commit (%s); nothing was written" % f)
                    raise
            except HookFault as f:
                self.db.execute("ROLLBACK")
                raise ContractError("unavailable", "injected fault before commit (%s); nothing was written" % f)
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        try:
            self.hook(op, "after_commit")
        except HookFault as f:
            raise ContractError("unknown_outcome", "%s committed but its result was lost (%s); read back before acting" % (op, f))
        return result

    def read(self, fn):
        self.db.execute("BEGIN")
        try:
            return fn()
        finally:
            self.db.execute("COMMIT")

    # Rows.

    def q(self, sql, args=()):
        return self.db.execute(sql, args)

    def one(self, sql, args=()):
        rows = self.db.execute(sql, args).fetchall()
        return rows[0] if rows else None

    def get_run_row(self, tenant, run_id):
        r = self.one("SELECT %s FROM runs WHERE tenant = ? AND run_id = ?" % ", ".join(RUN_COLUMNS), (tenant, run_id))
        if r is None:
            raise ContractError("not_found", "run %s not found for tenant %s" % (run_id, tenant))
        return dict(zip(RUN_COLUMNS, r))

    def get_job_row(self, tenant, run_id):
        r = self.one("SELECT %s FROM jobs WHERE tenant = ? AND run_id = ?" % ", ".join(JOB_COLUMNS), (tenant, run_id))
        if r is None:
            raise ContractError("not_found", "run %s not found for tenant %s" % (run_id, tenant))
        return dict(zip(JOB_COLUMNS, r))

    def get_effect_row(self, tenant, run_id, step, key):
        r = self.one("SELECT %s FROM effects WHERE tenant = ? AND run_id = ? AND step = ? AND key = ?"
                     % ", ".join(EFFECT_COLUMNS), (tenant, run_id, step, key))
        if r is None:
            raise ContractError("not_found", "no effect %s/#%s for run %s; reserve it first"
                                % (step, contract.short_hash(key), run_id))
        return dict(zip(EFFECT_COLUMNS, r))

    def run_exists(self, tenant, run_id):
        return self.one("SELECT 1 FROM runs WHERE tenant = ? AND run_id = ?", (tenant, run_id)) is not None

    def rows(self, columns, sql, args=()):
        return [dict(zip(columns, r)) for r in self.q(sql, args)]

    def lease_of(self, tenant, run_id):
        job, run = self.get_job_row(tenant, run_id), self.get_run_row(tenant, run_id)
        return {"tenant": tenant, "run_id": run_id, "operation": job["operation"], "owner": job["lease_owner"],
                "generation": job["generation"], "expires_at": job["lease_expires_at"], "attempt": job["attempts"],
                "max_attempts": job["max_attempts"], "payload": run["payload"], "deadline_at": run["deadline_at"]}

    def lease_problem(self, ref, now):
        job = self.get_job_row(ref["tenant"], ref["run_id"])
        return contract.lease_error(job, ref, now)

    def refused(self, op, ref, now):
        """Why a guarded statement matched no row."""
        e = self.lease_problem(ref, now)
        if e is not None:
            return e
        raise AssertionError("%s matched no row although lease %s is current" % (op, contract.lease_str(ref)))

    def guard(self, op, ref, now):
        r = self.one("SELECT attempts, max_attempts FROM jobs WHERE " + LEASE_GUARD, lease_args(ref, now))
        if r is None:
            raise self.refused(op, ref, now)
        return r

    def finish_run_with_event(self, tenant, run_id, now, state, kind, payload, error_code="", result=""):
        r = self.one("UPDATE runs SET state = ?, version = version + 1, last_seq = last_seq + 1, error_code = ?, result = ? "
                     "WHERE tenant = ? AND run_id = ? AND state NOT IN ('completed', 'failed', 'cancelled') RETURNING last_seq",
                     (state, error_code, result, tenant, run_id))
        if r is None:
            raise AssertionError("run %s/%s is terminal while its job was not" % (tenant, run_id))
        self.q("INSERT INTO events (tenant, run_id, seq, kind, at, payload) VALUES (?, ?, ?, ?, ?, ?)",
               (tenant, run_id, r[0], kind, now, payload))

    def finish_attempt(self, tenant, run_id, generation, now, outcome, error_code="", error_class="", retry_at=0):
        self.q("UPDATE attempts SET outcome = ?, finished_at = ?, error_code = ?, error_class = ?, retry_at = ? "
               "WHERE tenant = ? AND run_id = ? AND generation = ? AND outcome = 'running'",
               (outcome, now, error_code, error_class, retry_at, tenant, run_id, generation))

    def finish(self, op, ref, now, job_state, run_state, kind, payload, error_code="", error_class="", result="",
               outcome=""):
        """A terminal transition under the lease: the job under the guard,
        then the run and its next event, then the attempt."""
        guard = COMPLETE_GUARD if op == "complete" else LEASE_GUARD
        a = lease_args(ref, now)
        a.update(state=job_state, error_code=error_code)
        n = self.q("UPDATE jobs SET state = :state, lease_owner = '', lease_expires_at = 0, "
                   "last_error_code = CASE WHEN :error_code = '' THEN last_error_code ELSE :error_code END WHERE "
                   + guard, a).rowcount
        if n == 0:
            raise self.refused(op, ref, now)
        self.finish_run_with_event(ref["tenant"], ref["run_id"], now, run_state, kind, payload, error_code, result)
        self.finish_attempt(ref["tenant"], ref["run_id"], ref["generation"], now, outcome, error_code, error_class)

    # Operations. Each takes the request in its JSON form.

    def create_run(self, p):
        req = {"tenant": p.get("tenant", ""), "operation": p.get("operation", ""),
               "idempotency_key": p.get("idempotency_key", ""), "run_id": p.get("run_id", ""),
               "payload": b64(p.get("payload")), "max_attempts": p.get("max_attempts", 0),
               "timeout_ms": p.get("timeout_ms", 0), "available_at": p.get("available_at", 0),
               "delay_ms": p.get("delay_ms", 0), "outbox": messages_of(p.get("outbox"))}

        def fn(now):
            n = self.cfg.normalize_create(req, now)
            if BUG == "fingerprint_not_canonical":
                policy = self.cfg.operations[n["operation"]]
                n["fingerprint"] = contract.fingerprint(n["tenant"], n["operation"], policy["schema_version"],
                                                        n["max_attempts"], n["timeout_ms"],
                                                        req["payload"].decode("utf-8"), req["available_at"], req["delay_ms"],
                                                        contract.outbox_fingerprint(n["outbox"]))
            scope = (n["tenant"], n["operation"], n["key"])
            rec = self.one("SELECT fingerprint, run_id, expires_at FROM idempotency WHERE tenant = ? AND operation = ? AND key = ?",
                           scope)
            if rec is not None and rec[2] > now:
                if rec[0] != n["fingerprint"] and BUG != "idempotency_ignores_fingerprint":
                    raise ContractError("idempotency_conflict",
                                        "idempotency key #%s of operation %r is bound to a different request (fingerprint %s); "
                                        "use a new key for a new request"
                                        % (contract.short_hash(n["key"]), n["operation"], contract.short_hash(rec[0])))
                return {"run": self.get_run_row(n["tenant"], rec[1]), "replayed": True}
            if rec is not None:
                # Expired but not yet purged: the key is free again.
                self.q("DELETE FROM idempotency WHERE tenant = ? AND operation = ? AND key = ?", scope)
            if self.run_exists(n["tenant"], n["run_id"]):
                raise ContractError("already_exists", "run %s already exists for tenant %s; propose a new run id"
                                    % (n["run_id"], n["tenant"]))
            self.q("INSERT INTO runs (tenant, run_id, operation, state, version, last_seq, payload, fingerprint, "
                   "max_attempts, created_at, deadline_at) VALUES (?, ?, ?, 'queued', 1, 1, ?, ?, ?, ?, ?)",
                   (n["tenant"], n["run_id"], n["operation"], n["payload"], n["fingerprint"], n["max_attempts"], now,
                    n["deadline_at"]))
            self.q("INSERT INTO jobs (tenant, run_id, operation, state, available_at, generation, attempts, max_attempts) "
                   "VALUES (?, ?, ?, 'queued', ?, 0, 0, ?)", (n["tenant"], n["run_id"], n["operation"], n["available_at"],
                                                         n["max_attempts"]))
            self.q("INSERT INTO idempotency (tenant, operation, key, fingerprint, run_id, created_at, expires_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", scope + (n["fingerprint"], n["run_id"], now, n["expires_at"]))
            self.q("INSERT INTO events (tenant, run_id, seq, kind, at, payload) VALUES (?, ?, 1, 'run_queued', ?, ?)",
                   (n["tenant"], n["run_id"], now, contract.queued_payload("", "", 0)))
            self.write_outbox(n["tenant"], n["run_id"], now, 0, now, n["outbox"])
            return {"run": self.get_run_row(n["tenant"], n["run_id"]), "replayed": False}
        return self.write("create_run", fn)

    def claim(self, p):
        req = {"tenant": p.get("tenant", ""), "worker": p.get("worker", ""), "lease_ms": p.get("lease_ms", 0),
               "limit": p.get("limit", 0)}

        def fn(now):
            expires_at = self.cfg.check_claim(req, now)
            a = {"tenant": req["tenant"], "worker": req["worker"], "now": now, "expires_at": expires_at, "limit": req["limit"]}
            candidates = [r[0] for r in self.q(CLAIM_CANDIDATES, a)]
            leases = []
            for run_id in candidates:
                a["run_id"] = run_id
                r = self.one("UPDATE jobs SET state = 'leased', lease_owner = :worker, lease_expires_at = :expires_at, "
                             "generation = generation + 1, attempts = attempts + 1 "
                             "WHERE run_id = :run_id AND " + CLAIMABLE + " RETURNING generation, attempts", a)
                if r is None:
                    raise AssertionError("claim candidate %s no longer eligible under the writer lock" % run_id)
                generation, attempts = r
                self.q("UPDATE attempts SET outcome = 'expired', finished_at = ? "
                       "WHERE tenant = ? AND run_id = ? AND generation = ? AND outcome = 'running'",
                       (now, req["tenant"], run_id, generation - 1))
                self.q("INSERT INTO attempts (tenant, run_id, generation, number, worker, claimed_at, renewed_at, outcome) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, 'running')", (req["tenant"], run_id, generation, attempts, req["worker"], now, now))
                self.q("UPDATE runs SET state = 'running', version = version + 1 "
                       "WHERE tenant = ? AND run_id = ? AND state = 'queued'", (req["tenant"], run_id))
                leases.append(self.lease_of(req["tenant"], run_id))
            return leases
        return self.write("claim", fn)

    def renew(self, p):
        req = {"lease": ref_of(p.get("lease")), "lease_ms": p.get("lease_ms", 0)}

        def fn(now):
            expires_at = self.cfg.check_renew(req, now)
            ref = req["lease"]
            a = lease_args(ref, now)
            a["expires_at"] = expires_at
            n = self.q("UPDATE jobs SET lease_expires_at = :expires_at WHERE " + LEASE_GUARD +
                       " AND :expires_at <= (SELECT deadline_at FROM runs WHERE runs.tenant = jobs.tenant AND runs.run_id = jobs.run_id)",
                       a).rowcount
            if n == 0:
                e = self.lease_problem(ref, now)
                if e is not None:
                    raise e
                run = self.get_run_row(ref["tenant"], ref["run_id"])
                raise ContractError("deadline_exceeded", "renewing to %d would pass run %s's deadline %d; finish or fail the attempt"
                                    % (expires_at, run["run_id"], run["deadline_at"]))
            self.q("UPDATE attempts SET renewed_at = ? WHERE tenant = ? AND run_id = ? AND generation = ?",
                   (now, ref["tenant"], ref["run_id"], ref["generation"]))
            return self.lease_of(ref["tenant"], ref["run_id"])
        return self.write("renew", fn)

    def complete_in(self, req, now):
        result = self.cfg.check_complete(req, now)
        ref = req["lease"]
        self.finish("complete", ref, now, "completed", "completed", "run_completed",
                    contract.completed_payload(ref["generation"]), result=result, outcome="completed")
        run = self.get_run_row(ref["tenant"], ref["run_id"])
        self.write_outbox(ref["tenant"], ref["run_id"], run["created_at"], ref["generation"], now,
                          contract.normalize_outbox(req["outbox"]))
        return run

    def write_outbox(self, tenant, run_id, run_created_at, generation, now, msgs):
        """Inserts msgs as the run's next pending outbox messages, written at
        now by generation (0: the admission)."""
        if not msgs:
            return
        seq = self.one("SELECT coalesce(max(seq), 0) + 1 FROM outbox WHERE tenant = ? AND run_id = ?", (tenant, run_id))[0]
        for i, (subject, payload) in enumerate(msgs):
            n = seq + i
            self.q("INSERT INTO outbox (tenant, run_id, seq, id, subject, payload, generation, created_at, state) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending')",
                   (tenant, run_id, n, "%s/%s/%d/%d" % (tenant, run_id, run_created_at, n), subject, payload, generation, now))

    def claim_outbox(self, p):
        req = {"tenant": p.get("tenant", ""), "relay": p.get("relay", ""), "lease_ms": p.get("lease_ms", 0),
               "limit": p.get("limit", 0)}

        def fn(now):
            expires_at = self.cfg.check_claim_outbox(req, now)
            a = {"tenant": req["tenant"], "relay": req["relay"], "now": now, "expires_at": expires_at, "limit": req["limit"]}
            of_tenant = "tenant = :tenant AND " if req["tenant"] else ""
            keys = self.q("SELECT tenant, run_id, seq FROM outbox WHERE " + of_tenant + OUTBOX_CLAIMABLE +
                          " ORDER BY created_at, tenant, run_id, seq LIMIT :limit", a).fetchall()
            claimed = []
            for tenant, run_id, seq in keys:
                r = self.one("UPDATE outbox SET relay = :relay, claim_expires_at = :expires_at, claims = claims + 1 "
                             "WHERE tenant = :t AND run_id = :r AND seq = :s AND " + OUTBOX_CLAIMABLE +
                             " RETURNING " + ", ".join(OUTBOX_COLUMNS), dict(a, t=tenant, r=run_id, s=seq))
                if r is None:
                    raise AssertionError("outbox candidate %s/%s#%d no longer claimable under the writer lock"
                                         % (tenant, run_id, seq))
                claimed.append(dict(zip(OUTBOX_COLUMNS, r)))
            return claimed
        return self.write("claim_outbox", fn)

    def mark_delivered(self, p):
        req = {"messages": [{"tenant": k.get("tenant", ""), "run_id": k.get("run_id", ""), "seq": k.get("seq", 0)}
                            for k in (p.get("messages") or [])]}

        def fn(now):
            self.cfg.check_mark_delivered(req, now)
            marked = 0
            for k in req["messages"]:
                marked += self.q("UPDATE outbox SET state = 'delivered', delivered_at = ?, relay = '', claim_expires_at = 0 "
                                 "WHERE tenant = ? AND run_id = ? AND seq = ? AND state = 'pending'",
                                 (now, k["tenant"], k["run_id"], k["seq"])).rowcount
            return marked
        return self.write("mark_delivered", fn)

    @staticmethod
    def complete_request(p):
        return {"lease": ref_of(p.get("lease")), "result": b64(p.get("result")), "outbox": messages_of(p.get("outbox"))}

    def complete(self, p):
        req = self.complete_request(p)
        return self.write("complete", lambda now: self.complete_in(req, now))

    def fail(self, p):
        req = {"lease": ref_of(p.get("lease")), "error_code": p.get("error_code", "")}

        def fn(now):
            self.cfg.check_fail(req, now)
            ref = req["lease"]
            self.finish("fail", ref, now, "dead", "failed", "run_failed",
                        contract.failed_payload(req["error_code"], ref["generation"]), error_code=req["error_code"],
                        error_class="terminal", outcome="dead")
            return self.get_run_row(ref["tenant"], ref["run_id"])
        return self.write("fail", fn)

    def retry(self, p):
        req = {"lease": ref_of(p.get("lease")), "error_code": p.get("error_code", ""),
               "retry_after_ms": p.get("retry_after_ms", 0)}

        def fn(now):
            self.cfg.check_retry(req, now)
            ref = req["lease"]
            attempts, max_attempts = self.guard("retry", ref, now)
            if attempts >= max_attempts:
                self.finish("retry", ref, now, "dead", "failed", "run_failed",
                            contract.failed_payload(req["error_code"], ref["generation"]), error_code=req["error_code"],
                            error_class="retryable", outcome="dead")
            else:
                jitter = self.wire.call("random", {"n": self.cfg.jitter_bound()})["value"]
                delay = self.cfg.delay(attempts, req["retry_after_ms"], jitter)
                available_at = contract.deadline(now, delay, "retry time")
                a = lease_args(ref, now)
                a.update(available_at=available_at, error_code=req["error_code"])
                n = self.q("UPDATE jobs SET state = 'queued', lease_owner = '', lease_expires_at = 0, "
                           "available_at = :available_at, last_error_code = :error_code WHERE " + LEASE_GUARD, a).rowcount
                if n == 0:
                    raise self.refused("retry", ref, now)
                self.finish_attempt(ref["tenant"], ref["run_id"], ref["generation"], now, "retried", req["error_code"],
                                    "retryable", available_at)
            return self.get_job_row(ref["tenant"], ref["run_id"])
        return self.write("retry", fn)

    def cancel(self, p):
        req = {"tenant": p.get("tenant", ""), "run_id": p.get("run_id", ""), "reason": p.get("reason", "")}

        def fn(now):
            reason = self.cfg.check_cancel(req, now)
            job = self.get_job_row(req["tenant"], req["run_id"])
            if job["state"] in contract.TERMINAL_JOB_STATES:
                raise contract.terminal_error(contract.RUN_STATE_FOR[job["state"]], req["run_id"])
            if BUG != "cancel_leaves_claimable":
                self.q("UPDATE jobs SET state = 'cancelled', lease_owner = '', lease_expires_at = 0 "
                       "WHERE tenant = ? AND run_id = ? AND state IN ('queued', 'leased')", (req["tenant"], req["run_id"]))
            if job["state"] == "leased":
                self.finish_attempt(req["tenant"], req["run_id"], job["generation"], now, "cancelled")
            self.finish_run_with_event(req["tenant"], req["run_id"], now, "cancelled", "run_cancelled",
                                       contract.cancelled_payload(reason, job["generation"]), error_code=reason)
            return self.get_run_row(req["tenant"], req["run_id"])
        return self.write("cancel", fn)

    def release(self, p):
        req = {"lease": ref_of(p.get("lease"))}

        def fn(now):
            self.cfg.check_release(req, now)
            ref = req["lease"]
            n = self.q("UPDATE jobs SET state = 'queued', lease_owner = '', lease_expires_at = 0, available_at = :now, "
                       "attempts = attempts - 1 WHERE " + LEASE_GUARD, lease_args(ref, now)).rowcount
            if n == 0:
                raise self.refused("release", ref, now)
            self.finish_attempt(ref["tenant"], ref["run_id"], ref["generation"], now, "released")
            return self.get_job_row(ref["tenant"], ref["run_id"])
        return self.write("release", fn)

    def reap(self, p):
        req = {"tenant": p.get("tenant", ""), "limit": p.get("limit", 0)}

        def fn(now):
            self.cfg.check_reap(req, now)
            victims = self.q("SELECT run_id, generation FROM jobs WHERE tenant = ? AND state = 'leased' AND lease_expires_at <= ? "
                             "AND attempts >= max_attempts ORDER BY lease_expires_at, run_id LIMIT ?",
                             (req["tenant"], now, req["limit"])).fetchall()
            reaped = []
            for run_id, generation in victims:
                n = self.q("UPDATE jobs SET state = 'dead', lease_owner = '', lease_expires_at = 0, last_error_code = ? "
                           "WHERE tenant = ? AND run_id = ? AND state = 'leased' AND generation = ? AND lease_expires_at <= ? "
                           "AND attempts >= max_attempts",
                           (contract.REAP_ERROR_CODE, req["tenant"], run_id, generation, now)).rowcount
                if n == 0:
                    continue
                self.finish_run_with_event(req["tenant"], run_id, now, "failed", "run_failed",
                                           contract.failed_payload(contract.REAP_ERROR_CODE, generation),
                                           error_code=contract.REAP_ERROR_CODE)
                self.finish_attempt(req["tenant"], run_id, generation, now, "dead", contract.REAP_ERROR_CODE, "expired")
                reaped.append(run_id)
            return reaped
        return self.write("reap", fn)

    def purge_idempotency(self, p):
        req = {"limit": p.get("limit", 0)}

        def fn(now):
            contract.Config.check_purge(req, now)
            return self.q("DELETE FROM idempotency WHERE (tenant, operation, key) IN (SELECT tenant, operation, key "
                          "FROM idempotency WHERE expires_at <= ? ORDER BY expires_at, tenant, operation, key LIMIT ?)",
                          (now, req["limit"])).rowcount
        return self.write("purge_idempotency", fn)

    def purge_runs(self, p):
        """Deletes up to limit retired lineages of the tenant (SPEC.md,
        PurgeRuns), in (leaf finished, leaf run id) order: each leaf first,
        then up its replay_of links. The writer lock holds off every other
        writer, so the lineages cannot change before the commit."""
        req = {"tenant": p.get("tenant", ""), "limit": p.get("limit", 0)}

        def fn(now):
            self.cfg.check_purge_runs(req, now)
            by = self.cfg.retired_by(now)
            if by is None:
                return []
            a = {"tenant": req["tenant"], "by": by, "now": now}
            deleted = []
            lineages = 0
            for leaf, replay_of in self.q(RETIRED_LEAVES, a).fetchall():
                if lineages == req["limit"]:
                    break
                lineage, up = [leaf], replay_of
                while up:
                    r = self.one(RETIRED_RUN, dict(a, run_id=up))
                    if r is None:
                        lineage = None  # a run of it is not retired: the lineage stays whole
                        break
                    lineage.append(up)
                    up = r[0]
                if lineage is None:
                    continue
                lineages += 1
                for run_id in lineage:
                    key = (req["tenant"], run_id)
                    for table in ("outbox", "effects", "attempts", "jobs", "events"):
                        self.q("DELETE FROM %s WHERE tenant = ? AND run_id = ?" % table, key)
                    self.q("DELETE FROM idempotency WHERE tenant = ? AND run_id = ? AND expires_at <= ?", key + (now,))
                    self.q("DELETE FROM runs WHERE tenant = ? AND run_id = ?", key)
                    deleted.append(run_id)
            return deleted
        return self.write("purge_runs", fn)

    def replay(self, p):
        req = {"tenant": p.get("tenant", ""), "run_id": p.get("run_id", ""), "new_run_id": p.get("new_run_id", ""),
               "actor": p.get("actor", "")}

        def fn(now):
            self.cfg.check_replay(req, now)
            orig = self.get_run_row(req["tenant"], req["run_id"])
            if orig["state"] != "failed":
                raise ContractError("failed_precondition", "run %s is %s; only a failed (dead) run can be replayed"
                                    % (orig["run_id"], orig["state"]))
            depth = orig["replay_depth"] + 1
            if depth > self.cfg.max_replays:
                raise ContractError("replay_limit", "run %s is replay %d of its lineage; the limit is %d"
                                    % (orig["run_id"], orig["replay_depth"], self.cfg.max_replays))
            existing = self.one("SELECT run_id FROM runs WHERE tenant = ? AND replay_of = ?", (req["tenant"], req["run_id"]))
            if existing is not None:
                raise ContractError("already_exists", "run %s was already replayed as %s; replay that run instead"
                                    % (orig["run_id"], existing[0]))
            if self.run_exists(req["tenant"], req["new_run_id"]):
                raise ContractError("already_exists", "run %s already exists for tenant %s; propose a new run id"
                                    % (req["new_run_id"], req["tenant"]))
            orig_job = self.get_job_row(req["tenant"], req["run_id"])
            dl = contract.deadline(now, orig["deadline_at"] - orig["created_at"], "run deadline")
            self.q("INSERT INTO runs (tenant, run_id, operation, state, version, last_seq, payload, fingerprint, max_attempts, "
                   "created_at, deadline_at, replay_of, replay_depth) VALUES (?, ?, ?, 'queued', 1, 1, ?, ?, ?, ?, ?, ?, ?)",
                   (req["tenant"], req["new_run_id"], orig["operation"], orig["payload"], orig["fingerprint"],
                    orig["max_attempts"], now, dl, orig["run_id"], depth))
            self.q("INSERT INTO jobs (tenant, run_id, operation, state, available_at, generation, attempts, max_attempts) "
                   "VALUES (?, ?, ?, 'queued', ?, ?, 0, ?)",
                   (req["tenant"], req["new_run_id"], orig["operation"], now, orig_job["generation"], orig["max_attempts"]))
            self.q("INSERT INTO events (tenant, run_id, seq, kind, at, payload) VALUES (?, ?, 1, 'run_queued', ?, ?)",
                   (req["tenant"], req["new_run_id"], now, contract.queued_payload(orig["run_id"], req["actor"], depth)))
            return self.get_run_row(req["tenant"], req["new_run_id"])
        return self.write("replay", fn)

    def reserve_effect(self, p):
        req = {"lease": ref_of(p.get("lease")), "step": p.get("step", ""), "key": p.get("key", "")}

        def fn(now):
            self.cfg.check_reserve_effect(req, now)
            ref = req["lease"]
            self.guard("reserve_effect", ref, now)
            k = (ref["tenant"], ref["run_id"], req["step"], req["key"])
            row = self.one("SELECT state FROM effects WHERE tenant = ? AND run_id = ? AND step = ? AND key = ?", k)
            if row is None:
                self.q("INSERT INTO effects (tenant, run_id, step, key, state, generation, updated_at) "
                       "VALUES (?, ?, ?, ?, 'reserved', ?, ?)", k + (ref["generation"], now))
                decision = "proceed"
            elif row[0] == "succeeded":
                decision = "done"
            elif row[0] == "failed":
                self.q("UPDATE effects SET state = 'reserved', provider_ref = '', generation = ?, updated_at = ? "
                       "WHERE tenant = ? AND run_id = ? AND step = ? AND key = ? AND state = 'failed'",
                       (ref["generation"], now) + k)
                decision = "proceed"
            else:
                # Unknown, or reserved (by any generation, the caller's too):
                # the call may have happened.
                decision = "reconcile"
            return {"effect": self.get_effect_row(*k), "decision": decision}
        return self.write("reserve_effect", fn)

    def resolve_effect(self, op, p, reconcile):
        req = {"lease": ref_of(p.get("lease")), "step": p.get("step", ""), "key": p.get("key", ""),
               "state": p.get("state", ""), "provider_ref": p.get("provider_ref", "")}

        def fn(now):
            self.cfg.check_record_effect(req, now, reconcile)
            ref = req["lease"]
            self.guard(op, ref, now)
            k = (ref["tenant"], ref["run_id"], req["step"], req["key"])
            before = self.get_effect_row(*k)
            if reconcile:
                n = self.q("UPDATE effects SET state = ?, provider_ref = ?, generation = ?, updated_at = ? "
                           "WHERE tenant = ? AND run_id = ? AND step = ? AND key = ? AND state IN ('unknown', 'reserved')",
                           (req["state"], req["provider_ref"], ref["generation"], now) + k).rowcount
            else:
                n = self.q("UPDATE effects SET state = ?, provider_ref = ?, updated_at = ? "
                           "WHERE tenant = ? AND run_id = ? AND step = ? AND key = ? AND state = 'reserved' AND generation = ?",
                           (req["state"], req["provider_ref"], now) + k + (ref["generation"],)).rowcount
            if n == 0:
                raise ContractError("effect_conflict", "effect %s/%s is %s by generation %d; %s by generation %d is not allowed"
                                    % (req["step"], contract.short_hash(req["key"]), before["state"], before["generation"],
                                       op, ref["generation"]))
            return self.get_effect_row(*k)
        return self.write(op, fn)

    def record_effect(self, p):
        return self.resolve_effect("record_effect", p, False)

    def reconcile_effect(self, p):
        return self.resolve_effect("reconcile_effect", p, True)

    def complete_batch(self, p):
        reqs = [self.complete_request(r) for r in (p.get("requests") or [])]
        if not reqs:
            return []
        if len(reqs) > contract.MAX_BATCH:
            raise contract.invalid("a batch of %d completions is over the limit of %d" % (len(reqs), contract.MAX_BATCH))

        def fn(now):
            contract.check_now(now)
            outcomes = []
            for req in reqs:
                try:
                    outcomes.append({"run": self.complete_in(req, now)})
                except ContractError as e:
                    outcomes.append({"run": ZERO_RUN, "error": e.to_json()})
            return outcomes
        return self.write("complete_batch", fn)

    # Reads: validation, then one snapshot transaction; no clock.

    def read_run(self, p, fn):
        tenant, run_id = p.get("tenant", ""), p.get("run_id", "")
        self.cfg.check_run_ref(tenant, run_id)
        return self.read(lambda: fn(tenant, run_id))

    def get_run(self, p):
        return self.read_run(p, self.get_run_row)

    def get_job(self, p):
        return self.read_run(p, self.get_job_row)

    def child_rows(self, p, columns, table, order):
        def fn(tenant, run_id):
            self.get_run_row(tenant, run_id)
            return self.rows(columns, "SELECT %s FROM %s WHERE tenant = ? AND run_id = ? ORDER BY %s"
                             % (", ".join(columns), table, order), (tenant, run_id))
        return self.read_run(p, fn)

    def events(self, p):
        return self.child_rows(p, EVENT_COLUMNS, "events", "seq")

    def attempts(self, p):
        return self.child_rows(p, ATTEMPT_COLUMNS, "attempts", "generation")

    def effects(self, p):
        return self.child_rows(p, EFFECT_COLUMNS, "effects", "step, key")

    def snapshot(self, p):
        tenant = p.get("tenant", "")
        where, args = ("WHERE tenant = ?", (tenant,)) if tenant else ("", ())

        def fn():
            def table(columns, name, order):
                return self.rows(columns, "SELECT %s FROM %s %s ORDER BY %s" % (", ".join(columns), name, where, order), args)
            return {"runs": table(RUN_COLUMNS, "runs", "tenant, run_id"),
                    "events": table(EVENT_COLUMNS, "events", "tenant, run_id, seq"),
                    "jobs": table(JOB_COLUMNS, "jobs", "tenant, run_id"),
                    "attempts": table(ATTEMPT_COLUMNS, "attempts", "tenant, run_id, generation"),
                    "idempotency": table(IDEMPOTENCY_COLUMNS, "idempotency", "tenant, operation, key"),
                    "effects": table(EFFECT_COLUMNS, "effects", "tenant, run_id, step, key"),
                    "outbox": table(OUTBOX_COLUMNS, "outbox", "tenant, run_id, seq")}
        return self.read(fn)


ZERO_RUN = {c: (0 if c in ("version", "last_seq", "max_attempts", "created_at", "deadline_at", "replay_depth") else "")
            for c in RUN_COLUMNS}

OPERATIONS = ("create_run", "claim", "renew", "complete", "retry", "fail", "cancel", "release", "reap",
              "purge_idempotency", "purge_runs", "claim_outbox", "mark_delivered", "replay", "reserve_effect", "record_effect", "reconcile_effect",
              "get_run", "get_job", "events", "attempts", "effects", "snapshot", "complete_batch")


def main():
    wire = Wire()
    store = None
    try:
        while True:
            m = wire.read()
            if m is None:
                return 0
            rid, op = m.get("id"), m.get("op")
            if not isinstance(rid, int) or not isinstance(op, str):
                raise ProtocolError("want a request {id, op, params}, got %r" % m)
            params = m.get("params") or {}
            reply = {"in_reply_to": rid}
            try:
                if op == "open":
                    if store is not None:
                        raise ProtocolError("open twice")
                    if params.get("protocol") != PROTOCOL:
                        reply["protocol_error"] = "this store speaks protocol %d, not %r" % (PROTOCOL, params.get("protocol"))
                    else:
                        store = Store(wire, params)
                        if BUG:
                            log("running the deliberately broken variant %s: %s" % (BUG, BUGS[BUG]))
                        reply["result"] = {"protocol": PROTOCOL, "store": STORE_NAME, "operations": list(OPERATIONS),
                                           "capabilities": ["hooks"]}
                elif store is None:
                    reply["protocol_error"] = "the first request must be open"
                elif op in OPERATIONS:
                    reply["result"] = getattr(store, op)(params)
                else:
                    reply["protocol_error"] = "unknown operation %r" % op
            except ContractError as e:
                reply["error"] = e.to_json()
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    reply["error"] = {"code": "unavailable",
                                      "message": "the database stayed locked (%s); nothing was written, retry" % e}
                else:
                    log(traceback.format_exc())
                    reply["protocol_error"] = "internal error in %s: %s" % (op, e)
            except ProtocolError:
                raise
            except Exception as e:  # a bug of this store: the harness must hear of it
                log(traceback.format_exc())
                reply["protocol_error"] = "internal error in %s: %r" % (op, e)
            wire.send(reply)
    except ProtocolError as e:
        log("protocol error: %s" % e)
        return 2
    except (BrokenPipeError, KeyboardInterrupt):
        return 1


if __name__ == "__main__":
    sys.exit(main())

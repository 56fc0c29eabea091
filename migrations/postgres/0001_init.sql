-- leasehold schema v1 (PostgreSQL). Times are integer milliseconds since the Unix epoch.
-- Every table carries tenant, and every child row references its run through
-- (tenant, run_id), so no row can belong to another tenant's run.
--
-- Differences from the SQLite file, and why:
--  * Identity columns (tenant, run ids, names, keys) use COLLATE "C": SQLite
--    compares TEXT byte by byte, and the contract's orders (claim order, Snapshot
--    order) are byte orders. A database created with a natural-language
--    collation (en_US.UTF-8) would otherwise sort 'B' after 'a' and disagree
--    with SQLite and the model. "C" comparisons are also the cheapest.
--  * Size limits use octet_length: the spec's limits are in bytes.
--  * The job indexes differ from SQLite's (see each index): the claim reads
--    due queued jobs and expired leases through two narrow partial indexes,
--    so that it never steps over leases in flight or jobs awaiting the reaper.
-- The tables are created in the store's schema (search_path); the store
-- records this file in leasehold_schema_migrations with its checksum.

CREATE TABLE runs (
    tenant         TEXT    COLLATE "C" NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 64),
    run_id         TEXT    COLLATE "C" NOT NULL CHECK (octet_length(run_id) BETWEEN 1 AND 64),
    operation      TEXT    COLLATE "C" NOT NULL CHECK (octet_length(operation) BETWEEN 1 AND 64),
    state          TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    version        BIGINT  NOT NULL CHECK (version >= 1),
    last_event_seq BIGINT  NOT NULL CHECK (last_event_seq >= 1),
    payload        TEXT    NOT NULL CHECK (octet_length(payload) <= 65536),
    fingerprint    TEXT    NOT NULL,
    max_attempts   BIGINT  NOT NULL CHECK (max_attempts >= 1),
    error_code     TEXT,
    result         TEXT    CHECK (result IS NULL OR octet_length(result) <= 65536),
    created_at     BIGINT  NOT NULL CHECK (created_at >= 0),
    deadline_at    BIGINT  NOT NULL CHECK (deadline_at > created_at),
    replay_of      TEXT    COLLATE "C",
    replay_depth   BIGINT  NOT NULL DEFAULT 0 CHECK (replay_depth >= 0),
    -- Every read, lock and FK lookup of a run is by (tenant, run_id).
    PRIMARY KEY (tenant, run_id),
    -- A run may be replayed at most once; the replay points back at it. The
    -- unique index also serves Replay's "was it already replayed?" lookup.
    UNIQUE (tenant, replay_of),
    FOREIGN KEY (tenant, replay_of) REFERENCES runs (tenant, run_id),
    CHECK ((replay_of IS NULL) = (replay_depth = 0)),
    -- Failed and cancelled runs say why; others carry no error code.
    CHECK ((state IN ('failed', 'cancelled')) = (error_code IS NOT NULL)),
    CHECK (result IS NULL OR state = 'completed')
);

CREATE TABLE run_events (
    tenant  TEXT    COLLATE "C" NOT NULL,
    run_id  TEXT    COLLATE "C" NOT NULL,
    seq     BIGINT  NOT NULL CHECK (seq >= 1),
    kind    TEXT    NOT NULL CHECK (kind IN ('run_queued', 'run_completed', 'run_failed', 'run_cancelled')),
    at      BIGINT  NOT NULL CHECK (at >= 0),
    payload TEXT    NOT NULL CHECK (octet_length(payload) <= 4096),
    -- Events are read per run in seq order; the key also makes seqs unique.
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id),
    -- run_queued is the first event and only the first.
    CHECK ((kind = 'run_queued') = (seq = 1))
);

-- At most one terminal event per run.
CREATE UNIQUE INDEX run_events_one_terminal ON run_events (tenant, run_id)
    WHERE kind IN ('run_completed', 'run_failed', 'run_cancelled');

CREATE TABLE jobs (
    tenant           TEXT    COLLATE "C" NOT NULL,
    run_id           TEXT    COLLATE "C" NOT NULL,
    operation        TEXT    COLLATE "C" NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('queued', 'leased', 'completed', 'dead', 'cancelled')),
    available_at     BIGINT  NOT NULL CHECK (available_at >= 0),
    lease_owner      TEXT,
    lease_expires_at BIGINT  CHECK (lease_expires_at IS NULL OR lease_expires_at >= 0),
    lease_generation BIGINT  NOT NULL DEFAULT 0 CHECK (lease_generation >= 0),
    attempts         BIGINT  NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     BIGINT  NOT NULL CHECK (max_attempts >= 1),
    last_error_code  TEXT,
    -- Every guarded write locks its job by (tenant, run_id) first.
    PRIMARY KEY (tenant, run_id),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id),
    CHECK (attempts <= max_attempts),
    -- A leased job has an owner and an expiry; any other job has neither.
    CHECK ((state = 'leased') = (lease_owner IS NOT NULL)),
    CHECK ((state = 'leased') = (lease_expires_at IS NOT NULL)),
    CHECK (state <> 'leased' OR (lease_generation >= 1 AND attempts >= 1))
);

-- Claim, due branch: one tenant's queued jobs in the claim order
-- (available_at, run_id), so "available_at <= now ORDER BY available_at, run_id
-- LIMIT n FOR NO KEY UPDATE SKIP LOCKED" is a range scan that stops after n
-- lockable rows and never reads a job that is not claimable by state.
-- Leased jobs are deliberately not in this index (SQLite's jobs_claim holds
-- both): in-flight jobs are the oldest in the order, and with them in the
-- index every claim stepped over every unexpired lease (measured: 10,000
-- filtered rows for a one-job claim with 10,000 leases in flight).
CREATE INDEX jobs_due ON jobs (tenant, available_at, run_id)
    WHERE state = 'queued';

-- Claim, expiry-reclaim branch: one tenant's leases that still have budget,
-- by expiry, so "lease_expires_at <= now" reads only the expired ones (few:
-- crashed or stalled workers), which the claim then sorts into its order.
CREATE INDEX jobs_expired ON jobs (tenant, lease_expires_at)
    WHERE state = 'leased' AND attempts < max_attempts;

-- Reap: one tenant's leases on their last attempt, in the reap order
-- (lease_expires_at, run_id). Only such jobs can be reaped; keeping them out
-- of jobs_expired also keeps a backlog awaiting the reaper out of the claim's
-- way.
CREATE INDEX jobs_reap ON jobs (tenant, lease_expires_at, run_id)
    WHERE state = 'leased' AND attempts >= max_attempts;

CREATE TABLE idempotency_keys (
    tenant          TEXT    COLLATE "C" NOT NULL,
    operation       TEXT    COLLATE "C" NOT NULL,
    idempotency_key TEXT    COLLATE "C" NOT NULL CHECK (octet_length(idempotency_key) BETWEEN 1 AND 255),
    fingerprint     TEXT    NOT NULL,
    run_id          TEXT    COLLATE "C" NOT NULL,
    created_at      BIGINT  NOT NULL CHECK (created_at >= 0),
    expires_at      BIGINT  NOT NULL CHECK (expires_at > created_at),
    -- Admission looks the key up by exactly this triple: one index probe at any depth.
    PRIMARY KEY (tenant, operation, idempotency_key),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id)
);

-- Purge: expired records in the purge order (expires_at, tenant, operation,
-- key). With every column of the order in the index, "ORDER BY ... LIMIT n"
-- reads the first n entries instead of sorting all expired records.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at, tenant, operation, idempotency_key);

CREATE TABLE attempts (
    tenant      TEXT    COLLATE "C" NOT NULL,
    run_id      TEXT    COLLATE "C" NOT NULL,
    generation  BIGINT  NOT NULL CHECK (generation >= 1),
    number      BIGINT  NOT NULL CHECK (number >= 1),
    worker      TEXT    NOT NULL,
    claimed_at  BIGINT  NOT NULL CHECK (claimed_at >= 0),
    renewed_at  BIGINT  NOT NULL CHECK (renewed_at >= claimed_at),
    finished_at BIGINT  CHECK (finished_at IS NULL OR finished_at >= claimed_at),
    outcome     TEXT    NOT NULL CHECK (outcome IN ('running', 'completed', 'retried', 'dead', 'released', 'expired', 'cancelled')),
    error_code  TEXT,
    error_class TEXT    CHECK (error_class IS NULL OR error_class IN ('retryable', 'terminal', 'expired')),
    retry_at    BIGINT,
    -- Attempts are written and read by (run, generation).
    PRIMARY KEY (tenant, run_id, generation),
    FOREIGN KEY (tenant, run_id) REFERENCES jobs (tenant, run_id),
    CHECK ((outcome = 'running') = (finished_at IS NULL)),
    CHECK ((outcome = 'retried') = (retry_at IS NOT NULL))
);

CREATE TABLE effects (
    tenant       TEXT    COLLATE "C" NOT NULL,
    run_id       TEXT    COLLATE "C" NOT NULL,
    step         TEXT    COLLATE "C" NOT NULL CHECK (octet_length(step) BETWEEN 1 AND 64),
    effect_key   TEXT    COLLATE "C" NOT NULL CHECK (octet_length(effect_key) BETWEEN 1 AND 255),
    state        TEXT    NOT NULL CHECK (state IN ('reserved', 'succeeded', 'failed', 'unknown')),
    provider_ref TEXT    NOT NULL DEFAULT '',
    generation   BIGINT  NOT NULL CHECK (generation >= 1),
    updated_at   BIGINT  NOT NULL CHECK (updated_at >= 0),
    -- Effects are looked up by (run, step, key) and listed per run in (step, key) order.
    PRIMARY KEY (tenant, run_id, step, effect_key),
    FOREIGN KEY (tenant, run_id, generation) REFERENCES attempts (tenant, run_id, generation)
);

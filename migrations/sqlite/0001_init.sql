-- leasehold schema v1 (SQLite). Times are integer milliseconds since the Unix epoch.
-- Every table carries tenant, and every child row references its run through
-- (tenant, run_id), so no row can belong to another tenant's run.

CREATE TABLE runs (
    tenant         TEXT    NOT NULL CHECK (length(tenant) BETWEEN 1 AND 64),
    run_id         TEXT    NOT NULL CHECK (length(run_id) BETWEEN 1 AND 64),
    operation      TEXT    NOT NULL CHECK (length(operation) BETWEEN 1 AND 64),
    state          TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    version        INTEGER NOT NULL CHECK (version >= 1),
    last_event_seq INTEGER NOT NULL CHECK (last_event_seq >= 1),
    payload        TEXT    NOT NULL CHECK (length(payload) <= 65536),
    fingerprint    TEXT    NOT NULL,
    max_attempts   INTEGER NOT NULL CHECK (max_attempts >= 1),
    error_code     TEXT,
    result         TEXT    CHECK (result IS NULL OR length(result) <= 65536),
    created_at     INTEGER NOT NULL CHECK (created_at >= 0),
    deadline_at    INTEGER NOT NULL CHECK (deadline_at > created_at),
    replay_of      TEXT,
    replay_depth   INTEGER NOT NULL DEFAULT 0 CHECK (replay_depth >= 0),
    PRIMARY KEY (tenant, run_id),
    -- A run may be replayed at most once; the replay points back at it.
    UNIQUE (tenant, replay_of),
    FOREIGN KEY (tenant, replay_of) REFERENCES runs (tenant, run_id),
    CHECK ((replay_of IS NULL) = (replay_depth = 0)),
    -- Failed and cancelled runs say why; others carry no error code.
    CHECK ((state IN ('failed', 'cancelled')) = (error_code IS NOT NULL)),
    CHECK (result IS NULL OR state = 'completed')
) WITHOUT ROWID;

CREATE TABLE run_events (
    tenant  TEXT    NOT NULL,
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL CHECK (seq >= 1),
    kind    TEXT    NOT NULL CHECK (kind IN ('run_queued', 'run_completed', 'run_failed', 'run_cancelled')),
    at      INTEGER NOT NULL CHECK (at >= 0),
    payload TEXT    NOT NULL CHECK (length(payload) <= 4096),
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id),
    -- run_queued is the first event and only the first.
    CHECK ((kind = 'run_queued') = (seq = 1))
) WITHOUT ROWID;

-- At most one terminal event per run.
CREATE UNIQUE INDEX run_events_one_terminal ON run_events (tenant, run_id)
    WHERE kind IN ('run_completed', 'run_failed', 'run_cancelled');

CREATE TABLE jobs (
    tenant           TEXT    NOT NULL,
    run_id           TEXT    NOT NULL,
    operation        TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('queued', 'leased', 'completed', 'dead', 'cancelled')),
    available_at     INTEGER NOT NULL CHECK (available_at >= 0),
    lease_owner      TEXT,
    lease_expires_at INTEGER CHECK (lease_expires_at IS NULL OR lease_expires_at >= 0),
    lease_generation INTEGER NOT NULL DEFAULT 0 CHECK (lease_generation >= 0),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    last_error_code  TEXT,
    PRIMARY KEY (tenant, run_id),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id),
    CHECK (attempts <= max_attempts),
    -- A leased job has an owner and an expiry; any other job has neither.
    CHECK ((state = 'leased') = (lease_owner IS NOT NULL)),
    CHECK ((state = 'leased') = (lease_expires_at IS NOT NULL)),
    CHECK (state <> 'leased' OR (lease_generation >= 1 AND attempts >= 1))
) WITHOUT ROWID;

-- Claim: eligible jobs of one tenant in (available_at, run_id) order.
CREATE INDEX jobs_claim ON jobs (tenant, available_at, run_id) WHERE state IN ('queued', 'leased');
-- Reap: expired leases of one tenant in expiry order.
CREATE INDEX jobs_reap ON jobs (tenant, lease_expires_at, run_id) WHERE state = 'leased';

CREATE TABLE idempotency_keys (
    tenant          TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    fingerprint     TEXT    NOT NULL,
    run_id          TEXT    NOT NULL,
    created_at      INTEGER NOT NULL CHECK (created_at >= 0),
    expires_at      INTEGER NOT NULL CHECK (expires_at > created_at),
    PRIMARY KEY (tenant, operation, idempotency_key),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id)
) WITHOUT ROWID;

-- Purge: oldest expired records first.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE attempts (
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    generation  INTEGER NOT NULL CHECK (generation >= 1),
    number      INTEGER NOT NULL CHECK (number >= 1),
    worker      TEXT    NOT NULL,
    claimed_at  INTEGER NOT NULL CHECK (claimed_at >= 0),
    renewed_at  INTEGER NOT NULL CHECK (renewed_at >= claimed_at),
    finished_at INTEGER CHECK (finished_at IS NULL OR finished_at >= claimed_at),
    outcome     TEXT    NOT NULL CHECK (outcome IN ('running', 'completed', 'retried', 'dead', 'released', 'expired', 'cancelled')),
    error_code  TEXT,
    error_class TEXT    CHECK (error_class IS NULL OR error_class IN ('retryable', 'terminal', 'expired')),
    retry_at    INTEGER,
    PRIMARY KEY (tenant, run_id, generation),
    FOREIGN KEY (tenant, run_id) REFERENCES jobs (tenant, run_id),
    CHECK ((outcome = 'running') = (finished_at IS NULL)),
    CHECK ((outcome = 'retried') = (retry_at IS NOT NULL))
) WITHOUT ROWID;

CREATE TABLE effects (
    tenant       TEXT    NOT NULL,
    run_id       TEXT    NOT NULL,
    step         TEXT    NOT NULL CHECK (length(step) BETWEEN 1 AND 64),
    effect_key   TEXT    NOT NULL CHECK (length(effect_key) BETWEEN 1 AND 255),
    state        TEXT    NOT NULL CHECK (state IN ('reserved', 'succeeded', 'failed', 'unknown')),
    provider_ref TEXT    NOT NULL DEFAULT '',
    generation   INTEGER NOT NULL CHECK (generation >= 1),
    updated_at   INTEGER NOT NULL CHECK (updated_at >= 0),
    PRIMARY KEY (tenant, run_id, step, effect_key),
    FOREIGN KEY (tenant, run_id, generation) REFERENCES attempts (tenant, run_id, generation)
) WITHOUT ROWID;

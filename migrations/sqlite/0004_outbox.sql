-- The transactional outbox (SPEC.md, Outbox): messages a completion (or an
-- admission) wrote in its own transaction, for a relay to publish. A row is
-- keyed by its run and its seq (1.. in the order the run's writes made
-- them); message_id is the broker's deduplication id, fixed at the insert.
-- A pending message may carry a relay's claim (relay, claim_expires_at); a
-- delivered one carries its delivery time and no claim. A run's rows go
-- only with the run (the foreign key), and PurgeRuns deletes only delivered
-- ones: a pending message keeps its run.
CREATE TABLE outbox (
    tenant           TEXT    NOT NULL,
    run_id           TEXT    NOT NULL,
    seq              INTEGER NOT NULL CHECK (seq >= 1),
    message_id       TEXT    NOT NULL CHECK (length(message_id) >= 1),
    subject          TEXT    NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    payload          TEXT    NOT NULL CHECK (length(payload) BETWEEN 1 AND 65536),
    generation       INTEGER NOT NULL CHECK (generation >= 0),
    created_at       INTEGER NOT NULL CHECK (created_at >= 0),
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered')),
    relay            TEXT,
    claim_expires_at INTEGER CHECK (claim_expires_at IS NULL OR claim_expires_at >= 0),
    claims           INTEGER NOT NULL DEFAULT 0 CHECK (claims >= 0),
    delivered_at     INTEGER CHECK (delivered_at IS NULL OR delivered_at >= created_at),
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id),
    CHECK ((relay IS NULL) = (claim_expires_at IS NULL)),
    CHECK (relay IS NULL OR claims >= 1),
    CHECK ((state = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK (state = 'pending' OR relay IS NULL)
) WITHOUT ROWID;

-- ClaimOutbox: pending messages in (created_at, tenant, run_id, seq) order,
-- of every tenant or of one.
CREATE INDEX outbox_pending ON outbox (created_at, tenant, run_id, seq) WHERE state = 'pending';
CREATE INDEX outbox_pending_tenant ON outbox (tenant, created_at, run_id, seq) WHERE state = 'pending';

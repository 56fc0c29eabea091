-- The transactional outbox (SPEC.md, Outbox): messages a completion (or an
-- admission) wrote in its own transaction, for a relay to publish. A row is
-- keyed by its run and its seq (1.. in the order the run's writes made
-- them); message_id is the broker's deduplication id, fixed at the insert.
-- A pending message may carry a relay's claim (relay, claim_expires_at); a
-- delivered one carries its delivery time and no claim. A run's rows go
-- only with the run (the foreign key), and PurgeRuns deletes only delivered
-- ones: a pending message keeps its run.
CREATE TABLE outbox (
    tenant           TEXT    COLLATE "C" NOT NULL,
    run_id           TEXT    COLLATE "C" NOT NULL,
    seq              BIGINT  NOT NULL CHECK (seq >= 1),
    message_id       TEXT    COLLATE "C" NOT NULL CHECK (octet_length(message_id) >= 1),
    subject          TEXT    COLLATE "C" NOT NULL CHECK (octet_length(subject) BETWEEN 1 AND 255),
    payload          TEXT    NOT NULL CHECK (octet_length(payload) BETWEEN 1 AND 65536),
    generation       BIGINT  NOT NULL CHECK (generation >= 0),
    created_at       BIGINT  NOT NULL CHECK (created_at >= 0),
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered')),
    relay            TEXT,
    claim_expires_at BIGINT  CHECK (claim_expires_at IS NULL OR claim_expires_at >= 0),
    claims           INTEGER NOT NULL DEFAULT 0 CHECK (claims >= 0),
    delivered_at     BIGINT  CHECK (delivered_at IS NULL OR delivered_at >= created_at),
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id),
    CHECK ((relay IS NULL) = (claim_expires_at IS NULL)),
    CHECK (relay IS NULL OR claims >= 1),
    CHECK ((state = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK (state = 'pending' OR relay IS NULL)
);

-- ClaimOutbox: pending messages in (created_at, tenant, run_id, seq) order,
-- of every tenant or of one; a delivered message leaves both indexes.
CREATE INDEX outbox_pending ON outbox (created_at, tenant, run_id, seq) WHERE state = 'pending';
CREATE INDEX outbox_pending_tenant ON outbox (tenant, created_at, run_id, seq) WHERE state = 'pending';

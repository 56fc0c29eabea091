-- A run's run_queued event is its run row: admission writes the run, its
-- job and its idempotency record, and no event row.
--
-- Before, admission wrote four rows per run, the fourth a run_queued event
-- that repeated what the run row holds: seq 1, at the run's created_at, and
-- payload {} (spec.QueuedPayload("", "", 0)) for an admitted run. Only a
-- replay's event says more: its audit payload names the actor, who is not
-- on the run row.
--
-- What moves where (the store derives the event back in queries.go, so
-- nothing outside the store sees a difference):
--  * runs.queued_payload is a replay's run_queued payload, verbatim, and
--    NULL for an admitted run, whose payload is {}. The run_queued event of
--    every run is (tenant, run_id, 1, 'run_queued', created_at,
--    coalesce(queued_payload, '{}')).
--  * run_events keeps the terminal events (seq 2 and on) and refuses a
--    run_queued row.
--
-- Nothing is lost silently: if a run_queued row is not what its run row
-- gives back (its at is not the run's created_at, an admitted run's payload
-- is not {}, or the run has no run_queued event at all), the migration
-- fails naming the first such run, and as the whole migration is one
-- transaction the database is left as it was. Repair the row (or delete the
-- run) and open the store again.

-- SQLite has no RAISE outside a trigger: the check inserts the first
-- underivable run into a temporary table whose trigger refuses every row.
CREATE TEMP TABLE migration_0005_underivable (tenant TEXT, run_id TEXT, problem TEXT);
CREATE TEMP TRIGGER migration_0005_refuse BEFORE INSERT ON migration_0005_underivable
BEGIN
    SELECT RAISE(ABORT, 'migration 5 would lose the run_queued event of run ' || NEW.tenant || '/' || NEW.run_id
        || ' (' || NEW.problem || '); nothing was changed: repair that event or delete the run, then open the store again');
END;
INSERT INTO migration_0005_underivable (tenant, run_id, problem)
SELECT r.tenant, r.run_id, CASE
        WHEN e.run_id IS NULL THEN 'the run has no run_queued event'
        WHEN e.at <> r.created_at THEN 'its at ' || e.at || ' is not the run''s created_at ' || r.created_at
        ELSE 'the payload of an admitted run is ' || substr(e.payload, 1, 64) || ', not {}'
    END
FROM runs AS r LEFT JOIN run_events AS e ON e.tenant = r.tenant AND e.run_id = r.run_id AND e.seq = 1
WHERE e.run_id IS NULL OR e.at <> r.created_at OR (r.replay_of IS NULL AND e.payload <> '{}')
ORDER BY r.tenant, r.run_id LIMIT 1;
DROP TRIGGER migration_0005_refuse;
DROP TABLE migration_0005_underivable;

-- ADD COLUMN checks a new column's CHECK against the rows already there,
-- which every replay would fail while its queued_payload is still NULL, and
-- no CHECK can be added later. So the replays leave runs, the column comes
-- with its CHECKs, and they come back with their payloads. The store's
-- connections keep foreign_keys on, which cannot change inside the
-- migration's transaction: defer_foreign_keys lets the replays' jobs,
-- records and events point at no run until the replays are back.
PRAGMA defer_foreign_keys = ON;
CREATE TEMP TABLE migration_0005_replays AS
SELECT r.tenant, r.run_id, r.operation, r.state, r.version, r.last_event_seq, r.payload, r.fingerprint, r.max_attempts,
    r.error_code, r.result, r.created_at, r.deadline_at, r.replay_of, r.replay_depth, e.payload AS queued_payload
FROM runs AS r JOIN run_events AS e ON e.tenant = r.tenant AND e.run_id = r.run_id AND e.seq = 1
WHERE r.replay_of IS NOT NULL;
DELETE FROM runs WHERE replay_of IS NOT NULL;
ALTER TABLE runs ADD COLUMN queued_payload TEXT
    CHECK (length(queued_payload) <= 4096)
    -- A replay carries its audit payload; an admitted run's is {}.
    CHECK ((replay_of IS NULL) = (queued_payload IS NULL));
INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint, max_attempts,
    error_code, result, created_at, deadline_at, replay_of, replay_depth, queued_payload)
SELECT tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint, max_attempts,
    error_code, result, created_at, deadline_at, replay_of, replay_depth, queued_payload
FROM migration_0005_replays;
DROP TABLE migration_0005_replays;
PRAGMA defer_foreign_keys = OFF;

-- run_events without its run_queued rows, and with a CHECK that refuses
-- them (SQLite adds no CHECK to a table: it is rebuilt, with its key, its
-- foreign key and both of its indexes). Nothing references run_events, so
-- dropping it checks no foreign key.
CREATE TABLE run_events_terminal (
    tenant  TEXT    NOT NULL,
    run_id  TEXT    NOT NULL,
    -- seq 1 is the run_queued event, which the run row holds.
    seq     INTEGER NOT NULL CHECK (seq >= 2),
    kind    TEXT    NOT NULL CHECK (kind IN ('run_completed', 'run_failed', 'run_cancelled')),
    at      INTEGER NOT NULL CHECK (at >= 0),
    payload TEXT    NOT NULL CHECK (length(payload) <= 4096),
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, run_id)
) WITHOUT ROWID;
INSERT INTO run_events_terminal (tenant, run_id, seq, kind, at, payload)
SELECT tenant, run_id, seq, kind, at, payload FROM run_events WHERE kind <> 'run_queued';
DROP TABLE run_events;
ALTER TABLE run_events_terminal RENAME TO run_events;

-- As before (0001, 0003). Every row is now a terminal event, but the
-- conditions stay: the purge's statements name them, and SQLite uses a
-- partial index only for a statement that does.
CREATE UNIQUE INDEX run_events_one_terminal ON run_events (tenant, run_id)
    WHERE kind IN ('run_completed', 'run_failed', 'run_cancelled');
CREATE INDEX run_events_finished ON run_events (tenant, at, run_id)
    WHERE kind IN ('run_completed', 'run_failed', 'run_cancelled');

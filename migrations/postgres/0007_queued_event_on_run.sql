-- The run_queued event on the run row: admission writes three rows, not four.
--
-- Since migration 4, run_events held nothing but run_queued events, and every
-- run has exactly one: seq 1, at the run's creation, with the payload '{}'
-- for an admitted run and the replay's audit record for a replay. All of it
-- but the audit record is the run row already, so admission wrote a fourth
-- row, with its index entry and a foreign-key check, that said nothing new
-- (bench/findings.md, admission).
--
--  * runs.queued_payload is a replay's run_queued payload, verbatim; it is
--    NULL for an admitted run, whose payload is '{}'. The store reads the
--    event as (1, 'run_queued', created_at, coalesce(queued_payload, '{}')).
--  * run_events goes. Its rows are checked first: a row the run cannot give
--    back exactly (another time, an admitted run's payload other than '{}',
--    a run without its event) stops the migration, naming the run, and
--    nothing changes.
--  * The replay link's unique index holds only replays. Every admitted run
--    added an entry for its NULL replay_of to the old one, which NULLs never
--    conflict on; Replay's "already replayed?" lookup and its ON CONFLICT
--    are by a non-NULL replay_of, which the partial index serves.

DO $$
DECLARE
    bad record;
BEGIN
    SELECT r.run_id AS run_id, r.tenant AS tenant, e.seq AS seq, e.at AS at, r.created_at AS created_at INTO bad
    FROM runs AS r
    LEFT JOIN run_events AS e ON e.tenant = r.tenant AND e.run_id = r.run_id
    WHERE e.run_id IS NULL OR e.at <> r.created_at OR (r.replay_of IS NULL AND e.payload <> '{}')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'leasehold migration 7: run %/% has no run_queued event the run row can give back (event at %, run created at %); fix or purge that run, then open the store again',
            bad.tenant, bad.run_id, bad.at, bad.created_at;
    END IF;
END $$;

ALTER TABLE runs ADD COLUMN queued_payload TEXT;

UPDATE runs AS r SET queued_payload = e.payload
FROM run_events AS e
WHERE e.tenant = r.tenant AND e.run_id = r.run_id AND r.replay_of IS NOT NULL;

ALTER TABLE runs ADD CONSTRAINT runs_queued_payload CHECK ((replay_of IS NULL) = (queued_payload IS NULL)
    AND octet_length(queued_payload) <= 4096);

DROP TABLE run_events;

ALTER TABLE runs DROP CONSTRAINT runs_tenant_replay_of_key;
CREATE UNIQUE INDEX runs_replayed ON runs (tenant, replay_of) WHERE replay_of IS NOT NULL;

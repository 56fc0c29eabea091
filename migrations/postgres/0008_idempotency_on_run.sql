-- The idempotency record on its run's row: admission writes two rows, not three.
--
-- An admission creates its record with its run, from the run's own tenant,
-- operation, fingerprint and creation time; only the key and the record's
-- expiry are the record's own, and a run has at most one record (Replay
-- creates none). The separate table cost every admission a third row, three
-- index entries and a foreign-key check (bench/findings.md, admission).
--
--  * runs.idempotency_key and runs.idempotency_expires_at are the record of
--    the run's admission, both NULL when the run holds none (a replay, or a
--    record deleted: expired and purged, or replaced by a new admission of
--    its scope). The store reads a record as (tenant, operation,
--    idempotency_key, fingerprint, run_id, created_at, idempotency_expires_at)
--    of a run whose key is not NULL, and deletes one by setting both NULL.
--  * runs_idempotency is the scope's uniqueness and the admission's lookup;
--    runs_idempotency_expiry serves the purge order (expires_at, tenant,
--    operation, key), as idempotency_keys_expiry did. The record's foreign key
--    and idempotency_keys_run (the run's records, for PurgeRuns) have nothing
--    left to do: the record is the run row.
--  * idempotency_keys goes. Its rows are checked first: a record its run
--    cannot give back exactly (another fingerprint, operation or creation
--    time, or a second record of one run) stops the migration, naming it,
--    and nothing changes.

DO $$
DECLARE
    bad record;
BEGIN
    SELECT k.tenant AS tenant, k.operation AS operation, k.idempotency_key AS key, k.run_id AS run_id INTO bad
    FROM idempotency_keys AS k
    JOIN runs AS r ON r.tenant = k.tenant AND r.run_id = k.run_id
    WHERE k.fingerprint <> r.fingerprint OR k.operation <> r.operation OR k.created_at <> r.created_at
        OR (SELECT count(*) FROM idempotency_keys AS o WHERE o.tenant = k.tenant AND o.run_id = k.run_id) > 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'leasehold migration 8: the idempotency record of tenant %, operation %, key % is not what its run % can hold (another fingerprint, operation or creation time, or a second record of the run); delete that record or purge the run, then open the store again',
            bad.tenant, bad.operation, bad.key, bad.run_id;
    END IF;
END $$;

ALTER TABLE runs ADD COLUMN idempotency_key TEXT COLLATE "C",
    ADD COLUMN idempotency_expires_at BIGINT;

UPDATE runs AS r SET idempotency_key = k.idempotency_key, idempotency_expires_at = k.expires_at
FROM idempotency_keys AS k
WHERE k.tenant = r.tenant AND k.run_id = r.run_id;

ALTER TABLE runs ADD CONSTRAINT runs_idempotency_record CHECK ((idempotency_key IS NULL) = (idempotency_expires_at IS NULL)
    AND octet_length(idempotency_key) BETWEEN 1 AND 255 AND idempotency_expires_at > created_at);

DROP TABLE idempotency_keys;

-- Admission looks the key up by exactly this triple: one index probe at any depth.
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, operation, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Purge: expired records in the purge order; "ORDER BY ... LIMIT n" reads
-- the first n entries.
CREATE INDEX runs_idempotency_expiry ON runs (idempotency_expires_at, tenant, operation, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

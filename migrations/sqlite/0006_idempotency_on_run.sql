-- A run's idempotency record is its run row: admission writes the run and
-- its job, and no record row.
--
-- Before, admission wrote three rows per run, the third an idempotency_keys
-- row that repeated what the run row holds: an admission creates its record
-- with its run, from the run's tenant, operation, fingerprint and created_at
-- (Replay creates none), so only the key and the record's expiry were the
-- record's own. That row cost every admission an insert, its index entries
-- (the key, idempotency_keys_expiry, idempotency_keys_run) and a foreign-key
-- check.
--
-- What moves where (the store derives the records back in queries.go, so
-- nothing outside the store sees a difference):
--  * runs.idempotency_key and runs.idempotency_expires_at are the run's
--    record, both NULL when the run holds none (a replay, or a record
--    deleted: purged, or replaced by a new admission of its scope). The
--    record of a run whose key is not NULL is (tenant, operation,
--    idempotency_key, fingerprint, run_id, created_at,
--    idempotency_expires_at).
--  * runs_idempotency is the scope's uniqueness and the admission's lookup;
--    runs_idempotency_expiry serves the purge's order, as
--    idempotency_keys_expiry did. idempotency_keys_run served PurgeRuns'
--    question whether a live record names a run, and the records' foreign
--    key: the run row answers the first, and the second is gone.
--  * idempotency_keys and its indexes go.
--
-- Nothing is lost silently: if a record is not what its run row gives back
-- (its run is missing, its operation, fingerprint or created_at is not the
-- run's, or its run has a second record), the migration fails naming the
-- first such record, and as the whole migration is one transaction the
-- database is left as it was. Repair the record (or delete it) and open the
-- store again.

-- SQLite has no RAISE outside a trigger: the check inserts the first
-- underivable record into a temporary table whose trigger refuses every row.
CREATE TEMP TABLE migration_0006_underivable (tenant TEXT, operation TEXT, idempotency_key TEXT, run_id TEXT, problem TEXT);
CREATE TEMP TRIGGER migration_0006_refuse BEFORE INSERT ON migration_0006_underivable
BEGIN
    SELECT RAISE(ABORT, 'migration 6 would lose the idempotency record ' || NEW.tenant || '/' || NEW.operation || '/' || NEW.idempotency_key
        || ' of run ' || NEW.run_id || ' (' || NEW.problem || '); nothing was changed: repair that record or delete it, then open the store again');
END;
INSERT INTO migration_0006_underivable (tenant, operation, idempotency_key, run_id, problem)
SELECT k.tenant, k.operation, k.idempotency_key, k.run_id, CASE
        WHEN r.run_id IS NULL THEN 'its run does not exist'
        WHEN k.operation <> r.operation THEN 'its operation ' || k.operation || ' is not the run''s operation ' || r.operation
        WHEN k.fingerprint <> r.fingerprint THEN 'its fingerprint ' || substr(k.fingerprint, 1, 128) || ' is not the run''s fingerprint ' || substr(r.fingerprint, 1, 128)
        WHEN k.created_at <> r.created_at THEN 'its created_at ' || k.created_at || ' is not the run''s created_at ' || r.created_at
        ELSE 'its run has ' || (SELECT count(*) FROM idempotency_keys AS o WHERE o.tenant = k.tenant AND o.run_id = k.run_id)
            || ' records; a run holds at most one'
    END
FROM idempotency_keys AS k LEFT JOIN runs AS r ON r.tenant = k.tenant AND r.run_id = k.run_id
WHERE r.run_id IS NULL OR k.operation <> r.operation OR k.fingerprint <> r.fingerprint OR k.created_at <> r.created_at
    OR EXISTS (SELECT 1 FROM idempotency_keys AS o WHERE o.tenant = k.tenant AND o.run_id = k.run_id
        AND (o.operation, o.idempotency_key) <> (k.operation, k.idempotency_key))
ORDER BY k.tenant, k.operation, k.idempotency_key LIMIT 1;
DROP TRIGGER migration_0006_refuse;
DROP TABLE migration_0006_underivable;

-- ADD COLUMN checks a new column's CHECKs against the rows already there,
-- where both columns are still NULL: every CHECK holds, and the records
-- then come onto their runs under them. A CHECK naming both columns goes
-- with the second, as the first cannot name a column not yet there.
ALTER TABLE runs ADD COLUMN idempotency_key TEXT
    CHECK (length(idempotency_key) BETWEEN 1 AND 255);
ALTER TABLE runs ADD COLUMN idempotency_expires_at INTEGER
    -- A run holds a record (a key and its expiry) or none.
    CHECK ((idempotency_key IS NULL) = (idempotency_expires_at IS NULL))
    CHECK (idempotency_expires_at IS NULL OR idempotency_expires_at > created_at);
UPDATE runs SET idempotency_key = k.idempotency_key, idempotency_expires_at = k.expires_at
FROM idempotency_keys AS k
WHERE k.tenant = runs.tenant AND k.run_id = runs.run_id;

-- The records' table, and with it its indexes (idempotency_keys_expiry,
-- idempotency_keys_run). Nothing references it, so dropping it checks no
-- foreign key.
DROP TABLE idempotency_keys;

-- Admission: the record of one scope (tenant, operation, key), at most one.
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, operation, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Purge: expired records in the purge's order (expiry, then scope), read
-- from the first and cut at its limit. The statements name the condition
-- (idempotency_key IS NOT NULL): SQLite uses a partial index only then.
CREATE INDEX runs_idempotency_expiry ON runs (idempotency_expires_at, tenant, operation, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

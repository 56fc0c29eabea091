-- One row per run on the hot path: a run's mutable state, its terminal
-- event and its latest attempt live in its job row.
--
-- Before, a job claimed once and completed wrote seven row versions (the job
-- twice, the run twice, an attempt inserted then updated, a run_completed
-- event), three of them inserts with foreign-key checks. The benchmark found
-- the drain bound by the server's CPU at about 340 µs per job against River's
-- 60, which writes its one job row twice (bench/findings.md §8, §9). Now the
-- claim and the completion each write the job row once and nothing else.
--
-- What moves where (the store maps the rows back to spec.Run, spec.Event and
-- spec.Attempt in queries.go, so nothing outside the store sees a difference):
--  * runs keeps what admission fixed (operation, payload, fingerprint, budget,
--    times, replay link); run_state, run_version, run_last_seq,
--    run_error_code and run_result are now on the job row.
--  * The terminal event (there is at most one) is run_finished_at and
--    run_event_payload on the job row, its kind follows from run_state and
--    its sequence is run_last_seq. run_events keeps the run_queued events.
--  * The latest attempt of a job is the attempt_* columns of its job row;
--    the attempts table holds the earlier ones. A claim moves the latest
--    attempt there before it starts the next one (closing it as expired if
--    its lease had expired while running), so a job claimed once writes no
--    attempt row at all.
--  * Effects reference their job: the attempt they were reserved under may
--    still be on the job row. Every effect write is made under the lease
--    guard, which pins the generation.

ALTER TABLE jobs
    ADD COLUMN run_state          TEXT,
    ADD COLUMN run_version        BIGINT,
    ADD COLUMN run_last_seq       BIGINT,
    ADD COLUMN run_error_code     TEXT,
    ADD COLUMN run_result         TEXT,
    ADD COLUMN run_finished_at    BIGINT,
    ADD COLUMN run_event_payload  TEXT,
    ADD COLUMN attempt_generation BIGINT,
    ADD COLUMN attempt_number     BIGINT,
    ADD COLUMN attempt_worker     TEXT,
    ADD COLUMN attempt_claimed_at BIGINT,
    ADD COLUMN attempt_renewed_at BIGINT,
    ADD COLUMN attempt_finished_at BIGINT,
    ADD COLUMN attempt_outcome    TEXT,
    ADD COLUMN attempt_error_code TEXT,
    ADD COLUMN attempt_error_class TEXT,
    ADD COLUMN attempt_retry_at   BIGINT;

-- Move the data of a schema already in use.
UPDATE jobs AS j SET run_state = r.state, run_version = r.version, run_last_seq = r.last_event_seq,
    run_error_code = r.error_code, run_result = r.result
FROM runs AS r WHERE r.tenant = j.tenant AND r.run_id = j.run_id;

UPDATE jobs AS j SET run_finished_at = e.at, run_event_payload = e.payload
FROM run_events AS e
WHERE e.tenant = j.tenant AND e.run_id = j.run_id AND e.kind IN ('run_completed', 'run_failed', 'run_cancelled');

UPDATE jobs AS j SET attempt_generation = a.generation, attempt_number = a.number, attempt_worker = a.worker,
    attempt_claimed_at = a.claimed_at, attempt_renewed_at = a.renewed_at, attempt_finished_at = a.finished_at,
    attempt_outcome = a.outcome, attempt_error_code = a.error_code, attempt_error_class = a.error_class,
    attempt_retry_at = a.retry_at
FROM attempts AS a
WHERE a.tenant = j.tenant AND a.run_id = j.run_id
    AND a.generation = (SELECT max(generation) FROM attempts AS l WHERE l.tenant = j.tenant AND l.run_id = j.run_id);

ALTER TABLE effects DROP CONSTRAINT effects_tenant_run_id_generation_fkey;
ALTER TABLE effects ADD FOREIGN KEY (tenant, run_id) REFERENCES jobs (tenant, run_id);

DELETE FROM attempts AS a USING jobs AS j
WHERE a.tenant = j.tenant AND a.run_id = j.run_id AND a.generation = j.attempt_generation;

DROP INDEX run_events_one_terminal;
DELETE FROM run_events WHERE kind <> 'run_queued';
ALTER TABLE run_events ADD CONSTRAINT run_events_queued_only CHECK (kind = 'run_queued');

ALTER TABLE runs DROP COLUMN state, DROP COLUMN version, DROP COLUMN last_event_seq,
    DROP COLUMN error_code, DROP COLUMN result;

-- The constraints the runs and attempts rows carried, on the job row.
ALTER TABLE jobs
    ALTER COLUMN run_state SET NOT NULL,
    ALTER COLUMN run_version SET NOT NULL,
    ALTER COLUMN run_last_seq SET NOT NULL,
    ADD CONSTRAINT jobs_run_state CHECK (run_state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    ADD CONSTRAINT jobs_run_version CHECK (run_version >= 1 AND run_last_seq >= 1),
    -- Failed and cancelled runs say why; others carry no error code.
    ADD CONSTRAINT jobs_run_error CHECK ((run_state IN ('failed', 'cancelled')) = (run_error_code IS NOT NULL)),
    ADD CONSTRAINT jobs_run_result CHECK (run_result IS NULL OR (run_state = 'completed' AND octet_length(run_result) <= 65536)),
    -- A terminal run has exactly one terminal event: its time and payload.
    ADD CONSTRAINT jobs_run_finished CHECK ((run_state IN ('completed', 'failed', 'cancelled')) = (run_finished_at IS NOT NULL)
        AND (run_finished_at IS NULL) = (run_event_payload IS NULL) AND octet_length(run_event_payload) <= 4096),
    -- The latest attempt is all there or all absent.
    ADD CONSTRAINT jobs_attempt_whole CHECK ((attempt_outcome IS NULL) = (attempt_generation IS NULL)
        AND (attempt_outcome IS NULL) = (attempt_number IS NULL) AND (attempt_outcome IS NULL) = (attempt_worker IS NULL)
        AND (attempt_outcome IS NULL) = (attempt_claimed_at IS NULL) AND (attempt_outcome IS NULL) = (attempt_renewed_at IS NULL)
        AND (attempt_outcome IS NOT NULL OR (attempt_finished_at IS NULL AND attempt_error_code IS NULL
            AND attempt_error_class IS NULL AND attempt_retry_at IS NULL))),
    ADD CONSTRAINT jobs_attempt_values CHECK (attempt_generation >= 1 AND attempt_number >= 1 AND attempt_claimed_at >= 0
        AND attempt_renewed_at >= attempt_claimed_at AND attempt_finished_at >= attempt_claimed_at),
    ADD CONSTRAINT jobs_attempt_outcome CHECK (attempt_outcome IN ('running', 'completed', 'retried', 'dead', 'released', 'expired', 'cancelled')
        AND (attempt_outcome = 'running') = (attempt_finished_at IS NULL)
        AND (attempt_outcome = 'retried') = (attempt_retry_at IS NOT NULL)),
    ADD CONSTRAINT jobs_attempt_class CHECK (attempt_error_class IN ('retryable', 'terminal', 'expired')),
    -- A leased job's latest attempt is the lease's, and it is running.
    ADD CONSTRAINT jobs_leased_attempt CHECK (state <> 'leased'
        OR (attempt_outcome IS NOT NULL AND attempt_outcome = 'running' AND attempt_generation = lease_generation));

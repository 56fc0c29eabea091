-- jobs_row_valid decides a job row as an admission writes it (queued, its
-- run queued, no attempt yet) from a short expression of its own.
--
-- plpgsql compiles a function's expression once per transaction, and the
-- cost grows with its size: for the one job row of an admission, compiling
-- the 29 conjuncts of migration 9 was a large share of the transaction
-- (bench/findings.md §25). For such a row most conjuncts cannot be false,
-- and the others reduce to "this column is NULL" or to a bound; the new
-- branch is that reduction, and every other row is decided by the
-- conjunction of migration 9, unchanged.
--
-- The function fails (returns false) exactly where migration 9's did, on
-- every row: for a row with state = 'queued', run_state = 'queued' and no
-- attempt outcome,
--   - conjuncts that name another state or an attempt outcome are true or
--     NULL (state IN, run_state IN, the leased rules, the outcome rules);
--   - the biconditionals reduce to "is NULL": no lease owner or expiry, no
--     run error, result, finish or event payload, no attempt column;
--   - the remaining bounds (an attempt's numbers and times, a lease
--     expiry's sign, an error class, a payload's length) read only columns
--     that must be NULL, so each is false only where a NULL test is false.
-- TestJobCheckMatchesMigration9 compares the two on generated rows.
-- The constraint is unchanged: CREATE OR REPLACE keeps it, and since the
-- rows it accepts are the same, no stored row needs checking again.

CREATE OR REPLACE FUNCTION jobs_row_valid(j jobs) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    -- A job as an admission writes it.
    IF j.state = 'queued' AND j.run_state = 'queued' AND j.attempt_outcome IS NULL THEN
        RETURN num_nonnulls(j.lease_owner, j.lease_expires_at, j.run_error_code, j.run_result, j.run_finished_at,
                j.run_event_payload, j.attempt_generation, j.attempt_number, j.attempt_worker, j.attempt_claimed_at,
                j.attempt_renewed_at, j.attempt_finished_at, j.attempt_error_code, j.attempt_error_class,
                j.attempt_retry_at) = 0
            AND j.available_at >= 0
            AND j.lease_generation >= 0
            AND j.attempts >= 0
            AND j.max_attempts >= 1
            AND j.attempts <= j.max_attempts
            AND j.run_version >= 1 AND j.run_last_seq >= 1;
    END IF;
    -- Every other job: migration 9's conjunction.
    RETURN j.state IN ('queued', 'leased', 'completed', 'dead', 'cancelled')
        AND j.available_at >= 0
        AND (j.lease_expires_at IS NULL OR j.lease_expires_at >= 0)
        AND j.lease_generation >= 0
        AND j.attempts >= 0
        AND j.max_attempts >= 1
        AND j.attempts <= j.max_attempts
        -- A leased job has an owner and an expiry; any other job has neither.
        AND (j.state = 'leased') = (j.lease_owner IS NOT NULL)
        AND (j.state = 'leased') = (j.lease_expires_at IS NOT NULL)
        AND (j.state <> 'leased' OR (j.lease_generation >= 1 AND j.attempts >= 1))
        -- The run's state and version.
        AND j.run_state IN ('queued', 'running', 'completed', 'failed', 'cancelled')
        AND j.run_version >= 1 AND j.run_last_seq >= 1
        -- Failed and cancelled runs say why; others carry no error code.
        AND (j.run_state IN ('failed', 'cancelled')) = (j.run_error_code IS NOT NULL)
        AND (j.run_result IS NULL OR (j.run_state = 'completed' AND octet_length(j.run_result) <= 65536))
        -- A terminal run has exactly one terminal event: its time and payload.
        AND (j.run_state IN ('completed', 'failed', 'cancelled')) = (j.run_finished_at IS NOT NULL)
        AND (j.run_finished_at IS NULL) = (j.run_event_payload IS NULL) AND octet_length(j.run_event_payload) <= 4096
        -- The latest attempt is all there or all absent.
        AND (j.attempt_outcome IS NULL) = (j.attempt_generation IS NULL)
        AND (j.attempt_outcome IS NULL) = (j.attempt_number IS NULL)
        AND (j.attempt_outcome IS NULL) = (j.attempt_worker IS NULL)
        AND (j.attempt_outcome IS NULL) = (j.attempt_claimed_at IS NULL)
        AND (j.attempt_outcome IS NULL) = (j.attempt_renewed_at IS NULL)
        AND (j.attempt_outcome IS NOT NULL OR (j.attempt_finished_at IS NULL AND j.attempt_error_code IS NULL
            AND j.attempt_error_class IS NULL AND j.attempt_retry_at IS NULL))
        AND j.attempt_generation >= 1 AND j.attempt_number >= 1 AND j.attempt_claimed_at >= 0
        AND j.attempt_renewed_at >= j.attempt_claimed_at AND j.attempt_finished_at >= j.attempt_claimed_at
        AND j.attempt_outcome IN ('running', 'completed', 'retried', 'dead', 'released', 'expired', 'cancelled')
        AND (j.attempt_outcome = 'running') = (j.attempt_finished_at IS NULL)
        AND (j.attempt_outcome = 'retried') = (j.attempt_retry_at IS NOT NULL)
        AND j.attempt_error_class IN ('retryable', 'terminal', 'expired')
        -- A leased job's latest attempt is the lease's, and it is running.
        AND (j.state <> 'leased'
            OR (j.attempt_outcome IS NOT NULL AND j.attempt_outcome = 'running' AND j.attempt_generation = j.lease_generation));
END
$$;

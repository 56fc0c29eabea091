-- jobs_row_valid decides the three job rows the hot paths write from short
-- expressions of their own: a job as an admission writes it (queued, its run
-- queued, no attempt yet), a leased job as a claim writes it (its run
-- running, its attempt running) and a completed job as a completion writes
-- it (its run and attempt completed). Every other row is decided by
-- migration 9's conjunction, unchanged.
--
-- plpgsql prepares a function's expression once per transaction, and the
-- cost grows with its size: for the one job row of an admission, preparing
-- the 29 conjuncts of migration 9 was a large share of the transaction
-- (bench/findings.md §25), and evaluating them, field by field of the row,
-- a share of every claim and completion. Each branch evaluates only what
-- can still be false for its kind of row.
--
-- The function refuses (returns false) exactly the rows migration 9's did.
-- Within a branch, where state, run_state and attempt_outcome are known:
--   - a conjunct that names another state, run state or outcome is true
--     or NULL, and is left out;
--   - a biconditional on a column's presence ("a leased job has an owner",
--     "a running attempt has no finish time") reduces to that column being
--     NULL, or not NULL: num_nonnulls(...) = 0 and num_nulls(...) = 0;
--   - a bound stays, simplified by what the branch knows, except where it
--     reads only columns the branch requires to be NULL (then it is false
--     only where a NULL test is) or is implied by one that stays
--     (attempts >= 1 over attempts >= 0).
-- TestJobCheckMatchesMigration9 holds the function to migration 9's on
-- every row one or two columns away from a valid row of each branch, and
-- shows that taking out any rule of a branch makes them differ.
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
    -- A leased job whose attempt is running, as a claim writes it.
    IF j.state = 'leased' AND j.run_state = 'running' AND j.attempt_outcome = 'running' THEN
        RETURN num_nonnulls(j.run_error_code, j.run_result, j.run_finished_at, j.run_event_payload,
                j.attempt_finished_at, j.attempt_retry_at) = 0
            AND num_nulls(j.lease_owner, j.lease_expires_at, j.attempt_generation, j.attempt_number, j.attempt_worker,
                j.attempt_claimed_at, j.attempt_renewed_at) = 0
            AND j.available_at >= 0
            AND j.lease_expires_at >= 0
            AND j.max_attempts >= 1
            AND j.attempts <= j.max_attempts
            AND j.lease_generation >= 1 AND j.attempts >= 1
            AND j.run_version >= 1 AND j.run_last_seq >= 1
            AND j.attempt_generation >= 1 AND j.attempt_number >= 1 AND j.attempt_claimed_at >= 0
            AND j.attempt_renewed_at >= j.attempt_claimed_at
            AND j.attempt_error_class IN ('retryable', 'terminal', 'expired')
            AND j.attempt_generation = j.lease_generation;
    END IF;
    -- A completed job and run, as a completion writes them.
    IF j.state = 'completed' AND j.run_state = 'completed' AND j.attempt_outcome = 'completed' THEN
        RETURN num_nonnulls(j.lease_owner, j.lease_expires_at, j.run_error_code, j.attempt_retry_at) = 0
            AND num_nulls(j.run_finished_at, j.run_event_payload, j.attempt_generation, j.attempt_number,
                j.attempt_worker, j.attempt_claimed_at, j.attempt_renewed_at, j.attempt_finished_at) = 0
            AND j.available_at >= 0
            AND j.lease_generation >= 0
            AND j.attempts >= 0
            AND j.max_attempts >= 1
            AND j.attempts <= j.max_attempts
            AND j.run_version >= 1 AND j.run_last_seq >= 1
            AND octet_length(j.run_result) <= 65536
            AND octet_length(j.run_event_payload) <= 4096
            AND j.attempt_generation >= 1 AND j.attempt_number >= 1 AND j.attempt_claimed_at >= 0
            AND j.attempt_renewed_at >= j.attempt_claimed_at AND j.attempt_finished_at >= j.attempt_claimed_at
            AND j.attempt_error_class IN ('retryable', 'terminal', 'expired');
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

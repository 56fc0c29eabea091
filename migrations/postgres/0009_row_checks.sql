-- The row constraints of runs and jobs, each table's in one function.
--
-- PostgreSQL reads a table's CHECK constraints from their stored node trees
-- at every statement that writes the table, and compiles them then: the 20
-- of jobs and the 11 of runs at every admission, claim and batch of
-- completions (the profile is in bench/findings.md §24). A plpgsql function
-- is parsed once per connection; the statement's constraint is one call.
--
-- The invariants are the same: runs_row_valid and
-- jobs_row_valid return the conjunction of the dropped constraints, and a
-- CHECK fails only on false (a NULL passes, as it passed each constraint),
-- so a row passes exactly when it passed every one. A row that breaks one
-- is refused with check_violation, naming runs_row_valid or jobs_row_valid.
--
-- PostgreSQL does not see which columns a function reads: a later migration
-- that drops or renames one must replace the function, and one that changes
-- an invariant must drop and add the constraint (CREATE OR REPLACE checks no
-- existing row). Writers need EXECUTE on both functions (PUBLIC's default).

CREATE FUNCTION runs_row_valid(r runs) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN octet_length(r.tenant) BETWEEN 1 AND 64
        AND octet_length(r.run_id) BETWEEN 1 AND 64
        AND octet_length(r.operation) BETWEEN 1 AND 64
        AND octet_length(r.payload) <= 65536
        AND r.max_attempts >= 1
        AND r.created_at >= 0
        AND r.deadline_at > r.created_at
        -- A replay names its original and is one deeper; a first run neither.
        AND r.replay_depth >= 0
        AND (r.replay_of IS NULL) = (r.replay_depth = 0)
        -- A replay's run_queued event payload; a first run has none.
        AND (r.replay_of IS NULL) = (r.queued_payload IS NULL) AND octet_length(r.queued_payload) <= 4096
        -- The idempotency record of the run's admission, all there or absent.
        AND (r.idempotency_key IS NULL) = (r.idempotency_expires_at IS NULL)
        AND octet_length(r.idempotency_key) BETWEEN 1 AND 255
        AND r.idempotency_expires_at > r.created_at;
END
$$;

CREATE FUNCTION jobs_row_valid(j jobs) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
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

ALTER TABLE runs
    DROP CONSTRAINT runs_tenant_check,
    DROP CONSTRAINT runs_run_id_check,
    DROP CONSTRAINT runs_operation_check,
    DROP CONSTRAINT runs_payload_check,
    DROP CONSTRAINT runs_max_attempts_check,
    DROP CONSTRAINT runs_created_at_check,
    DROP CONSTRAINT runs_check,
    DROP CONSTRAINT runs_replay_depth_check,
    DROP CONSTRAINT runs_check1,
    DROP CONSTRAINT runs_queued_payload,
    DROP CONSTRAINT runs_idempotency_record,
    ADD CONSTRAINT runs_row_valid CHECK (runs_row_valid(runs));

ALTER TABLE jobs
    DROP CONSTRAINT jobs_state_check,
    DROP CONSTRAINT jobs_available_at_check,
    DROP CONSTRAINT jobs_lease_expires_at_check,
    DROP CONSTRAINT jobs_lease_generation_check,
    DROP CONSTRAINT jobs_attempts_check,
    DROP CONSTRAINT jobs_max_attempts_check,
    DROP CONSTRAINT jobs_check,
    DROP CONSTRAINT jobs_check1,
    DROP CONSTRAINT jobs_check2,
    DROP CONSTRAINT jobs_check3,
    DROP CONSTRAINT jobs_run_state,
    DROP CONSTRAINT jobs_run_version,
    DROP CONSTRAINT jobs_run_error,
    DROP CONSTRAINT jobs_run_result,
    DROP CONSTRAINT jobs_run_finished,
    DROP CONSTRAINT jobs_attempt_whole,
    DROP CONSTRAINT jobs_attempt_values,
    DROP CONSTRAINT jobs_attempt_outcome,
    DROP CONSTRAINT jobs_attempt_class,
    DROP CONSTRAINT jobs_leased_attempt,
    ADD CONSTRAINT jobs_row_valid CHECK (jobs_row_valid(jobs));

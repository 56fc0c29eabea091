-- Run retention (SPEC.md, PurgeRuns). A purge reads one tenant's finished
-- runs in the order they finished, which is the time of their terminal
-- event: run_events_finished serves that order and stops at the purge's
-- limit. Deleting a run looks up the idempotency records that name it (the
-- foreign key, and the check that no live record does): without an index
-- on (tenant, run_id) each deleted run scanned every record.
CREATE INDEX run_events_finished ON run_events (tenant, at, run_id)
    WHERE kind IN ('run_completed', 'run_failed', 'run_cancelled');
CREATE INDEX idempotency_keys_run ON idempotency_keys (tenant, run_id);

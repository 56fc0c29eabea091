-- Run retention (SPEC.md, PurgeRuns). A purge reads one tenant's finished
-- runs in the order they finished, which is the time of their terminal
-- event: run_events_finished serves that order and stops at the purge's
-- limit. For each run it asks whether a live idempotency record names it,
-- and deleting the run checks the records' foreign key: without an index on
-- (tenant, run_id) each of them scanned the tenant's records, and with
-- expires_at in it the first is answered from the index alone.
CREATE INDEX run_events_finished ON run_events (tenant, at, run_id)
    WHERE kind IN ('run_completed', 'run_failed', 'run_cancelled');
CREATE INDEX idempotency_keys_run ON idempotency_keys (tenant, run_id, expires_at);

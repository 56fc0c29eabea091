-- Run retention (SPEC.md, PurgeRuns). A purge reads one tenant's finished
-- runs in the order they finished: a terminal run's job row holds its
-- terminal event's time (run_finished_at, migration 4), and jobs_finished
-- serves that order and stops at the purge's limit. For each run it asks
-- whether a live idempotency record names it, and deleting the run checks
-- the records' foreign key: without an index on (tenant, run_id) each of
-- them read every record, and with expires_at in it the first is answered
-- from the index alone.
CREATE INDEX jobs_finished ON jobs (tenant, run_finished_at, run_id)
    WHERE run_finished_at IS NOT NULL;
CREATE INDEX idempotency_keys_run ON idempotency_keys (tenant, run_id, expires_at);

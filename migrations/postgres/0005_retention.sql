-- Run retention (SPEC.md, PurgeRuns). A purge reads one tenant's finished
-- runs in the order they finished: a terminal run's job row holds its
-- terminal event's time (run_finished_at, migration 4), and jobs_finished
-- serves that order and stops at the purge's limit. Deleting a run looks up
-- the idempotency records that name it (the foreign key's check, and the
-- purge's own "no live record names it"): without an index on (tenant,
-- run_id) each deleted run read every record.
CREATE INDEX jobs_finished ON jobs (tenant, run_finished_at, run_id)
    WHERE run_finished_at IS NOT NULL;
CREATE INDEX idempotency_keys_run ON idempotency_keys (tenant, run_id);

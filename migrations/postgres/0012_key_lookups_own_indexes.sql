-- A lookup of a run by its key reads the key's own unique index, never the
-- listing's or the purge's. runs_created (0011: tenant, created_at, run_id)
-- holds tenant and run_id, and runs_idempotency_expiry (0008: expires_at,
-- tenant, operation, idempotency_key) the whole idempotency scope. On a
-- small table the planner costs each the same as runs_pkey or
-- runs_idempotency, and a plan made then and kept (a prepared statement's
-- generic plan, or the check of a foreign key to runs, which each
-- connection plans once) could take it: each lookup then read every entry
-- of its tenant, or every record, and admission grew quadratic with the
-- table wherever nothing ANALYZEd it (TestKeyLookupsPlannedOnAnEmptyTable,
-- bench/findings.md §34).
--
-- Both become partial on a predicate every row they held meets, which only
-- their own statements imply: runs_created on created_at IS NOT NULL (the
-- column is NOT NULL; the listing's created_at >= @from implies it),
-- runs_idempotency_expiry on idempotency_expires_at IS NOT NULL (set
-- exactly when idempotency_key is, by the row check; the purge's
-- idempotency_expires_at <= @now implies it). A lookup by key constrains
-- neither column, so neither index can serve it.
--
-- Rebuilt in the migration's transaction, so a runs table already large is
-- locked against writes while they build. To avoid that on a busy
-- database, build each beforehand: CREATE INDEX CONCURRENTLY <name>_partial
-- ON runs (<its columns>) WHERE <its predicate>; DROP INDEX CONCURRENTLY
-- <name>; ALTER INDEX <name>_partial RENAME TO <name>. This migration then
-- finds them partial on the right predicate and keeps them.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('runs_created')
            AND pg_get_expr(indpred, indrelid) = '(created_at IS NOT NULL)') THEN
        DROP INDEX IF EXISTS runs_created;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('runs_idempotency_expiry')
            AND pg_get_expr(indpred, indrelid) = '(idempotency_expires_at IS NOT NULL)') THEN
        DROP INDEX IF EXISTS runs_idempotency_expiry;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS runs_created ON runs (tenant, created_at, run_id) WHERE created_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_idempotency_expiry ON runs (idempotency_expires_at, tenant, operation, idempotency_key)
    WHERE idempotency_expires_at IS NOT NULL;

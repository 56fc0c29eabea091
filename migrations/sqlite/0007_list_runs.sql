-- ListRuns (SPEC.md, Optional capabilities): a tenant's runs newest first,
-- by (created_at, run_id) descending, read from this index backwards from
-- the page's bound (the cursor, or the creation range's end) and stopped
-- at the page's limit. Neither column changes after admission, so no claim
-- or completion ever writes this index; admission writes one entry more.
-- A filter on state or operation is applied to the rows read in order.
CREATE INDEX runs_created ON runs (tenant, created_at, run_id);

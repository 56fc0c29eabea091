-- Claim order by eligibility (SPEC.md, Claim): queued jobs by available_at,
-- expired leases by their expiry. jobs_claim served one order for both, so
-- every claim stepped over the leases in flight and read every expired
-- lease older than the queue's head. Now each branch reads its own index in
-- its own order and stops at the limit: queued jobs from jobs_due, expired
-- leases from jobs_reap, whose (tenant, lease_expires_at, run_id) order is
-- the expired branch's.
CREATE INDEX jobs_due ON jobs (tenant, available_at, run_id) WHERE state = 'queued';
DROP INDEX jobs_claim;

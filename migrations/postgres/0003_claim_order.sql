-- Claim order by eligibility (SPEC.md, Claim): expired leases are claimed in
-- (lease_expires_at, run_id) order, the order of this index, so the expired
-- branch of the claim is a range scan that stops at the limit. Before, it
-- took expired leases in (available_at, run_id) order, which no index of
-- leases by expiry serves: every claim read and sorted every expired lease
-- (the benchmark's mass expiry, 100,000 expired at a depth of 1M: 1,748
-- buffers and 53 ms per claim, 60 times the cost at a depth of 1k).
DROP INDEX jobs_expired;
CREATE INDEX jobs_expired ON jobs (tenant, lease_expires_at, run_id)
    WHERE state = 'leased' AND attempts < max_attempts;

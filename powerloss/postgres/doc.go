// Package postgres is the power-loss check of leasehold's PostgreSQL store
// (impl/postgres), in its tests: a private PostgreSQL cluster
// (pgtest.ClusterOptions.Durable: fsync and full_page_writes on) keeps its
// data directory on a fault filesystem (faultfs); the store admits, claims
// and completes runs (package ledger); the power goes at a known operation
// on the write-ahead log while one more admission is under way, sometimes
// tearing its last write; every server process is killed, the cluster
// recovers, and every acknowledged write must be there and every invariant
// hold. With synchronous_commit = off, which acknowledges a commit before
// its log is flushed, the check must catch acknowledged writes gone, or it
// proved nothing.
package postgres

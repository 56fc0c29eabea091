// Package sqlite is the power-loss check of leasehold's SQLite store
// (impl/sqlite), in its tests: the store runs in a child process (the test
// binary again) on a fault filesystem (faultfs), admitting, claiming and
// completing runs (package ledger) and reporting every write it
// acknowledged; the power goes at a known operation on the write-ahead log
// while one more admission is under way, sometimes tearing its last write;
// the next child reopens the database and reports what it holds. Every
// acknowledged write must be there and every invariant hold, after every
// power loss, with the store's default (SyncFull); with SyncNormal the
// check must catch acknowledged writes gone, or it proved nothing.
//
// The store runs in a child because SQLite maps its -shm file into memory,
// which the process serving the filesystem must not do (see faultfs), and
// because a power loss ends a process without a clean close.
package sqlite

// Package jetstream is the power-loss check of the outbox relay (package
// relay) and the NATS JetStream server it publishes to, in its tests: an
// embedded nats-server (2.10 or later: it has sync_interval) keeps its
// JetStream store on a fault filesystem (faultfs); runs are admitted with an
// outbox message each, the relay publishes them and marks each delivered
// once the stream acknowledged it; one more publish is under way when the
// power goes at a known write to the stream's message blocks, sometimes
// tearing it; the server starts again on what its disk holds. Every message
// the relay marked delivered must be in the stream. With the server's
// default lazy fsync (sync_interval 2 minutes) acknowledged messages are
// lost (Jepsen's finding on NATS 2.12.1, reproduced), and the check must
// catch it; with sync_interval: always none may be.
package jetstream

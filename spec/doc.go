// Package spec is the durable job contract as Go: the records (Run, Job,
// Event, Attempt, IdempotencyRecord, Effect), the Store interface every
// leasehold store implements, the request types and the operation table
// (Operations: one row per operation, with how to call it, its request and
// result types and its guard), the stable error codes (Code, Error), and the
// pure functions every store and the model share so that they apply one
// definition: validation (Config.Check*, NormalizeCreate), RFC 8785
// canonical JSON and the request fingerprint, event payloads, backoff and
// the lease rule (LeaseError).
//
// SPEC.md in this directory states the contract in prose; this package
// depends on nothing else of leasehold's, so a port can take it alone.
package spec

// Package history is what a run of the harness records and its file format:
// the entries (an operation, what its client saw, its call and return
// ticks), the notes, holds and blocks around them, the Recorder and Callers
// that stamp them on one logical clock, the simulated external Provider
// behind the effect ledger, and the JSON file (Encode, Decode) that
// `leasehold lincheck` checks again. It judges nothing and imports no test
// machinery: the validate package judges a History, the traffic package
// makes one.
package history

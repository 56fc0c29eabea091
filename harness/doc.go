// Package harness drives real stores and the model with the same operations
// and judges the stores against the model: rapid property tests (one random
// sequence at a time, compared step by step), porcupine linearizability checks
// of concurrent workloads, and the worker runtime under injected faults. It is
// the runners and the traffic they make; the parts below it, each importing
// only the ones before it, are
//
//   - history: what a run records and its file format;
//   - validate: judging a history (Judge, Verdict, the races);
//   - faults: the fault plan, the RecordingStore and the barriers;
//   - report: failed-history reports, kept failfiles, replay commands.
//
// leaseholdtest is the porter's one face over all of it.
package harness

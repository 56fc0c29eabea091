// Package harness drives real stores and the model with the same operations
// and judges the stores against the model: rapid property tests (one random
// sequence at a time, compared step by step), porcupine linearizability checks
// of concurrent histories, the race vocabulary and its detectors, barriers
// that stop a client at a named point, and the fault and clock machinery
// they share.
package harness

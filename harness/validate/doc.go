// Package validate judges a recorded history (package history) against the
// model: Judge runs porcupine's linearizability check with the model
// (PorcupineModel), then the accounting that needs no model (nothing lost,
// nothing duplicated, no stale write accepted, no row the history cannot
// explain), and counts the races the history contains (the one race
// vocabulary, each race with its one detector). Its Verdict explains itself:
// Explain finds the culprit of an illegal history, the shortest prefix that
// no order of operations explains. It records nothing and runs no store.
package validate

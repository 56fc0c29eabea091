// Package model is the executable statement of the leasehold contract
// (spec/SPEC.md): a pure, deterministic state machine of every writing
// operation of spec.Store, the invariants every reachable state satisfies,
// and a bounded exhaustive explorer that proves them on a small scope.
//
// The model is the oracle the harness judges stores against, so it shares no
// code with any store: it imports only spec (the contract's own validation,
// LeaseError, Backoff.Delay, fingerprint and event payloads) and the standard
// library. It was written from SPEC.md, not from impl/sqlite.
//
// Shape (in the style of etcd raft's pure state machine and porcupine's small
// API):
//
//   - Model.Step(State, Op) (State, Result) is the canonical sequential
//     outcome of one store call. A State is an immutable value: Step never
//     changes its input, and states share every row an operation did not touch.
//   - Model.Check(State) and Model.CheckStep(prev, Op, next) are the state and
//     transition invariants of SPEC.md.
//   - Model.Observe and Model.Unknown are the concurrent semantics a
//     linearizability checker needs: a claim may take any eligible subset in
//     any order (SKIP LOCKED), an empty claim is always allowed, and an
//     operation whose commit outcome is unknown may or may not have applied.
//   - Explore walks every state of a Scope breadth first, like TLC, and returns
//     the shortest trace to the first violated invariant.
//
// Time is not part of a State: every Op carries the clock reading the store
// used (Op.Now), exactly as SPEC.md says every writing operation reads the
// clock once. The explorer owns the clock and advances it as an action.
package model

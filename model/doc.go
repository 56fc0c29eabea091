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
//
// Every row of the operation table (spec.Operations) has a step here
// (Model.Step's table; TestStepsCoverTheTable), reads, BatchCompleter's
// CompleteBatch and BatchCreator's CreateRuns included; docs/MAPPING.md names, for each, the statements
// that carry it in each store.
//
// # What is not modeled
//
// The model judges what a store promises through spec.Store. Outside that,
// and so outside what a passing model check proves:
//
//   - The shared pure functions. The model calls spec's validation
//     (Config.Check*, NormalizeCreate), canonical JSON and fingerprint,
//     LeaseError, Backoff.Delay and the event payloads, as the stores do, so
//     a bug in one of them is the same in both and no comparison finds it.
//     spec's own tests hold them: the RFC 8785 vectors byte for byte, fuzzing,
//     table tests of every code.
//   - Time itself. An Op carries the one clock reading its store made; the
//     model takes it as given. That a store reads the clock once, after its
//     lock, and that the database clock is monotonic and no worker's decides
//     expiry, are checked by the harness (clock recorders) and the stores'
//     tests, not here.
//   - Notifications (spec.Notifier): hints that may be lost, late or never
//     sent; nothing may depend on them, so the model has none.
//   - The caller's own writes in an in-transaction completion
//     (postgres.Store.CompleteTx) or admission (create_run_tx, the stores'
//     CreateRunTx): the model sees a Complete, and a CreateRun kept or
//     dropped with its transaction; that the application's rows commit with
//     them or not at all is the harness's tests with an application's table
//     (completetx_test.go, admittx_test.go) and the stores' own.
//   - External systems. The model has the effect ledger; what a provider
//     does with a call (deduplicate, fence, neither) is the harness's
//     simulated provider and the worker's documentation.
//   - The broker. The model has the outbox (messages written with their
//     write, claimed, marked delivered); what NATS JetStream does with a
//     publish (deduplicates it within its window, keeps it through an
//     fsync) is the relay's fault tests' accounting, against a real server.
//   - Liveness and fairness. The model accepts an empty claim in any state
//     and any eligible subset (SKIP LOCKED, trap 1 and 2 of SPEC.md); that
//     every acknowledged run ends is the harness's drain accounting, and
//     fairness is measured, not assumed.
//   - Durability. A committed operation is assumed to stay committed; what
//     fsync, a power loss or a replica failover do to that is the database's
//     promise, tested only where a fault test restarts a server.
//   - Physical layout: schemas, migrations, indexes and plans (the stores'
//     migration and plan tests).
package model

// Package storeproto is the language-neutral store protocol (docs/PROTOCOL.md):
// a store written in any language runs as a child process that reads
// requests as newline-delimited JSON on stdin, answers on stdout and logs on
// stderr, and the harness checks it exactly as it checks leasehold's own
// stores.
//
// The harness side is a spec.Store client over one child process (Dial,
// Store) and a storetest.Factory that starts a process per session on a fresh
// database (Command.Factory): the first for the Handle, one more for every
// Reopen and OpenWith, each on the same database. The child calls back for
// everything the harness owns: the clock reading of every write ("now"), the
// random draws of retry jitter ("random") and the hook points of every write
// ("hook"; the harness's answer may wait, which is a barrier, or carry a
// fault). So the clock recorders, scripted random sources and barriers of
// the checks work on a port exactly as on a Go store.
//
// Everything a child says is checked: a line that is not a message, a reply
// to a request that was never sent, a result that does not have the wire
// form of the operation's result type (spec.DecodeWire: a missing field, a
// null, an unknown state or field; published in docs/protocol), an error
// code the contract does not have, a reply that contradicts a hook's fault, silence past the timeout, or a
// crash is a Finding, returned as an error that is not a *spec.Error (so every
// check counts it as a violation) and reported, with the tail of the child's
// stderr, when the test ends. Nothing a child sends can panic or hang the
// harness.
//
// Serve is the other side, in Go: it runs a spec.Store as such a child (the
// package's own tests serve the SQLite store through it, so that the
// protocol is proven to carry every check on a store known to pass them).
package storeproto

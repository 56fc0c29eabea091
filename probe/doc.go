// Package probe checks the promises job queues make — an acknowledged job
// is not lost, a stale worker cannot finish a newer attempt, the retry
// budget is exact, cancel against complete has one winner, a key admits one
// job, a transaction that rolls back leaves nothing — on any queue, through
// an adapter process that speaks the queue-adapter protocol (package
// queueproto, docs/ADAPTERS.md), and writes the matrix probe × system
// (reports/peers.{md,json,html}).
//
// Each probe (Probes) is a fixed script of runner actions at the adapter's
// boundary: enqueues, held handlers, SIGKILL and SIGSTOP of worker
// processes, lease expiry by the queue's own timestamps, a crash of a
// private database server. Each run starts on a fresh namespace; each cell
// runs several times, and a violation is reported only when every run (at
// least MinRuns) shows it. Every run also checks that each handler start
// is explained by a retry, a kill or an expiry of the attempt before it.
// A probe whose race did not happen is not exercised, never holds; an
// adapter that crashes, hangs or breaks the protocol is an adapter error,
// never a pass.
//
// Package probe/control is the control row: leasehold's own stores as an
// adapter, and their deliberately broken variants, on which each probe is
// shown to fail.
package probe

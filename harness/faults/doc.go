// Package faults is what the harness does to a store besides calling it:
// the faults a run injects at the store's hook points (At, an abort before
// the commit, a lost reply after it), the RecordingStore that runs a
// program's calls through a pool of recorded callers with a Faults plan
// (rolled-back transactions, lost replies, paused programs), and the
// Barriers that hold a client at a named point until a scenario releases
// it. It records into package history and judges nothing.
package faults

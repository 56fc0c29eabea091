package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// Entry is one operation of a recorded history.
type Entry struct {
	Client int    // porcupine client id (a client that saw an unknown outcome continues under a new one)
	Actor  string // the client's name
	Op     model.Op
	Out    Observed
	Call   int64
	Return int64 // math.MaxInt64 for an unknown outcome
}

// Note is a history annotation: a clock move or a fault, for the report.
type Note struct {
	Client int
	At     int64
	Text   string
}

// Hold is an operation a barrier held at a hook point, from the tick it was
// seen there to the tick it was released.
type Hold struct {
	Actor    string
	Op       spec.Op
	Point    spec.HookPoint
	From, To int64
}

// Block is an operation seen blocked on a lock: at tick At, Actor's store
// reported one of its calls (Actor's one call in flight, an Op) waiting for
// a lock another transaction held (spec.LockWaitReporter).
type Block struct {
	Actor string
	Op    spec.Op
	At    int64
}

// Observed is what a client saw of one operation.
type Observed struct {
	Result model.Result
	// Unknown: the connection failed after COMMIT was sent. The operation has
	// no return in the history, and the model accepts it applied or not.
	Unknown bool
}

// String is one line: the client, the call and return times, the operation
// with its clock reading, and what the client saw.
func (e Entry) String() string {
	res, ret := e.Out.Result.String(), fmt.Sprint(e.Return)
	if e.Out.Unknown {
		res = "unknown outcome"
	}
	if e.Return == math.MaxInt64 {
		ret = "never"
	}
	return fmt.Sprintf("[%s #%d, %d..%s] @%d %s -> %s", e.Actor, e.Client, e.Call, ret, e.Op.Now, e.Op, res)
}

// Code is the error code the entry's client saw: none for a success or
// for an unknown outcome.
func (e Entry) Code() spec.Code {
	if e.Out.Unknown || e.Out.Result.Err == nil {
		return ""
	}
	return e.Out.Result.Err.Code
}

// Committed is the request an entry's request stands for in the accounting:
// the admission of a create_run_tx whose transaction committed (a
// CreateRun's), the request itself otherwise; one whose transaction rolled
// back stands for nothing the store keeps, and no case of the accounting's
// matches it.
func Committed(req spec.Request) spec.Request {
	if tx, inTx := req.(spec.CreateRunTxRequest); inTx && !tx.Rollback {
		return tx.Request
	}
	return req
}

// History is what a run recorded.
type History struct {
	Entries []Entry
	Notes   []Note
	Holds   []Hold
	Blocks  []Block
	// Provider is the simulated external system behind the effect ledger.
	Provider *Provider
}

// Operations converts the history for porcupine.
func (h *History) Operations() []porcupine.Operation {
	ops := make([]porcupine.Operation, len(h.Entries))
	for i, e := range h.Entries {
		ops[i] = porcupine.Operation{ClientId: e.Client, Input: e.Op, Output: e.Out, Call: e.Call, Return: e.Return}
	}
	return ops
}

// Count returns how many entries f holds for.
func (h *History) Count(f func(Entry) bool) int {
	n := 0
	for _, e := range h.Entries {
		if f(e) {
			n++
		}
	}
	return n
}

// FinalScans returns the snapshots of the history's final scan: the
// snapshot operations after the last other operation returned.
func (h *History) FinalScans() []spec.Snapshot {
	var last int64
	for _, e := range h.Entries {
		if _, isSnap := e.Op.Req.(spec.SnapshotRequest); !isSnap && e.Return != math.MaxInt64 && e.Return > last {
			last = e.Return
		}
	}
	var out []spec.Snapshot
	for _, e := range h.Entries {
		if s, isSnap := e.Out.Result.Value.(spec.Snapshot); isSnap && e.Call > last && !e.Out.Unknown {
			out = append(out, s)
		}
	}
	return out
}

// Recorder collects the entries of every client of one run, stamped by one
// logical clock so that real-time order is preserved. It is safe for
// concurrent use.
type Recorder struct {
	mu     sync.Mutex
	tick   atomic.Int64
	nextID atomic.Int64
	h      History
}

// NewRecorder returns an empty recorder whose history's provider is p.
func NewRecorder(p *Provider) *Recorder { return &Recorder{h: History{Provider: p}} }

// Tick advances the logical clock and returns its new reading.
func (r *Recorder) Tick() int64 { return r.tick.Add(1) }

// NewClient returns a fresh porcupine client id.
func (r *Recorder) NewClient() int { return int(r.nextID.Add(1)) - 1 }

// Note records an annotation at the next tick.
func (r *Recorder) Note(client int, text string) {
	r.mu.Lock()
	r.h.Notes = append(r.h.Notes, Note{Client: client, At: r.Tick(), Text: text})
	r.mu.Unlock()
}

// Hold records an operation held by a barrier.
func (r *Recorder) Hold(h Hold) {
	r.mu.Lock()
	r.h.Holds = append(r.h.Holds, h)
	r.mu.Unlock()
}

// Block records an operation seen blocked on a lock.
func (r *Recorder) Block(b Block) {
	r.mu.Lock()
	r.h.Blocks = append(r.h.Blocks, b)
	r.mu.Unlock()
}

// Add appends an entry.
func (r *Recorder) Add(e Entry) {
	r.mu.Lock()
	r.h.Entries = append(r.h.Entries, e)
	r.mu.Unlock()
}

// History returns what was recorded so far. The caller must not record more.
func (r *Recorder) History() *History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	return &h
}

// Caller runs operations on one client's store and records each in its
// Recorder: the operation's time is the one reading the store made of the
// client's clock recorder, a retry's jitter is handed to the client's
// scripted random source, and an operation whose outcome is unknown is
// recorded as pending forever, the client going on under a new client id.
type Caller struct {
	Rec    *Recorder
	ID     int // the current porcupine client id
	Name   string
	Store  spec.Store
	Clock  *clock.Recorder
	Random *ScriptedRandom
}

// NewCaller returns a caller for store, with a fresh client id.
func NewCaller(rec *Recorder, name string, store spec.Store, clk *clock.Recorder, rnd *ScriptedRandom) *Caller {
	return &Caller{Rec: rec, ID: rec.NewClient(), Name: name, Store: store, Clock: clk, Random: rnd}
}

// Do runs op (whose Now it sets from the store's clock reading) and records
// it. The error is not the operation's outcome (that is the Result) but a
// breach of the harness's expectations that no model can judge: an untyped
// error, a write that read no clock or a read that did.
func (c *Caller) Do(ctx context.Context, op model.Op) (model.Result, error) {
	return c.Begin(op).Run(ctx)
}

// Begin stamps op's call time and returns it ready to run. A runner that
// starts an operation on another goroutine begins it first, so that the
// history's real-time order is the order the runner started operations in.
// The caller runs one operation at a time.
func (c *Caller) Begin(op model.Op) *Call {
	c.Random.Set(op.Jitter)
	_, reads := c.Clock.Last()
	return &Call{c: c, op: op, reads: reads, call: c.Rec.Tick()}
}

// Call is one begun operation of a Caller.
type Call struct {
	c     *Caller
	op    model.Op
	reads int64
	call  int64
}

// Run runs the operation and records it (see Do).
func (p *Call) Run(ctx context.Context) (model.Result, error) {
	c, op := p.c, p.op
	res, unexpected := Execute(ctx, c.Store, op)
	ret := c.Rec.Tick()
	if unexpected != nil {
		return res, unexpected
	}
	now, reads := c.Clock.Last()
	writes := spec.OperationOf(op.Req).Writes
	switch {
	case writes && reads == p.reads && !readsNoClock(op, res, ctx.Err()):
		return res, fmt.Errorf("%s: %s returned %s without reading the clock", c.Name, op.Kind(), res)
	case !writes && reads != p.reads:
		return res, fmt.Errorf("%s: the read %s read the clock (reads never do)", c.Name, op.Kind())
	case reads == p.reads:
		now = c.Clock.Source.Now() // it read no clock: its time does not matter
	}
	op.Now = now
	e := Entry{Client: c.ID, Actor: c.Name, Op: op, Out: Observed{Result: res}, Call: p.call, Return: ret}
	if res.Err != nil && res.Err.Code == spec.CodeUnknownOutcome {
		e.Out = Observed{Unknown: true}
		e.Return = math.MaxInt64
		c.Rec.Note(c.ID, fmt.Sprintf("%s: unknown outcome for %s; continues as a new client", c.Name, op.Kind()))
		c.ID = c.Rec.NewClient()
	}
	if res.Err != nil && res.Err.Code == spec.CodeUnavailable {
		c.Rec.Note(e.Client, fmt.Sprintf("%s: %s rolled back (%s)", c.Name, op.Kind(), res.Err.Message))
	}
	c.Rec.Add(e)
	return res, nil
}

// readsNoClock reports a write that may return without reading the clock:
// one that wrote nothing because the store could not run it, one whose
// outcome is unknown because its caller's context ended (ctxErr) while it
// ran (a store behind the store protocol is stopped wherever it was, maybe
// before its clock reading), an empty batch (of completions or of
// admissions), and a batch of more than spec.MaxBatch members, refused
// whole before its transaction. SPEC.md ("For porters") states this list;
// TestReadsNoClockIsWhatSpecSays holds it there.
func readsNoClock(op model.Op, res model.Result, ctxErr error) bool {
	if res.Err != nil && res.Err.Code == spec.CodeUnavailable {
		return true
	}
	if res.Err != nil && res.Err.Code == spec.CodeUnknownOutcome && ctxErr != nil {
		return true
	}
	members := -1
	switch b := op.Req.(type) {
	case spec.CompleteBatchRequest:
		members = len(b.Requests)
	case spec.CreateRunsRequest:
		members = len(b.Requests)
	}
	return members == 0 || members > spec.MaxBatch && res.Err != nil && res.Err.Code == spec.CodeInvalidArgument
}

// Execute runs one operation against a real store and returns its outcome
// in the model's terms. An error that is not a *spec.Error is returned as
// unexpected: the contract forbids untyped errors, so callers treat it as a
// violation.
func Execute(ctx context.Context, s spec.Store, op model.Op) (res model.Result, unexpected error) {
	v, err := spec.OperationOf(op.Req).Call(ctx, s, op.Req)
	if err == nil {
		return model.Result{Value: v}, nil
	}
	var e *spec.Error
	if !errors.As(err, &e) {
		return model.Result{}, fmt.Errorf("harness: %s returned an untyped error: %w", op.Kind(), err)
	}
	return model.Result{Err: e}, nil
}

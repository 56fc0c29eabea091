package model

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Report is what an exploration found.
type Report struct {
	Scope string
	// States is the number of distinct (clock, state) pairs reached, each
	// checked with Check.
	States int
	// Transitions is the number of state-changing steps taken, each checked
	// with CheckStep, including those that lead to an already-visited state.
	Transitions int
	// Unchanged is the number of operations that left the state as it was
	// (refused with an error, or a claim or reap with nothing to take).
	Unchanged int
	// MaxDepth is the length of the longest shortest path from the empty store.
	MaxDepth int
	// Complete is false when Scope.MaxStates stopped the search early.
	Complete bool
	Elapsed  time.Duration
	// Violation is the first invariant violation found, nil if none.
	Violation *Violation
}

// String is the one-line summary (states, transitions, depth, time), then
// the counterexample if there is one.
func (r Report) String() string {
	status := "complete"
	if !r.Complete {
		status = "INCOMPLETE (MaxStates reached)"
	}
	s := fmt.Sprintf("scope %s: %d distinct states, %d transitions, %d unchanged, max depth %d, %s, %s",
		r.Scope, r.States, r.Transitions, r.Unchanged, r.MaxDepth, status, r.Elapsed.Round(time.Millisecond))
	if r.Violation != nil {
		s += "\n" + r.Violation.String()
	}
	return s
}

// Violation is a shortest path from the empty store to a broken invariant.
type Violation struct {
	Err   error
	Trace []TraceStep
}

// String prints the trace one numbered step per line, with the clock, then
// the violated invariants.
func (v *Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "counterexample (%d steps):\n", len(v.Trace))
	for i, st := range v.Trace {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, st)
	}
	fmt.Fprintf(&b, "violates: %v", v.Err)
	return b.String()
}

// TraceStep is one step of a counterexample: a clock move, or an operation
// (at the explorer's clock) with the result the model gave.
type TraceStep struct {
	Advance int64 // > 0: the clock moved by this much, and Op is zero
	Now     int64 // the clock after the step
	Op      Op
	Result  Result
}

// String renders the step as "t=<clock>  <op> -> <result>".
func (t TraceStep) String() string {
	if t.Advance > 0 {
		return fmt.Sprintf("t=%d  clock advances by %d", t.Now, t.Advance)
	}
	return fmt.Sprintf("t=%d  %s -> %s", t.Now, t.Op, t.Result)
}

// Explore walks, breadth first, every state reachable from the empty store
// within sc, checking Check at every state and CheckStep at every transition
// (including Outcomes' non-FIFO claims and reaps), and stops at the first
// violation with a shortest trace to it. It also fails a state whose Step
// changed its input. States are deduplicated by a 128-bit digest of
// (clock, State.Key()), as TLC deduplicates by fingerprint: a collision could
// only hide a state, never invent a violation. The result does not depend on
// the number of CPUs: levels are expanded in parallel and merged in order.
func Explore(m Model, sc Scope) Report {
	start := time.Now()
	m.memo = &memo{}
	x := &explorer{m: m, sc: sc, visited: map[digest]int32{}}
	root := xstate{now: 0, s: m.Init()}
	root.d = digestOf(root.now, root.s)
	x.visited[root.d] = 0
	x.nodes = append(x.nodes, node{parent: -1})
	rep := Report{Scope: sc.Name, Complete: true}
	if err := m.Check(root.s); err != nil {
		rep.Violation = &Violation{Err: err}
	}
	frontier := []xstate{root}
	for depth := 0; len(frontier) > 0 && rep.Violation == nil; depth++ {
		rep.MaxDepth = depth
		var next []xstate
		const chunk = 512
		for lo := 0; lo < len(frontier) && rep.Violation == nil; lo += chunk {
			batch := frontier[lo:min(lo+chunk, len(frontier))]
			for i, exp := range x.expandAll(batch) {
				rep.Transitions += exp.transitions
				rep.Unchanged += exp.unchanged
				if exp.violation != nil {
					rep.Violation = x.violation(batch[i].id, exp.violation)
					break
				}
				for _, c := range exp.children {
					if _, seen := x.visited[c.d]; seen {
						continue
					}
					c.id = int32(len(x.nodes))
					x.visited[c.d] = c.id
					x.nodes = append(x.nodes, node{parent: batch[i].id, action: c.action, choice: c.choice})
					next = append(next, c)
				}
				batch[i].s = State{} // expanded: let its rows go
			}
			if sc.MaxStates > 0 && len(x.nodes) >= sc.MaxStates {
				rep.Complete = false
				next = nil
				break
			}
		}
		if sc.MaxDepth > 0 && depth+1 >= sc.MaxDepth && len(next) > 0 {
			rep.MaxDepth = depth + 1 // the last level is checked, not expanded
			break
		}
		frontier = next
	}
	rep.States = len(x.nodes)
	rep.Elapsed = time.Since(start)
	return rep
}

type digest [16]byte

func digestOf(now int64, s State) digest {
	h := sha256.New()
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], uint64(now))
	h.Write(t[:])
	h.Write([]byte(s.Key()))
	var d digest
	copy(d[:], h.Sum(nil))
	return d
}

// node is one visited state: how it was first reached. The explorer keeps no
// states beyond the frontier; a trace is rebuilt by replaying the indices.
type node struct {
	parent int32
	action uint16 // index into Scope.actions at the parent
	choice uint16 // index into Model.Outcomes of that action
}

type xstate struct {
	now    int64
	s      State
	d      digest
	id     int32
	action uint16
	choice uint16
}

type explorer struct {
	m       Model
	sc      Scope
	visited map[digest]int32 // read-only while a batch expands
	nodes   []node
}

// expansion is everything one state leads to.
type expansion struct {
	children               []xstate // not yet visited when the batch began
	transitions, unchanged int
	violation              *pendingViolation
}

// pendingViolation is a violation found at a transition out of a state.
type pendingViolation struct {
	err            error
	action, choice int // -1: the state itself (Step mutated it)
}

// expandAll expands the batch on every CPU; results are in batch order.
func (x *explorer) expandAll(batch []xstate) []expansion {
	out := make([]expansion, len(batch))
	workers := min(runtime.GOMAXPROCS(0), len(batch))
	var wg sync.WaitGroup
	var next int
	var mu sync.Mutex
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(batch) {
					return
				}
				out[i] = x.expand(batch[i])
			}
		})
	}
	wg.Wait()
	return out
}

// expand takes every action of the scope at one state.
func (x *explorer) expand(st xstate) expansion {
	var e expansion
	for ai, act := range x.sc.actions(st.now, st.s) {
		if act.advance > 0 {
			c := xstate{now: st.now + act.advance, s: st.s, action: uint16(ai)}
			c.d = digestOf(c.now, c.s)
			e.transitions++
			if _, seen := x.visited[c.d]; !seen {
				e.children = append(e.children, c)
			}
			continue
		}
		outs := x.outcomes(st.s, act.op)
		if len(outs) == 0 {
			e.unchanged++
		}
		for ci, o := range outs {
			if sameState(st.s, o.State) {
				e.unchanged++
				continue
			}
			e.transitions++
			if err := x.m.CheckStep(st.s, act.op, o.State); err != nil {
				e.violation = &pendingViolation{err: err, action: ai, choice: ci}
				return e
			}
			c := xstate{now: st.now, s: o.State, action: uint16(ai), choice: uint16(ci)}
			c.d = digestOf(c.now, c.s)
			if _, seen := x.visited[c.d]; seen {
				continue
			}
			if err := x.m.Check(c.s); err != nil {
				e.violation = &pendingViolation{err: err, action: ai, choice: ci}
				return e
			}
			e.children = append(e.children, c)
		}
	}
	if digestOf(st.now, st.s) != st.d {
		e.violation = &pendingViolation{err: fmt.Errorf("Step changed its input state"), action: -1}
	}
	return e
}

// violation rebuilds the trace to node id, plus the violating step.
func (x *explorer) violation(id int32, p *pendingViolation) *Violation {
	var path []node
	for n := id; n > 0; n = x.nodes[n].parent {
		path = append(path, x.nodes[n])
	}
	var steps []node
	for i := len(path) - 1; i >= 0; i-- {
		steps = append(steps, path[i])
	}
	if p.action >= 0 {
		steps = append(steps, node{action: uint16(p.action), choice: uint16(p.choice)})
	}
	v := &Violation{Err: p.err}
	now, s := int64(0), x.m.Init()
	for _, n := range steps {
		act := x.sc.actions(now, s)[n.action]
		if act.advance > 0 {
			now += act.advance
			v.Trace = append(v.Trace, TraceStep{Advance: act.advance, Now: now})
			continue
		}
		o := x.outcomes(s, act.op)[n.choice]
		s = o.State
		v.Trace = append(v.Trace, TraceStep{Now: now, Op: act.op, Result: o.Result})
	}
	return v
}

// outcomes is Model.Outcomes within the scope: an admission past
// Scope.MaxRuns and a claim past Scope.MaxGeneration are dropped. A dropped
// outcome is replaced by the unchanged state, so that choice indices (which
// traces are rebuilt from) stay stable.
func (x *explorer) outcomes(s State, op Op) []Outcome {
	outs := x.m.Outcomes(s, op)
	for i, o := range outs {
		if !x.sc.allows(o.State) {
			outs[i] = Outcome{State: s}
		}
	}
	return outs
}

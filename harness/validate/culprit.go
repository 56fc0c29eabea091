package validate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/model"
)

// Culprit is where an illegal history first goes wrong. Cut the history
// after the n-th call (keeping the operations called so far, returned or
// not): the shortest cut that is still illegal ends with Last, and the same
// cut without Last is linearizable. Overlapping are the operations whose
// interval overlaps Last's, the ones it may have raced.
type Culprit struct {
	Prefix      int // operations in the shortest illegal cut
	Last        history.Entry
	Overlapping []history.Entry
}

// FindCulprit binary-searches the cuts of h, which must be illegal as a whole.
// Adding an operation that starts later never makes an illegal history
// legal, so the search is sound. It returns false when h is not illegal or
// when a check of a cut does not finish within timeout.
func FindCulprit(m model.Model, h *history.History, partition bool, timeout time.Duration) (Culprit, bool) {
	order := make([]int, len(h.Entries))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(h.Entries[a].Call, h.Entries[b].Call) })
	cut := func(n int) *history.History { // the first n calls
		p := &history.History{Provider: h.Provider}
		for _, i := range order[:n] {
			p.Entries = append(p.Entries, h.Entries[i])
		}
		return p
	}
	pm := PorcupineModel(m, partition)
	illegal := func(n int) (bool, bool) {
		r := porcupine.CheckOperationsTimeout(pm, cut(n).Operations(), timeout)
		return r == porcupine.Illegal, r != porcupine.Unknown
	}
	lo, hi := 1, len(order)
	if bad, decided := illegal(hi); !bad || !decided {
		return Culprit{}, false
	}
	for lo < hi {
		mid := (lo + hi) / 2
		bad, decided := illegal(mid)
		if !decided {
			return Culprit{}, false
		}
		if bad {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	c := Culprit{Prefix: hi, Last: h.Entries[order[hi-1]]}
	for _, i := range order[:hi-1] {
		if e := h.Entries[i]; e.Return >= c.Last.Call {
			c.Overlapping = append(c.Overlapping, e)
		}
	}
	return c, true
}

// String prints the culprit for a log or a report, one operation a line.
func (c Culprit) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the shortest illegal cut has %d operations; without its last call it is linearizable:\n  %s\n", c.Prefix, c.Last)
	if len(c.Overlapping) > 0 {
		fmt.Fprintf(&b, "operations overlapping it (%d):\n", len(c.Overlapping))
		for _, e := range c.Overlapping {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	return b.String()
}

// Explain fills v.Culprit when v found h illegal (see FindCulprit); it
// leaves v alone otherwise.
func (v *Verdict) Explain(m model.Model, h *history.History, timeout time.Duration) {
	if v.Linearizable != porcupine.Illegal {
		return
	}
	if c, ok := FindCulprit(m, h, v.Partitioned, timeout); ok {
		v.Culprit = &c
	}
}

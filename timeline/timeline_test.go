package timeline

import (
	"strings"
	"testing"
)

// reclaimed: w1 held generation 1 until it expired at 100, w2 claimed
// generation 2 at 150; w1's completion at 160 came after generation 2 was
// granted.
func reclaimed(staleAccepted bool) Timeline {
	return Timeline{Unit: "ms",
		Generations: []Generation{
			{Generation: 2, Owner: "w2", From: 150, To: 250, Open: true},
			{Generation: 1, Owner: "w1", From: 0, To: 150, Outcome: "expired"},
		},
		Writes: []Write{
			{At: 50, Generation: 1, Owner: "w1", Op: "renew", Accepted: true},
			{At: 160, Generation: 1, Owner: "w1", Op: "complete", Accepted: staleAccepted, Detail: "lost_lease"},
			{At: 170, Generation: 2, Owner: "w2", Op: "complete", Accepted: false, Detail: "cancelled"},
		},
		Marks: []Mark{{At: 100, Label: "clock +100"}},
	}
}

func TestVerdicts(t *testing.T) {
	for _, c := range []struct {
		staleAccepted bool
		want          []string
	}{
		{false, []string{"accepted", "stale, refused", "refused"}},
		{true, []string{"accepted", "STALE, ACCEPTED", "refused"}},
	} {
		tl := reclaimed(c.staleAccepted)
		var got []string
		for _, w := range tl.Writes {
			got = append(got, tl.Verdict(w))
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("stale write accepted=%v: verdicts %q, want %q", c.staleAccepted, got, c.want)
		}
	}
}

// TestStaleAtOneTime: a release and the re-claim of the same millisecond
// are not called stale without an order; with one, the order decides.
func TestStaleAtOneTime(t *testing.T) {
	tl := Timeline{Generations: []Generation{{Generation: 1, Owner: "w1", From: 0, To: 100}, {Generation: 2, Owner: "w2", From: 100, To: 200, Seq: 5}}}
	for _, c := range []struct {
		seq   int64
		stale bool
	}{{0, false}, {4, false}, {6, true}} {
		w := Write{At: 100, Generation: 1, Owner: "w1", Op: "release", Accepted: true, Seq: c.seq}
		if got := tl.Stale(w); got != c.stale {
			t.Errorf("a write at the re-claim's time with seq %d: stale %v, want %v", c.seq, got, c.stale)
		}
	}
}

func TestHTML(t *testing.T) {
	h, err := reclaimed(true).HTML()
	if err != nil {
		t.Fatal(err)
	}
	s := string(h)
	// Generations in order, each with its owner; the stale accepted write
	// flagged in its row; the open lease marked as an expiry.
	for _, want := range []string{
		`<tr data-generation="1"><td>1</td><td>w1</td><td>0</td><td>150</td><td>expired</td></tr>`,
		`<tr data-generation="2"><td>2</td><td>w2</td><td>150</td><td>250 (expiry)</td><td></td></tr>`,
		`<tr class="bad"><td>160</td><td>complete</td><td>w1</td><td>1</td><td>STALE, ACCEPTED</td><td>lost_lease</td></tr>`,
		`<line class="mark"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("HTML lacks %s:\n%s", want, s)
		}
	}
	if strings.Index(s, `data-generation="1"`) > strings.Index(s, `data-generation="2"`) {
		t.Errorf("generations not in order")
	}
	if e, _ := (Timeline{}).HTML(); !strings.Contains(string(e), "No lease was ever granted") {
		t.Errorf("empty timeline: %s", e)
	}
	var b strings.Builder
	if err := WritePage(&b, "T <x>", "intro", []Section{{"run r1", reclaimed(false)}}); err != nil {
		t.Fatal(err)
	}
	if p := b.String(); !strings.Contains(p, "<title>T &lt;x&gt;</title>") || !strings.Contains(p, "stale, refused") || !strings.Contains(p, ".timeline svg") {
		t.Errorf("page:\n%s", p)
	}
}

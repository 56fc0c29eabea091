package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// synthetic describes a soak's shape for synthSoak: 240 s sampled every 5 s
// at 400 jobs/s, the horizon pinned from 90 to 150 s.
type synthetic struct {
	recover  float64 // seconds after the pin's end the backlog is back at 8 (pre-pin samples: 8 and 2, the last 2); <0: never
	growth   float64 // bytes per job after the pin's end + 60 s, as a multiple of the pre-pin 1000
	vacuum   float64 // seconds after the pin's end the dead tuples fall to vacuumTo; <0: never
	vacuumTo int64   // default 1000, the pre-pin most (samples 200 and 1000 by turns)
	arrivals float64 // admissions end at this time, the tail's completions writing 3000 B per job of the rate (default: none)
	load     float64 // host load of every sample
	end      float64 // the last sample's time (default 240)
	notHeld  string
	noPin    bool
	lastSamp float64 // no samples after this time (default: none missing)
	from     float64 // no samples before this time
	cold     bool    // a backlog of 5000 in the first 30 s (the warm-up, not the level)
	behind   int     // the backlog grows by this many jobs per second before the pin
	vacuumOf string  // the server's autovacuum setting ("": not recorded)
}

func synthSoak(s synthetic) SoakRun {
	const pinStart, pinEnd, rate = 90.0, 150.0, 400.0
	end := s.end
	if end == 0 {
		end = 240
	}
	r := SoakRun{System: "leasehold", RatePerSec: rate, PinStartSec: pinStart, PinEndSec: pinEnd, PinNotHeld: s.notHeld, CPUs: 2, Autovacuum: s.vacuumOf}
	if s.noPin {
		r.PinStartSec, r.PinEndSec = 0, 0
	}
	vacuumTo := s.vacuumTo
	if vacuumTo == 0 {
		vacuumTo = 1000
	}
	var bytes float64
	for t := 0.0; t <= end; t += 5 {
		if s.lastSamp > 0 && t > s.lastSamp {
			break
		}
		if t < s.from {
			continue
		}
		x := SoakSample{T: t, Admitted: int(rate * t), Load: s.load, Pinned: t >= pinStart && t < pinEnd}
		ended := s.arrivals > 0 && t > s.arrivals
		if ended {
			x.Admitted = int(rate * s.arrivals)
		}
		// Backlog: 8 and 2 by turns before the pin (its last sample 2),
		// rising while pinned, back to 8 at recover after the pin's end.
		switch {
		case t < pinStart:
			x.Backlog = 2 + 6*((int(t/5)+1)%2)
		case t < pinEnd:
			x.Backlog = int(30 * (t - pinStart))
		case s.recover >= 0 && t >= pinEnd+s.recover:
			x.Backlog = 8
		default:
			x.Backlog = 1800
		}
		// Bytes: 1000 per job before the pin, 3000 while pinned and in the
		// minute after, then growth × 1000.
		if t > 0 {
			per := 1000.0
			switch {
			case t > pinStart && t <= pinEnd+60:
				per = 3000
			case t > pinEnd+60:
				per = 1000 * s.growth
			}
			if ended {
				per = 3000
			}
			bytes += per * rate * 5
		}
		x.TableBytes = int64(bytes * 0.75)
		x.IndexBytes = int64(bytes) - x.TableBytes
		switch {
		case t < pinStart:
			x.DeadTuples = int64(200 + 800*(int(t/5)%2))
		case t < pinEnd || s.vacuum < 0 || t < pinEnd+s.vacuum:
			x.DeadTuples = 50_000
		default:
			x.DeadTuples = vacuumTo
		}
		if t < pinStart {
			x.Backlog += int(float64(s.behind) * t)
		}
		if s.cold && t < 30 {
			x.Backlog = 5000
		}
		x.Completed = x.Admitted - x.Backlog
		r.Samples = append(r.Samples, x)
	}
	return r
}

// TestSoakEvaluation holds the soak's goals to synthetic samples: each
// shape's verdicts, met, not met and not readable, exactly.
func TestSoakEvaluation(t *testing.T) {
	for _, tc := range []struct {
		name             string
		s                synthetic
		drain, bounded   string
		drainHas, bndHas string
	}{
		{"healthy", synthetic{recover: 20, growth: 0.5, vacuum: 30, load: 1}, "met", "met", "back to it 20 s after", "back to the pre-pin level 30 s after"},
		{"drained at the minute", synthetic{recover: 60, growth: 1, vacuum: 30, load: 1}, "met", "met", "back to it 60 s after", ""},
		{"drained after the minute", synthetic{recover: 65, growth: 1, vacuum: 30, load: 1}, "not met", "met", "back to it 65 s after", ""},
		{"never drained", synthetic{recover: -1, growth: 1, vacuum: 30, load: 1}, "not met", "met", "never back to it", ""},
		{"not keeping up before the pin", synthetic{recover: 10, growth: 1, vacuum: 30, load: 1, behind: 21}, "not readable", "met", "did not keep up with the arrivals before the pin (its backlog grew by", ""},
		{"keeping up before the pin", synthetic{recover: 10, growth: 1, vacuum: 30, load: 1, behind: 19}, "met", "met", "", ""},
		{"the warm-up is not the level", synthetic{recover: -1, growth: 1, vacuum: 30, load: 1, cold: true}, "not met", "met", "pre-pin level 8 jobs", ""},
		{"too little before the pin", synthetic{recover: 10, growth: 1, vacuum: 30, load: 1, from: 80}, "not readable", "not readable", "the pre-pin window has 5 s", "the pre-pin window has 5 s"},
		{"growth within tolerance", synthetic{recover: 10, growth: 1.2, vacuum: 30, load: 1}, "met", "met", "", "(1.20×"},
		{"growth past tolerance", synthetic{recover: 10, growth: 1.3, vacuum: 30, load: 1}, "met", "not met", "", "(1.30×"},
		{"never vacuumed", synthetic{recover: 10, growth: 1, vacuum: -1, load: 1}, "met", "not met", "", "never back to the pre-pin level"},
		{"autovacuum off", synthetic{recover: 10, growth: 1, vacuum: -1, load: 1, vacuumOf: "off"}, "met", "not readable", "", "the server runs with autovacuum off"},
		{"autovacuum on", synthetic{recover: 10, growth: 1, vacuum: 30, load: 1, vacuumOf: "on"}, "met", "met", "", ""},
		{"vacuumed in part", synthetic{recover: 10, growth: 1, vacuum: 30, vacuumTo: 1001, load: 1}, "met", "not met", "", "never back to the pre-pin level"},
		{"arrivals end before the samples", synthetic{recover: 10, growth: 1, vacuum: 30, load: 1, arrivals: 235}, "met", "met", "", "(1.00×"},
		{"noisy host", synthetic{recover: 10, growth: 1, vacuum: 30, load: 5.5}, "not readable", "met", "host too noisy: mean 1-minute load 5.5", ""},
		{"noisy host, not drained", synthetic{recover: -1, growth: 1, vacuum: 30, load: 6}, "not readable", "met", "never back to it", ""},
		{"load at the limit", synthetic{recover: 10, growth: 1, vacuum: 30, load: 5}, "met", "met", "mean host load 5.0", ""},
		{"pin not held", synthetic{recover: 10, growth: 1, vacuum: 30, load: 1, notHeld: "backend 7 gone"}, "not readable", "not readable", "the pin did not hold: backend 7 gone", "the pin did not hold"},
		{"never pinned", synthetic{recover: 10, growth: 1, vacuum: 30, load: 1, noPin: true}, "not readable", "not readable", "never pinned", "never pinned"},
		{"soak too short after the pin", synthetic{recover: 10, growth: 1, vacuum: 5, load: 1, end: 225}, "met", "not readable", "", "fewer than 20"},
		{"samples stop at the pin's end", synthetic{recover: 10, growth: 1, vacuum: 5, load: 1, lastSamp: 160}, "not readable", "not readable", "too few samples", "fewer than 20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := synthSoak(tc.s)
			d, b := evaluateDrainBack(r), evaluateBounded(r)
			if d.Status != tc.drain || !strings.Contains(d.Detail, tc.drainHas) {
				t.Errorf("drain-back: %s (%s), want %s with %q", d.Status, d.Detail, tc.drain, tc.drainHas)
			}
			if b.Status != tc.bounded || !strings.Contains(b.Detail, tc.bndHas) {
				t.Errorf("bounded: %s (%s), want %s with %q", b.Status, b.Detail, tc.bounded, tc.bndHas)
			}
		})
	}
}

// TestSoakGoals: the report's soak goals are leasehold's verdicts with the
// peer's beside them, recomputed from the samples (a verdict stored in the
// report is not trusted); the pages render every chart with a line per
// system.
func TestSoakGoals(t *testing.T) {
	lh := synthSoak(synthetic{recover: 20, growth: 0.5, vacuum: 30, load: 1})
	peer := synthSoak(synthetic{recover: -1, growth: 2, vacuum: -1, load: 1})
	peer.System = "River v0.0.0"
	lh.DrainBack = SoakVerdict{"not met", "stale"}
	r := &Report{Mode: "soak smoke", Soak: &Soak{RatePerSec: 400, DurationSec: 240, PinSec: 60, IntervalSec: 5, Runs: []SoakRun{lh, peer}}}
	r.computeRatios()
	if len(r.Goals) != 2 {
		t.Fatalf("goals of a soak-only report: %+v", r.Goals)
	}
	for _, g := range r.Goals {
		if g.Status != "met" || !strings.Contains(g.Detail, "River v0.0.0, measured the same way: not met") {
			t.Errorf("goal %q: %s — %s", g.Goal, g.Status, g.Detail)
		}
	}
	var md, page strings.Builder
	r.Markdown(&md)
	r.HTML(&page)
	if !strings.Contains(md.String(), "## Soak") || !strings.Contains(md.String(), "| River v0.0.0 | 240 |") {
		t.Errorf("bench.md lacks the soak's section or its last sample:\n%s", md.String())
	}
	for _, m := range soakMetrics {
		i := strings.Index(page.String(), `<svg class="`+m.class+`"`)
		if i < 0 {
			t.Fatalf("bench.html lacks the %s chart", m.class)
		}
		chart := page.String()[i:]
		chart = chart[:strings.Index(chart, "</svg>")]
		if n := strings.Count(chart, `class="series"`); n != 2 {
			t.Errorf("%s: %d lines, want 2", m.class, n)
		}
		if n := strings.Count(chart, `class="pin"`); n != 2 {
			t.Errorf("%s: %d pin bands, want 2", m.class, n)
		}
	}
	r.Soak = nil
	r.Mode = "quick"
	r.computeRatios()
	for _, g := range r.Goals {
		if strings.HasPrefix(g.Goal, "soak") {
			t.Errorf("a report without a soak has a soak goal: %+v", g)
		}
	}
}

// TestSoakCounts: a sample reads admissions begun and completions
// acknowledged by its time, and the latencies of the jobs completed since
// the previous sample only.
func TestSoakCounts(t *testing.T) {
	tl := NewTimeline(0, 4)
	ms := int64(time.Millisecond)
	copy(tl.Admit, []int64{1 * ms, 2 * ms, 3 * ms, 20 * ms})
	copy(tl.Complete, []int64{5 * ms, 12 * ms, 0, 25 * ms})
	adm, comp, win := soakCounts(tl, 10*ms, 15*ms)
	if adm != 3 || comp != 2 || len(win) != 1 || win[0] != 10*time.Millisecond {
		t.Errorf("soakCounts at 15 ms since 10 ms: admitted %d, completed %d, window %v; want 3, 2, [10ms]", adm, comp, win)
	}
}

// TestSoakRuns soaks leasehold briefly on a database of its own: the pin is
// taken and released (its times recorded, checked held), every job
// completes, and the samples carry the tables' figures. Nothing is timed.
func TestSoakRuns(t *testing.T) {
	ctx := context.Background()
	dsn, _, pg := scratchDatabase(t)
	o := Options{Soak: 4 * time.Second, SoakPin: time.Second, SoakInterval: 250 * time.Millisecond, SoakRate: 100, Workers: 8, Conns: 4}.Defaults()
	s, err := openPG(ctx, dsn, soakSchema, o)
	if err != nil {
		t.Fatal(err)
	}
	defer closePG(ctx, dsn, s)
	r, err := soakOne(ctx, pg.conn, "leasehold", dsn, s.Schema(), o, t.Logf, func(ctx context.Context, tl *Timeline) error {
		return steadyLeasehold(ctx, s, tl, o.SoakRate, o)
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.PinNotHeld != "" || !(r.PinStartSec > 0 && r.PinEndSec > r.PinStartSec) || r.PinXmin == "" {
		t.Fatalf("pin: %+v", r)
	}
	last := r.Samples[len(r.Samples)-1]
	if r.Jobs != 400 || last.Admitted != 400 || last.Completed != 400 || last.Backlog != 0 {
		t.Errorf("last sample %+v, want all %d jobs admitted and completed", last, r.Jobs)
	}
	pinned := 0
	for _, x := range r.Samples {
		if x.Pinned {
			pinned++
			if x.T < r.PinStartSec || x.T > r.PinEndSec {
				t.Errorf("sample at %.2f s marked pinned outside the pin %.2f–%.2f", x.T, r.PinStartSec, r.PinEndSec)
			}
		}
	}
	if pinned == 0 || last.TableBytes == 0 || last.IndexBytes == 0 || math.IsNaN(last.Throughput) {
		t.Errorf("samples: %d pinned, last %+v", pinned, last)
	}
}

// TestSoakFlags: a full run soaks for DefaultSoak, a quick one not unless
// asked; --soak-smoke is a short soak and nothing else; a pin as long as
// the soak is a usage error.
func TestSoakFlags(t *testing.T) {
	for _, tc := range []struct {
		args            []string
		soak, pin, step time.Duration
		only            bool
	}{
		{nil, DefaultSoak, 0, 0, false},
		{[]string{"--quick"}, 0, 0, 0, false},
		{[]string{"--quick", "--soak", "3m"}, 3 * time.Minute, 0, 0, false},
		{[]string{"--soak", "0"}, 0, 0, 0, false},
		{[]string{"--soak-smoke"}, SmokeSoak, SmokeSoakPin, SmokeSoakInterval, true},
		{[]string{"--soak-smoke", "--soak", "3m"}, 3 * time.Minute, SmokeSoakPin, SmokeSoakInterval, true},
		{[]string{"--soak-only"}, DefaultSoak, 0, 0, true},
	} {
		c := NewCommandLine("reports/latest")
		if err := c.Parse(tc.args); err != nil {
			t.Fatalf("Parse(%q): %v", tc.args, err)
		}
		o := c.Options
		if o.Soak != tc.soak || o.SoakPin != tc.pin || o.SoakInterval != tc.step || o.SoakOnly != tc.only {
			t.Errorf("Parse(%q): soak %v pin %v interval %v only %v, want %v %v %v %v", tc.args, o.Soak, o.SoakPin, o.SoakInterval, o.SoakOnly, tc.soak, tc.pin, tc.step, tc.only)
		}
	}
	for _, args := range [][]string{{"--soak", "5m", "--soak-pin", "5m"}, {"--soak-only", "--soak", "0"}, {"--soak-rate", "-1"}} {
		if err := NewCommandLine("r").Parse(args); err == nil {
			t.Errorf("Parse(%q) accepted", args)
		}
	}
	if d := (Options{Soak: time.Minute}).Defaults(); d.SoakPin != DefaultSoakPin || d.SoakInterval != DefaultSoakInterval || d.SoakRate != DefaultSoakRate {
		t.Errorf("Defaults of a soak: %v %v %v", d.SoakPin, d.SoakInterval, d.SoakRate)
	}
}

package bench

import (
	"cmp"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/sqlite"
)

// TestSummarize holds the median and spread of a series of rounds, and the
// noise flag, to exact values.
func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xs     []float64
		want   Spread
		wanted string
	}{
		{"none", nil, Spread{}, "—"},
		{"odd count, unsorted", []float64{1.10, 0.90, 1.00}, Spread{Rounds: []float64{1.10, 0.90, 1.00}, Median: 1.00, Min: 0.90, Max: 1.10, Rel: 0.20000000000000007, Noisy: true},
			"noisy: not readable (median 1.00, 0.90–1.10, 3 rounds, spread 20 % > 20 %)"},
		{"even count: mean of the middle two", []float64{2, 1, 4, 3}, Spread{Rounds: []float64{2, 1, 4, 3}, Median: 2.5, Min: 1, Max: 4, Rel: 1.2, Noisy: true},
			"noisy: not readable (median 2.50, 1.00–4.00, 4 rounds, spread 120 % > 20 %)"},
		{"tight", []float64{1.00, 1.05, 1.10}, Spread{Rounds: []float64{1.00, 1.05, 1.10}, Median: 1.05, Min: 1.00, Max: 1.10, Rel: rel(1.10, 1.00, 1.05), Noisy: false},
			"1.05 (1.00–1.10, 3 rounds)"},
		{"two rounds cannot show a spread", []float64{1, 1}, Spread{Rounds: []float64{1, 1}, Median: 1, Min: 1, Max: 1, Rel: 0, Noisy: true},
			"noisy: not readable (median 1.00, 1.00–1.00, 2 rounds, spread 0 % > 20 %)"},
	} {
		got := summarize(tc.xs)
		if tc.xs == nil {
			got.Rounds = nil
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: summarize(%v) = %+v, want %+v", tc.name, tc.xs, got, tc.want)
		}
		if text := got.Text(); text != tc.wanted {
			t.Errorf("%s: Text() = %q, want %q", tc.name, text, tc.wanted)
		}
	}
}

// rel is (max-min)/median computed at run time, as summarize does.
func rel(hi, lo, med float64) float64 { return (hi - lo) / med }

// TestNoisyThreshold: exactly at the threshold is readable, above is not.
func TestNoisyThreshold(t *testing.T) {
	if s := summarize([]float64{0.9, 1.0, 1.1 - 1e-9}); s.Noisy {
		t.Errorf("spread %.4f at most %.2f must be readable: %+v", s.Rel, NoisyAbove, s)
	}
	if s := summarize([]float64{0.9, 1.0, 1.11}); !s.Noisy {
		t.Errorf("spread %.4f above %.2f must be noisy: %+v", s.Rel, NoisyAbove, s)
	}
}

// TestRatiosPairRounds: ratios divide round by round and drop a round with
// a side missing.
func TestRatiosPairRounds(t *testing.T) {
	got := ratios([]float64{10, 20, 0, 40}, []float64{5, 10, 7, 0, 9})
	if want := []float64{2, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("ratios = %v, want %v", got, want)
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want float64
	}{{0.5, 50}, {0.99, 99}, {0.999, 100}, {0.01, 1}} {
		if got := quantile(d, tc.p); got != tc.want {
			t.Errorf("quantile(1..100 ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of none = %v, want 0", got)
	}
}

// TestSummarizeTimeline: latencies are complete minus admit, start minus
// admit and admitted minus admit; a job without a mark is an error.
func TestSummarizeTimeline(t *testing.T) {
	tl := &Timeline{Admit: []int64{1e6, 2e6, 3e6}, Admitted: []int64{1.5e6, 2.25e6, 3.75e6}, Start: []int64{3e6, 3e6, 4e6},
		Complete: []int64{5e6, 12e6, 8e6}}
	r, err := summarizeTimeline(tl)
	if err != nil {
		t.Fatal(err)
	}
	if r.Jobs != 3 || r.StartP50Ms != 1 || r.StartP99Ms != 2 || r.CompleteP50Ms != 5 || r.CompleteP99Ms != 10 ||
		r.CallP50Ms != 0.5 || r.CallP99Ms != 0.75 || r.AchievedRate != 1000 {
		t.Errorf("summary %+v, want 3 jobs, start p50 1 p99 2, complete p50 5 p99 10, call p50 0.5 p99 0.75, 1000/s", r)
	}
	if len(r.StartQ) != len(LatencyQuantiles) || len(r.CompleteQ) != len(LatencyQuantiles) {
		t.Errorf("quantile lists of %d and %d, want %d", len(r.StartQ), len(r.CompleteQ), len(LatencyQuantiles))
	}
	// A warm-up job is worked but not counted.
	warm := &Timeline{Admit: []int64{1e6, 1e6, 2e6, 3e6}, Admitted: []int64{40e6, 1.5e6, 2.25e6, 3.75e6},
		Start: []int64{50e6, 3e6, 3e6, 4e6}, Complete: []int64{90e6, 5e6, 12e6, 8e6}, Warmup: 1}
	if w, err := summarizeTimeline(warm); err != nil || w.Jobs != 3 || w.WarmupJobs != 1 || w.StartP99Ms != r.StartP99Ms ||
		w.CompleteP99Ms != r.CompleteP99Ms || w.CallP99Ms != r.CallP99Ms {
		t.Errorf("with a slow warm-up job first: %+v, %v; want the figures above and 1 warm-up job", w, err)
	}
	warm.Complete[0] = 0
	if _, err := summarizeTimeline(warm); err == nil || !strings.Contains(err.Error(), "job 0 lacks a mark") {
		t.Errorf("a warm-up job never completed: err = %v, want job 0 lacks a mark", err)
	}
	tl.Complete[1] = 0
	if _, err := summarizeTimeline(tl); err == nil || !strings.Contains(err.Error(), "job 1 lacks a mark") {
		t.Errorf("a missing mark: err = %v, want job 1 lacks a mark", err)
	}
}

func TestLatencyRate(t *testing.T) {
	for _, tc := range []struct {
		drains, inserts []float64
		want            float64
	}{
		{[]float64{1000, 3000, 2000}, []float64{10000, 10000, 10000}, 2000}, // the drain
		{[]float64{1000, 3000, 2000}, []float64{600, 800, 700}, 700},        // the admission
		{[]float64{1000, 3000, 2000}, nil, 2000},                            // no admission measured
		{nil, []float64{600}, 0},                                            // no drain: not run
	} {
		if got := latencyCapacity(tc.drains, tc.inserts); got != tc.want {
			t.Errorf("latencyCapacity(%v, %v) = %v, want %v", tc.drains, tc.inserts, got, tc.want)
		}
	}
	for _, tc := range []struct {
		load       float64
		capacities []float64
		want       float64
	}{
		{0.25, []float64{2000, 800}, 200}, // the slower system's
		{0.25, []float64{800, 2000}, 200}, // whichever side it is on
		{0.5, []float64{2000, 0}, 1000},   // a system not run does not count
		{0.25, []float64{0, 0}, 0},        // none run
	} {
		if got := latencyRate(tc.load, tc.capacities...); got != tc.want {
			t.Errorf("latencyRate(%v, %v) = %v, want %v", tc.load, tc.capacities, got, tc.want)
		}
	}
	for _, tc := range []struct {
		lhCap, peerCap, lh, peer float64
	}{
		{2000, 800, 200, 200}, // one rate for both: the slower one's
		{800, 2000, 200, 200},
		{2000, 0, 500, 0}, // the peer not run
		{0, 800, 0, 200},  // leasehold's drain not measured
		{0, 0, 0, 0},
	} {
		if lh, peer := latencyRates(0.25, tc.lhCap, tc.peerCap); lh != tc.lh || peer != tc.peer {
			t.Errorf("latencyRates(0.25, %v, %v) = %v, %v; want %v, %v", tc.lhCap, tc.peerCap, lh, peer, tc.lh, tc.peer)
		}
	}
}

// TestLatencyLoadFlag: --latency-load takes a fraction in (0, 1]; 0 is
// the default's.
func TestLatencyLoadFlag(t *testing.T) {
	for _, tc := range []struct {
		arg string
		ok  bool
	}{{"0.5", true}, {"1", true}, {"0", true}, {"1.5", false}, {"-0.1", false}, {"NaN", false}} {
		c := NewCommandLine("reports/latest")
		err := c.Parse([]string{"--latency-load", tc.arg})
		if (err == nil) != tc.ok {
			t.Errorf("--latency-load %s: err = %v, want ok = %v", tc.arg, err, tc.ok)
		}
	}
}

// TestBulkN: bulk admission runs have their own size, refused when
// negative, defaulted per mode, and named in the report; a report from
// before it existed names the size its bulk runs had, InsertN.
func TestBulkN(t *testing.T) {
	if err := NewCommandLine("reports/latest").Parse([]string{"--bulk-n", "-1"}); err == nil || !strings.Contains(err.Error(), "--bulk-n -1") {
		t.Errorf("--bulk-n -1: err = %v, want a refusal naming the flag", err)
	}
	for _, tc := range []struct {
		quick        bool
		insert, bulk int
	}{{true, 2_000, 20_000}, {false, 20_000, 100_000}} {
		if o := (Options{Quick: tc.quick}).Defaults(); o.InsertN != tc.insert || o.BulkN != tc.bulk ||
			o.admissionN(false) != tc.insert || o.admissionN(true) != tc.bulk {
			t.Errorf("quick %v: InsertN %d, BulkN %d; want %d and %d", tc.quick, o.InsertN, o.BulkN, tc.insert, tc.bulk)
		}
	}
	for _, tc := range []struct {
		bulkN int
		want  []string
	}{
		{0, []string{"Bulk: 700 jobs in calls of 1000", "700 per admission run one per call, 700 per bulk admission run",
			"The etcd store admits 300 jobs each way", "300 per SQLite drain and per etcd admission and drain"}},
		{9000, []string{"Bulk: 9000 jobs in calls of 1000", "700 per admission run one per call, 9000 per bulk admission run"}},
	} {
		r := roundsReport()
		r.Settings.InsertN, r.Settings.BulkN, r.Settings.SQLiteN = 700, tc.bulkN, 300
		var md strings.Builder
		r.Markdown(&md)
		for _, want := range tc.want {
			if !strings.Contains(md.String(), want) {
				t.Errorf("BulkN %d: the report lacks %q", tc.bulkN, want)
			}
		}
	}
}

// TestLatencyParagraph: the latency section says the rule, the warm-up and
// the admission call's figures the run recorded, and renders a report from
// before them truthfully.
func TestLatencyParagraph(t *testing.T) {
	render := func(r *Report) string {
		var md strings.Builder
		r.Markdown(&md)
		return md.String()
	}
	old := render(roundsReport())
	for _, want := range []string{"Each system's arrival rate is half its median drain rate",
		"| leasehold | 1 | 0 | 0 | 0 | — | — | 2.00 | 4.00 | 3.00 | 6.00 |",
		"this run did not record the call's duration", "at half of each one's drain rate"} {
		if !strings.Contains(old, want) {
			t.Errorf("a report from before the change lacks %q", want)
		}
	}
	if strings.Contains(old, "warm-up jobs") {
		t.Errorf("a report from before the warm-up mentions one")
	}
	// A report of the one-rate rule, before the warm-up and the call's
	// figures (the full run of e6b3a71).
	r := roundsReport()
	r.Settings.LatencyLoad = 0.25
	for i := range r.Latency {
		r.Latency[i].RatePerSec = 500
	}
	if between := render(r); strings.Contains(between, "warm-up jobs") || !strings.Contains(between, "did not record") {
		t.Errorf("a report with neither warm-up nor call figures claims one of them")
	}
	for i := range r.Latency {
		r.Latency[i].RatePerSec, r.Latency[i].WarmupJobs, r.Latency[i].CallP50Ms, r.Latency[i].CallP99Ms = 500, 500, 0.5, 2.25
	}
	r.computeRatios()
	now := render(r)
	for _, want := range []string{"Both systems get the same arrival rate: 25 % of the lower of their capacities",
		"after 500 warm-up jobs (1.0 s at that rate)", "| leasehold | 1 | 500 | 0 | 0 | 0.50 | 2.25 | 2.00 | 4.00 | 3.00 | 6.00 |",
		"at one arrival rate for both, 25 % of the slower one's capacity"} {
		if !strings.Contains(now, want) {
			t.Errorf("a report of this code lacks %q", want)
		}
	}
	if strings.Contains(now, "did not record") {
		t.Errorf("a report with the admission call's figures says they were not recorded")
	}
	r.PeerName = ""
	if alone := render(r); !strings.Contains(alone, "The arrival rate is 25 % of leasehold's capacity (the peer was not run)") {
		t.Errorf("a run without the peer does not say so in its latency paragraph")
	}
}

// roundsReport is a report with three alternating rounds on each side.
func roundsReport() *Report {
	r := &Report{Mode: "quick", Commit: "abc", PeerName: "River vX", SQLitePeerName: "River vX", ElapsedSec: 170,
		LoadBefore: []float64{1, 2, 3}, LoadAfter: []float64{4, 5, 6},
		Settings: Settings{Rounds: 3, BulkBatch: 1000, Depths: []int{1_000, 100_000}}}
	for i, v := range []float64{300, 330, 360} {
		r.Drains = append(r.Drains,
			DrainResult{System: "leasehold", Store: "postgres", Variant: bestPG, Name: "batch claim, CompleteBatch", Round: i + 1, JobsPerSec: v, Cost: Cost{ServerCPUPerJob: 60}},
			DrainResult{System: "River vX", Store: "postgres", Variant: "peer", Name: "River vX", Round: i + 1, JobsPerSec: 200, Cost: Cost{ServerCPUPerJob: 20}},
			DrainResult{System: "leasehold", Store: "sqlite", Variant: sqliteBest, Name: "batch claim, CompleteBatch", Round: i + 1, JobsPerSec: []float64{100, 300, 200}[i]},
			DrainResult{System: "River vX", Store: "sqlite", Variant: "peer", Name: "River vX sqlite", Round: i + 1, JobsPerSec: 100})
		r.Inserts = append(r.Inserts,
			InsertResult{System: "leasehold", Store: "postgres", Method: methodOne, Round: i + 1, JobsPerSec: 50, Cost: Cost{ServerCPUPerJob: []float64{40, 44, 42}[i]}},
			InsertResult{System: "River vX", Store: "postgres", Method: methodOne, Round: i + 1, JobsPerSec: 100},
			InsertResult{System: "River vX", Store: "postgres", Method: methodOneUnique, Round: i + 1, JobsPerSec: 80, Cost: Cost{ServerCPUPerJob: 30}},
			InsertResult{System: "leasehold", Store: "postgres", Method: methodBulk, Round: i + 1, NotMeasured: notMeasuredCreateRuns},
			InsertResult{System: "River vX", Store: "postgres", Method: methodBulk, Round: i + 1, JobsPerSec: 1000})
		r.Latency = append(r.Latency,
			LatencyResult{System: "leasehold", Round: i + 1, StartP50Ms: 2, StartP99Ms: 4, CompleteP50Ms: 3, CompleteP99Ms: 6,
				StartQ: ramp(1), CompleteQ: ramp(2)},
			LatencyResult{System: "River vX", Round: i + 1, StartP50Ms: 4, StartP99Ms: 8, CompleteP50Ms: 6, CompleteP99Ms: 12,
				StartQ: ramp(2), CompleteQ: ramp(4)})
	}
	r.Drains = append(r.Drains, DrainResult{System: "leasehold", Store: "postgres", Variant: "single", Name: "single claim, Complete per job", Round: 0, JobsPerSec: 33})
	r.Ceiling = []CeilingResult{{CommitsPerSec: 300}, {CommitsPerSec: 300}}
	r.Depth = []DepthResult{
		{Depth: 1_000, Phases: []PhaseResult{{Phase: phaseClaim, P50Ms: 2, P99Ms: 4}}},
		{Depth: 100_000, Phases: []PhaseResult{{Phase: phaseClaim, P50Ms: 3, P99Ms: 4, Plan: "Limit"}}},
	}
	r.computeRatios()
	return r
}

// TestRoundRatios: every peer ratio is the median of its rounds with its
// spread, goals carry their status, and a store without CreateRuns is
// reported as not measured, never as a number.
func TestRoundRatios(t *testing.T) {
	r := roundsReport()
	byName := map[string]Ratio{}
	for _, x := range r.Ratios {
		byName[x.Name] = x
	}
	for _, tc := range []struct {
		name   string
		value  float64
		min    float64
		max    float64
		noisy  bool
		status string
	}{
		{"leasehold / River vX (PostgreSQL drain)", 1.65, 1.5, 1.8, false, "met"},
		{"leasehold CreateRun / River vX Insert of unique jobs (PostgreSQL, one per call)", 0.625, 0.625, 0.625, false, "not met"},
		{"leasehold CreateRun / River vX Insert (PostgreSQL, one per call)", 0.5, 0.5, 0.5, false, ""},           // the plain insert: for scale
		{"leasehold / River vX (riversqlite) (SQLite drain, synchronous NORMAL)", 2, 1, 3, true, "not readable"}, // 1, 3, 2 straddle 1.5
		{"leasehold / River vX server CPU per drained job", 3, 3, 3, false, ""},
		{"leasehold / River vX admit-to-complete p99 (steady rate)", 0.5, 0.5, 0.5, false, ""},
		{"leasehold / ceiling (PostgreSQL drain)", 1.1, 1, 1.2, false, ""},
	} {
		x, ok := byName[tc.name]
		if !ok {
			t.Errorf("no ratio %q", tc.name)
			continue
		}
		if x.Spread == nil || !near(x.Value, tc.value) || !near(x.Spread.Min, tc.min) || !near(x.Spread.Max, tc.max) || x.Spread.Noisy != tc.noisy || x.Status != tc.status {
			t.Errorf("%s: value %v spread %+v status %q; want %v (%v–%v) noisy %v status %q", tc.name, x.Value, x.Spread, x.Status, tc.value, tc.min, tc.max, tc.noisy, tc.status)
		}
	}
	bulk := byName["leasehold CreateRuns / River vX InsertMany of unique jobs (PostgreSQL, bulk, per job)"]
	if bulk.Value != 0 || bulk.Spread != nil || bulk.Note != "not measured: store lacks CreateRuns" || bulk.Status != "not measured" {
		t.Errorf("bulk ratio without CreateRuns: %+v", bulk)
	}
	scale := byName["leasehold postgres [single claim, Complete per job] / [batch claim, CompleteBatch]"]
	if !near(scale.Value, 0.1) || scale.Spread != nil {
		t.Errorf("a variant measured once is compared with the median of the rounds: %+v", scale)
	}
	goals := map[string]Goal{}
	for _, g := range r.Goals {
		goals[g.Goal] = g
	}
	if g := goals["leasehold / River vX (PostgreSQL drain) ≥ 1.5"]; g.Status != "met" || g.Detail != "1.65 (1.50–1.80, 3 rounds)" {
		t.Errorf("drain goal: %+v", g)
	}
	if g := goals["leasehold CreateRuns / River vX InsertMany of unique jobs (PostgreSQL, bulk, per job) ≥ 1.0"]; g.Status != "not measured" || g.Detail != "not measured: store lacks CreateRuns" {
		t.Errorf("bulk goal: %+v", g)
	}
	if g := goals["leasehold CreateRun / River vX Insert of unique jobs (PostgreSQL, one per call) ≥ 1.0"]; g.Status != "not met" ||
		g.Detail != "0.62 (0.62–0.62, 3 rounds); server CPU per admitted job, median (min–max) of the rounds: leasehold 42.0 µs (40.0–44.0), River vX 30.0 µs (30.0–30.0)" {
		t.Errorf("CreateRun goal, with the server CPU per admitted job beside it: %+v", g)
	}
	if g := goals["stable ratios: every ratio readable"]; g.Status != "not met" || !strings.Contains(g.Detail, "SQLite drain") {
		t.Errorf("stability goal: %+v", g)
	}
	if g := goals["quick mode under 3 minutes"]; g.Status != "met" || g.Detail != "170 s of measurement (plus the program's build)" {
		t.Errorf("quick-mode goal: %+v", g)
	}
}

// ramp is a latency distribution rising by step ms per quantile.
func ramp(step float64) []float64 {
	out := make([]float64, len(LatencyQuantiles))
	for i := range out {
		out[i] = step * float64(i+1)
	}
	return out
}

// TestGoalStatus: a noisy ratio is not readable, never met or not met,
// whichever side of its target its rounds fall (the report prints it as
// "noisy: not readable"); a readable one's median decides.
func TestGoalStatus(t *testing.T) {
	for _, tc := range []struct {
		rounds []float64
		better string
		want   string
	}{
		{[]float64{0.26, 0.38, 0.35}, "higher", "not readable"}, // noisy, all below 1.0
		{[]float64{1.1, 2.0, 1.5}, "higher", "not readable"},    // noisy, all above 1.0
		{[]float64{0.6, 1.4, 1.0}, "higher", "not readable"},    // noisy, straddles
		{[]float64{0.95, 1.02, 1.05}, "higher", "met"},          // readable, median decides
		{[]float64{0.95, 0.98, 1.05}, "higher", "not met"},      // readable, median decides
		{[]float64{0.85, 0.9, 0.88}, "lower", "met"},            // lower is better, readable
		{[]float64{0.5, 0.9, 0.7}, "lower", "not readable"},     // lower is better, noisy
		{nil, "higher", "not measured"},
	} {
		x := Ratio{Target: 1.0, Better: tc.better}
		if tc.rounds != nil {
			sp := summarize(tc.rounds)
			x.Spread = &sp
		}
		if got := status(x); got != tc.want {
			t.Errorf("status(%v, %s is better, target 1.0) = %q, want %q", tc.rounds, tc.better, got, tc.want)
		}
	}
}

func near(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }

// TestReportJSONShape holds bench.json's top-level keys and a ratio's
// shape, which tools read.
func TestReportJSONShape(t *testing.T) {
	b, err := json.Marshal(roundsReport())
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range top {
		keys = append(keys, k)
	}
	want := []string{"ceiling", "commit", "depth", "elapsed_sec", "goals", "host", "inserts", "latency", "load_average_after", "load_average_before",
		"mode", "peer", "postgres", "ratios", "settings", "sqlite_peer", "started_at", "throughput"}
	if got := sortedStrings(keys); !reflect.DeepEqual(got, want) {
		t.Errorf("bench.json keys\n%v\nwant\n%v", got, want)
	}
	var ratios []map[string]json.RawMessage
	if err := json.Unmarshal(top["ratios"], &ratios); err != nil {
		t.Fatal(err)
	}
	var first []string
	for k := range ratios[0] {
		first = append(first, k)
	}
	if got, want := sortedStrings(first), []string{"better", "name", "of", "spread", "status", "target", "value"}; !reflect.DeepEqual(got, want) {
		t.Errorf("first ratio's keys %v, want %v", got, want)
	}
	var sp Spread
	if err := json.Unmarshal(ratios[0]["spread"], &sp); err != nil || len(sp.Rounds) != 3 || !near(sp.Median, 1.65) {
		t.Errorf("first ratio's spread %s (%v)", ratios[0]["spread"], err)
	}
}

func sortedStrings(xs []string) []string {
	out := append([]string(nil), xs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestHTML: the page is self-contained (no script, nothing fetched) and has
// each picture with the elements its data calls for.
func TestHTML(t *testing.T) {
	r := roundsReport()
	var b strings.Builder
	r.HTML(&b)
	page := b.String()
	for _, bad := range []string{"<script", "src=", "href=\"http", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q: it must be self-contained", bad)
		}
	}
	for _, tc := range []struct {
		what string
		n    int
	}{
		{"<svg class=\"throughput\"", 1},
		{"<svg class=\"spread\"", 1},
		{"<svg class=\"latency\"", 1},
		{"<svg class=\"depth\"", 1},
		// One dot per round of every ratio measured in rounds: the PostgreSQL
		// drain, CreateRun against River's unique and plain Insert, the
		// SQLite drain, server CPU, four latencies and two ceilings (the bulk
		// ratios and the SQLite admissions have no rounds), 3 each.
		{"<circle class=\"round\"", 33},
		{"<line class=\"median\"", 11},
		// Goal targets among them: PostgreSQL drain, CreateRun against the
		// unique Insert, SQLite drain.
		{"<line class=\"target\"", 3},
		// Latency: start and complete per system; depth: p50 and p99 of one phase.
		{"<polyline class=\"series\"", 4 + 2},
		{"<rect x=\"420\"", 5}, // throughput bars: 4 in rounds + 1 variant once
		{"noisy</text>", 1},
	} {
		if got := strings.Count(page, tc.what); got != tc.n {
			t.Errorf("page has %d × %q, want %d", got, tc.what, tc.n)
		}
	}
	if !strings.Contains(page, "<td class=\"met\">met</td>") || !strings.Contains(page, "<td class=\"notmet\">not measured</td>") {
		t.Errorf("the goals table lacks a met or a not-measured row")
	}
}

// TestEtcdDefault: the full run measures the etcd store unless told not to;
// the quick run leaves it out unless asked (it would pass three minutes).
func TestEtcdDefault(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--quick"}, false},
		{[]string{"--quick", "--etcd"}, true},
		{[]string{"--etcd=false"}, false},
	} {
		c := NewCommandLine("reports/latest")
		if err := c.Parse(tc.args); err != nil {
			t.Fatalf("Parse(%q): %v", tc.args, err)
		}
		if c.Options.Etcd != tc.want {
			t.Errorf("Parse(%q): Etcd = %v, want %v", tc.args, c.Options.Etcd, tc.want)
		}
	}
}

// TestUniqueAdmissionGoals: the admission goals are against the peer's
// inserts of unique jobs, one per call and bulk, round by round, each with
// the server CPU per admitted job of both sides beside it; the plain
// inserts are for scale (no goal); a peer without unique inserts leaves the
// goals not measured, saying so.
func TestUniqueAdmissionGoals(t *testing.T) {
	const (
		oneGoal  = "leasehold CreateRun / River vX Insert of unique jobs (PostgreSQL, one per call) ≥ 1.0"
		bulkGoal = "leasehold CreateRuns / River vX InsertMany of unique jobs (PostgreSQL, bulk, per job) ≥ 1.0"
		bulkName = "leasehold CreateRuns / River vX InsertMany of unique jobs (PostgreSQL, bulk, per job)"
	)
	for _, tc := range []struct {
		name     string
		unique   []float64 // the peer's unique rates by round (one per call and bulk alike); nil: not run
		value    float64
		status   string
		beside   string
		goalText string
	}{
		{"measured", []float64{1000, 800, 1200}, 0.25, "not met",
			"server CPU per admitted job, median (min–max) of the rounds: leasehold 30.0 µs (25.0–35.0, noisy), River vX 20.0 µs (20.0–20.0)",
			"0.25 (0.25–0.25, 3 rounds); server CPU per admitted job, median (min–max) of the rounds: leasehold 30.0 µs (25.0–35.0, noisy), River vX 20.0 µs (20.0–20.0)"},
		{"peer without it", nil, 0, "not measured", "", "a side was not measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Mode: "quick", PeerName: "River vX", Settings: Settings{Rounds: 3, BulkBatch: 1000}}
			for i, lh := range []float64{250, 200, 300} {
				cpu := Cost{ServerCPUPerJob: []float64{25, 30, 35}[i]}
				for _, m := range [][2]string{{methodOne, methodOneUnique}, {methodBulk, methodBulkUnique}} {
					r.Inserts = append(r.Inserts,
						InsertResult{System: "leasehold", Store: "postgres", Method: m[0], Round: i + 1, JobsPerSec: lh, Cost: cpu},
						InsertResult{System: "River vX", Store: "postgres", Method: m[0], Round: i + 1, JobsPerSec: 2 * lh})
					if tc.unique != nil {
						r.Inserts = append(r.Inserts, InsertResult{System: "River vX", Store: "postgres", Method: m[1], Round: i + 1,
							JobsPerSec: tc.unique[i], Cost: Cost{ServerCPUPerJob: 20}})
					}
				}
			}
			r.computeRatios()
			var got *Ratio
			for i := range r.Ratios {
				if r.Ratios[i].Name == bulkName {
					got = &r.Ratios[i]
				}
			}
			if got == nil {
				t.Fatalf("no ratio %q", bulkName)
			}
			if !near(got.Value, tc.value) || got.Target != 1 || got.Status != tc.status || got.Beside != tc.beside || (got.Spread == nil) != (tc.unique == nil) {
				t.Errorf("%+v; want value %v, target 1, status %q, beside %q, a spread only when measured", *got, tc.value, tc.status, tc.beside)
			}
			goals := map[string]Goal{}
			for _, g := range r.Goals {
				goals[g.Goal] = g
				if strings.Contains(g.Goal, "Insert (PostgreSQL") || strings.Contains(g.Goal, "InsertMany (PostgreSQL") {
					t.Errorf("a goal was set against a plain insert: %+v", g)
				}
			}
			for _, name := range []string{oneGoal, bulkGoal} {
				if g, ok := goals[name]; !ok || g.Status != tc.status || g.Detail != tc.goalText {
					t.Errorf("goal %q: %+v; want status %q, detail %q", name, g, tc.status, tc.goalText)
				}
			}
		})
	}
}

// TestSQLiteSyncFlag: --sqlite-sync sets both SQLite systems' setting; the
// default is the store's (FULL), and a report says which ran.
func TestSQLiteSyncFlag(t *testing.T) {
	for args, want := range map[string]sqlite.Sync{"": sqlite.SyncFull, "--sqlite-sync=normal": sqlite.SyncNormal, "--sqlite-sync=FULL": sqlite.SyncFull} {
		c := NewCommandLine("reports/latest")
		if err := c.Parse(strings.Fields(args)); err != nil || c.Options.SQLiteSync != want {
			t.Errorf("%q: %v, %v; want %v", args, c.Options.SQLiteSync, err, want)
		}
	}
	if err := NewCommandLine("reports/latest").Parse([]string{"--sqlite-sync", "off"}); err == nil || !strings.Contains(err.Error(), "want full or normal") {
		t.Errorf("--sqlite-sync off: %v", err)
	}
	for _, set := range []string{"", "FULL"} {
		r := roundsReport()
		r.Settings.SQLiteSync = set
		r.computeRatios()
		var md strings.Builder
		r.Markdown(&md)
		if want := "SQLite: synchronous " + cmp.Or(set, "NORMAL") + " for leasehold's store and the SQLite peer alike"; !strings.Contains(md.String(), want) {
			t.Errorf("setting %q: the report does not say %q", set, want)
		}
		if want := "leasehold / River vX (riversqlite) (SQLite drain, synchronous " + cmp.Or(set, "NORMAL") + ") ≥ 1.5"; !slices.ContainsFunc(r.Goals, func(g Goal) bool { return g.Goal == want }) {
			t.Errorf("setting %q: no goal %q: %+v", set, want, r.Goals)
		}
	}
}

package bench

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Report is everything one run measured; it is written as bench.json and
// rendered as bench.md.
type Report struct {
	Mode       string       `json:"mode"` // quick or full
	StartedAt  string       `json:"started_at"`
	ElapsedSec float64      `json:"elapsed_sec"`
	Commit     string       `json:"commit"`
	Host       HostInfo     `json:"host"`
	Postgres   PostgresInfo `json:"postgres"`
	Settings   Settings     `json:"settings"`
	// LoadBefore and LoadAfter are the machine's load averages (1, 5 and
	// 15 minutes, /proc/loadavg) when the run started and ended: the
	// machine is shared, and this says how much.
	LoadBefore         []float64         `json:"load_average_before"`
	LoadAfter          []float64         `json:"load_average_after"`
	PeerName           string            `json:"peer,omitempty"`
	PeerSettings       map[string]string `json:"peer_settings,omitempty"`
	SQLitePeerName     string            `json:"sqlite_peer,omitempty"`
	SQLitePeerSettings map[string]string `json:"sqlite_peer_settings,omitempty"`
	Ratios             []Ratio           `json:"ratios"`
	Goals              []Goal            `json:"goals"`
	Drains             []DrainResult     `json:"throughput"`
	Inserts            []InsertResult    `json:"inserts"`
	Latency            []LatencyResult   `json:"latency"`
	Ceiling            []CeilingResult   `json:"ceiling"`
	Depth              []DepthResult     `json:"depth"`
	// Soak is the soak (soak.go); nil when the run had none.
	Soak *Soak `json:"soak,omitempty"`
}

// Goal is one of issue 16's targets and where this run leaves it.
type Goal struct {
	Goal   string `json:"goal"`
	Status string `json:"status"` // met, not met, not readable, not measured
	Detail string `json:"detail"`
}

// HostInfo describes the machine and the toolchain.
type HostInfo struct {
	GOOS     string `json:"goos"`
	GOARCH   string `json:"goarch"`
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	Go       string `json:"go"`
}

// PostgresInfo is the server's version and the settings that decide a
// commit-bound benchmark.
type PostgresInfo struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
	// Private says the server was the run's own (Options.PrivateServer),
	// started for it and removed after it.
	Private bool `json:"private,omitempty"`
}

// Settings are the benchmark's knobs as run.
type Settings struct {
	N       int `json:"n"`
	InsertN int `json:"insert_n"`
	// BulkN is Options.BulkN; 0 in reports written before it existed, whose
	// bulk admission runs were InsertN jobs (see bulkN).
	BulkN          int     `json:"bulk_n,omitempty"`
	SQLiteN        int     `json:"sqlite_n"`
	BulkBatch      int     `json:"bulk_batch"`
	Rounds         int     `json:"rounds"`
	LatencySeconds float64 `json:"latency_seconds"`
	// LatencyLoad is Options.LatencyLoad; 0 in reports written before it
	// existed, whose latency runs each ran at half the system's own rate.
	LatencyLoad   float64 `json:"latency_load,omitempty"`
	Workers       int     `json:"workers"`
	Conns         int     `json:"conns"`
	Coalesce      int     `json:"coalesce"`
	ClaimBatch    int     `json:"claim_batch"`
	ClaimGatherMs float64 `json:"claim_gather_ms"`
	Producers     int     `json:"producers"`
	CompleteBatch int     `json:"complete_batch"`
	Completers    int     `json:"completers"`
	Depths        []int   `json:"depths"`
	DepthSamples  int     `json:"depth_samples"`
	// SQLiteSync is the synchronous setting of both SQLite systems (FULL or
	// NORMAL); "" in reports from before it, which ran NORMAL.
	SQLiteSync string `json:"sqlite_sync,omitempty"`
	LeaseMs    int64  `json:"lease_ms"`
}

// bulkN is the number of jobs of each bulk admission run: BulkN, or for a
// report written before it existed InsertN.
func (s Settings) bulkN() int {
	if s.BulkN == 0 {
		return s.InsertN
	}
	return s.BulkN
}

// measuredMs is a duration in ms, or "—" for 0: a figure the report's run
// did not record (the admission call's, before reports had it).
func measuredMs(ms float64) string {
	if ms == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", ms)
}

// warmupText says how the latency runs warmed up, from what the runs
// recorded ("" in reports written before they did).
func (r *Report) warmupText() string {
	for _, l := range r.Latency {
		if l.WarmupJobs > 0 && l.RatePerSec > 0 {
			return fmt.Sprintf(", after %d warm-up jobs (%.1f s at that rate) that are worked but not counted: a fresh client's connections are cold",
				l.WarmupJobs, float64(l.WarmupJobs)/l.RatePerSec)
		}
	}
	return ""
}

// unrecordedCalls says, when some latency run has no admission call
// figures (a report written before they were recorded), what its "—" is.
func (r *Report) unrecordedCalls() string {
	for _, l := range r.Latency {
		if l.CallP50Ms == 0 {
			return " A — in the admission call's columns: this run did not record the call's duration (the benchmark's code predates it)."
		}
	}
	return ""
}

// latencyRule says how the latency runs' arrival rate was chosen.
func (r *Report) latencyRule() string {
	s := r.Settings
	if s.LatencyLoad == 0 {
		return "Each system's arrival rate is half its median drain rate, capped at half its median admission rate one per call (faster arrivals would measure the admission's backlog)."
	}
	who := "Both systems get the same arrival rate: %.4g %% of the lower of their capacities, each system's capacity being"
	if r.PeerName == "" {
		who = "The arrival rate is %.4g %% of leasehold's capacity (the peer was not run),"
	}
	return fmt.Sprintf(who+" the lower of its median drain rate and its median admission rate one per call (--latency-load; the admission shares the machine with the workers during these runs, and faster arrivals measured the admission's backlog whenever the host slowed).", 100*s.LatencyLoad)
}

// latencyRateText is latencyRule in a few words, for the ratio table.
func (s Settings) latencyRateText() string {
	if s.LatencyLoad == 0 {
		return "at half of each one's drain rate (capped by its admission)"
	}
	return fmt.Sprintf("at one arrival rate for both, %.4g %% of the slower one's capacity", 100*s.LatencyLoad)
}

// Ratio is one of the headline comparisons. Value is 0 when a side was not
// measured (Note says why). A ratio measured in rounds has its Spread, and
// Value is the Spread's median; a ratio with a Target is one of the issue's
// goals, and Status says where it stands.
type Ratio struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Of     string  `json:"of"` // what was divided by what
	Note   string  `json:"note,omitempty"`
	Spread *Spread `json:"spread,omitempty"`
	// Better is "higher" or "lower": which way is good for leasehold.
	Better string  `json:"better,omitempty"`
	Target float64 `json:"target,omitempty"`
	Status string  `json:"status,omitempty"`
	// Beside is a figure the report prints beside the ratio (the server CPU
	// per admitted job of both sides, for the admission goals).
	Beside string `json:"beside,omitempty"`
}

// Text is the ratio as the report prints it: the median with its spread,
// "noisy: not readable (…)", a single value, or "—".
func (x Ratio) Text() string {
	if x.Spread != nil && len(x.Spread.Rounds) > 0 {
		return x.Spread.Text()
	}
	if x.Value > 0 {
		return fmt.Sprintf("%.2f", x.Value)
	}
	return "—"
}

// status is where a goal ratio stands: "not measured" without rounds; "not
// readable" when its spread is too wide (the report prints such a ratio as
// "noisy: not readable", and a ratio it cannot read is neither met nor not
// met, whichever side of the target its rounds fell); else the median
// decides.
func status(x Ratio) string {
	if x.Spread == nil || len(x.Spread.Rounds) == 0 {
		return "not measured"
	}
	sp := *x.Spread
	reaches := sp.Median >= x.Target
	if x.Better == "lower" {
		reaches = sp.Median <= x.Target
	}
	switch {
	case sp.Noisy:
		return "not readable"
	case reaches:
		return "met"
	}
	return "not met"
}

// DrainResult is one throughput run: N queued jobs worked to completion.
type DrainResult struct {
	System              string  `json:"system"`
	Store               string  `json:"store"`
	Variant             string  `json:"variant"`
	Name                string  `json:"name"`
	Jobs                int     `json:"jobs"`
	Seconds             float64 `json:"seconds"`
	JobsPerSec          float64 `json:"jobs_per_sec"`
	Round               int     `json:"round"` // 1..Rounds; 0: measured once, outside the rounds
	Cost                Cost    `json:"cost"`
	JobsPerClaim        float64 `json:"jobs_per_claim,omitempty"`
	JobsPerCompleteCall float64 `json:"jobs_per_complete_call,omitempty"`
	ClaimCallMs         float64 `json:"claim_call_ms,omitempty"`    // mean wall time of one Claim
	CompleteCallMs      float64 `json:"complete_call_ms,omitempty"` // mean wall time of one Complete or CompleteBatch
	Retries             int64   `json:"unavailable_retries"`
	NotMeasured         string  `json:"not_measured,omitempty"`
	// ClaimPlan is EXPLAIN (ANALYZE, BUFFERS) of a claim of ClaimBatch jobs
	// on the full queue before the first round's drain (rolled back), with
	// its buffers and execution time.
	ClaimPlan        string  `json:"claim_plan,omitempty"`
	ClaimPlanBuffers int     `json:"claim_plan_buffers,omitempty"`
	ClaimPlanMs      float64 `json:"claim_plan_ms,omitempty"`
	// Pin is how the drain's MVCC horizon was held back: "" not, "whole"
	// for the whole drain, "mid" from its midpoint (pinMode).
	Pin string `json:"pin,omitempty"`
	// ClaimIndexReadsPerJob is the entries the indexes the claims scan
	// returned (pg_stat_user_indexes.idx_tup_read) per drained job: one
	// for the job itself, the rest entries of row versions the claims
	// stepped over (0: not counted).
	ClaimIndexReadsPerJob float64 `json:"claim_index_reads_per_job,omitempty"`
	// DeadRowVersions is the job table's n_dead_tup at the drain's end:
	// row versions dead and not removed (by page pruning; autovacuum is
	// off on the benchmark's server).
	DeadRowVersions int64 `json:"dead_row_versions,omitempty"`
}

// InsertResult is one admission run.
type InsertResult struct {
	System     string  `json:"system"`
	Store      string  `json:"store"`
	Method     string  `json:"method"`
	Jobs       int     `json:"jobs"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	Round      int     `json:"round"`
	Cost       Cost    `json:"cost"`
	// NotMeasured says why a method has no figure (a store without
	// spec.BatchCreator); such a result is never estimated.
	NotMeasured string `json:"not_measured,omitempty"`
	// Admission is what leasehold's PostgreSQL store says its admissions
	// did (postgres.Store.AdmissionStats): for the coalesced run, how many
	// calls shared how many transactions.
	Admission *AdmissionStats `json:"admission,omitempty"`
}

// AdmissionStats are postgres.AdmissionStats as the report keeps them.
type AdmissionStats struct {
	Coalesced          int64 `json:"coalesced_calls"`
	SharedTransactions int64 `json:"shared_transactions"`
	Retried            int64 `json:"retried_attempts"`
	Fresh              int64 `json:"fresh_admissions"`
}

// CeilingResult is the database's own commit rate.
type CeilingResult struct {
	Method        string  `json:"method"`
	Commits       int     `json:"commits"`
	Seconds       float64 `json:"seconds"`
	CommitsPerSec float64 `json:"commits_per_sec"`
	Cost          Cost    `json:"cost"`
}

// DepthResult is claim latency at one queue depth.
type DepthResult struct {
	Depth       int           `json:"depth"`
	LoadSeconds float64       `json:"load_seconds"`
	Phases      []PhaseResult `json:"phases"`
}

// PhaseResult is one series of timed single claims.
type PhaseResult struct {
	Phase       string  `json:"phase"`
	Expired     int     `json:"expired_leases"`
	Samples     int     `json:"samples"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MeanMs      float64 `json:"mean_ms"`
	MaxMs       float64 `json:"max_ms"`
	PlanBuffers int     `json:"plan_buffers"`
	PlanMs      float64 `json:"plan_execution_ms"`
	Plan        string  `json:"plan"`
}

// drainRates are the jobs/s of a system's drains of one variant, in round
// order (rounds 1.. only; a missing round is a zero, so that rounds stay
// paired with the peer's).
func (r *Report) drainRates(system, store, variant string) []float64 {
	return r.pinnedRates(system, store, variant, pinNone)
}

// pinnedRates are drainRates of the drains pinned by pm.
func (r *Report) pinnedRates(system, store, variant string, pm pinMode) []float64 {
	var out []float64
	for _, d := range r.Drains {
		if d.System == system && d.Store == store && d.Variant == variant && d.Round > 0 && d.Pin == string(pm) {
			out = append(out, d.JobsPerSec)
		}
	}
	return out
}

// drainCosts are a per-job cost of the same drains.
func (r *Report) drainCosts(system, store, variant string, f func(Cost) float64) []float64 {
	var out []float64
	for _, d := range r.Drains {
		if d.System == system && d.Store == store && d.Variant == variant && d.Round > 0 && d.Pin == "" {
			out = append(out, f(d.Cost))
		}
	}
	return out
}

// insertRates are the jobs/s of a system's admissions by one method, in
// round order (zero where not measured).
func (r *Report) insertRates(system, store, method string) []float64 {
	var out []float64
	for _, in := range r.Inserts {
		if in.System == system && in.Store == store && in.Method == method && in.Round > 0 {
			out = append(out, in.JobsPerSec)
		}
	}
	return out
}

func (r *Report) insertNote(system, store, method string) string {
	for _, in := range r.Inserts {
		if in.System == system && in.Store == store && in.Method == method && in.NotMeasured != "" {
			return "not measured: " + in.NotMeasured
		}
	}
	return ""
}

// perRound divides num[i] by den[i], keeping the rounds' positions: 0 where
// either side is missing (ratios drops such rounds; this keeps them paired
// with another system's rounds).
func perRound(num, den []float64) []float64 {
	out := make([]float64, min(len(num), len(den)))
	for i := range out {
		if num[i] > 0 && den[i] > 0 {
			out[i] = num[i] / den[i]
		}
	}
	return out
}

// drainFigures is one figure of a system's drains of one variant pinned by
// pm, in round order.
func (r *Report) drainFigures(system, variant string, pm pinMode, f func(DrainResult) float64) []float64 {
	var out []float64
	for _, d := range r.Drains {
		if d.System == system && d.Store == "postgres" && d.Variant == variant && d.Round > 0 && d.Pin == string(pm) {
			out = append(out, f(d))
		}
	}
	return out
}

// deadText is a system's dead claim-index entries read per claimed job,
// median of its rounds, pinned by pm and unpinned ("" when not counted).
func (r *Report) deadText(system, variant string, pm pinMode) string {
	dead := func(d DrainResult) float64 { return d.deadReadsPerJob() }
	counted := func(d DrainResult) float64 { return d.ClaimIndexReadsPerJob }
	if summarize(r.drainFigures(system, variant, pm, counted)).Median == 0 {
		return ""
	}
	return fmt.Sprintf("%s steps over %.1f dead claim-index entries per claimed job pinned, %.1f unpinned (medians)", system,
		summarize(r.drainFigures(system, variant, pm, dead)).Median, summarize(r.drainFigures(system, variant, pinNone, dead)).Median)
}

// besideDead sets Beside of the last ratio to deadText.
func (r *Report) besideDead(system, variant string, pm pinMode) {
	r.Ratios[len(r.Ratios)-1].Beside = r.deadText(system, variant, pm)
}

// insertCosts are a per-job cost of a system's admissions by one method,
// in round order (zero where not measured).
func (r *Report) insertCosts(system, store, method string, f func(Cost) float64) []float64 {
	var out []float64
	for _, in := range r.Inserts {
		if in.System == system && in.Store == store && in.Method == method && in.Round > 0 {
			out = append(out, f(in.Cost))
		}
	}
	return out
}

// besideCPU sets Beside of the last ratio (an admission ratio of
// leasehold's method against the peer's): the server CPU per admitted job
// of both sides, median (min–max) over the rounds, so that a ratio read on
// a busy host can be told from one the database's work decides.
func (r *Report) besideCPU(peer, lhMethod, peerMethod string) {
	cpu := func(c Cost) float64 { return c.ServerCPUPerJob }
	lh, pe := summarize(r.insertCosts("leasehold", "postgres", lhMethod, cpu)), summarize(r.insertCosts(r.PeerName, "postgres", peerMethod, cpu))
	if len(lh.Rounds) == 0 || len(pe.Rounds) == 0 {
		return
	}
	r.Ratios[len(r.Ratios)-1].Beside = fmt.Sprintf("server CPU per admitted job, median (min–max) of the rounds: leasehold %s, %s %s", cpuText(lh), peer, cpuText(pe))
}

// cpuText is a CPU figure's rounds as "42.0 µs (40.0–44.0)", with ", noisy"
// in the brackets when they spread wider than NoisyAbove.
func cpuText(sp Spread) string {
	noisy := ""
	if sp.Noisy {
		noisy = ", noisy"
	}
	return fmt.Sprintf("%.1f µs (%.1f–%.1f%s)", sp.Median, sp.Min, sp.Max, noisy)
}

// latencies are one latency figure of a system's rounds.
func (r *Report) latencies(system string, f func(LatencyResult) float64) []float64 {
	var out []float64
	for _, l := range r.Latency {
		if l.System == system {
			out = append(out, f(l))
		}
	}
	return out
}

// computeRatios fills r.Ratios and r.Goals from the measurements.
func (r *Report) computeRatios() {
	r.Ratios = nil
	if r.soakOnly() { // a soak-only run measured no ratio
		r.Goals = r.soakGoals()
		return
	}
	peer := r.PeerName
	if peer == "" {
		peer = "peer"
	}
	speer := r.SQLitePeerName
	if speer == "" {
		speer = "SQLite peer"
	} else {
		speer += " (riversqlite)"
	}
	peerNote := ""
	if r.PeerName == "" {
		peerNote = "the peer was not run"
	}
	speerNote := ""
	if r.SQLitePeerName == "" {
		speerNote = "the SQLite peer was not run"
	}
	rounds := func(name, of string, num, den []float64, better string, target float64, note string) {
		x := Ratio{Name: name, Of: of, Better: better, Target: target, Note: note}
		if rs := ratios(num, den); len(rs) > 0 {
			sp := summarize(rs)
			x.Spread, x.Value = &sp, sp.Median
		} else if x.Note == "" {
			x.Note = "a side was not measured"
		}
		if target > 0 {
			x.Status = status(x)
		}
		r.Ratios = append(r.Ratios, x)
	}
	lhBest := r.drainRates("leasehold", "postgres", bestPG)
	rounds("leasehold / "+peer+" (PostgreSQL drain)", "jobs/s of leasehold [batch claim, CompleteBatch] / jobs/s of "+peer+", round by round",
		lhBest, r.drainRates(r.PeerName, "postgres", "peer"), "higher", 1.5, peerNote)
	// Admission: the goals are against the peer's inserts with a duplicate
	// check on every job (issue 43), each with the server CPU per admitted
	// job of both sides beside it; the plain inserts are there for scale.
	lhOne, lhBulk := r.insertRates("leasehold", "postgres", methodOne), r.insertRates("leasehold", "postgres", methodBulk)
	bulkNote := cmpNote(r.insertNote("leasehold", "postgres", methodBulk), peerNote)
	rounds("leasehold CreateRun / "+peer+" Insert of unique jobs (PostgreSQL, one per call)",
		"jobs/s / jobs/s, round by round; the peer checks every job for a duplicate (UniqueOpts{ByArgs: true}), the nearest it has to an idempotent admission",
		lhOne, r.insertRates(r.PeerName, "postgres", methodOneUnique), "higher", 1.0, peerNote)
	r.besideCPU(peer, methodOne, methodOneUnique)
	rounds("leasehold CreateRuns / "+peer+" InsertMany of unique jobs (PostgreSQL, bulk, per job)",
		fmt.Sprintf("jobs/s / jobs/s, batches of %d, round by round; the peer checks every job for a duplicate (UniqueOpts{ByArgs: true})", r.Settings.BulkBatch),
		lhBulk, r.insertRates(r.PeerName, "postgres", methodBulkUnique), "higher", 1.0, bulkNote)
	r.besideCPU(peer, methodBulk, methodBulkUnique)
	rounds("leasehold CreateRun / "+peer+" Insert (PostgreSQL, one per call)", "jobs/s / jobs/s, round by round; the peer's plain insert, no duplicate check: for scale, no goal",
		lhOne, r.insertRates(r.PeerName, "postgres", methodOne), "higher", 0, peerNote)
	rounds("leasehold CreateRun, concurrent calls coalesced / "+peer+" Insert of unique jobs (PostgreSQL, one per call)",
		fmt.Sprintf("jobs/s / jobs/s, round by round; leasehold with postgres.Options.CoalesceCreateRun = %d; for scale, no goal", r.Settings.Coalesce),
		r.insertRates("leasehold", "postgres", methodCoalesced), r.insertRates(r.PeerName, "postgres", methodOneUnique), "higher", 0, peerNote)
	rounds("leasehold CreateRuns / "+peer+" InsertMany (PostgreSQL, bulk, per job)",
		fmt.Sprintf("jobs/s / jobs/s, batches of %d, round by round; the peer's plain insert, no duplicate check: for scale, no goal", r.Settings.BulkBatch),
		lhBulk, r.insertRates(r.PeerName, "postgres", methodBulk), "higher", 0, bulkNote)
	// Both SQLite systems run at one synchronous setting (reports from
	// before it ran NORMAL).
	sync := "synchronous " + cmp.Or(r.Settings.SQLiteSync, "NORMAL")
	rounds("leasehold / "+speer+" (SQLite drain, "+sync+")", "jobs/s of leasehold sqlite [batch claim, CompleteBatch] / jobs/s of "+speer+", round by round",
		r.drainRates("leasehold", "sqlite", sqliteBest), r.drainRates(r.SQLitePeerName, "sqlite", "peer"), "higher", 1.5, speerNote)
	rounds("leasehold CreateRun / "+speer+" Insert (SQLite, "+sync+", one per call)", "jobs/s / jobs/s, round by round",
		r.insertRates("leasehold", "sqlite", methodOne), r.insertRates(r.SQLitePeerName, "sqlite", methodOne), "higher", 1.5, speerNote)
	rounds("leasehold CreateRuns / "+speer+" InsertMany (SQLite, "+sync+", bulk, per job)", fmt.Sprintf("jobs/s / jobs/s, batches of %d, round by round", r.Settings.BulkBatch),
		r.insertRates("leasehold", "sqlite", methodBulk), r.insertRates(r.SQLitePeerName, "sqlite", methodBulk), "higher", 1.5,
		cmpNote(r.insertNote("leasehold", "sqlite", methodBulk), speerNote))
	// The drain under a pinned horizon: what each system keeps of its own
	// unpinned rate in the same round, and the goal, leasehold keeping more
	// of it than the peer (issue 43).
	peerBest := r.drainRates(r.PeerName, "postgres", "peer")
	for _, pm := range pinModes {
		lhPinned, peerPinned := r.pinnedRates("leasehold", "postgres", bestPG, pm), r.pinnedRates(r.PeerName, "postgres", "peer", pm)
		note := peerNote
		if len(lhPinned) == 0 && note == "" {
			note = "not measured (--no-pin)"
		}
		rounds("leasehold drain, "+pm.text()+" / unpinned", "jobs/s / jobs/s of leasehold [batch claim, CompleteBatch] in the same round",
			lhPinned, lhBest, "higher", 0, note)
		r.besideDead("leasehold", bestPG, pm)
		rounds(peer+" drain, "+pm.text()+" / unpinned", "jobs/s / jobs/s of "+peer+" in the same round",
			peerPinned, peerBest, "higher", 0, note)
		r.besideDead(r.PeerName, "peer", pm)
		rounds("leasehold / "+peer+": share of the unpinned drain kept, "+pm.text(),
			"(leasehold pinned / unpinned) / ("+peer+" pinned / unpinned), round by round: above 1, leasehold loses less to the pin",
			perRound(lhPinned, lhBest), perRound(peerPinned, peerBest), "higher", 1.0, note)
		r.Ratios[len(r.Ratios)-1].Beside = joinNonEmpty(", ", r.deadText("leasehold", bestPG, pm), r.deadText(r.PeerName, "peer", pm))
	}
	cpu := func(c Cost) float64 { return c.ServerCPUPerJob }
	rounds("leasehold / "+peer+" server CPU per drained job", "µs/job / µs/job (PostgreSQL processes), round by round",
		r.drainCosts("leasehold", "postgres", bestPG, cpu), r.drainCosts(r.PeerName, "postgres", "peer", cpu), "lower", 0, peerNote)
	for _, l := range []struct {
		name string
		f    func(LatencyResult) float64
	}{
		{"admit-to-start p50", func(l LatencyResult) float64 { return l.StartP50Ms }},
		{"admit-to-start p99", func(l LatencyResult) float64 { return l.StartP99Ms }},
		{"admit-to-complete p50", func(l LatencyResult) float64 { return l.CompleteP50Ms }},
		{"admit-to-complete p99", func(l LatencyResult) float64 { return l.CompleteP99Ms }},
	} {
		rounds("leasehold / "+peer+" "+l.name+" (steady rate)", "ms / ms "+r.Settings.latencyRateText()+", round by round",
			r.latencies("leasehold", l.f), r.latencies(r.PeerName, l.f), "lower", 0, peerNote)
	}

	ceil := r.meanCeiling()
	ceilings := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i := range out {
			out[i] = ceil
		}
		return out
	}
	rounds("leasehold / ceiling (PostgreSQL drain)", "jobs/s of leasehold [batch claim, CompleteBatch], round by round / mean single-row commits/s of the ceiling loop",
		lhBest, ceilings(lhBest), "higher", 0, "")
	peerRates := r.drainRates(r.PeerName, "postgres", "peer")
	rounds(peer+" / ceiling", "jobs/s, round by round / mean commits/s", peerRates, ceilings(peerRates), "higher", 0, peerNote)
	add := func(name, of string, num, den float64, note string) {
		v := 0.0
		if num > 0 && den > 0 {
			v = num / den
		}
		r.Ratios = append(r.Ratios, Ratio{Name: name, Value: v, Of: of, Note: note})
	}
	bestMedian := summarize(lhBest).Median
	for _, d := range r.Drains {
		if d.System == "leasehold" && d.Round == 0 {
			best := bestMedian
			if d.Store == "sqlite" {
				best = summarize(r.drainRates("leasehold", "sqlite", sqliteBest)).Median
			}
			add(fmt.Sprintf("leasehold %s [%s] / [batch claim, CompleteBatch]", d.Store, d.Name), "jobs/s (one round) / median jobs/s of the rounds (not a peer ratio: for scale)",
				d.JobsPerSec, best, d.NotMeasured)
		}
	}
	if len(r.Depth) >= 2 {
		lo, hi := r.Depth[0], r.Depth[len(r.Depth)-1]
		for _, ph := range []string{phaseClaim, phaseReclaim, phaseMass} {
			pl, ph2 := lo.phase(ph), hi.phase(ph)
			if pl == nil || ph2 == nil {
				continue
			}
			of := fmt.Sprintf("claim latency at depth %s / at %s", count(hi.Depth), count(lo.Depth))
			add(fmt.Sprintf("depth %s / %s, %s p50", count(hi.Depth), count(lo.Depth), ph), of, ph2.P50Ms, pl.P50Ms, "")
			add(fmt.Sprintf("depth %s / %s, %s p99", count(hi.Depth), count(lo.Depth), ph), of, ph2.P99Ms, pl.P99Ms, "")
		}
	}
	r.computeGoals()
}

// computeGoals states where each goal of issue 16 stands, from the ratios.
func (r *Report) computeGoals() {
	r.Goals = nil
	for _, x := range r.Ratios {
		if x.Target == 0 {
			continue
		}
		detail := x.Text()
		switch {
		case x.Spread == nil && x.Note != "":
			detail = x.Note
		case x.Note != "":
			detail += "; " + x.Note
		}
		if x.Beside != "" {
			detail += "; " + x.Beside
		}
		r.Goals = append(r.Goals, Goal{Goal: fmt.Sprintf("%s ≥ %.1f", x.Name, x.Target), Status: x.Status, Detail: detail})
	}
	var noisy []string
	for _, x := range r.Ratios {
		if x.Spread != nil && len(x.Spread.Rounds) > 0 && x.Spread.Noisy {
			noisy = append(noisy, x.Name)
		}
	}
	st, detail := "met", fmt.Sprintf("every peer ratio is the median of %d alternating rounds with its min–max; none is wider than %.0f %% of its median", r.Settings.Rounds, 100*NoisyAbove)
	if len(noisy) > 0 {
		st = "not met"
		detail = fmt.Sprintf("%d ratios flagged noisy (spread above %.0f %% of the median): %s", len(noisy), 100*NoisyAbove, strings.Join(noisy, "; "))
	}
	r.Goals = append(r.Goals, Goal{Goal: "stable ratios: every ratio readable", Status: st, Detail: detail})
	r.Goals = append(r.Goals, r.soakGoals()...)
	if strings.HasPrefix(r.Mode, "quick") {
		st := "met"
		if r.ElapsedSec >= 180 {
			st = "not met"
		}
		r.Goals = append(r.Goals, Goal{Goal: "quick mode under 3 minutes", Status: st, Detail: fmt.Sprintf("%.0f s of measurement (plus the program's build)", r.ElapsedSec)})
	}
}

// joinNonEmpty joins the non-empty strings of xs with sep.
func joinNonEmpty(sep string, xs ...string) string {
	var out []string
	for _, x := range xs {
		if x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, sep)
}

func cmpNote(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (d DepthResult) phase(name string) *PhaseResult {
	for i := range d.Phases {
		if d.Phases[i].Phase == name {
			return &d.Phases[i]
		}
	}
	return nil
}

func (r *Report) meanCeiling() float64 {
	if len(r.Ceiling) == 0 {
		return 0
	}
	sum := 0.0
	for _, c := range r.Ceiling {
		sum += c.CommitsPerSec
	}
	return sum / float64(len(r.Ceiling))
}

// count writes 1000 as 1k and 1000000 as 1M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return fmt.Sprint(n)
}

// findings is the hand-written part of bench.md: what the profiles and plans
// showed and what was changed because of it. It is kept beside the code
// (findings.md) and appended to every rendered report.
//
//go:embed findings.md
var findings string

// Write writes dir/bench.json, dir/bench.md and dir/bench.html.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	r.Markdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "bench.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	var page strings.Builder
	r.HTML(&page)
	return os.WriteFile(filepath.Join(dir, "bench.html"), []byte(page.String()), 0o644)
}

// Rerender reads dir/bench.json and writes it again with its ratios and
// goals recomputed and bench.md and bench.html rendered by this code (its
// findings included); the measured figures are the file's.
func Rerender(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s/bench.json: %w", dir, err)
	}
	r.computeRatios()
	return r.Write(dir)
}

// Markdown renders the report: goals and ratios first, then the raw
// figures, the settings, the server and the findings.
func (r *Report) Markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# leasehold benchmark (%s mode)\n\n", r.Mode)
	private := ""
	if r.Postgres.Private {
		private = " (" + privateServerText + ")"
	}
	p("Commit `%s`, started %s, %.0f s. PostgreSQL: %s%s. Machine: %d CPUs (%s), %s; load average %s at the start, %s at the end (the machine is shared).\n\n",
		r.Commit, r.StartedAt, r.ElapsedSec, shortVersion(r.Postgres.Version), private, r.Host.CPUs, r.Host.CPUModel, r.Host.Go, loadText(r.LoadBefore), loadText(r.LoadAfter))
	if r.soakOnly() {
		p("A soak and nothing else (--soak-only, or --soak-smoke: a smoke, to see the soak work, never the evidence): the ratios are in the full run's report.\n\n")
	} else {
		p("Only the ratios mean anything: every figure below was measured in this one run on a shared machine. Each leasehold / peer ratio is the median of %d alternating rounds (leasehold, peer, leasehold, peer, …), shown with its min–max; a ratio whose rounds spread more than %.0f %% of its median is printed as **noisy: not readable** instead of as a number. Pictures: bench.html.\n\n",
			r.Settings.Rounds, 100*NoisyAbove)
	}

	p("## Goals (issue 16)\n\n| goal | status | figures |\n|---|---|---|\n")
	for _, g := range r.Goals {
		p("| %s | **%s** | %s |\n", g.Goal, g.Status, g.Detail)
	}
	if r.soakOnly() {
		r.Soak.markdown(p)
		return
	}

	p("\n## Ratios\n\n| ratio | median (min–max, rounds) | better | of | note |\n|---|---|---|---|---|\n")
	for _, x := range r.Ratios {
		p("| %s | %s | %s | %s | %s |\n", x.Name, x.Text(), x.Better, x.Of, joinNonEmpty("; ", x.Note, x.Beside))
	}

	p("\n## Throughput: drain N queued jobs with a no-op handler\n\n")
	p("| system | store | variant | horizon | round | jobs/s | s | write txns/job | commits/job | WAL B/job | server CPU µs/job | client CPU µs/job | jobs/claim | ms/claim | jobs/complete call | ms/complete call | retries | claim-index entries read/job | dead row versions at the end |\n")
	p("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range r.Drains {
		if d.NotMeasured != "" {
			p("| %s | %s | %s | %s | %s | not measured: %s | | | | | | | | | | | | | |\n", d.System, d.Store, d.Name, pinMode(d.Pin).text(), roundText(d.Round), d.NotMeasured)
			continue
		}
		p("| %s | %s | %s | %s | %s | %.0f | %.2f | %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %d | %s | %s |\n", d.System, d.Store, d.Name, pinMode(d.Pin).text(), roundText(d.Round), d.JobsPerSec, d.Seconds,
			pgOnly(d.Store, "%.2f", d.Cost.WriteTxPerJob), pgOnly(d.Store, "%.3f", d.Cost.CommitsPerJob), pgOnly(d.Store, "%.0f", d.Cost.WALBytesPerJob),
			pgOnly(d.Store, "%.0f", d.Cost.ServerCPUPerJob), d.Cost.ClientCPUPerJob,
			opt("%.1f", d.JobsPerClaim), opt("%.2f", d.ClaimCallMs), opt("%.1f", d.JobsPerCompleteCall), opt("%.2f", d.CompleteCallMs), d.Retries,
			opt("%.1f", d.ClaimIndexReadsPerJob), opt("%.0f", float64(d.DeadRowVersions)))
	}
	p("\nRound `once`: a variant measured outside the rounds, for scale. Write txns/job counts the transactions that wrote anything during the drain (transaction ids assigned; each is one commit and, with synchronous_commit on, one WAL flush unless group commit shares it); commits/job is pg_stat_database.xact_commit of the system's database (read-only transactions included, read once the phase's backends have exited); WAL B/job the WAL written (pg_current_wal_lsn); server CPU is the CPU time of the PostgreSQL server's processes, backends that exited during the phase included, client CPU this program's. The peer's jobs/claim and jobs/complete call are not observable from outside it.\n")
	p("\nHorizon: each round drains each system unpinned, then with its database's MVCC horizon pinned for the whole drain, then pinned from the drain's midpoint (once half its jobs are completed), leasehold then the peer each time. The pin is a REPEATABLE READ transaction of another connection to the same database that has taken its snapshot and stays open to the drain's end (checked: its backend still holds the same backend_xmin when the drain ends), as a long report or a forgotten session holds it in production: no row version that died after its snapshot can be removed, and no index entry pointing to one can be marked dead, so every claim steps over the entries of the jobs claimed before it. Claim-index entries read/job is idx_tup_read of the indexes the claims scan (leasehold: jobs_due and jobs_expired; River: river_job_prioritized_fetching_index) per drained job: one for the job itself, the rest entries of row versions the claims stepped over. Dead row versions: the job table's n_dead_tup when the drain ended.\n")

	p("\n## Admission\n\n| system | store | method | round | jobs/s | s | write txns/job | commits/job | WAL B/job | server CPU µs/job | client CPU µs/job |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, in := range r.Inserts {
		if in.NotMeasured != "" {
			p("| %s | %s | %s | %s | not measured: %s | | | | | | |\n", in.System, in.Store, methodText(in), roundText(in.Round), in.NotMeasured)
			continue
		}
		p("| %s | %s | %s | %s | %.0f | %.2f | %s | %s | %s | %s | %.0f |\n", in.System, in.Store, methodText(in), roundText(in.Round), in.JobsPerSec, in.Seconds,
			pgOnly(in.Store, "%.2f", in.Cost.WriteTxPerJob), pgOnly(in.Store, "%.3f", in.Cost.CommitsPerJob), pgOnly(in.Store, "%.0f", in.Cost.WALBytesPerJob),
			pgOnly(in.Store, "%.0f", in.Cost.ServerCPUPerJob), in.Cost.ClientCPUPerJob)
	}
	p("\nOne per call: %d jobs from W goroutines (leasehold CreateRun: run, first event, job and idempotency record in one transaction, fingerprint checked; River Insert, and Insert with UniqueOpts{ByArgs: true}). Bulk: %d jobs in calls of %d, one after another (leasehold spec.BatchCreator.CreateRuns, River InsertMany, and InsertMany with UniqueOpts{ByArgs: true}). River's unique inserts check every job for a duplicate (its unique_key column and index) as an idempotent admission checks its key: the admission goals are against them; the plain inserts, with no such check, are there for scale. Every River job's arguments differ, so none is skipped (a skipped one fails the run). The etcd store admits %d jobs each way. The drains of leasehold's PostgreSQL store start from the bulk loader's rows (the same rows CreateRun writes, checked by bench_test.go and by the fingerprint check at every depth); River's from InsertMany; leasehold's SQLite drains from a file admitted with CreateRun.\n",
		r.Settings.InsertN, r.Settings.bulkN(), r.Settings.BulkBatch, r.Settings.SQLiteN)

	p("\n## Latency at a steady arrival rate (PostgreSQL, notifications on)\n\n")
	p("| system | round | arrival rate/s | achieved/s | jobs | admission call p50 ms | p99 ms | admit→start p50 ms | p99 ms | admit→complete p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range r.Latency {
		p("| %s | %d | %.0f | %.0f | %d | %s | %s | %.2f | %.2f | %.2f | %.2f |\n", l.System, l.Round, l.RatePerSec, l.AchievedRate, l.Jobs,
			measuredMs(l.CallP50Ms), measuredMs(l.CallP99Ms), l.StartP50Ms, l.StartP99Ms, l.CompleteP50Ms, l.CompleteP99Ms)
	}
	p("\n%s Jobs are admitted one per call, each when due (%.0f s per round%s); admit is just before the admission call, admitted when the admission call returned (the admission call's own time, its backlog when arrivals outrun it; leasehold's includes the retries of a call refused unavailable, which the contract tells a client to retry, River's Insert is called once), start the handler's entry, complete the acknowledgement of the completion (leasehold: the worker's OnResult after the batch committed; River: its JobCompleted event, sent after its completer committed). leasehold runs package worker with W slots, batch claims and batched completion, waking on NOTIFY; River its client with the settings below.%s\n", r.latencyRule(), r.Settings.LatencySeconds, r.warmupText(), r.unrecordedCalls())

	p("\n## Ceiling: the database's own commit rate\n\n| when | method | commits/s | s | WAL B/commit | server CPU µs/commit |\n|---|---|---:|---:|---:|---:|\n")
	for i, c := range r.Ceiling {
		when := "first"
		if i > 0 {
			when = "after the rounds"
		}
		p("| %s | %s | %.0f | %.2f | %.0f | %.0f |\n", when, c.Method, c.CommitsPerSec, c.Seconds, c.Cost.WALBytesPerJob, c.Cost.ServerCPUPerJob)
	}

	p("\n## Depth: single claims (Limit 1, one transaction each) at queue depth\n\n")
	p("| depth | load s | phase | expired leases | claims | p50 ms | p99 ms | mean ms | max ms | plan buffers | plan exec ms |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range r.Depth {
		for _, ph := range d.Phases {
			p("| %s | %.1f | %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %d | %.3f |\n", count(d.Depth), d.LoadSeconds, ph.Phase, ph.Expired,
				ph.Samples, ph.P50Ms, ph.P99Ms, ph.MeanMs, ph.MaxMs, ph.PlanBuffers, ph.PlanMs)
		}
	}
	p("\nPhases: `claim` — D queued jobs; `reclaim` — plus %d leases that expired (a few crashed workers), first in claim order; `mass_expiry` — plus D/10 more expired leases (a fleet died). A claim's latency includes its commit. Plan figures are the claim's EXPLAIN (ANALYZE, BUFFERS) after the phase (shared hit+read buffers of the top node, execution time).\n", reclaimExpired)
	if strings.HasPrefix(r.Mode, "quick") {
		p("\nQuick mode: depths %v (the full mode measures 1k, 100k and 1M).\n", r.Settings.Depths)
	}

	r.Soak.markdown(p)

	p("\n## Settings\n\n")
	s := r.Settings
	p("- %d alternating rounds; N = %d jobs per PostgreSQL drain, %d per SQLite drain and per etcd admission and drain, %d per admission run one per call, %d per bulk admission run in batches of %d\n", s.Rounds, s.N, s.SQLiteN, s.InsertN, s.bulkN(), s.BulkBatch)
	p("- W = %d handler goroutines (leasehold workers, River MaxWorkers); C = %d connections per client (leasehold's pool, River's pool, the ceiling loop)\n", s.Workers, s.Conns)
	p("- batch claim: %d producer goroutines each claim up to min(%d, free handler slots) per Claim, after a full claim waiting up to %g ms for more slots to free (worker.Config.ClaimGather); batched completion: %d goroutines each send what has queued up, up to %d per CompleteBatch\n", s.Producers, s.ClaimBatch, s.ClaimGatherMs, s.Completers, s.CompleteBatch)
	p("- depths %v, %d timed claims per phase (fewer where the phase holds fewer expired leases); lease %d ms; leasehold on the database clock (production mode), fencing on\n", s.Depths, s.DepthSamples, s.LeaseMs)
	p("- SQLite: synchronous %s for leasehold's store and the SQLite peer alike (--sqlite-sync; FULL, the store's default, flushes every commit; NORMAL flushes at checkpoints and can lose acknowledged writes to a power loss)\n", cmp.Or(s.SQLiteSync, "NORMAL"))
	for _, peer := range []struct {
		name string
		set  map[string]string
	}{{r.PeerName, r.PeerSettings}, {r.SQLitePeerName + " on SQLite", r.SQLitePeerSettings}} {
		if len(peer.set) == 0 {
			continue
		}
		p("- %s:", peer.name)
		for _, k := range sortedKeys(peer.set) {
			p(" %s=%s;", k, peer.set[k])
		}
		p("\n")
	}
	p("\n## PostgreSQL\n\n%s\n\n| setting | value |\n|---|---|\n", r.Postgres.Version)
	for _, k := range sortedKeys(r.Postgres.Settings) {
		p("| %s | %s |\n", k, r.Postgres.Settings[k])
	}
	for _, d := range r.Drains {
		if d.ClaimPlan != "" {
			p("\n## The drain's claim (%s, %d jobs queued): EXPLAIN (ANALYZE, BUFFERS), rolled back\n\n%d buffers, %.3f ms: %.1f buffers and %.3f ms per claimed job.\n\n```\n%s\n```\n",
				d.Name, d.Jobs, d.ClaimPlanBuffers, d.ClaimPlanMs, float64(d.ClaimPlanBuffers)/float64(max(1, r.Settings.ClaimBatch)), d.ClaimPlanMs/float64(max(1, r.Settings.ClaimBatch)), d.ClaimPlan)
		}
	}
	if len(r.Depth) > 0 {
		d := r.Depth[len(r.Depth)-1]
		p("\n## Claim plans at depth %s\n", count(d.Depth))
		for _, ph := range d.Phases {
			p("\n### %s\n\n```\n%s\n```\n", ph.Phase, ph.Plan)
		}
	}
	p("\n%s", findings)
}

func roundText(r int) string {
	if r == 0 {
		return "once"
	}
	return fmt.Sprint(r)
}

// methodText names an admission method for the tables.
func methodText(in InsertResult) string {
	lh := in.System == "leasehold"
	switch {
	case in.Method == methodOne && lh:
		return "CreateRun, one run per call, W goroutines"
	case in.Method == methodCoalesced && in.Admission != nil && in.Admission.SharedTransactions > 0:
		a := in.Admission
		return fmt.Sprintf("CreateRun, one run per call, W goroutines, concurrent calls coalesced (Options.CoalesceCreateRun): %d calls in %d transactions, %.1f per transaction, %d attempts retried",
			a.Coalesced, a.SharedTransactions, float64(a.Coalesced)/float64(a.SharedTransactions), a.Retried)
	case in.Method == methodCoalesced:
		return "CreateRun, one run per call, W goroutines, concurrent calls coalesced (Options.CoalesceCreateRun)"
	case in.Method == methodOne:
		return "Insert, one job per call, W goroutines"
	case in.Method == methodOneUnique:
		return "Insert, UniqueOpts{ByArgs: true}, one job per call, W goroutines (every job checked for a duplicate)"
	case in.Method == methodBulk && lh:
		return "CreateRuns (bulk)"
	case in.Method == methodBulk:
		return "InsertMany (bulk)"
	case in.Method == methodBulkUnique:
		return "InsertMany, UniqueOpts{ByArgs: true} (bulk, every job checked for a duplicate)"
	}
	return in.Method
}

func loadText(l []float64) string {
	if len(l) < 3 {
		return "unknown"
	}
	return fmt.Sprintf("%.2f/%.2f/%.2f", l[0], l[1], l[2])
}

// loadAverage reads /proc/loadavg (nil where it is not available).
func loadAverage() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	var out []float64
	for _, x := range f[:min(3, len(f))] {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

func pgOnly(store, format string, v float64) string {
	if store != "postgres" {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

func opt(format string, v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

func shortVersion(v string) string {
	if f := strings.Fields(v); len(f) >= 2 {
		return f[0] + " " + f[1]
	}
	return v
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

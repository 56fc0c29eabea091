package bench

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Report is everything one run measured; it is written as bench.json and
// rendered as bench.md.
type Report struct {
	Mode         string            `json:"mode"` // quick or full
	StartedAt    string            `json:"started_at"`
	ElapsedSec   float64           `json:"elapsed_sec"`
	Commit       string            `json:"commit"`
	Host         HostInfo          `json:"host"`
	Postgres     PostgresInfo      `json:"postgres"`
	Settings     Settings          `json:"settings"`
	PeerName     string            `json:"peer,omitempty"`
	PeerSettings map[string]string `json:"peer_settings,omitempty"`
	Ratios       []Ratio           `json:"ratios"`
	Drains       []DrainResult     `json:"throughput"`
	Inserts      []InsertResult    `json:"inserts"`
	Ceiling      []CeilingResult   `json:"ceiling"`
	Depth        []DepthResult     `json:"depth"`
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
}

// Settings are the benchmark's knobs as run.
type Settings struct {
	N             int   `json:"n"`
	Workers       int   `json:"workers"`
	Conns         int   `json:"conns"`
	ClaimBatch    int   `json:"claim_batch"`
	Producers     int   `json:"producers"`
	CompleteBatch int   `json:"complete_batch"`
	Completers    int   `json:"completers"`
	Depths        []int `json:"depths"`
	DepthSamples  int   `json:"depth_samples"`
	LeaseMs       int64 `json:"lease_ms"`
}

// Ratio is one of the headline comparisons. Value is 0 when a side was not
// measured (Note says why).
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Of    string  `json:"of"` // what was divided by what
	Note  string  `json:"note,omitempty"`
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
	Cost                Cost    `json:"cost"`
	JobsPerClaim        float64 `json:"jobs_per_claim,omitempty"`
	JobsPerCompleteCall float64 `json:"jobs_per_complete_call,omitempty"`
	ClaimCallMs         float64 `json:"claim_call_ms,omitempty"`    // mean wall time of one Claim
	CompleteCallMs      float64 `json:"complete_call_ms,omitempty"` // mean wall time of one Complete or CompleteBatch
	Retries             int64   `json:"unavailable_retries"`
	NotMeasured         string  `json:"not_measured,omitempty"`
}

// InsertResult is one admission run.
type InsertResult struct {
	System     string  `json:"system"`
	Store      string  `json:"store"`
	Method     string  `json:"method"`
	Jobs       int     `json:"jobs"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	Cost       Cost    `json:"cost"`
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

// computeRatios fills r.Ratios from the measurements.
func (r *Report) computeRatios() {
	r.Ratios = nil
	best := r.bestLeasehold()
	peer := r.drain(func(d DrainResult) bool { return d.Variant == "peer" })
	ceil := r.meanCeiling()
	add := func(name, of string, num, den float64, note string) {
		v := 0.0
		if num > 0 && den > 0 {
			v = num / den
		}
		r.Ratios = append(r.Ratios, Ratio{Name: name, Value: v, Of: of, Note: note})
	}
	peerName := r.PeerName
	if peerName == "" {
		peerName = "peer"
	}
	bestName, bestRate := "not measured", 0.0
	if best != nil {
		bestName, bestRate = best.Name, best.JobsPerSec
	}
	peerRate, peerNote := 0.0, "the peer was not run"
	if peer != nil {
		peerRate, peerNote = peer.JobsPerSec, ""
	}
	add("leasehold / "+peerName+" (throughput, best variant)", "jobs/s of leasehold postgres ["+bestName+"] / jobs/s of "+peerName, bestRate, peerRate, peerNote)
	for _, d := range r.Drains {
		if d.System == "leasehold" && d.Store == "postgres" {
			note := d.NotMeasured
			if note == "" {
				note = peerNote
			}
			add("leasehold ["+d.Name+"] / "+peerName, "jobs/s / jobs/s", d.JobsPerSec, peerRate, note)
		}
	}
	ceilNote := ""
	if ceil == 0 {
		ceilNote = "the ceiling was not measured"
	}
	add("leasehold / ceiling (best variant)", "jobs/s of leasehold postgres ["+bestName+"] / single-row commits/s of the ceiling loop", bestRate, ceil, ceilNote)
	add(peerName+" / ceiling", "jobs/s / commits/s", peerRate, ceil, cmpNote(peerNote, ceilNote))
	if lh, pe := r.insert("leasehold", "postgres", "CreateRun"), r.insert(peerName, "postgres", "Insert,"); lh != nil || pe != nil {
		a, b := 0.0, 0.0
		if lh != nil {
			a = lh.JobsPerSec
		}
		if pe != nil {
			b = pe.JobsPerSec
		}
		add("leasehold CreateRun / "+peerName+" Insert (one job per call)", "jobs/s / jobs/s", a, b, peerNote)
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

func (r *Report) drain(f func(DrainResult) bool) *DrainResult {
	for i := range r.Drains {
		if f(r.Drains[i]) && r.Drains[i].NotMeasured == "" {
			return &r.Drains[i]
		}
	}
	return nil
}

func (r *Report) bestLeasehold() *DrainResult {
	var best *DrainResult
	for i, d := range r.Drains {
		if d.System == "leasehold" && d.Store == "postgres" && d.NotMeasured == "" && (best == nil || d.JobsPerSec > best.JobsPerSec) {
			best = &r.Drains[i]
		}
	}
	return best
}

func (r *Report) insert(system, store, method string) *InsertResult {
	for i, in := range r.Inserts {
		if in.System == system && in.Store == store && strings.HasPrefix(in.Method, method) {
			return &r.Inserts[i]
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

// Write writes dir/bench.json and dir/bench.md.
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
	return os.WriteFile(filepath.Join(dir, "bench.md"), []byte(md.String()), 0o644)
}

// Markdown renders the report: ratios first, then the raw figures, the
// settings, the server and the findings.
func (r *Report) Markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# leasehold benchmark (%s mode)\n\n", r.Mode)
	p("Commit `%s`, started %s, %.0f s. PostgreSQL: %s. Machine: %d CPUs (%s), %s.\n\n",
		r.Commit, r.StartedAt, r.ElapsedSec, shortVersion(r.Postgres.Version), r.Host.CPUs, r.Host.CPUModel, r.Host.Go)
	p("Only the ratios mean anything: every figure below was measured in this one run, back to back, on a shared machine.\n\n")

	p("## Ratios\n\n| ratio | value | of | note |\n|---|---:|---|---|\n")
	for _, x := range r.Ratios {
		v := "—"
		if x.Value > 0 {
			v = fmt.Sprintf("%.2f", x.Value)
		}
		p("| %s | %s | %s | %s |\n", x.Name, v, x.Of, x.Note)
	}

	p("\n## Throughput: drain N queued jobs with a no-op handler\n\n")
	p("| system | store | variant | jobs/s | s | write txns/job | WAL B/job | server CPU µs/job | client CPU µs/job | jobs/claim | ms/claim | jobs/complete call | ms/complete call | retries |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range r.Drains {
		if d.NotMeasured != "" {
			p("| %s | %s | %s | not measured: %s | | | | | | | | | | |\n", d.System, d.Store, d.Name, d.NotMeasured)
			continue
		}
		p("| %s | %s | %s | %.0f | %.2f | %s | %s | %s | %.0f | %s | %s | %s | %s | %d |\n", d.System, d.Store, d.Name, d.JobsPerSec, d.Seconds,
			pgOnly(d.Store, "%.2f", d.Cost.WriteTxPerJob), pgOnly(d.Store, "%.0f", d.Cost.WALBytesPerJob),
			pgOnly(d.Store, "%.0f", d.Cost.ServerCPUPerJob), d.Cost.ClientCPUPerJob,
			opt("%.1f", d.JobsPerClaim), opt("%.2f", d.ClaimCallMs), opt("%.1f", d.JobsPerCompleteCall), opt("%.2f", d.CompleteCallMs), d.Retries)
	}
	p("\nWrite txns/job counts the transactions that wrote anything during the drain (transaction ids assigned; each is one commit and, with synchronous_commit on, one WAL flush unless group commit shares it), WAL B/job the WAL written (pg_current_wal_lsn); server CPU is the PostgreSQL processes' CPU time, client CPU this program's. The peer's jobs/claim and jobs/complete call are not observable from outside it.\n")

	p("\n## Inserts\n\n| system | store | method | jobs/s | s | write txns/job | WAL B/job |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, in := range r.Inserts {
		p("| %s | %s | %s | %.0f | %.2f | %s | %s |\n", in.System, in.Store, in.Method, in.JobsPerSec, in.Seconds,
			pgOnly(in.Store, "%.2f", in.Cost.WriteTxPerJob), pgOnly(in.Store, "%.0f", in.Cost.WALBytesPerJob))
	}
	p("\nThe throughput drains of leasehold's PostgreSQL store start from the bulk loader's rows (the same rows CreateRun writes, checked by bench_test.go and by the fingerprint check at every depth); River's from InsertMany.\n")

	p("\n## Ceiling: the database's own commit rate\n\n| when | method | commits/s | s | WAL B/commit | server CPU µs/commit |\n|---|---|---:|---:|---:|---:|\n")
	for i, c := range r.Ceiling {
		when := "first"
		if i > 0 {
			when = "after the drains"
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
	if r.Mode == "quick" {
		p("\nQuick mode: the 1M point is really loaded (bulk loader) but measured with a smaller sample (at most 100 claims per phase).\n")
	}

	p("\n## Settings\n\n")
	s := r.Settings
	p("- N = %d jobs per throughput run; W = %d handler goroutines (leasehold workers, River MaxWorkers); C = %d connections per client (leasehold's pool, River's pool, the ceiling loop)\n", s.N, s.Workers, s.Conns)
	p("- batch claim: %d producer goroutines each claim up to min(%d, free handler slots) per Claim; batched completion: %d goroutines each send what has queued up, up to %d per CompleteBatch\n", s.Producers, s.ClaimBatch, s.Completers, s.CompleteBatch)
	p("- depths %v, %d timed claims per phase (fewer where the phase holds fewer expired leases); lease %d ms; leasehold on the database clock (production mode), fencing on\n", s.Depths, s.DepthSamples, s.LeaseMs)
	if r.PeerName != "" {
		p("- %s:", r.PeerName)
		for _, k := range sortedKeys(r.PeerSettings) {
			p(" %s=%s;", k, r.PeerSettings[k])
		}
		p("\n")
	}
	p("\n## PostgreSQL\n\n%s\n\n| setting | value |\n|---|---|\n", r.Postgres.Version)
	for _, k := range sortedKeys(r.Postgres.Settings) {
		p("| %s | %s |\n", k, r.Postgres.Settings[k])
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

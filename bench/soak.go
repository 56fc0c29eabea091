package bench

import (
	"context"
	"fmt"
	"html"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The soak (issue 43): jobs arrive one CreateRun (River: Insert) at a time at
// one steady rate for a long while, workers draining them as they come,
// with the database's MVCC horizon pinned for a stretch in the middle; the
// queue is sampled over time (throughput, admit-to-complete p99, backlog,
// dead tuples, table and index sizes, the host's load) and the goals are
// judged from those samples and the pin's recorded start and end alone
// (evaluateDrainBack, evaluateBounded). leasehold and the peer soak one
// after the other, each on its own database with the machine to itself:
// run together on two shared cores, each one's backlog would follow the
// other's load, and the pin of one database does not hold the other's
// horizon anyway.

// Soak defaults (Options.Soak* fields at zero).
const (
	DefaultSoak         = 20 * time.Minute // a full run's soak, per system
	DefaultSoakPin      = 5 * time.Minute
	DefaultSoakInterval = 10 * time.Second
	DefaultSoakRate     = 400.0 // jobs per second, both systems
	// The smoke (--soak-smoke): long enough for every window the goals
	// read, short enough for a shared machine.
	SmokeSoak         = 4 * time.Minute
	SmokeSoakPin      = time.Minute
	SmokeSoakInterval = 5 * time.Second
)

// The goals' rules, in one place; the report states them.
const (
	// soakRecoverWithin: the backlog must be back at its pre-pin level
	// within this many seconds of the pin's end; it is also the grace
	// (autovacuum's default naptime) before the bounded-size window.
	soakRecoverWithin = 60.0
	// soakGrowthTolerance: after the pin (and the grace), the tables may
	// grow by at most this multiple of the bytes per admitted job they
	// grew by before it.
	soakGrowthTolerance = 1.25
	// soakNoisyLoadPerCPU: a drain-back judged while the host's mean
	// 1-minute load average exceeded this many per CPU is not readable.
	soakNoisyLoadPerCPU = 2.5
	// soakBehind: a system whose backlog grew by more than this share of
	// the jobs admitted in the pre-pin window was not keeping up before
	// the pin: it has no pre-pin level to drain back to.
	soakBehind = 0.05
	// soakMinWindow: the fewest seconds of samples a window the goals read
	// must span.
	soakMinWindow = 20.0
	// soakWarmup bounds the start of the pre-pin window (a fresh client's
	// first minute is not its steady state): the window starts at
	// min(soakWarmup, a third of the time before the pin).
	soakWarmup = 60.0
)

// SoakSample is the state of one system's soak at one moment.
type SoakSample struct {
	// T is the sample's time in seconds since the soak's timeline began.
	T float64 `json:"t_sec"`
	// Admitted and Completed count the jobs whose admission began and
	// whose completion was acknowledged by T; Backlog is the jobs admitted
	// and not completed.
	Admitted  int `json:"admitted"`
	Completed int `json:"completed"`
	Backlog   int `json:"backlog"`
	// Throughput is the completions per second since the previous sample;
	// P99Ms the admit-to-complete p99 of the jobs completed since then (0:
	// none completed).
	Throughput float64 `json:"completed_per_sec"`
	P99Ms      float64 `json:"admit_to_complete_p99_ms"`
	// The system's tables (all of its schema): pg_stat_user_tables'
	// n_live_tup, n_dead_tup and autovacuum_count summed, pg_table_size and
	// pg_indexes_size summed.
	LiveTuples  int64 `json:"live_tuples"`
	DeadTuples  int64 `json:"dead_tuples"`
	Autovacuums int64 `json:"autovacuums"`
	TableBytes  int64 `json:"table_bytes"`
	IndexBytes  int64 `json:"index_bytes"`
	// Pinned says the pin held the horizon when the sample was taken.
	Pinned bool `json:"pinned"`
	// Load is the host's 1-minute load average (/proc/loadavg).
	Load float64 `json:"host_load_1m"`
}

// bytes is the system's table and index size.
func (s SoakSample) bytes() int64 { return s.TableBytes + s.IndexBytes }

// SoakRun is one system's soak: its samples, its pin and the goals' verdicts
// on them.
type SoakRun struct {
	System      string  `json:"system"`
	Schema      string  `json:"schema"`
	RatePerSec  float64 `json:"arrival_rate_per_sec"`
	Jobs        int     `json:"jobs"`
	DurationSec float64 `json:"duration_sec"`
	// PinStartSec and PinEndSec are when the pin's snapshot was taken and
	// when it was released, on the samples' clock (0: never). PinNotHeld
	// says why the pin cannot be trusted (it no longer held its
	// backend_xmin when released, or the soak ended first).
	PinStartSec float64      `json:"pin_start_sec"`
	PinEndSec   float64      `json:"pin_end_sec"`
	PinXmin     string       `json:"pin_xmin,omitempty"`
	PinNotHeld  string       `json:"pin_not_held,omitempty"`
	Samples     []SoakSample `json:"samples"`
	// CPUs is the host's CPU count, for the load rule.
	CPUs int `json:"cpus"`
	// Autovacuum is the server's autovacuum setting during the soak (""
	// when not recorded).
	Autovacuum string      `json:"autovacuum,omitempty"`
	DrainBack  SoakVerdict `json:"drain_back"`
	Bounded    SoakVerdict `json:"bounded"`
}

// SoakVerdict is where one soak goal stands for one system.
type SoakVerdict struct {
	Status string `json:"status"` // met, not met, not readable
	Detail string `json:"detail"`
}

// Soak is the soak part of a report.
type Soak struct {
	RatePerSec  float64   `json:"arrival_rate_per_sec"`
	DurationSec float64   `json:"duration_sec"`
	PinSec      float64   `json:"pin_sec"`
	IntervalSec float64   `json:"interval_sec"`
	Order       string    `json:"order"`
	Runs        []SoakRun `json:"runs"`
}

// evaluate fills the verdicts of every run from its samples.
func (s *Soak) evaluate() {
	for i := range s.Runs {
		s.Runs[i].DrainBack = evaluateDrainBack(s.Runs[i])
		s.Runs[i].Bounded = evaluateBounded(s.Runs[i])
	}
}

// pinProblem is why a run's pin cannot be read ("" when it can).
func (r SoakRun) pinProblem() string {
	switch {
	case r.PinNotHeld != "":
		return "the pin did not hold: " + r.PinNotHeld
	case r.PinStartSec <= 0 || r.PinEndSec <= r.PinStartSec:
		return "the horizon was never pinned"
	}
	return ""
}

// window is the run's samples with from ≤ T ≤ to.
func (r SoakRun) window(from, to float64) []SoakSample {
	var out []SoakSample
	for _, s := range r.Samples {
		if s.T >= from && s.T <= to {
			out = append(out, s)
		}
	}
	return out
}

// prePin is the pre-pin window: from the warm-up's end to the pin's start.
func (r SoakRun) prePin() []SoakSample {
	var out []SoakSample
	for _, s := range r.window(math.Min(soakWarmup, r.PinStartSec/3), r.PinStartSec) {
		if s.T < r.PinStartSec {
			out = append(out, s)
		}
	}
	return out
}

func span(ss []SoakSample) float64 {
	if len(ss) < 2 {
		return 0
	}
	return ss[len(ss)-1].T - ss[0].T
}

// evaluateDrainBack judges "the backlog drains back to its pre-pin level
// within soakRecoverWithin seconds of the pin's end": the pre-pin level is
// the largest backlog sampled in the pre-pin window; met when a sample
// taken at most soakRecoverWithin after the pin's end shows a backlog at or
// below it. Not readable: a pin that did not hold, a window with too few
// samples, a system not keeping up before the pin (soakBehind), or a host whose mean 1-minute load over the pin and the minute
// after it exceeded soakNoisyLoadPerCPU per CPU (whatever the backlog did).
func evaluateDrainBack(r SoakRun) SoakVerdict {
	if p := r.pinProblem(); p != "" {
		return SoakVerdict{"not readable", p}
	}
	pre := r.prePin()
	if span(pre) < soakMinWindow {
		return SoakVerdict{"not readable", fmt.Sprintf("the pre-pin window has %.0f s of samples, fewer than %.0f", span(pre), soakMinWindow)}
	}
	level := 0
	for _, s := range pre {
		level = max(level, s.Backlog)
	}
	first, last := pre[0], pre[len(pre)-1]
	if grew, admitted := last.Backlog-first.Backlog, last.Admitted-first.Admitted; float64(grew) > soakBehind*float64(admitted) {
		return SoakVerdict{"not readable", fmt.Sprintf("no pre-pin level to drain back to: the system did not keep up with the arrivals before the pin (its backlog grew by %d of the %d jobs admitted in the pre-pin window)", grew, admitted)}
	}
	peak := 0
	for _, s := range r.window(r.PinStartSec, r.PinEndSec) {
		peak = max(peak, s.Backlog)
	}
	after := r.window(r.PinEndSec, r.PinEndSec+soakRecoverWithin)
	if len(after) == 0 || after[len(after)-1].T < r.PinEndSec+soakRecoverWithin/2 {
		return SoakVerdict{"not readable", fmt.Sprintf("too few samples in the %.0f s after the pin's end", soakRecoverWithin)}
	}
	recovered := -1.0
	for _, s := range r.window(r.PinEndSec, math.Inf(1)) {
		if s.Backlog <= level {
			recovered = s.T - r.PinEndSec
			break
		}
	}
	what := fmt.Sprintf("pre-pin level %d jobs (largest backlog sampled before the pin), peak %d while pinned, ", level, peak)
	switch {
	case recovered < 0:
		what += "never back to it by the soak's end"
	default:
		what += fmt.Sprintf("back to it %.0f s after the pin's end", recovered)
	}
	var load float64
	judged := r.window(r.PinStartSec, r.PinEndSec+soakRecoverWithin)
	for _, s := range judged {
		load += s.Load
	}
	load /= float64(max(1, len(judged)))
	limit := soakNoisyLoadPerCPU * float64(max(1, r.CPUs))
	if load > limit {
		return SoakVerdict{"not readable", fmt.Sprintf("host too noisy: mean 1-minute load %.1f over the pin and the minute after it, above %.1f (%.1f per CPU); %s", load, limit, soakNoisyLoadPerCPU, what)}
	}
	what += fmt.Sprintf("; mean host load %.1f", load)
	if recovered >= 0 && recovered <= soakRecoverWithin {
		return SoakVerdict{"met", what}
	}
	return SoakVerdict{"not met", what}
}

// evaluateBounded judges "the tables return to a bounded size with
// autovacuum on". PostgreSQL does not give a table's pages back (only VACUUM
// FULL does), and both systems keep their completed jobs, so the tables
// grow with every admitted job; bounded means the pin's dead row versions
// were vacuumed and their space is reused: (1) some sample after the pin's
// end shows no more dead tuples than the most the pre-pin window showed,
// and (2) from soakRecoverWithin after the pin's end to the soak's end, the
// tables and indexes grew by at most soakGrowthTolerance times the bytes
// per admitted job they grew by in the pre-pin window. A size per job is
// not a timing, so host load does not make it unreadable; a pin that did
// not hold, a window too short or a server with autovacuum off does.
func evaluateBounded(r SoakRun) SoakVerdict {
	if p := r.pinProblem(); p != "" {
		return SoakVerdict{"not readable", p}
	}
	perJob := func(ss []SoakSample) (float64, bool) {
		if span(ss) < soakMinWindow {
			return 0, false
		}
		a, b := ss[0], ss[len(ss)-1]
		if b.Admitted <= a.Admitted {
			return 0, false
		}
		return float64(b.bytes()-a.bytes()) / float64(b.Admitted-a.Admitted), true
	}
	pre := r.prePin()
	gPre, ok := perJob(pre)
	if !ok {
		return SoakVerdict{"not readable", fmt.Sprintf("the pre-pin window has %.0f s of samples with admissions, fewer than %.0f", span(pre), soakMinWindow)}
	}
	if gPre <= 0 {
		return SoakVerdict{"not readable", "the tables did not grow before the pin: no growth per job to compare with"}
	}
	post := r.window(r.PinEndSec+soakRecoverWithin, math.Inf(1))
	// The post window ends with the arrivals: the samples after the last
	// admission add no jobs.
	for len(post) > 1 && post[len(post)-2].Admitted == post[len(post)-1].Admitted {
		post = post[:len(post)-1]
	}
	gPost, ok := perJob(post)
	if !ok {
		return SoakVerdict{"not readable", fmt.Sprintf("the window from %.0f s after the pin's end to the last admission has %.0f s of samples, fewer than %.0f", soakRecoverWithin, span(post), soakMinWindow)}
	}
	var preDead, pinDead int64
	for _, s := range pre {
		preDead = max(preDead, s.DeadTuples)
	}
	for _, s := range r.window(r.PinStartSec, r.PinEndSec) {
		pinDead = max(pinDead, s.DeadTuples)
	}
	vacuumed := -1.0
	for _, s := range r.window(r.PinEndSec, math.Inf(1)) {
		if s.DeadTuples <= preDead {
			vacuumed = s.T - r.PinEndSec
			break
		}
	}
	what := fmt.Sprintf("%.0f B per admitted job before the pin, %.0f B after it (%.2f×, at most %.2f×); dead tuples at most %d before the pin, up to %d while pinned, ",
		gPre, gPost, gPost/gPre, soakGrowthTolerance, preDead, pinDead)
	if vacuumed < 0 {
		what += "never back to the pre-pin level"
	} else {
		what += fmt.Sprintf("back to the pre-pin level %.0f s after the pin's end", vacuumed)
	}
	if r.Autovacuum == "off" {
		return SoakVerdict{"not readable", "the server runs with autovacuum off (its setting, not the benchmark's to change): nothing vacuums the pin's dead versions; soak against a server with autovacuum on (--dsn, or --private-server); " + what}
	}
	if vacuumed >= 0 && gPost <= soakGrowthTolerance*gPre {
		return SoakVerdict{"met", what}
	}
	return SoakVerdict{"not met", what}
}

// soakCounts reads a timeline at to (ns since its base): the jobs whose
// admission began by then, those completed by then, and the
// admit-to-complete durations of those completed in (from, to].
func soakCounts(tl *Timeline, from, to int64) (admitted, completed int, window []time.Duration) {
	for i := range tl.Admit {
		a := atomic.LoadInt64(&tl.Admit[i])
		c := atomic.LoadInt64(&tl.Complete[i])
		if a != 0 && a <= to {
			admitted++
		}
		if c != 0 && c <= to {
			completed++
			if c > from && a != 0 {
				window = append(window, time.Duration(c-a))
			}
		}
	}
	return admitted, completed, window
}

// soakTableSQL sums a schema's table statistics and sizes.
const soakTableSQL = `SELECT coalesce(sum(n_live_tup), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint,
	coalesce(sum(autovacuum_count), 0)::bigint, coalesce(sum(pg_table_size(relid)), 0)::bigint,
	coalesce(sum(pg_indexes_size(relid)), 0)::bigint
FROM pg_stat_user_tables WHERE schemaname = $1`

// soakOne runs one system's soak: run admits and works the timeline's jobs
// at o.SoakRate and returns when all completed; meanwhile the horizon of
// the system's database (dsn) is pinned from the middle of the arrivals for
// o.SoakPin, and the system (its tables in schema) is sampled every
// o.SoakInterval. admin is a connection to the server that checks the pin.
func soakOne(ctx context.Context, admin *pgx.Conn, system, dsn, schema string, o Options, logf func(string, ...any),
	run func(ctx context.Context, tl *Timeline) error) (SoakRun, error) {
	n := max(1, int(o.SoakRate*o.Soak.Seconds()))
	res := SoakRun{System: system, Schema: schema, RatePerSec: o.SoakRate, Jobs: n, DurationSec: o.Soak.Seconds(), CPUs: runtime.NumCPU()}
	stats, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer stats.Close(context.WithoutCancel(ctx))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tl := NewTimeline(0, n)
	since := func() int64 { return int64(time.Since(tl.base)) }
	done := make(chan error, 1)
	go func() { done <- run(ctx, tl) }()

	var p *pin
	defer func() { p.release() }()
	pinAt := time.NewTimer(time.Until(tl.base.Add((o.Soak - o.SoakPin) / 2)))
	defer pinAt.Stop()
	var unpinAt <-chan time.Time
	tick := time.NewTicker(o.SoakInterval)
	defer tick.Stop()
	var last int64
	sample := func() error {
		now := since()
		adm, comp, win := soakCounts(tl, last, now)
		s := SoakSample{T: float64(now) / 1e9, Admitted: adm, Completed: comp, Backlog: adm - comp, Pinned: p != nil}
		if len(res.Samples) > 0 {
			prev := res.Samples[len(res.Samples)-1]
			s.Throughput = float64(comp-prev.Completed) / (s.T - prev.T)
		}
		slices.Sort(win)
		s.P99Ms = quantile(win, 0.99)
		if l := loadAverage(); len(l) > 0 {
			s.Load = l[0]
		}
		if err := stats.QueryRow(ctx, soakTableSQL, schema).Scan(&s.LiveTuples, &s.DeadTuples, &s.Autovacuums, &s.TableBytes, &s.IndexBytes); err != nil {
			return fmt.Errorf("sample: %w", err)
		}
		last = now
		res.Samples = append(res.Samples, s)
		return nil
	}
	for {
		select {
		case <-tick.C:
			if err := sample(); err != nil {
				return res, err
			}
			s := res.Samples[len(res.Samples)-1]
			logf("soak %s at %.0f s: %d admitted, backlog %d, %.0f/s, p99 %.1f ms, %d dead tuples, %.1f MB, load %.1f%s", system, s.T, s.Admitted, s.Backlog,
				s.Throughput, s.P99Ms, s.DeadTuples, float64(s.bytes())/1e6, s.Load, map[bool]string{true: ", pinned"}[s.Pinned])
		case <-pinAt.C:
			if p, err = openPin(ctx, dsn, pinWhole, 0); err != nil {
				return res, err
			}
			res.PinStartSec, res.PinXmin = float64(since())/1e9, p.xmin
			unpinAt = time.After(o.SoakPin)
			logf("soak %s: horizon pinned at xmin %s", system, p.xmin)
		case <-unpinAt:
			if err := p.held(ctx, admin); err != nil {
				res.PinNotHeld = err.Error()
			}
			p.release()
			p, unpinAt = nil, nil
			res.PinEndSec = float64(since()) / 1e9
			logf("soak %s: pin released", system)
		case err := <-done:
			if err != nil {
				return res, err
			}
			if p != nil {
				res.PinNotHeld = "the soak ended before the pin's end"
			}
			if err := sample(); err != nil {
				return res, err
			}
			return res, nil
		}
	}
}

// soakSchema is leasehold's schema during the soak.
const soakSchema = "bench_soak"

// runSoak soaks leasehold and then the peer (when it is a SteadyPeer), and
// adds the soak to the report.
func runSoak(ctx context.Context, pg *server, lhDSN string, peer *peerPG, o Options, r *Report, logf func(string, ...any)) error {
	sk := &Soak{RatePerSec: o.SoakRate, DurationSec: o.Soak.Seconds(), PinSec: o.SoakPin.Seconds(), IntervalSec: o.SoakInterval.Seconds(),
		Order: "one after the other (leasehold, then the peer), each on its own database with the machine to itself: together on a shared 2-core host, each one's backlog would follow the other's load"}
	s, err := openPG(ctx, lhDSN, soakSchema, o)
	if err != nil {
		return err
	}
	lh, err := soakOne(ctx, pg.conn, "leasehold", lhDSN, s.Schema(), o, logf, func(ctx context.Context, tl *Timeline) error {
		return steadyLeasehold(ctx, s, tl, o.SoakRate, o)
	})
	closePG(ctx, lhDSN, s)
	if err != nil {
		return fmt.Errorf("leasehold: %w", err)
	}
	lh.Autovacuum = pg.info.Settings["autovacuum"]
	sk.Runs = append(sk.Runs, lh)
	if peer != nil {
		if sp, ok := peer.p.(SteadyPeer); ok {
			if err := sp.Open(ctx, peer.dsn, o.Conns); err != nil {
				return err
			}
			run, err := func() (SoakRun, error) {
				defer sp.Close()
				if err := sp.Reset(ctx); err != nil {
					return SoakRun{}, err
				}
				return soakOne(ctx, pg.conn, r.PeerName, peer.dsn, "public", o, logf, func(ctx context.Context, tl *Timeline) error {
					return sp.Steady(ctx, len(tl.Admit), o.Workers, o.SoakRate, tl)
				})
			}()
			if err != nil {
				return fmt.Errorf("%s: %w", r.PeerName, err)
			}
			if err := peer.empty(ctx); err != nil {
				return err
			}
			run.Autovacuum = pg.info.Settings["autovacuum"]
			sk.Runs = append(sk.Runs, run)
		}
	}
	r.Soak = sk
	return nil
}

// goals evaluates the soak and states its goals: leasehold's verdicts, the
// peer's beside them (measured the same way; no goal of its own). None
// without a soak.
func (s *Soak) goals() []Goal {
	if s == nil {
		return nil
	}
	s.evaluate()
	var lh *SoakRun
	var others []SoakRun
	for i := range s.Runs {
		if s.Runs[i].System == "leasehold" {
			lh = &s.Runs[i]
		} else {
			others = append(others, s.Runs[i])
		}
	}
	names := []string{
		fmt.Sprintf("soak: leasehold's backlog back to its pre-pin level within %.0f s of the pin's end", soakRecoverWithin),
		"soak: leasehold's tables back to a bounded size with autovacuum on (the pin's dead versions vacuumed, growth per job after it ≤ " + fmt.Sprintf("%.2f", soakGrowthTolerance) + "× before it)",
	}
	var out []Goal
	for k, name := range names {
		pick := func(r SoakRun) SoakVerdict { return [2]SoakVerdict{r.DrainBack, r.Bounded}[k] }
		g := Goal{Goal: name, Status: "not measured", Detail: "leasehold's soak was not run"}
		if lh != nil {
			v := pick(*lh)
			g.Status, g.Detail = v.Status, v.Detail
		}
		for _, o := range others {
			v := pick(o)
			g.Detail += fmt.Sprintf("; %s, measured the same way: %s — %s", o.System, v.Status, v.Detail)
		}
		out = append(out, g)
	}
	return out
}

// soakOnly says the report is of a soak and nothing else (mode "soak", or
// "soak smoke" for --soak-smoke, never the evidence).
func (r *Report) soakOnly() bool { return strings.HasPrefix(r.Mode, "soak") }

// soakGoals are the soak's goals; a run that did not record the server's
// autovacuum setting takes the report's.
func (r *Report) soakGoals() []Goal {
	if r.Soak != nil {
		for i := range r.Soak.Runs {
			if r.Soak.Runs[i].Autovacuum == "" {
				r.Soak.Runs[i].Autovacuum = r.Postgres.Settings["autovacuum"]
			}
		}
	}
	return r.Soak.goals()
}

// markdown renders the soak's section of bench.md.
func (s *Soak) markdown(p func(string, ...any)) {
	if s == nil {
		return
	}
	p("\n## Soak: steady arrivals with the horizon pinned in the middle\n\n")
	p("Each system admits %.0f jobs/s one per call (leasehold CreateRun, River Insert) for %.0f s while its workers (W slots, as in the latency runs) drain them; its database's horizon is pinned for %.0f s in the middle (a REPEATABLE READ transaction of another connection, snapshot taken, checked to still hold its backend_xmin when released); sampled every %.0f s. Order: %s. Autovacuum on, the server's settings. Plots: bench.html.\n\n",
		s.RatePerSec, s.DurationSec, s.PinSec, s.IntervalSec, s.Order)
	p("Rules (judged from the samples and the pin's recorded start and end only): the pre-pin window runs from min(%.0f s, a third of the time before the pin) to the pin's start. **Drains back**: a sample at most %.0f s after the pin's end shows a backlog at or below the largest backlog sampled in the pre-pin window. **Bounded**: PostgreSQL gives no pages back without VACUUM FULL and both systems keep their completed jobs, so bounded means the pin's dead row versions were vacuumed and their space reused: a sample after the pin's end shows no more dead tuples (n_dead_tup, all the system's tables) than the pre-pin window's most, and from %.0f s after the pin's end to the last admission the tables and indexes (pg_table_size + pg_indexes_size) grew by at most %.2f× the bytes per admitted job they grew by in the pre-pin window. **Not readable**: the pin did not hold, a window spans under %.0f s of samples, the server runs with autovacuum off (bounded only), the system was not keeping up before the pin (its backlog grew by more than %.0f %% of the jobs admitted in the pre-pin window; drain-back only), or (drain-back only: a size per job is not a timing) the host's mean 1-minute load over the pin and the minute after it exceeded %.1f per CPU.\n\n",
		soakWarmup, soakRecoverWithin, soakRecoverWithin, soakGrowthTolerance, soakMinWindow, 100*soakBehind, soakNoisyLoadPerCPU)
	p("| system | jobs | pin (s) | drains back | bounded |\n|---|---:|---|---|---|\n")
	for _, r := range s.Runs {
		p("| %s | %d | %.0f–%.0f (xmin %s) | **%s**: %s | **%s**: %s |\n", r.System, r.Jobs, r.PinStartSec, r.PinEndSec, r.PinXmin,
			r.DrainBack.Status, r.DrainBack.Detail, r.Bounded.Status, r.Bounded.Detail)
	}
	p("\n| system | t s | admitted | backlog | completed/s | admit→complete p99 ms | dead tuples | table MB | index MB | autovacuums | pinned | host load |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, r := range s.Runs {
		every := max(1, int(60/max(1, s.IntervalSec))) // a row a minute, and every pinned sample's edges
		for i, x := range r.Samples {
			edge := i > 0 && r.Samples[i-1].Pinned != x.Pinned
			if i%every != 0 && !edge && i != len(r.Samples)-1 {
				continue
			}
			p("| %s | %.0f | %d | %d | %.0f | %.1f | %d | %.1f | %.1f | %d | %s | %.2f |\n", r.System, x.T, x.Admitted, x.Backlog, x.Throughput, x.P99Ms,
				x.DeadTuples, float64(x.TableBytes)/1e6, float64(x.IndexBytes)/1e6, x.Autovacuums, map[bool]string{true: "yes"}[x.Pinned], x.Load)
		}
	}
	p("\nA row a minute and at the pin's edges; every sample is in bench.json.\n")
}

// soakMetrics are the soak's pictures: each a figure of a sample, its
// name and unit.
var soakMetrics = []struct {
	class, title string
	f            func(SoakSample) float64
}{
	{"soak-throughput", "throughput (jobs completed/s)", func(s SoakSample) float64 { return s.Throughput }},
	{"soak-p99", "admit-to-complete p99 of the jobs completed in each interval (ms)", func(s SoakSample) float64 { return s.P99Ms }},
	{"soak-backlog", "backlog (jobs admitted, not completed)", func(s SoakSample) float64 { return float64(s.Backlog) }},
	{"soak-dead", "dead tuples (n_dead_tup, all the system's tables)", func(s SoakSample) float64 { return float64(s.DeadTuples) }},
	{"soak-table", "table size (MB, pg_table_size summed)", func(s SoakSample) float64 { return float64(s.TableBytes) / 1e6 }},
	{"soak-index", "index size (MB, pg_indexes_size summed)", func(s SoakSample) float64 { return float64(s.IndexBytes) / 1e6 }},
	{"soak-load", "host load (1-minute load average)", func(s SoakSample) float64 { return s.Load }},
}

// html draws the soak's pictures: one linear chart per metric, a line per
// system against minutes since its soak began, its pin shaded.
func (s *Soak) html(w io.Writer) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "<p>%.0f jobs/s for %.0f s per system, horizon pinned %.0f s in the middle (shaded), sampled every %.0f s; %s.</p>\n",
		s.RatePerSec, s.DurationSec, s.PinSec, s.IntervalSec, html.EscapeString(s.Order))
	fmt.Fprint(w, "<table><tr><th>system</th><th>drains back</th><th>bounded</th></tr>\n")
	for _, r := range s.Runs {
		fmt.Fprintf(w, "<tr><td>%s</td><td>%s: %s</td><td>%s: %s</td></tr>\n", html.EscapeString(r.System), r.DrainBack.Status, html.EscapeString(r.DrainBack.Detail),
			r.Bounded.Status, html.EscapeString(r.Bounded.Detail))
	}
	fmt.Fprint(w, "</table>\n")
	for _, m := range soakMetrics {
		fmt.Fprintf(w, "<h3>%s</h3>\n", html.EscapeString(m.title))
		soakChart(w, m.class, s.Runs, m.f)
	}
}

// tickText writes an axis value without exponents.
func tickText(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// soakChart draws f of every run's samples on linear axes from zero.
func soakChart(w io.Writer, class string, runs []SoakRun, f func(SoakSample) float64) {
	const left, top, width, height = 70, 10, 640, 200
	xmax, ymax := 0.0, 0.0
	for _, r := range runs {
		for _, s := range r.Samples {
			xmax, ymax = math.Max(xmax, s.T), math.Max(ymax, f(s))
		}
	}
	if xmax <= 0 {
		fmt.Fprint(w, "<p class=\"muted\">Not measured.</p>\n")
		return
	}
	ymax = math.Max(ymax*1.1, 1)
	fx := func(v float64) float64 { return left + v/xmax*width }
	fy := func(v float64) float64 { return top + height - v/ymax*height }
	W, H := left+width+180, top+height+36
	fmt.Fprintf(w, "<svg class=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"12\">\n", class, W, H, W, H)
	for _, r := range runs {
		if r.PinEndSec > r.PinStartSec {
			fmt.Fprintf(w, "<rect class=\"pin\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" fill-opacity=\"0.08\"><title>%s: pinned %.0f–%.0f s</title></rect>\n",
				fx(r.PinStartSec), top, fx(r.PinEndSec)-fx(r.PinStartSec), height, colour(r.System), html.EscapeString(r.System), r.PinStartSec, r.PinEndSec)
		}
	}
	fmt.Fprintf(w, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#ccc\"/>\n", left, top, width, height)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(w, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", left, left+width, fy(v), fy(v), left-4, fy(v)+4, tickText(v))
	}
	step := math.Max(60, math.Ceil(xmax/10/60)*60)
	for t := 0.0; t <= xmax; t += step {
		fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", fx(t), top+height+14, t/60)
	}
	fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#777\">minutes since the system's soak began</text>\n", left+width/2, top+height+30)
	for i, r := range runs {
		var pts []string
		for _, s := range r.Samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(s.T), fy(f(s))))
		}
		c := colour(r.System)
		fmt.Fprintf(w, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"><title>%s</title></polyline>\n", c, strings.Join(pts, " "), html.EscapeString(r.System))
		fmt.Fprintf(w, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
			left+width+10, left+width+30, top+10+i*16, top+10+i*16, c, left+width+34, top+14+i*16, html.EscapeString(r.System))
	}
	fmt.Fprint(w, "</svg>\n")
}

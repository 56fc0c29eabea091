package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// HTML renders bench.html: one self-contained page (inline SVG and CSS, no
// script, nothing fetched) with the pictures a reader would rather look at
// than read — throughput of every variant beside the peers, the latency
// distributions, claim latency against depth and the spread of each ratio
// over its rounds — followed by the goals table.
func (r *Report) HTML(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>leasehold benchmark (%s)</title>\n", html.EscapeString(r.Mode))
	p("<style>body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}svg{display:block;margin:1em 0}" +
		"table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}" +
		".met{color:#1a7f37}.notmet{color:#b42318}.muted{color:#777}</style></head><body>\n")
	p("<h1>leasehold benchmark (%s mode)</h1>\n", html.EscapeString(r.Mode))
	rule := fmt.Sprintf("Ratios are medians of %d alternating rounds; spreads above %.0f %% of the median are flagged noisy.", r.Settings.Rounds, 100*NoisyAbove)
	if r.soakOnly() {
		rule = "A soak and nothing else; a smoke (mode soak smoke) is never the evidence."
	}
	p("<p>Commit <code>%s</code>, started %s, %.0f s; %d CPUs (%s); load average %s → %s. %s</p>\n",
		html.EscapeString(r.Commit), html.EscapeString(r.StartedAt), r.ElapsedSec, r.Host.CPUs, html.EscapeString(r.Host.CPUModel),
		loadText(r.LoadBefore), loadText(r.LoadAfter), html.EscapeString(rule))

	p("<h2 id=\"goals\">Goals</h2>\n<table><tr><th>goal</th><th>status</th><th>figures</th></tr>\n")
	for _, g := range r.Goals {
		cls := "notmet"
		if g.Status == "met" {
			cls = "met"
		}
		p("<tr><td>%s</td><td class=\"%s\">%s</td><td>%s</td></tr>\n", html.EscapeString(g.Goal), cls, html.EscapeString(g.Status), html.EscapeString(g.Detail))
	}
	p("</table>\n")
	if r.Soak != nil {
		p("<h2 id=\"soak\">Soak: steady arrivals, horizon pinned in the middle</h2>\n")
		r.Soak.html(w)
	}
	if r.soakOnly() {
		p("<p class=\"muted\">The numbers behind every picture are in bench.md and bench.json.</p>\n</body></html>\n")
		return
	}

	p("<h2 id=\"throughput\">Throughput per variant beside the peers (jobs/s, median and min–max of the rounds)</h2>\n")
	r.throughputSVG(w)
	p("<h2 id=\"spread\">Spread of each ratio across rounds</h2>\n")
	r.spreadSVG(w)
	p("<h2 id=\"latency\">Latency distributions at a steady arrival rate (ms)</h2>\n")
	r.latencySVG(w)
	p("<h2 id=\"depth\">Claim latency against queue depth (ms)</h2>\n")
	r.depthSVG(w)
	p("<p class=\"muted\">The numbers behind every picture are in bench.md and bench.json.</p>\n</body></html>\n")
}

// palette colours the systems: leasehold blue, the peers orange.
func colour(system string) string {
	if system == "leasehold" {
		return "#2f6fb0"
	}
	return "#e07b1a"
}

// bar is one row of the throughput chart.
type bar struct {
	label, system string
	med, lo, hi   float64
}

// throughputBars are the drains grouped by (system, store, variant), in
// report order: median and min–max over their rounds (one value for a
// variant measured once).
func (r *Report) throughputBars() []bar {
	var out []bar
	index := map[string]int{}
	vals := map[string][]float64{}
	for _, d := range r.Drains {
		if d.NotMeasured != "" {
			continue
		}
		k := d.System + "|" + d.Store + "|" + d.Variant + "|" + d.Pin
		if _, ok := index[k]; !ok {
			index[k] = len(out)
			label := d.Store + ": " + d.System + " [" + d.Name + "]"
			if d.Variant == "peer" {
				label = d.Store + ": " + d.System
			}
			if d.Pin != "" {
				label += ", " + pinMode(d.Pin).text()
			}
			out = append(out, bar{label: label, system: d.System})
		}
		vals[k] = append(vals[k], d.JobsPerSec)
	}
	for k, i := range index {
		sp := summarize(vals[k])
		out[i].med, out[i].lo, out[i].hi = sp.Median, sp.Min, sp.Max
	}
	return out
}

func (r *Report) throughputSVG(w io.Writer) {
	bars := r.throughputBars()
	if len(bars) == 0 {
		fmt.Fprint(w, "<p class=\"muted\">No drain measured.</p>\n")
		return
	}
	const left, width, rowH = 420, 520, 22
	top := 10
	maxV := 0.0
	for _, b := range bars {
		maxV = math.Max(maxV, b.hi)
	}
	h := top + rowH*len(bars) + 30
	fmt.Fprintf(w, "<svg class=\"throughput\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"12\">\n", left+width+40, h, left+width+40, h)
	x := func(v float64) float64 { return left + v/maxV*width }
	for i, b := range bars {
		y := top + i*rowH
		fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", left-6, y+14, html.EscapeString(b.label))
		fmt.Fprintf(w, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%.0f jobs/s</title></rect>\n", left, y+3, x(b.med)-left, rowH-6, colour(b.system), b.med)
		if b.hi > b.lo {
			fmt.Fprintf(w, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", x(b.lo), x(b.hi), y+rowH/2, y+rowH/2)
		}
		fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%d\">%.0f</text>\n", x(b.hi)+4, y+14, b.med)
	}
	fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" class=\"muted\">0 … %.0f jobs/s</text>\n</svg>\n", left, h-8, maxV)
}

// spreadSVG draws, for each ratio measured in rounds, a dot per round, a
// tick at the median, the target (dashed) where the ratio is a goal, on a
// logarithmic axis so that 0.5× and 2× are equally far from parity.
func (r *Report) spreadSVG(w io.Writer) {
	var rows []Ratio
	for _, x := range r.Ratios {
		if x.Spread != nil && len(x.Spread.Rounds) > 0 {
			rows = append(rows, x)
		}
	}
	if len(rows) == 0 {
		fmt.Fprint(w, "<p class=\"muted\">No ratio measured in rounds.</p>\n")
		return
	}
	lo, hi := 1.0, 1.0
	for _, x := range rows {
		lo, hi = math.Min(lo, x.Spread.Min), math.Max(hi, x.Spread.Max)
		if x.Target > 0 {
			lo, hi = math.Min(lo, x.Target), math.Max(hi, x.Target)
		}
	}
	lo, hi = lo/1.2, hi*1.2
	const left, width, rowH = 540, 400, 24
	h := rowH*len(rows) + 50
	x := func(v float64) float64 { return left + (math.Log(v)-math.Log(lo))/(math.Log(hi)-math.Log(lo))*width }
	fmt.Fprintf(w, "<svg class=\"spread\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"12\">\n", left+width+120, h, left+width+120, h)
	fmt.Fprintf(w, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"0\" y2=\"%d\" stroke=\"#999\"/><text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">1.0 (parity)</text>\n", x(1), x(1), h-38, x(1), h-26)
	for i, ratio := range rows {
		y := i*rowH + 14
		sp := ratio.Spread
		label := ratio.Name
		fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", left-6, y+4, html.EscapeString(label))
		if ratio.Target > 0 {
			fmt.Fprintf(w, "<line class=\"target\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#1a7f37\" stroke-dasharray=\"3,2\"/>\n", x(ratio.Target), x(ratio.Target), y-9, y+9)
		}
		fmt.Fprintf(w, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#bbb\"/>\n", x(sp.Min), x(sp.Max), y, y)
		fill := "#2f6fb0"
		if sp.Noisy {
			fill = "#b42318"
		}
		for _, v := range sp.Rounds {
			fmt.Fprintf(w, "<circle class=\"round\" cx=\"%.1f\" cy=\"%d\" r=\"3.5\" fill=\"%s\"><title>%.3f</title></circle>\n", x(v), y, fill, v)
		}
		fmt.Fprintf(w, "<line class=\"median\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#000\" stroke-width=\"2\"/>\n", x(sp.Median), x(sp.Median), y-7, y+7)
		verdict := fmt.Sprintf("%.2f", sp.Median)
		if sp.Noisy {
			verdict = "noisy"
		}
		fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\">%s</text>\n", left+width+8, y+4, verdict)
	}
	fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" fill=\"#777\">log scale %.2f … %.2f; dots: rounds (red: noisy), black bar: median, green dashes: goal</text>\n</svg>\n", 10, h-6, lo, hi)
}

// series is one line of a line chart.
type series struct {
	name, colour, dash string
	xs, ys             []float64
}

// lineChart draws series on a log-y axis (latencies span decades) with
// labelled x ticks.
func lineChart(w io.Writer, class, xname string, ss []series, xticks []float64, xlabel func(float64) string, logX bool) {
	const left, top, width, height = 60, 10, 640, 260
	var ymin, ymax, xmin, xmax = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for i := range s.xs {
			if s.ys[i] > 0 {
				ymin, ymax = math.Min(ymin, s.ys[i]), math.Max(ymax, s.ys[i])
			}
			xmin, xmax = math.Min(xmin, s.xs[i]), math.Max(xmax, s.xs[i])
		}
	}
	if math.IsInf(ymin, 0) || xmax <= xmin {
		fmt.Fprint(w, "<p class=\"muted\">Not measured.</p>\n")
		return
	}
	ymin, ymax = ymin/1.5, ymax*1.5
	fx := func(v float64) float64 {
		if logX {
			return left + (math.Log(v)-math.Log(xmin))/(math.Log(xmax)-math.Log(xmin))*width
		}
		return left + (v-xmin)/(xmax-xmin)*width
	}
	fy := func(v float64) float64 {
		return top + height - (math.Log(math.Max(v, ymin))-math.Log(ymin))/(math.Log(ymax)-math.Log(ymin))*height
	}
	W, H := left+width+220, top+height+40
	fmt.Fprintf(w, "<svg class=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"12\">\n", class, W, H, W, H)
	fmt.Fprintf(w, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#ccc\"/>\n", left, top, width, height)
	var yticks []float64
	for e := math.Floor(math.Log10(ymin)); e <= math.Ceil(math.Log10(ymax)); e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v >= ymin && v <= ymax {
				yticks = append(yticks, v)
			}
		}
	}
	for _, v := range yticks {
		fmt.Fprintf(w, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", left, left+width, fy(v), fy(v), left-4, fy(v)+4, v)
	}
	for _, t := range xticks {
		fmt.Fprintf(w, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", fx(t), top+height+16, html.EscapeString(xlabel(t)))
	}
	fmt.Fprintf(w, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#777\">%s; y: ms, log scale</text>\n", left+width/2, top+height+34, html.EscapeString(xname))
	for i, s := range ss {
		var pts []string
		for k := range s.xs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(s.xs[k]), fy(s.ys[k])))
		}
		fmt.Fprintf(w, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"%s\" points=\"%s\"><title>%s</title></polyline>\n",
			s.colour, s.dash, strings.Join(pts, " "), html.EscapeString(s.name))
		fmt.Fprintf(w, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
			left+width+10, left+width+30, top+10+i*16, top+10+i*16, s.colour, s.dash, left+width+34, top+14+i*16, html.EscapeString(s.name))
	}
	fmt.Fprint(w, "</svg>\n")
}

// latencySVG draws, for each system, the quantile curves of admit-to-start
// (dashed) and admit-to-complete (solid) of its median round (by
// admit-to-complete p50).
func (r *Report) latencySVG(w io.Writer) {
	var ss []series
	seen := map[string]bool{}
	for _, l := range r.Latency {
		if seen[l.System] {
			continue
		}
		seen[l.System] = true
		med := medianRound(r.Latency, l.System)
		xs := make([]float64, len(LatencyQuantiles))
		for i, q := range LatencyQuantiles {
			xs[i] = float64(i)
			_ = q
		}
		ss = append(ss,
			series{name: l.System + " admit→start", colour: colour(l.System), dash: "5,3", xs: xs, ys: med.StartQ},
			series{name: l.System + " admit→complete", colour: colour(l.System), xs: xs, ys: med.CompleteQ})
	}
	var ticks []float64
	for i := range LatencyQuantiles {
		ticks = append(ticks, float64(i))
	}
	lineChart(w, "latency", "x: quantile of the median round (by admit→complete p50)", ss, ticks, func(v float64) string {
		return fmt.Sprintf("p%g", LatencyQuantiles[int(v)]*100)
	}, false)
}

// medianRound is the system's latency round with the median
// admit-to-complete p50.
func medianRound(ls []LatencyResult, system string) LatencyResult {
	var mine []LatencyResult
	for _, l := range ls {
		if l.System == system {
			mine = append(mine, l)
		}
	}
	for i := range mine {
		for j := i + 1; j < len(mine); j++ {
			if mine[j].CompleteP50Ms < mine[i].CompleteP50Ms {
				mine[i], mine[j] = mine[j], mine[i]
			}
		}
	}
	return mine[len(mine)/2]
}

// depthSVG draws p50 (solid) and p99 (dashed) claim latency of each phase
// against the queue depth (log x).
func (r *Report) depthSVG(w io.Writer) {
	if len(r.Depth) < 2 {
		fmt.Fprint(w, "<p class=\"muted\">Fewer than two depths measured.</p>\n")
		return
	}
	colours := map[string]string{phaseClaim: "#2f6fb0", phaseReclaim: "#7a4fb0", phaseMass: "#b42318"}
	var ss []series
	var ticks []float64
	for _, ph := range []string{phaseClaim, phaseReclaim, phaseMass} {
		p50, p99 := series{name: ph + " p50", colour: colours[ph]}, series{name: ph + " p99", colour: colours[ph], dash: "5,3"}
		for _, d := range r.Depth {
			if x := d.phase(ph); x != nil {
				p50.xs, p50.ys = append(p50.xs, float64(d.Depth)), append(p50.ys, x.P50Ms)
				p99.xs, p99.ys = append(p99.xs, float64(d.Depth)), append(p99.ys, x.P99Ms)
			}
		}
		if len(p50.xs) > 0 {
			ss = append(ss, p50, p99)
		}
	}
	for _, d := range r.Depth {
		ticks = append(ticks, float64(d.Depth))
	}
	lineChart(w, "depth", "x: queued jobs (log scale)", ss, ticks, func(v float64) string { return count(int(v)) }, true)
}

// Package timeline draws who held which generation of a run's lease when,
// and where each write under a lease came: the one picture of fencing that
// both `leasehold ui` (a run's page) and the linearizability reports (a
// failing history, harness) show. It takes plain data, knows no store and
// no history format, and renders HTML (an inline SVG and a table) that
// needs no script.
package timeline

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"slices"
)

// Generation is one lease: generation Generation held by Owner from From
// until To (the time it ended, or its expiry while Open).
type Generation struct {
	Generation int64
	Owner      string
	From, To   int64
	// Open: the lease still holds (To is its expiry, not its end).
	Open bool
	// Outcome says how it ended (completed, expired, retried, ...).
	Outcome string
	// Seq orders the grant among things at the same time (From); 0 when
	// unknown. See Timeline.Stale.
	Seq int64
}

// Write is one write presented under a lease: at At, by Owner with
// Generation, operation Op, accepted by the store or refused (Detail says
// why, e.g. the error code).
type Write struct {
	At         int64
	Generation int64
	Owner      string
	Op         string
	Accepted   bool
	Detail     string
	// Seq orders the write among things at the same time (At); 0 when
	// unknown. See Timeline.Stale.
	Seq int64
}

// Mark is a moment worth seeing on the time axis (an event, a clock move).
type Mark struct {
	At    int64
	Label string
}

// Timeline is one run's (or one history's key's) leases, writes and marks.
// Unit names the time axis ("ms" of the store's clock, or "tick" of a
// history's logical clock).
type Timeline struct {
	Unit        string
	Generations []Generation
	Writes      []Write
	Marks       []Mark
}

// Stale reports whether w came after a newer generation than its own had
// been granted: a write that fencing must refuse. After means From < At,
// or at one time, a grant whose Seq is below the write's (both known):
// a time alone cannot order a release and the re-claim of the same
// millisecond, so a tie without Seq is not called stale.
func (t Timeline) Stale(w Write) bool {
	for _, g := range t.Generations {
		if g.Generation > w.Generation && (g.From < w.At || g.From == w.At && g.Seq != 0 && w.Seq != 0 && g.Seq < w.Seq) {
			return true
		}
	}
	return false
}

// Verdict names a write's place: "accepted", "refused", "stale, refused"
// (fencing worked) or "STALE, ACCEPTED" (fencing failed).
func (t Timeline) Verdict(w Write) string {
	switch stale := t.Stale(w); {
	case stale && w.Accepted:
		return "STALE, ACCEPTED"
	case stale:
		return "stale, refused"
	case w.Accepted:
		return "accepted"
	}
	return "refused"
}

// Layout of the drawing, in SVG user units.
const (
	labelWidth = 230
	plotWidth  = 640
	rowHeight  = 26
	axisHeight = 22
)

type bar struct {
	Generation
	X, W, Y float64
	Label   string
}

type dot struct {
	Write
	X, Y    float64
	Verdict string
	Class   string
}

type markView struct {
	Mark
	X float64
}

type view struct {
	Timeline
	Width, Height float64
	Bars          []bar
	Dots          []dot
	MarkViews     []markView
	Min, Max      int64
	Empty         bool
	Rows          []dot
}

func (t Timeline) view() view {
	v := view{Timeline: t, Width: labelWidth + plotWidth + 20}
	var times []int64
	for _, g := range t.Generations {
		times = append(times, g.From, g.To)
	}
	for _, w := range t.Writes {
		times = append(times, w.At)
	}
	for _, m := range t.Marks {
		times = append(times, m.At)
	}
	if len(times) == 0 {
		v.Empty = true
		return v
	}
	v.Min, v.Max = slices.Min(times), slices.Max(times)
	span := float64(v.Max - v.Min)
	if span == 0 {
		span = 1
	}
	x := func(at int64) float64 { return labelWidth + float64(at-v.Min)/span*plotWidth }
	gens := slices.Clone(t.Generations)
	slices.SortStableFunc(gens, func(a, b Generation) int { return cmpInt(a.Generation, b.Generation) })
	row := map[int64]int{}
	for i, g := range gens {
		row[g.Generation] = i
		label := fmt.Sprintf("generation %d · %s", g.Generation, g.Owner)
		if g.Outcome != "" {
			label += " · " + g.Outcome
		}
		w := x(g.To) - x(g.From)
		if w < 2 {
			w = 2
		}
		v.Bars = append(v.Bars, bar{Generation: g, X: x(g.From), W: w, Y: float64(axisHeight + i*rowHeight), Label: label})
	}
	extra := len(gens) // writes of a generation that has no lease row
	for _, w := range t.Writes {
		r, ok := row[w.Generation]
		if !ok {
			r = extra
			row[w.Generation] = extra
			extra++
		}
		d := dot{Write: w, X: x(w.At), Y: float64(axisHeight+r*rowHeight) + rowHeight/2 - 3, Verdict: t.Verdict(w)}
		switch d.Verdict {
		case "STALE, ACCEPTED":
			d.Class = "bad"
		case "accepted":
			d.Class = "ok"
		default:
			d.Class = "refused"
		}
		v.Dots = append(v.Dots, d)
	}
	v.Rows = slices.Clone(v.Dots)
	slices.SortStableFunc(v.Rows, func(a, b dot) int { return cmpInt(a.At, b.At) })
	for _, m := range t.Marks {
		v.MarkViews = append(v.MarkViews, markView{Mark: m, X: x(m.At)})
	}
	v.Height = float64(axisHeight+max(extra, 1)*rowHeight) + 8
	return v
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Style is the CSS the fragment's classes need; a page includes it once.
const Style = `.timeline svg{font:12px system-ui,sans-serif;background:#fafafa;border:1px solid #ddd}
.timeline .lease{fill:#93c5fd;stroke:#1d4ed8}.timeline .lease.open{fill:#bfdbfe;stroke-dasharray:4 2}
.timeline .ok{fill:#16a34a}.timeline .refused{fill:#f59e0b}.timeline .bad{fill:#dc2626}
.timeline .mark{stroke:#6b7280;stroke-dasharray:2 3}.timeline table{border-collapse:collapse;margin-top:.5em}
.timeline td,.timeline th{border:1px solid #ddd;padding:2px 6px;text-align:left}
.timeline tr.bad td{background:#fee2e2;font-weight:bold}`

var fragment = template.Must(template.New("timeline").Parse(`<div class="timeline">
{{- if .Empty}}<p class="empty">No lease was ever granted and no write presented one.</p>{{else}}
<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="leases by generation">
<text x="4" y="14">{{.Unit}} {{.Min}}</text><text x="{{.Width}}" dx="-4" y="14" text-anchor="end">{{.Max}}</text>
{{- range .MarkViews}}<line class="mark" x1="{{.X}}" x2="{{.X}}" y1="16" y2="{{$.Height}}"><title>{{.Label}} at {{.At}}</title></line>{{end}}
{{- range .Bars}}<g class="generation" data-generation="{{.Generation.Generation}}" data-owner="{{.Owner}}">
<text x="4" y="{{.Y}}" dy="16">{{.Label}}</text>
<rect class="lease{{if .Open}} open{{end}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="18"><title>generation {{.Generation.Generation}} held by {{.Owner}} from {{.From}} to {{.To}}{{if .Open}} (expiry; still held){{end}}</title></rect></g>
{{- end}}
{{- range .Dots}}<circle class="write {{.Class}}" cx="{{.X}}" cy="{{.Y}}" r="6"><title>{{.Op}} by {{.Owner}} with generation {{.Generation}} at {{.At}}: {{.Verdict}}{{if .Detail}} ({{.Detail}}){{end}}</title></circle>{{end}}
</svg>
<table class="generations"><tr><th>generation</th><th>owner</th><th>from</th><th>to</th><th>outcome</th></tr>
{{- range .Bars}}<tr data-generation="{{.Generation.Generation}}"><td>{{.Generation.Generation}}</td><td>{{.Owner}}</td><td>{{.From}}</td><td>{{.To}}{{if .Open}} (expiry){{end}}</td><td>{{.Outcome}}</td></tr>{{end}}
</table>
{{- if .Rows}}
<table class="writes"><tr><th>at</th><th>write</th><th>owner</th><th>generation</th><th>verdict</th><th>detail</th></tr>
{{- range .Rows}}<tr class="{{.Class}}"><td>{{.At}}</td><td>{{.Op}}</td><td>{{.Owner}}</td><td>{{.Generation}}</td><td>{{.Verdict}}</td><td>{{.Detail}}</td></tr>{{end}}
</table>{{end}}
{{- end}}
</div>`))

// HTML renders the timeline as an HTML fragment (classes styled by Style):
// an SVG with one row per generation (its lease window) and each write as
// a dot on its generation's row (green accepted, amber refused, red a stale
// write accepted), then the same as tables.
func (t Timeline) HTML() (template.HTML, error) {
	var b bytes.Buffer
	if err := fragment.Execute(&b, t.view()); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title><style>body{font:14px system-ui,sans-serif;margin:1.5em}{{.Style}}</style></head>
<body><h1>{{.Title}}</h1>{{if .Intro}}<p>{{.Intro}}</p>{{end}}
{{range .Sections}}<h2>{{.Heading}}</h2>{{.Body}}{{end}}
</body></html>
`))

// Section is one titled timeline of a page.
type Section struct {
	Heading  string
	Timeline Timeline
}

// WritePage writes a standalone HTML page: title, an introduction, and a
// timeline per section.
func WritePage(w io.Writer, title, intro string, sections []Section) error {
	type rendered struct {
		Heading string
		Body    template.HTML
	}
	var rs []rendered
	for _, s := range sections {
		h, err := s.Timeline.HTML()
		if err != nil {
			return err
		}
		rs = append(rs, rendered{s.Heading, h})
	}
	return page.Execute(w, struct {
		Title, Intro string
		Style        template.CSS
		Sections     []rendered
	}{title, intro, template.CSS(Style), rs})
}

package probe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/queueproto"
)

// Write writes the report as peers.json, peers.md and peers.html in dir.
func (rep *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "peers.json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "peers.md"), []byte(rep.Markdown()), 0o644); err != nil {
		return err
	}
	h, err := rep.HTML()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "peers.html"), h, 0o644)
}

// label is a cell's text in the matrix.
func (c Cell) label() string {
	s := string(c.Outcome)
	switch c.Outcome {
	case Violated, Intermittent, Unconfirmed:
		s = fmt.Sprintf("%s (%d/%d)", s, c.Violations, c.Exercised)
		if c.NewFinding {
			s += ", new"
		} else {
			s += ", known"
		}
	}
	return s
}

// anchor is the id of a cell's section.
func (c Cell) anchor() string { return c.System + "-" + c.Probe }

// detailed reports whether a cell gets a section of its own.
func (c Cell) detailed() bool { return c.Outcome != Holds && c.Outcome != NotApplicable }

// Markdown renders the report for people.
func (rep *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Job queues probed: which keeps which promise\n\n")
	fmt.Fprintf(&b, "`leasehold probe`, %s, %d exercised runs per cell, %.0f s", rep.Started.Format("2006-01-02 15:04 UTC"), rep.Runs, rep.Seconds)
	if rep.Commit != "" {
		fmt.Fprintf(&b, ", leasehold %s", rep.Commit)
	}
	fmt.Fprintf(&b, ". How the probes work and how to write an adapter for your own queue: [docs/ADAPTERS.md](../docs/ADAPTERS.md). Regenerate with `make probe`.\n\n")
	b.WriteString("| probe |")
	for _, row := range rep.Systems {
		fmt.Fprintf(&b, " %s |", row.System.Name)
	}
	b.WriteString("\n|---|")
	for range rep.Systems {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for i, p := range rep.Probes {
		fmt.Fprintf(&b, "| **%s**: %s |", p.Name, p.Promise)
		for _, row := range rep.Systems {
			c := row.Cells[i]
			if c.detailed() {
				fmt.Fprintf(&b, " [%s](#%s) |", c.label(), c.anchor())
			} else {
				fmt.Fprintf(&b, " %s |", c.label())
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, o := range rep.Outcomes {
		fmt.Fprintf(&b, "- **%s**: %s.\n", o.Outcome, o.Means)
	}
	b.WriteString("\n## Cells\n")
	for _, row := range rep.Systems {
		for _, c := range row.Cells {
			if !c.detailed() {
				continue
			}
			writeCellMarkdown(&b, c)
		}
	}
	b.WriteString("\n## Notes per cell\n\n")
	for _, row := range rep.Systems {
		for _, c := range row.Cells {
			if len(c.Notes) == 0 && c.Outcome != NotApplicable {
				continue
			}
			fmt.Fprintf(&b, "- %s · %s: %s", c.System, c.Probe, c.Outcome)
			if c.Outcome == NotApplicable {
				fmt.Fprintf(&b, " (%s)", c.Why)
			}
			if c.Outcome == Holds && c.Why != "" {
				fmt.Fprintf(&b, " (%s)", c.Why)
			}
			if len(c.Notes) > 0 {
				fmt.Fprintf(&b, ": %s", strings.Join(c.Notes, "; "))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n## Systems, as configured\n")
	for _, row := range rep.Systems {
		fmt.Fprintf(&b, "\n### %s\n\n", row.System.Name)
		if row.Error != "" {
			fmt.Fprintf(&b, "Not probed: %s\n", fence(row.Error))
			continue
		}
		h := row.Hello
		fmt.Fprintf(&b, "%s %s (%s, on %s); adapter `%s` in `%s`.\n\n", h.System, h.Version, h.Language, h.Needs, row.System.Run, orDot(row.System.Dir))
		fmt.Fprintf(&b, "- Delivery: %s ([doc](%s))", h.Delivery.Semantics, h.Delivery.Doc)
		if h.Delivery.Quote != "" {
			fmt.Fprintf(&b, ": \"%s\"", h.Delivery.Quote)
		}
		fmt.Fprintf(&b, "\n- Out of attempts: `%s` ([doc](%s))\n", h.Exhausted.RawState, h.Exhausted.Doc)
		if h.DeletesCompleted {
			b.WriteString("- Deletes a job when it completes.\n")
		}
		if len(h.ServerArgs) > 0 {
			fmt.Fprintf(&b, "- Private server for db-restart: `%s`\n", strings.Join(h.ServerArgs, " "))
		}
		b.WriteString("\n| feature | offered | doc |\n|---|---|---|\n")
		for _, name := range queueproto.Features {
			f := h.Features[name]
			doc := f.Doc
			if f.Note != "" {
				doc += " (" + f.Note + ")"
			}
			fmt.Fprintf(&b, "| %s | %v | %s |\n", name, f.Supported, cellText(doc))
		}
		b.WriteString("\n| setting | value | doc | why |\n|---|---|---|---|\n")
		for _, s := range h.Config {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cellText(s.Name), cellText(s.Value), cellText(s.Doc), cellText(s.Why))
		}
	}
	b.WriteString("\n## Probes\n\n| probe | promise | script | needs |\n|---|---|---|---|\n")
	for _, p := range rep.Probes {
		needs := strings.Join(p.Needs, ", ")
		if p.Restart {
			needs = strings.TrimPrefix(needs+", a private database server to crash", ", ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", p.Name, cellText(p.Promise), cellText(p.Script), needs)
	}
	return b.String()
}

func orDot(dir string) string {
	if dir == "" {
		return "."
	}
	return dir
}

func cellText(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

func fence(s string) string { return "\n\n```\n" + strings.TrimRight(s, "\n") + "\n```\n" }

func writeCellMarkdown(b *strings.Builder, c Cell) {
	fmt.Fprintf(b, "\n### <a id=\"%s\"></a>%s · %s: %s\n\n", c.anchor(), c.System, c.Probe, c.label())
	fmt.Fprintf(b, "%s\n\n", c.Why)
	for _, r := range c.References {
		fmt.Fprintf(b, "- Known: [%s](%s)", r.Title, r.URL)
		if r.Says != "" {
			fmt.Fprintf(b, " — %s", r.Says)
		}
		b.WriteString("\n")
	}
	if c.NewFinding {
		b.WriteString("- New finding: no documentation or issue of the queue's that the adapter cites matches it.\n")
	}
	if len(c.Notes) > 0 {
		fmt.Fprintf(b, "- Notes: %s\n", strings.Join(c.Notes, "; "))
	}
	fmt.Fprintf(b, "- Replay: `%s`\n", c.Replay)
	if len(c.Runs) == 0 {
		return
	}
	ex := c.Runs[c.Example]
	fmt.Fprintf(b, "\nRun %d of %d (namespace `%s`, %.1f s), step by step:\n\n```\n", c.Example+1, len(c.Runs), ex.Namespace, ex.Seconds)
	for _, s := range ex.Steps {
		fmt.Fprintf(b, "%3d %7.3fs %-7s %s\n", s.Seq, float64(s.AtMs)/1000, s.Process, s.What)
	}
	b.WriteString("```\n")
	if len(ex.Rows) > 0 {
		b.WriteString("\nThe rows it left:\n\n```json\n")
		raw, _ := json.MarshalIndent(ex.Rows, "", "  ")
		b.Write(raw)
		b.WriteString("\n```\n")
	}
}

var htmlPage = template.Must(template.New("peers").Funcs(template.FuncMap{
	"ms": func(v int64) float64 { return float64(v) / 1000 },
	"json": func(v any) string {
		raw, _ := json.MarshalIndent(v, "", "  ")
		return string(raw)
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>leasehold probe: job queues</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:1400px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}
td.holds{background:#dff3df}td.violated{background:#f7d4d4}td.intermittent,td.unconfirmed{background:#fbe8c8}
td.not-applicable{background:#eee;color:#555}td.not-exercised{background:#fff6cc}td.adapter-error{background:#e8d4f7}
pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}
</style></head><body>
<h1>Job queues probed: which keeps which promise</h1>
<p><code>leasehold probe</code>, {{.Started.Format "2006-01-02 15:04 UTC"}}, {{.Runs}} exercised runs per cell{{if .Commit}}, leasehold {{.Commit}}{{end}}.
How it works, and how to probe your own queue: docs/ADAPTERS.md. Regenerate with <code>make probe</code>.</p>
<table><tr><th>probe</th>{{range .Systems}}<th>{{.System.Name}}</th>{{end}}</tr>
{{$rep := .}}{{range $i, $p := .Probes}}<tr><td><b>{{$p.Name}}</b>: {{$p.Promise}}</td>
{{range $rep.Systems}}{{$c := index .Cells $i}}<td class="{{$c.Class}}">{{if $c.Detailed}}<a href="#{{$c.Anchor}}">{{$c.Label}}</a>{{else}}{{$c.Label}}{{end}}</td>{{end}}</tr>
{{end}}</table>
<ul>{{range .Outcomes}}<li><b>{{.Outcome}}</b>: {{.Means}}.</li>{{end}}</ul>
{{range .Systems}}{{range .Cells}}{{if .Detailed}}
<h3 id="{{.Anchor}}">{{.System}} · {{.Probe}}: {{.Label}}</h3>
<p>{{.Why}}</p>
{{range .References}}<p>Known: <a href="{{.URL}}">{{.Title}}</a>{{if .Says}} — {{.Says}}{{end}}</p>{{end}}
{{if .NewFinding}}<p>New finding: no documentation or issue of the queue's that the adapter cites matches it.</p>{{end}}
{{if .Notes}}<p>Notes: {{range .Notes}}{{.}}; {{end}}</p>{{end}}
<p>Replay: <code>{{.Replay}}</code></p>
{{with .ExampleRun}}<pre>{{range .Steps}}{{printf "%3d %7.3fs %-7s %s" .Seq (ms .AtMs) .Process .What}}
{{end}}</pre>{{if .Rows}}<pre>{{json .Rows}}</pre>{{end}}{{end}}
{{end}}{{end}}{{end}}
<h2>Systems, as configured</h2>
{{range .Systems}}<h3>{{.System.Name}}</h3>{{if .Error}}<pre>{{.Error}}</pre>{{else}}{{with .Hello}}
<p>{{.System}} {{.Version}} ({{.Language}}, on {{.Needs}}); delivery {{.Delivery.Semantics}} (<a href="{{.Delivery.Doc}}">doc</a>){{if .Delivery.Quote}}: “{{.Delivery.Quote}}”{{end}}; out of attempts: <code>{{.Exhausted.RawState}}</code>.</p>
<table><tr><th>setting</th><th>value</th><th>doc</th><th>why</th></tr>{{range .Config}}<tr><td>{{.Name}}</td><td>{{.Value}}</td><td>{{.Doc}}</td><td>{{.Why}}</td></tr>{{end}}</table>
{{end}}{{end}}{{end}}
</body></html>
`))

// Class is a cell's CSS class.
func (c Cell) Class() string { return strings.ReplaceAll(string(c.Outcome), " ", "-") }

// Label, Anchor and Detailed are label, anchor and detailed for the HTML
// template.
func (c Cell) Label() string  { return c.label() }
func (c Cell) Anchor() string { return c.anchor() }
func (c Cell) Detailed() bool { return c.detailed() }

// ExampleRun is the run that shows the cell's verdict, or nil.
func (c Cell) ExampleRun() *Result {
	if len(c.Runs) == 0 {
		return nil
	}
	return &c.Runs[c.Example]
}

// HTML renders the report as one self-contained page.
func (rep *Report) HTML() ([]byte, error) {
	var b bytes.Buffer
	if err := htmlPage.Execute(&b, rep); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

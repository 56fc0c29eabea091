package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// WriteReport writes, under dir, what a person needs to study a failed
// history: history.html (porcupine's visualization, annotated with clock
// moves and faults), history.json (the history, re-checkable), and
// verdict.md (the verdict, the seed and the replay commands).
func WriteReport(dir string, m model.Model, h *history.History, v validate.Verdict, j validate.Judgement, store string, seed uint64, cfg spec.Config, replay string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := history.Encode(h, history.Header{Store: store, Seed: seed, Partitioned: j.Partition, Drained: j.Drained, Config: cfg, Replay: replay})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), data, 0o644); err != nil {
		return err
	}
	info := v.Info
	var notes []porcupine.Annotation
	for _, n := range h.Notes {
		color := "#fde68a" // clock moves
		if strings.Contains(n.Text, "unknown") || strings.Contains(n.Text, "rolled back") {
			color = "#fca5a5" // faults
		}
		notes = append(notes, porcupine.Annotation{Tag: "test framework", Start: n.At, Description: n.Text, BackgroundColor: color})
	}
	info.AddAnnotations(notes)
	if err := porcupine.VisualizePath(validate.PorcupineModel(m, v.Partitioned), info, filepath.Join(dir, "history.html")); err != nil {
		return fmt.Errorf("visualize: %w", err)
	}
	if err := writeTimelines(dir, h); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Linearizability report\n\nStore: %s. Seed: %d. Operations: %d. Checker: %s in %s (partitioned by tenant: %v).\n\n",
		store, seed, len(h.Entries), v.Linearizable, v.CheckTime.Round(1e6), v.Partitioned)
	fmt.Fprintf(&b, "Replay the workload: `%s`\n\nRe-check this history: `go run ./cmd/leasehold lincheck %s`\n\n", replay, filepath.Join(dir, "history.json"))
	fmt.Fprintf(&b, "Races seen: %s\n\n", v.Races)
	if v.Culprit != nil {
		b.WriteString("## Where it goes wrong\n\n```\n" + v.Culprit.String() + "```\n\n")
	}
	if len(v.Accounting) > 0 {
		b.WriteString("## Accounting violations\n\n")
		for _, a := range v.Accounting {
			b.WriteString("- " + a + "\n")
		}
	}
	b.WriteString("\nOpen history.html in a browser: each client's operations on a time line, the longest linearizable prefix, and the clock moves and faults as annotations. " +
		"timeline.html (when a run was re-claimed or a write under a lease was refused) shows who held which generation when, and where each write came.\n")
	return os.WriteFile(filepath.Join(dir, "verdict.md"), []byte(b.String()), 0o644)
}

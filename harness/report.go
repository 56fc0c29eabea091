package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// HistoryFile is a recorded history as JSON: enough to check it again, with
// `leasehold lincheck FILE`, without the store that produced it.
type HistoryFile struct {
	Store       string         `json:"store"`
	Seed        uint64         `json:"seed"`
	Partitioned bool           `json:"partitioned"`
	Config      spec.Config    `json:"config"`
	Replay      string         `json:"replay"`
	Applied     map[string]int `json:"provider_applied"`
	Entries     []entryJSON    `json:"entries"`
	Notes       []Note         `json:"notes"`
}

type entryJSON struct {
	Client  int             `json:"client"`
	Actor   string          `json:"actor"`
	Kind    spec.Op         `json:"kind"`
	Now     int64           `json:"now"`
	Jitter  int64           `json:"jitter,omitempty"`
	Req     json.RawMessage `json:"req"`
	Unknown bool            `json:"unknown,omitempty"`
	Value   json.RawMessage `json:"value,omitempty"`
	Err     *spec.Error     `json:"err,omitempty"`
	Call    int64           `json:"call"`
	Return  int64           `json:"return"`
}

// EncodeHistory renders h as a HistoryFile.
func EncodeHistory(h *History, store string, seed uint64, partitioned bool, cfg spec.Config, replay string) ([]byte, error) {
	f := HistoryFile{Store: store, Seed: seed, Partitioned: partitioned, Config: cfg, Replay: replay, Notes: h.Notes}
	h.Provider.mu.Lock()
	f.Applied = map[string]int{}
	for k, n := range h.Provider.applied {
		f.Applied[k] = n
	}
	h.Provider.mu.Unlock()
	for _, e := range h.Entries {
		req, err := json.Marshal(e.Op.Req)
		if err != nil {
			return nil, err
		}
		j := entryJSON{Client: e.Client, Actor: e.Actor, Kind: e.Op.Kind, Now: e.Op.Now, Jitter: e.Op.Jitter, Req: req,
			Unknown: e.Out.Unknown, Err: e.Out.Result.Err, Call: e.Call, Return: e.Return}
		if e.Out.Result.Value != nil {
			if j.Value, err = json.Marshal(e.Out.Result.Value); err != nil {
				return nil, err
			}
		}
		f.Entries = append(f.Entries, j)
	}
	return json.MarshalIndent(f, "", " ")
}

// DecodeHistory parses a HistoryFile back into a History.
func DecodeHistory(data []byte) (*History, HistoryFile, error) {
	var f HistoryFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, f, err
	}
	h := &History{Notes: f.Notes, Provider: NewProvider()}
	for k, n := range f.Applied {
		h.Provider.applied[k] = n
	}
	for i, j := range f.Entries {
		req, value, err := typesFor(j.Kind)
		if err != nil {
			return nil, f, fmt.Errorf("entry %d: %w", i, err)
		}
		if err := json.Unmarshal(j.Req, req); err != nil {
			return nil, f, fmt.Errorf("entry %d (%s) request: %w", i, j.Kind, err)
		}
		e := Entry{Client: j.Client, Actor: j.Actor, Call: j.Call, Return: j.Return,
			Op:  model.Op{Kind: j.Kind, Now: j.Now, Jitter: j.Jitter, Req: deref(req)},
			Out: Observed{Unknown: j.Unknown, Result: model.Result{Err: j.Err}}}
		if len(j.Value) > 0 {
			if err := json.Unmarshal(j.Value, value); err != nil {
				return nil, f, fmt.Errorf("entry %d (%s) value: %w", i, j.Kind, err)
			}
			e.Out.Result.Value = deref(value)
		}
		h.Entries = append(h.Entries, e)
	}
	return h, f, nil
}

// typesFor returns pointers to the request and result types of an op.
func typesFor(kind spec.Op) (req, value any, err error) {
	switch kind {
	case spec.OpCreateRun:
		return new(spec.CreateRunRequest), new(spec.CreateRunResult), nil
	case spec.OpClaim:
		return new(spec.ClaimRequest), new([]spec.Lease), nil
	case spec.OpRenew:
		return new(spec.RenewRequest), new(spec.Lease), nil
	case spec.OpComplete:
		return new(spec.CompleteRequest), new(spec.Run), nil
	case spec.OpRetry:
		return new(spec.RetryRequest), new(spec.Job), nil
	case spec.OpFail:
		return new(spec.FailRequest), new(spec.Run), nil
	case spec.OpCancel:
		return new(spec.CancelRequest), new(spec.Run), nil
	case spec.OpRelease:
		return new(spec.ReleaseRequest), new(spec.Job), nil
	case spec.OpReap:
		return new(spec.ReapRequest), new([]string), nil
	case spec.OpPurge:
		return new(spec.PurgeRequest), new(int), nil
	case spec.OpReplay:
		return new(spec.ReplayRequest), new(spec.Run), nil
	case spec.OpReserveEffect:
		return new(spec.ReserveEffectRequest), new(spec.EffectReservation), nil
	case spec.OpRecordEffect, spec.OpReconcileEffect:
		return new(spec.RecordEffectRequest), new(spec.Effect), nil
	case OpSnapshot:
		return new(SnapshotRequest), new(spec.Snapshot), nil
	}
	return nil, nil, fmt.Errorf("unknown operation %q", kind)
}

func deref(p any) any {
	switch v := p.(type) {
	case *spec.CreateRunRequest:
		return *v
	case *spec.CreateRunResult:
		return *v
	case *spec.ClaimRequest:
		return *v
	case *[]spec.Lease:
		return *v
	case *spec.RenewRequest:
		return *v
	case *spec.Lease:
		return *v
	case *spec.CompleteRequest:
		return *v
	case *spec.Run:
		return *v
	case *spec.RetryRequest:
		return *v
	case *spec.Job:
		return *v
	case *spec.FailRequest:
		return *v
	case *spec.CancelRequest:
		return *v
	case *spec.ReleaseRequest:
		return *v
	case *spec.ReapRequest:
		return *v
	case *[]string:
		return *v
	case *spec.PurgeRequest:
		return *v
	case *int:
		return *v
	case *spec.ReplayRequest:
		return *v
	case *spec.ReserveEffectRequest:
		return *v
	case *spec.EffectReservation:
		return *v
	case *spec.RecordEffectRequest:
		return *v
	case *spec.Effect:
		return *v
	case *SnapshotRequest:
		return *v
	case *spec.Snapshot:
		return *v
	}
	panic(fmt.Sprintf("harness: deref %T", p))
}

// WriteReport writes, under dir, what a person needs to study a failed
// history: history.html (porcupine's visualization, annotated with clock
// moves and faults), history.json (the history, re-checkable), and
// verdict.md (the verdict, the seed and the replay commands).
func WriteReport(dir string, m model.Model, h *History, v Verdict, store string, seed uint64, cfg spec.Config, replay string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := EncodeHistory(h, store, seed, v.Partitioned, cfg, replay)
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
	if err := porcupine.VisualizePath(PorcupineModel(m, v.Partitioned), info, filepath.Join(dir, "history.html")); err != nil {
		return fmt.Errorf("visualize: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Linearizability report\n\nStore: %s. Seed: %d. Operations: %d. Checker: %s in %s (partitioned by tenant: %v).\n\n",
		store, seed, len(h.Entries), v.Linearizable, v.CheckTime.Round(1e6), v.Partitioned)
	fmt.Fprintf(&b, "Replay the workload: `%s`\n\nRe-check this history: `go run ./cmd/leasehold lincheck %s`\n\n", replay, filepath.Join(dir, "history.json"))
	fmt.Fprintf(&b, "Races seen: %+v\n\n", v.Races)
	if v.Culprit != nil {
		b.WriteString("## Where it goes wrong\n\n```\n" + v.Culprit.String() + "```\n\n")
	}
	if len(v.Accounting) > 0 {
		b.WriteString("## Accounting violations\n\n")
		for _, a := range v.Accounting {
			b.WriteString("- " + a + "\n")
		}
	}
	b.WriteString("\nOpen history.html in a browser: each client's operations on a time line, the longest linearizable prefix, and the clock moves and faults as annotations.\n")
	return os.WriteFile(filepath.Join(dir, "verdict.md"), []byte(b.String()), 0o644)
}

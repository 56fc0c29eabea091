package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// HistoryFile is a recorded history as JSON: enough to check it again, with
// `leasehold lincheck FILE`, without the store that produced it. Requests and
// results are in their spec JSON form, decoded by the operation table.
// docs/HISTORY.md documents the format.
type HistoryFile struct {
	Store       string         `json:"store"`
	Seed        uint64         `json:"seed"`
	Partitioned bool           `json:"partitioned"`
	Drained     bool           `json:"drained"`
	Config      spec.Config    `json:"config"`
	Replay      string         `json:"replay"`
	Applied     map[string]int `json:"provider_applied"`
	Entries     []entryJSON    `json:"entries"`
	Notes       []Note         `json:"notes"`
	Holds       []Hold         `json:"holds,omitempty"`
	Blocks      []Block        `json:"blocks,omitempty"`
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
func EncodeHistory(h *History, store string, seed uint64, j Judgement, cfg spec.Config, replay string) ([]byte, error) {
	f := HistoryFile{Store: store, Seed: seed, Partitioned: j.Partition, Drained: j.Drained, Config: cfg, Replay: replay,
		Notes: h.Notes, Holds: h.Holds, Blocks: h.Blocks, Applied: map[string]int{}}
	if h.Provider != nil {
		h.Provider.mu.Lock()
		maps.Copy(f.Applied, h.Provider.applied)
		h.Provider.mu.Unlock()
	}
	for _, e := range h.Entries {
		req, err := json.Marshal(e.Op.Req)
		if err != nil {
			return nil, err
		}
		j := entryJSON{Client: e.Client, Actor: e.Actor, Kind: e.Op.Kind(), Now: e.Op.Now, Jitter: e.Op.Jitter, Req: req,
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

// The codes of a HistoryError: why DecodeHistory refused a file. They are
// stable; docs/HISTORY.md lists them.
const (
	HistoryNotAHistory     = "not_a_history"     // not JSON, an unknown field, data after the object
	HistoryDuplicateKey    = "duplicate_key"     // a key twice in one object, anywhere
	HistoryNoEntries       = "no_entries"        // nothing to check
	HistoryInvalidConfig   = "invalid_config"    // the config does not validate
	HistoryInvalidEntry    = "invalid_entry"     // an entry's kind, request, outcome or times
	HistoryNegativeNow     = "negative_now"      // a clock reading before the epoch
	HistoryNoFinalSnapshot = "no_final_snapshot" // no final scan: "lost" could not be judged
)

// HistoryError is a history file DecodeHistory refuses: Code (a History*
// constant) says why, Entry which entry (-1: the file as a whole).
type HistoryError struct {
	Code   string
	Entry  int
	Detail string
}

func (e *HistoryError) Error() string { return e.Detail + " [" + e.Code + "]" }

func refuse(code string, entry int, format string, args ...any) *HistoryError {
	return &HistoryError{Code: code, Entry: entry, Detail: fmt.Sprintf(format, args...)}
}

// DecodeHistory parses a HistoryFile back into a History (the format is
// docs/HISTORY.md). Decoding is strict: an unknown field, a key twice in
// one object, trailing data, an unknown operation, an entry without its
// request, without an outcome (a value, an error or unknown) or with two, an
// unknown outcome that returns, a negative clock reading, an error code the
// contract does not have, a history with no entries and one without its
// final snapshot are refused with a *HistoryError, never a history that
// would be judged by default (an empty one as linearizable, one without its
// final scan as having lost every run).
func DecodeHistory(data []byte) (*History, HistoryFile, error) {
	var f HistoryFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, f, refuse(HistoryNotAHistory, -1, "not a history file: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, f, refuse(HistoryNotAHistory, -1, "not a history file: trailing data after the JSON object")
	}
	if path, dup := duplicateKey(data); dup {
		return nil, f, refuse(HistoryDuplicateKey, -1, "the key at %s appears twice in its object: which one the history means is not said", path)
	}
	if len(f.Entries) == 0 {
		return nil, f, refuse(HistoryNoEntries, -1, "the history has no entries: there is nothing to check")
	}
	if err := f.Config.Validate(); err != nil {
		return nil, f, refuse(HistoryInvalidConfig, -1, "the history's config: %v", err)
	}
	h := &History{Notes: f.Notes, Holds: f.Holds, Blocks: f.Blocks, Provider: NewProvider()}
	maps.Copy(h.Provider.applied, f.Applied)
	for i, j := range f.Entries {
		bad := func(format string, args ...any) (*History, HistoryFile, error) {
			return nil, f, refuse(HistoryInvalidEntry, i, "entry %d (%s): %s", i, j.Kind, fmt.Sprintf(format, args...))
		}
		o, known := spec.Lookup(j.Kind)
		if !known {
			return nil, f, refuse(HistoryInvalidEntry, i, "entry %d: unknown operation %q", i, j.Kind)
		}
		if len(j.Req) == 0 {
			return bad("no request")
		}
		if j.Now < 0 {
			return nil, f, refuse(HistoryNegativeNow, i, "entry %d (%s): now is %d: a clock reading is milliseconds since the epoch, never negative", i, j.Kind, j.Now)
		}
		req, err := o.DecodeRequest(j.Req)
		if err != nil {
			return bad("request: %v", err)
		}
		e := Entry{Client: j.Client, Actor: j.Actor, Call: j.Call, Return: j.Return,
			Op:  model.Op{Now: j.Now, Jitter: j.Jitter, Req: req},
			Out: Observed{Unknown: j.Unknown, Result: model.Result{Err: j.Err}}}
		switch {
		case j.Unknown && (len(j.Value) > 0 || j.Err != nil):
			return bad("an unknown outcome has neither a value nor an error")
		case j.Unknown && j.Return != math.MaxInt64:
			return bad("an unknown outcome never returns (return %d, want %d)", j.Return, int64(math.MaxInt64))
		case len(j.Value) > 0 && j.Err != nil:
			return bad("both a value and an error")
		case !j.Unknown && len(j.Value) == 0 && j.Err == nil:
			return bad("no outcome: want a value, an error or \"unknown\": true")
		case j.Call > j.Return:
			return bad("returns (%d) before it is called (%d)", j.Return, j.Call)
		case j.Err != nil && !knownCode(j.Err.Code):
			return bad("error code %q is not a code of the contract", j.Err.Code)
		case len(j.Value) > 0:
			if e.Out.Result.Value, err = o.DecodeResult(j.Value); err != nil {
				return bad("value: %v", err)
			}
		}
		h.Entries = append(h.Entries, e)
	}
	if len(finalScans(h)) == 0 {
		return nil, f, refuse(HistoryNoFinalSnapshot, -1, "the history does not end with its final scan (a snapshot, with its value, called after every other operation returned): "+
			"without it nothing can be said about lost runs; the file is incomplete")
	}
	return h, f, nil
}

// duplicateKey reports the JSON Pointer of the first key that appears twice
// in one object of data (valid JSON), at any depth: encoding/json keeps the
// last and says nothing.
func duplicateKey(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var dup string
	var walk func(path string) bool
	walk = func(path string) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return false
				}
				k, _ := kt.(string)
				p := path + "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
				if seen[k] {
					dup = p
					return false
				}
				seen[k] = true
				if !walk(p) {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if !walk(fmt.Sprintf("%s/%d", path, i)) {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		}
		return true
	}
	walk("")
	return dup, dup != ""
}

func knownCode(c spec.Code) bool {
	for _, k := range spec.Codes {
		if k == c {
			return true
		}
	}
	return false
}

// WriteReport writes, under dir, what a person needs to study a failed
// history: history.html (porcupine's visualization, annotated with clock
// moves and faults), history.json (the history, re-checkable), and
// verdict.md (the verdict, the seed and the replay commands).
func WriteReport(dir string, m model.Model, h *History, v Verdict, j Judgement, store string, seed uint64, cfg spec.Config, replay string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := EncodeHistory(h, store, seed, j, cfg, replay)
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

package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strings"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// Header is what a history file says of its run besides the history: the
// store and seed, how the history is to be judged (split by tenant; drained,
// every run terminal at the end), the store's config and the command that
// replays the run.
type Header struct {
	Store       string      `json:"store"`
	Seed        uint64      `json:"seed"`
	Partitioned bool        `json:"partitioned"`
	Drained     bool        `json:"drained"`
	Config      spec.Config `json:"config"`
	Replay      string      `json:"replay"`
}

// File is a recorded history as JSON: enough to check it again, with
// `leasehold lincheck FILE`, without the store that produced it. Requests and
// results are in their spec JSON form, decoded by the operation table.
// docs/HISTORY.md documents the format.
type File struct {
	Header
	Applied map[string]int `json:"provider_applied"`
	Entries []FileEntry    `json:"entries"`
	Notes   []Note         `json:"notes"`
	Holds   []Hold         `json:"holds,omitempty"`
	Blocks  []Block        `json:"blocks,omitempty"`
}

// FileEntry is one Entry of a File: its request and its value in their spec
// JSON form.
type FileEntry struct {
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

// Encode renders h as a File with head.
func Encode(h *History, head Header) ([]byte, error) {
	f := File{Header: head,
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
		j := FileEntry{Client: e.Client, Actor: e.Actor, Kind: e.Op.Kind(), Now: e.Op.Now, Jitter: e.Op.Jitter, Req: req,
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

// The codes of a Error: why Decode refused a file. They are
// stable; docs/HISTORY.md lists them.
const (
	CodeNotAHistory     = "not_a_history"     // not JSON, an unknown field, data after the object
	CodeDuplicateKey    = "duplicate_key"     // a key twice in one object, anywhere
	CodeNoEntries       = "no_entries"        // nothing to check
	CodeInvalidConfig   = "invalid_config"    // the config does not validate
	CodeInvalidEntry    = "invalid_entry"     // an entry's kind, request, outcome or times
	CodeNegativeNow     = "negative_now"      // a clock reading before the epoch
	CodeNoFinalSnapshot = "no_final_snapshot" // no final scan: "lost" could not be judged
)

// Error is a history file Decode refuses: Code (a History*
// constant) says why, Entry which entry (-1: the file as a whole).
type Error struct {
	Code   string
	Entry  int
	Detail string
}

func (e *Error) Error() string { return e.Detail + " [" + e.Code + "]" }

func refuse(code string, entry int, format string, args ...any) *Error {
	return &Error{Code: code, Entry: entry, Detail: fmt.Sprintf(format, args...)}
}

// Decode parses a File back into a History (the format is
// docs/HISTORY.md). Decoding is strict: an unknown field, a key twice in
// one object, trailing data, an unknown operation, an entry without its
// request, without an outcome (a value, an error or unknown) or with two, an
// unknown outcome that returns, a negative clock reading, an error code the
// contract does not have, a history with no entries and one without its
// final snapshot are refused with a *Error, never a history that
// would be judged by default (an empty one as linearizable, one without its
// final scan as having lost every run).
func Decode(data []byte) (*History, File, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, f, refuse(CodeNotAHistory, -1, "not a history file: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, f, refuse(CodeNotAHistory, -1, "not a history file: trailing data after the JSON object")
	}
	if path, dup := duplicateKey(data); dup {
		return nil, f, refuse(CodeDuplicateKey, -1, "the key at %s appears twice in its object: which one the history means is not said", path)
	}
	if len(f.Entries) == 0 {
		return nil, f, refuse(CodeNoEntries, -1, "the history has no entries: there is nothing to check")
	}
	if err := f.Config.Validate(); err != nil {
		return nil, f, refuse(CodeInvalidConfig, -1, "the history's config: %v", err)
	}
	h := &History{Notes: f.Notes, Holds: f.Holds, Blocks: f.Blocks, Provider: NewProvider()}
	maps.Copy(h.Provider.applied, f.Applied)
	for i, j := range f.Entries {
		bad := func(format string, args ...any) (*History, File, error) {
			return nil, f, refuse(CodeInvalidEntry, i, "entry %d (%s): %s", i, j.Kind, fmt.Sprintf(format, args...))
		}
		o, known := spec.Lookup(j.Kind)
		if !known {
			return nil, f, refuse(CodeInvalidEntry, i, "entry %d: unknown operation %q", i, j.Kind)
		}
		if len(j.Req) == 0 {
			return bad("no request")
		}
		if j.Now < 0 {
			return nil, f, refuse(CodeNegativeNow, i, "entry %d (%s): now is %d: a clock reading is milliseconds since the epoch, never negative", i, j.Kind, j.Now)
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
	if len(h.FinalScans()) == 0 {
		return nil, f, refuse(CodeNoFinalSnapshot, -1, "the history does not end with its final scan (a snapshot, with its value, called after every other operation returned): "+
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

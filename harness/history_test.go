package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/model"
)

// recorded returns a small real history as a HistoryFile's JSON.
func recorded(t *testing.T) []byte {
	t.Helper()
	w := Workload{Factory: sqlitetest.Factory, Config: TestConfig(), Seed: 11, Tenants: []string{"t1", "t2"},
		Workers: 2, APIs: 1, Ops: 150, MaxUnknown: 1, Aborts: 0.05}
	scope := &scopedTB{TB: t}
	defer scope.close()
	h, err := w.Record(t.Context(), scope)
	if err != nil {
		t.Fatal(err)
	}
	data, err := history.Encode(h, history.Header{Store: "sqlite", Seed: w.Seed, Partitioned: true, Drained: true, Config: w.Config, Replay: "replay"})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestDecodeHistoryRefusesMalformed: a history file that is empty,
// misspelled, has a key twice, an incomplete entry, a negative clock
// reading or no final snapshot is refused with a *HistoryError whose code
// says why, never judged (an empty history would check as Ok, one without
// its final scan as having lost every run).
func TestDecodeHistoryRefusesMalformed(t *testing.T) {
	good := recorded(t)
	if _, _, err := history.Decode(good); err != nil {
		t.Fatalf("the recorded history does not decode: %v", err)
	}
	// Numbers stay json.Numbers: times are int64s past float64's precision.
	decode := func() map[string]any {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(good))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	entries := decode()["entries"].([]any)
	// The index of an entry with a value (not unknown, no error), and of a
	// create_run.
	valued, create := -1, -1
	for i, e := range entries {
		if _, ok := e.(map[string]any)["value"]; ok && valued < 0 {
			valued = i
		}
		if e.(map[string]any)["kind"] == "create_run" && create < 0 {
			create = i
		}
	}
	if valued < 0 || create < 0 {
		t.Fatalf("the history has no entry with a value (%d) or no create_run (%d)", valued, create)
	}
	edit := func(change func(m map[string]any)) []byte {
		m := decode()
		change(m)
		b, _ := json.Marshal(m)
		return b
	}
	entry := func(m map[string]any, i int) map[string]any { return m["entries"].([]any)[i].(map[string]any) }
	// The history without its final scan: the snapshot entries at its end.
	noFinal := edit(func(m map[string]any) {
		es := m["entries"].([]any)
		for len(es) > 0 && es[len(es)-1].(map[string]any)["kind"] == "snapshot" {
			es = es[:len(es)-1]
		}
		m["entries"] = es
	})
	// A key twice: at the top and in an entry (encoding/json keeps the last).
	dupTop := bytes.Replace(good, []byte(`"store": "sqlite",`), []byte(`"store": "sqlite", "store": "postgres",`), 1)
	dupEntry := bytes.Replace(good, []byte(`"kind": "create_run",`), []byte(`"kind": "claim", "kind": "create_run",`), 1)
	cases := []struct {
		name string
		data []byte
		code string
		want string
	}{
		{"empty file", nil, history.CodeNotAHistory, "not a history file"},
		{"not JSON", []byte("history"), history.CodeNotAHistory, "not a history file"},
		{"an object with nothing", []byte("{}"), history.CodeNoEntries, "no entries"},
		{"no entries", edit(func(m map[string]any) { m["entries"] = []any{} }), history.CodeNoEntries, "no entries"},
		{"a misspelled field", edit(func(m map[string]any) { m["entires"] = m["entries"] }), history.CodeNotAHistory, `unknown field "entires"`},
		{"a misspelled entry field", edit(func(m map[string]any) { entry(m, 0)["requst"] = 1 }), history.CodeNotAHistory, `unknown field "requst"`},
		{"trailing data", append(append([]byte(nil), good...), []byte(" {}")...), history.CodeNotAHistory, "trailing data"},
		{"a key twice", dupTop, history.CodeDuplicateKey, "the key at /store appears twice"},
		{"a key twice in an entry", dupEntry, history.CodeDuplicateKey, "/kind appears twice"},
		{"an unknown operation", edit(func(m map[string]any) { entry(m, 0)["kind"] = "teleport" }), history.CodeInvalidEntry, `unknown operation "teleport"`},
		{"no request", edit(func(m map[string]any) { delete(entry(m, 0), "req") }), history.CodeInvalidEntry, "no request"},
		{"a request of another operation", edit(func(m map[string]any) { entry(m, create)["kind"] = "claim" }), history.CodeInvalidEntry, `(claim): request: json: unknown field`},
		{"no outcome", edit(func(m map[string]any) { delete(entry(m, valued), "value") }), history.CodeInvalidEntry, "no outcome"},
		{"a value and an error", edit(func(m map[string]any) {
			entry(m, valued)["err"] = map[string]any{"code": "not_found", "message": "x"}
		}), history.CodeInvalidEntry, "both a value and an error"},
		{"an unknown outcome that returns", edit(func(m map[string]any) {
			e := entry(m, valued)
			delete(e, "value")
			e["unknown"] = true
		}), history.CodeInvalidEntry, "an unknown outcome never returns"},
		{"a return before the call", edit(func(m map[string]any) { entry(m, valued)["return"] = 0 }), history.CodeInvalidEntry, "returns (0) before it is called"},
		{"an unknown error code", edit(func(m map[string]any) {
			e := entry(m, valued)
			delete(e, "value")
			e["err"] = map[string]any{"code": "oops", "message": "x"}
		}), history.CodeInvalidEntry, `error code "oops"`},
		{"a negative now", edit(func(m map[string]any) { entry(m, create)["now"] = -1 }), history.CodeNegativeNow, "now is -1"},
		{"no final snapshot", noFinal, history.CodeNoFinalSnapshot, "does not end with its final scan"},
		{"a bad config", edit(func(m map[string]any) { m["config"] = map[string]any{} }), history.CodeInvalidConfig, "config"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := history.Decode(c.data)
			var he *history.Error
			if !errors.As(err, &he) || he.Code != c.code || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want a *HistoryError %s containing %q, got %T %v", c.code, c.want, err, err)
			}
		})
	}
}

// TestDecodedHistoriesNeverPanic: every history DecodeHistory accepts can
// be judged. Each entry of a real history is changed in turn — its time,
// its outcome turned into another entry's, its client — and every decoded
// variant is judged; a panic inside porcupine's checker could not be
// recovered, so this must never crash.
func TestDecodedHistoriesNeverPanic(t *testing.T) {
	good := recorded(t)
	var f history.File
	if err := json.Unmarshal(good, &f); err != nil {
		t.Fatal(err)
	}
	m := model.Model{Config: f.Config}
	judged, illegal := 0, 0
	for i := 0; i < len(f.Entries); i += 7 {
		for _, change := range []func(e *history.FileEntry){
			func(e *history.FileEntry) { e.Now = -1 },
			func(e *history.FileEntry) { e.Now = math.MaxInt64 },
			func(e *history.FileEntry) { e.Jitter = -5 },
			func(e *history.FileEntry) { e.Client = 9999 },
			func(e *history.FileEntry) { *e = f.Entries[(i+3)%len(f.Entries)] }, // another entry in its place
			func(e *history.FileEntry) {
				other := f.Entries[(i+1)%len(f.Entries)]
				e.Value, e.Err = other.Value, other.Err // another operation's outcome
			},
		} {
			v := f
			v.Entries = append([]history.FileEntry(nil), f.Entries...)
			change(&v.Entries[i])
			data, _ := json.Marshal(v)
			h, file, err := history.Decode(data)
			if err != nil {
				continue
			}
			verdict := validate.Judge(model.Model{Config: file.Config}, h, validate.Judgement{Partition: file.Partitioned, Timeout: hang.PhasePatience(), Drained: file.Drained})
			judged++
			if verdict.Linearizable != porcupine.Ok {
				illegal++
				verdict.Explain(m, h, hang.PhasePatience())
			}
		}
	}
	if judged == 0 || illegal == 0 {
		t.Fatalf("judged %d variants, %d not linearizable: the test proves nothing", judged, illegal)
	}
	t.Logf("judged %d variants of a %d-entry history, %d not linearizable", judged, len(f.Entries), illegal)
}

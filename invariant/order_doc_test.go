package invariant

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// orderNames are the names Check gives each table of a snapshot in its
// order violations, by the table's JSON name.
var orderNames = map[string]string{
	"runs": "runs", "events": "events", "jobs": "jobs", "attempts": "attempts",
	"idempotency": "idempotency records", "effects": "effects", "outbox": "outbox messages",
}

// TestSnapshotOrderTable holds SPEC.md's table of a snapshot's canonical
// order ("For porters") to Check: for each table and each of its keys, two
// rows equal on the keys before it and ascending in it (strings byte by
// byte, "Z" before "a"; integers numerically, 2 before 10) are in order
// even when every later key and every other field descends, and out of
// order swapped; two rows equal on every key are a duplicate even when
// every other field ascends. So the order is exactly the table's keys,
// in its precedence, no more and no fewer.
func TestSnapshotOrderTable(t *testing.T) {
	doc, err := os.ReadFile("../spec/SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start, end := strings.Index(s, "<!-- snapshot-order"), strings.Index(s, "<!-- /snapshot-order -->")
	if start < 0 || end < start {
		t.Fatal("SPEC.md has no <!-- snapshot-order … --> … <!-- /snapshot-order --> table")
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(s[start:end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		table := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var keys []string
		for _, k := range strings.Split(cells[2], ",") {
			keys = append(keys, strings.Trim(strings.TrimSpace(k), "`"))
		}
		seen[table] = true
		checkDocOrder(t, table, keys)
	}
	snap := reflect.TypeFor[spec.Snapshot]()
	for i := 0; i < snap.NumField(); i++ {
		if name, _, _ := strings.Cut(snap.Field(i).Tag.Get("json"), ","); !seen[name] {
			t.Errorf("the snapshot's table %q has no row in SPEC.md's order table", name)
		}
	}
}

// checkDocOrder checks the order of one table by keys.
func checkDocOrder(t *testing.T, table string, keys []string) {
	t.Helper()
	field, ok := snapshotField(table)
	if !ok || orderNames[table] == "" {
		t.Errorf("SPEC.md's order table names %q, which is not a table of spec.Snapshot", table)
		return
	}
	elem := field.Type.Elem()
	kinds := map[string]reflect.Kind{}
	for i := 0; i < elem.NumField(); i++ {
		name, _, _ := strings.Cut(elem.Field(i).Tag.Get("json"), ",")
		kinds[name] = elem.Field(i).Type.Kind()
	}
	low := func(k reflect.Kind) any {
		if k == reflect.String {
			return "Z"
		}
		return 2
	}
	high := func(k reflect.Kind) any {
		if k == reflect.String {
			return "a"
		}
		return 10
	}
	// row sets every field: keys[:i] equal, keys[i] low or high, and every
	// other field (later keys too) the other way round.
	row := func(i int, up bool) reflect.Value {
		m := map[string]any{}
		for name, k := range kinds {
			if k != reflect.String && k != reflect.Int && k != reflect.Int64 {
				continue
			}
			if up {
				m[name] = low(k)
			} else {
				m[name] = high(k)
			}
		}
		for j, key := range keys {
			if _, ok := kinds[key]; !ok {
				t.Fatalf("%s: SPEC.md sorts by %q, which is not a field of %v", table, key, elem)
			}
			switch {
			case j < i:
				m[key] = low(kinds[key])
			case j == i && up:
				m[key] = high(kinds[key])
			case j == i:
				m[key] = low(kinds[key])
			}
		}
		data, _ := json.Marshal(m)
		v := reflect.New(elem)
		if err := json.Unmarshal(data, v.Interface()); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		return v.Elem()
	}
	outOfOrder := func(a, b reflect.Value) bool {
		var s spec.Snapshot
		rows := reflect.ValueOf(&s).Elem().FieldByIndex(field.Index)
		rows.Set(reflect.Append(reflect.Append(rows, a), b))
		for _, v := range Check(s) {
			if v.Invariant == "Snapshot" && strings.HasPrefix(v.Message, orderNames[table]+" not in canonical order") {
				return true
			}
		}
		return false
	}
	for i, key := range keys {
		lo, hi := row(i, false), row(i, true)
		if outOfOrder(lo, hi) {
			t.Errorf("%s: two rows ascending in %s (equal on %v) are out of order for Check; SPEC.md says they are in order", table, key, keys[:i])
		}
		if !outOfOrder(hi, lo) {
			t.Errorf("%s: two rows descending in %s (equal on %v) are in order for Check; SPEC.md says they are not", table, key, keys[:i])
		}
	}
	// Equal on every key, every other field ascending: a duplicate.
	if !outOfOrder(row(len(keys), true), row(len(keys), false)) {
		t.Errorf("%s: two rows equal on %v are not a duplicate for Check; SPEC.md says those keys are the whole order", table, keys)
	}
}

// snapshotField returns the field of spec.Snapshot with JSON name table.
func snapshotField(table string) (reflect.StructField, bool) {
	snap := reflect.TypeFor[spec.Snapshot]()
	for i := 0; i < snap.NumField(); i++ {
		if name, _, _ := strings.Cut(snap.Field(i).Tag.Get("json"), ","); name == table {
			return snap.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

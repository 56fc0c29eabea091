package scenarios

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// An expectation's pattern is matched against the JSON form of the result
// (spec's JSON names): an object matches when each of its fields matches the
// result's field of that name (fields it does not name are not compared); an
// array when it has as many elements and each matches; a string, number or
// boolean when equal. An object, array or null matched against a string
// (a run's result or payload, which the store keeps as canonical JSON text)
// compares as its RFC 8785 canonical text, null as "" (no result).

// checkShape checks that the pattern only names fields the operation's
// result has.
func (e *Expect) checkShape(row spec.Operation) error {
	if e == nil || e.Pattern == nil {
		return nil
	}
	return shapeOf(row.Result, e.Pattern, string(row.Op)+" result")
}

func shapeOf(t reflect.Type, p any, path string) error {
	if t.Kind() == reflect.Interface {
		return nil // an error: any *spec.Error's JSON
	}
	if _, isText := p.(string); t.Kind() == reflect.String && !isText {
		if _, isNum := p.(json.Number); isNum {
			return fmt.Errorf("%s is a string", path)
		}
		return nil // canonical JSON text: see match
	}
	switch pv := p.(type) {
	case map[string]any:
		fields := jsonFields(t)
		if fields == nil {
			return fmt.Errorf("%s is not an object", path)
		}
		for k, v := range pv {
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("field %q is not part of a %s (fields: %s)", k, path, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
			}
			if err := shapeOf(ft, v, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() != reflect.Slice {
			return fmt.Errorf("%s is not a list", path)
		}
		for i, v := range pv {
			if err := shapeOf(t.Elem(), v, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case string:
		if t.Kind() != reflect.String {
			return fmt.Errorf("%s is not a string", path)
		}
	case json.Number:
		if k := t.Kind(); k < reflect.Int || k > reflect.Float64 {
			return fmt.Errorf("%s is not a number", path)
		}
	case bool:
		if t.Kind() != reflect.Bool {
			return fmt.Errorf("%s is not a boolean", path)
		}
	}
	return nil
}

// jsonFields returns a struct type's fields by JSON name, nil for a
// non-struct.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t.Kind() != reflect.Struct {
		return nil
	}
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out[name] = f.Type
	}
	return out
}

// compare returns every difference between the expectation and a result,
// each saying what was expected and what was got.
func compare(e *Expect, r model.Result) []string {
	if e.Error != "" {
		if r.Err == nil || r.Err.Code != e.Error || r.Err.State != e.ErrorState {
			return []string{fmt.Sprintf("expected error %s, got %s", describeError(e.Error, e.ErrorState), outcome(r))}
		}
		return nil
	}
	if r.Err != nil {
		return []string{fmt.Sprintf("expected ok, got %s", outcome(r))}
	}
	if e.Pattern == nil {
		return nil
	}
	data, err := json.Marshal(r.Value)
	if err != nil {
		return []string{fmt.Sprintf("the result does not encode as JSON: %v", err)}
	}
	got, err := decodeJSON(data)
	if err != nil {
		return []string{fmt.Sprintf("the result does not decode as JSON: %v", err)}
	}
	var diffs []string
	match(e.Pattern, got, "", &diffs)
	return diffs
}

// match appends a difference for every place where got does not match the
// pattern want.
func match(want, got any, path string, diffs *[]string) {
	at := func() string {
		if path == "" {
			return "result"
		}
		return strings.TrimPrefix(path, ".")
	}
	if s, isString := got.(string); isString {
		switch want.(type) {
		case map[string]any, []any, nil:
			text, err := json.Marshal(want)
			if err == nil && want != nil {
				var canon string
				if canon, err = spec.Canonicalize(text); err == nil {
					text = []byte(canon)
				}
			}
			if want == nil {
				text = nil
			}
			if err != nil || string(text) != s {
				*diffs = append(*diffs, fmt.Sprintf("%s: expected %s, got %s", at(), textOrNull(string(text)), textOrNull(s)))
			}
			return
		}
	}
	switch w := want.(type) {
	case map[string]any:
		g, isObj := got.(map[string]any)
		if !isObj {
			*diffs = append(*diffs, fmt.Sprintf("%s: expected an object, got %s", at(), show(got)))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(w)) {
			match(w[k], g[k], path+"."+k, diffs)
		}
	case []any:
		g, isList := got.([]any)
		if !isList || len(g) != len(w) {
			*diffs = append(*diffs, fmt.Sprintf("%s: expected %d element(s) %s, got %s", at(), len(w), show(want), show(got)))
			return
		}
		for i := range w {
			match(w[i], g[i], fmt.Sprintf("%s[%d]", path, i), diffs)
		}
	case json.Number:
		g, isNum := got.(json.Number)
		if !isNum || !sameNumber(w, g) {
			*diffs = append(*diffs, fmt.Sprintf("%s: expected %s, got %s", at(), w, show(got)))
		}
	default:
		if !reflect.DeepEqual(want, got) {
			*diffs = append(*diffs, fmt.Sprintf("%s: expected %s, got %s", at(), show(want), show(got)))
		}
	}
}

func sameNumber(a, b json.Number) bool {
	if a == b {
		return true
	}
	x, errA := a.Float64()
	y, errB := b.Float64()
	return errA == nil && errB == nil && x == y
}

func textOrNull(s string) string {
	if s == "" {
		return "null"
	}
	return s
}

// show renders a decoded JSON value compactly.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// decodeJSON decodes one JSON value, numbers as json.Number.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// canonicalOrNull is the stored form of a JSON value: its canonical text,
// or "" for null.
func canonicalOrNull(raw json.RawMessage) (string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return "", nil
	}
	return spec.Canonicalize(raw)
}

func describeError(code spec.Code, state spec.RunState) string {
	if state == "" {
		return string(code)
	}
	return fmt.Sprintf("%s (state %s)", code, state)
}

// outcome shows a result on one line: "ok" and the model's summary of the
// value, or the error with its message.
func outcome(r model.Result) string {
	if r.Err != nil {
		s := "error " + describeError(r.Err.Code, r.Err.State)
		if r.Err.Message != "" {
			s += ": " + r.Err.Message
		}
		return s
	}
	return "ok " + r.String()
}

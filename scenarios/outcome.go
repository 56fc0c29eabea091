package scenarios

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// Outcome is what one store operation returned, in the file's terms.
type Outcome struct {
	// Kind is the result kind (FORMAT.md): it fixes the names in Fields.
	Kind string
	// Err is the contract error, nil on success.
	Err *spec.Error
	// Untyped is an error that is not a *spec.Error; the contract forbids
	// them, so one is always a mismatch.
	Untyped error
	// Fields holds every field of a successful result.
	Fields map[string]any
}

// Code returns the error code, or "" on success.
func (o Outcome) Code() spec.Code {
	switch {
	case o.Untyped != nil:
		return spec.CodeOf(o.Untyped)
	case o.Err != nil:
		return o.Err.Code
	}
	return ""
}

// observe turns a store method's return values into an Outcome.
func observe(kind string, v any, err error) Outcome {
	o := Outcome{Kind: kind}
	if err != nil {
		var e *spec.Error
		if errors.As(err, &e) {
			o.Err = e
		} else {
			o.Untyped = err
		}
		return o
	}
	switch x := v.(type) {
	case spec.CreateRunResult:
		o.Fields = runMap(x.Run)
		o.Fields["replayed"] = x.Replayed
	case []spec.Lease:
		l := []map[string]any{}
		for _, lease := range x {
			l = append(l, leaseMap(lease))
		}
		o.Fields = map[string]any{"leases": l}
	case spec.Lease:
		o.Fields = leaseMap(x)
	case spec.Run:
		o.Fields = runMap(x)
	case spec.Job:
		o.Fields = jobMap(x)
	case []string:
		if x == nil {
			x = []string{}
		}
		o.Fields = map[string]any{"run_ids": x}
	case int:
		o.Fields = map[string]any{"count": int64(x)}
	case spec.EffectReservation:
		o.Fields = effectMap(x.Effect)
		o.Fields["decision"] = string(x.Decision)
	case spec.Effect:
		o.Fields = effectMap(x)
	default:
		o.Untyped = fmt.Errorf("scenarios: no field mapping for a %T result", v)
	}
	return o
}

func runMap(r spec.Run) map[string]any {
	return map[string]any{"run_id": r.ID, "state": string(r.State), "version": r.Version, "last_seq": r.LastSeq,
		"error_code": r.ErrorCode, "result": r.Result, "replay_of": r.ReplayOf, "replay_depth": int64(r.ReplayDepth),
		"created_at": r.CreatedAt, "deadline_at": r.DeadlineAt}
}

func leaseMap(l spec.Lease) map[string]any {
	return map[string]any{"run_id": l.RunID, "owner": l.Owner, "generation": l.Generation, "attempt": int64(l.Attempt),
		"max_attempts": int64(l.MaxAttempts), "expires_at": l.ExpiresAt, "deadline_at": l.DeadlineAt}
}

func jobMap(j spec.Job) map[string]any {
	return map[string]any{"run_id": j.RunID, "state": string(j.State), "generation": j.Generation, "attempts": int64(j.Attempts),
		"max_attempts": int64(j.MaxAttempts), "available_at": j.AvailableAt, "owner": j.LeaseOwner,
		"expires_at": j.LeaseExpiresAt, "error_code": j.LastErrorCode}
}

func effectMap(e spec.Effect) map[string]any {
	return map[string]any{"effect": e.Step, "key": e.Key, "state": string(e.State), "generation": e.Generation,
		"provider_ref": e.ProviderRef, "updated_at": e.UpdatedAt}
}

// compare returns every difference between the expectation and the outcome,
// each saying what was expected and what was got.
func compare(e *Expect, o Outcome) []string {
	if o.Untyped != nil {
		return []string{fmt.Sprintf("the store returned an untyped error, which the contract forbids: %v", o.Untyped)}
	}
	if e.Error != "" {
		if o.Err == nil {
			return []string{fmt.Sprintf("expected error %s, got %s", describeError(e.Error, e.ErrorState), o.String(nil))}
		}
		if o.Err.Code != e.Error || o.Err.State != e.ErrorState {
			return []string{fmt.Sprintf("expected error %s, got %s", describeError(e.Error, e.ErrorState), o.String(nil))}
		}
		return nil
	}
	if o.Err != nil {
		return []string{fmt.Sprintf("expected ok, got %s", o.String(nil))}
	}
	var diffs []string
	for _, k := range kindFields[o.Kind] {
		want, ok := e.Fields[k]
		if !ok {
			continue
		}
		if d := diffValue(k, want, o.Fields[k]); d != "" {
			diffs = append(diffs, d)
		}
	}
	return diffs
}

func describeError(code spec.Code, state spec.RunState) string {
	if state == "" {
		return string(code)
	}
	return fmt.Sprintf("%s (state %s)", code, state)
}

// diffValue compares one field. Lease lists must have the expected length
// and each lease the expected values of the fields the file names.
func diffValue(name string, want, got any) string {
	if wl, ok := want.([]map[string]any); ok {
		gl, _ := got.([]map[string]any)
		if len(wl) != len(gl) {
			return fmt.Sprintf("%s: expected %d lease(s) %s, got %d %s", name, len(wl), formatValue(name, want), len(gl), formatValue(name, got))
		}
		var diffs []string
		for i := range wl {
			for _, k := range leaseFields {
				w, ok := wl[i][k]
				if !ok {
					continue
				}
				if !reflect.DeepEqual(w, gl[i][k]) {
					diffs = append(diffs, fmt.Sprintf("%s[%d].%s: expected %s, got %s", name, i, k, formatValue(k, w), formatValue(k, gl[i][k])))
				}
			}
		}
		return strings.Join(diffs, "; ")
	}
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("%s: expected %s, got %s", name, formatValue(name, want), formatValue(name, got))
}

func formatValue(name string, v any) string {
	switch x := v.(type) {
	case string:
		if name == "result" {
			if x == "" {
				return "null"
			}
			return x
		}
		return fmt.Sprintf("%q", x)
	case []string:
		return "[" + strings.Join(x, " ") + "]"
	case []map[string]any:
		var parts []string
		for _, l := range x {
			var f []string
			for _, k := range leaseFields {
				if v, ok := l[k]; ok {
					f = append(f, k+"="+formatValue(k, v))
				}
			}
			parts = append(parts, "{"+strings.Join(f, " ")+"}")
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}

// String shows the outcome: the error, or "ok" with the kind's headline
// fields and the fields an expectation names (e may be nil).
func (o Outcome) String(e *Expect) string {
	switch {
	case o.Untyped != nil:
		return "untyped error: " + o.Untyped.Error()
	case o.Err != nil:
		s := "error " + describeError(o.Err.Code, o.Err.State)
		if o.Err.Message != "" {
			s += ": " + o.Err.Message
		}
		return s
	}
	fields := kindFields[o.Kind]
	var parts []string
	for i, k := range fields {
		named := false
		if e != nil {
			_, named = e.Fields[k]
		}
		if i < headline[o.Kind] || named || (k == "error_code" && o.Fields[k] != "") {
			parts = append(parts, k+"="+formatValue(k, o.Fields[k]))
		}
	}
	return "ok " + strings.Join(slices.Compact(parts), " ")
}

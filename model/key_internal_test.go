package model

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

// TestKeyCoversEveryField holds State.Key to the shape of State, found by
// reflection rather than listed: for every field reachable from State
// (through structs, pointers and one element of every slice), two states
// that differ only in that field must have different keys. A field added to
// spec's rows or to runRow without its line in key.go fails here, instead
// of silently merging distinct states in the explorer and in the
// linearizability checker.
func TestKeyCoversEveryField(t *testing.T) {
	paths := leafPaths(t, reflect.TypeFor[State](), "State")
	if len(paths) < 70 {
		t.Fatalf("found %d fields of State, want at least the 70 key.go encodes: the walk lost some", len(paths))
	}
	for _, p := range paths {
		a, b := fullState(), fullState()
		setLeaf(t, reflect.ValueOf(&b).Elem(), p.steps, p.path)
		if a.Key() == b.Key() {
			t.Errorf("%s: two states that differ only in this field have the same Key; encode it in key.go", p.path)
		}
	}
	// The counts of every list are in the key too.
	a, b := fullState(), fullState()
	b.runs[0].events = append(b.runs[0].events, b.runs[0].events[0])
	if a.Key() == b.Key() {
		t.Error("a state with one more event has the same Key")
	}
}

type leaf struct {
	path  string
	steps []int // field indices from State down; -1 is a slice's element 0 or a pointer's target
}

// leafPaths lists every field of typ that holds a value (a string, a number,
// a bool), descending into structs, pointers and slices.
func leafPaths(t *testing.T, typ reflect.Type, name string) []leaf {
	t.Helper()
	var out []leaf
	var walk func(reflect.Type, string, []int)
	walk = func(ty reflect.Type, path string, steps []int) {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				walk(ty.Field(i).Type, path+"."+ty.Field(i).Name, append(append([]int(nil), steps...), i))
			}
		case reflect.Pointer:
			walk(ty.Elem(), path, append(append([]int(nil), steps...), -1))
		case reflect.Slice:
			walk(ty.Elem(), path+"[0]", append(append([]int(nil), steps...), -1))
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			out = append(out, leaf{path: path, steps: steps})
		default:
			t.Fatalf("%s: a field of kind %s; teach TestKeyCoversEveryField to vary it", path, ty.Kind())
		}
	}
	walk(typ, name, nil)
	return out
}

// fullState returns a state with one run holding one row of every kind and
// one idempotency record, every field at its zero value.
func fullState() State {
	var s State
	fill(reflect.ValueOf(&s).Elem())
	return s
}

// fill allocates every pointer and gives every slice one element, all the
// way down.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(settable(v.Field(i)))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	}
}

// setLeaf changes the field at steps to a value other than its zero.
func setLeaf(t *testing.T, v reflect.Value, steps []int, path string) {
	t.Helper()
	for _, s := range steps {
		switch {
		case s >= 0:
			v = settable(v.Field(s))
		case v.Kind() == reflect.Pointer:
			// Rows are shared between states: change a copy.
			c := reflect.New(v.Type().Elem())
			c.Elem().Set(v.Elem())
			v.Set(c)
			v = c.Elem()
		default:
			c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			reflect.Copy(c, v)
			v.Set(c)
			v = v.Index(0)
		}
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	default:
		panic(fmt.Sprintf("%s: kind %s", path, v.Kind()))
	}
}

// settable returns v, made settable even when it is an unexported field
// (State's and runRow's are).
func settable(v reflect.Value) reflect.Value {
	if v.CanSet() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

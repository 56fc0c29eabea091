package spec

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestWireEnumsAreTheConstants holds wireEnums to the source: the closed
// set of every named string type of the wire form is exactly the constants
// declared with that type, in their order (Op's are the table's rows,
// which TestOperationTableComplete holds to the Op constants).
func TestWireEnumsAreTheConstants(t *testing.T) {
	consts := typedConstants()
	for typ, vals := range wireEnums() {
		want := consts[typ.Name()]
		if typ == reflect.TypeFor[Op]() {
			slices.Sort(want)
			vals = slices.Sorted(slices.Values(vals))
		}
		if !slices.Equal(vals, want) {
			t.Errorf("wireEnums lists %v for %s; its constants are %v", vals, typ.Name(), want)
		}
	}
}

// sampleOf returns a value of t with every field set: the first value of
// a closed string type, "x" for another string, 7 for an integer, one
// element in every slice and map.
func sampleOf(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		if vals, ok := wireEnums()[t]; ok {
			v.SetString(vals[0])
		} else if t.PkgPath() == "" {
			v.SetString("x")
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(`{"a":1}`))
		} else {
			v.Set(reflect.Append(v, sampleOf(t.Elem())))
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(reflect.ValueOf("k").Convert(t.Key()), sampleOf(t.Elem()))
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.IsExported() && f.Type.Kind() != reflect.Interface {
				v.Field(i).Set(sampleOf(f.Type))
			}
		}
	}
	return v
}

// requiredPaths lists the path of every required field of a sample of t
// (sampleOf), as WireError.Path names them.
func requiredPaths(t reflect.Type, path string) []string {
	if w, ok := wireForms[t]; ok {
		t = w.Wire
	}
	var out []string
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 {
			out = requiredPaths(t.Elem(), path+"[0]")
		}
	case reflect.Map:
		out = requiredPaths(t.Elem(), join(path, "k"))
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if !strings.Contains(opts, "omitempty") {
				out = append(out, join(path, name))
			}
			if k := f.Type.Kind(); k != reflect.Interface && k != reflect.Pointer { // a sample has no error
				out = append(out, requiredPaths(f.Type, join(path, name))...)
			}
		}
	}
	return out
}

// without returns the JSON of v with the field at path removed.
func without(t *testing.T, data []byte, path string) []byte {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	cur := v
	parts := strings.Split(strings.ReplaceAll(path, "[0]", ".[0]"), ".")
	for i, p := range parts {
		if p == "" {
			continue
		}
		if p == "[0]" {
			cur = cur.([]any)[0]
			continue
		}
		m := cur.(map[string]any)
		if i == len(parts)-1 {
			delete(m, p)
			break
		}
		cur = m[p]
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAMissingFieldIsAnError: for every result type of the table and every
// field it requires, at any depth, a result without that field is refused
// with a *WireError naming it, never decoded as its zero value.
func TestAMissingFieldIsAnError(t *testing.T) {
	for _, o := range Operations() {
		full, err := json.Marshal(sampleOf(o.Result).Interface())
		if err != nil {
			t.Fatal(err)
		}
		paths := requiredPaths(o.Result, "")
		if len(paths) == 0 && o.Result != reflect.TypeFor[int]() && o.Result != reflect.TypeFor[[]string]() {
			t.Errorf("%s: the result %v has no required field", o.Op, o.Result)
		}
		for _, path := range paths {
			_, err := o.DecodeResult(without(t, full, path))
			var we *WireError
			if !errors.As(err, &we) || we.Path != path || !strings.Contains(we.Problem, "missing") {
				t.Errorf("%s: a result without %s gave %v; want a *WireError naming it as missing", o.Op, path, err)
			}
		}
	}
}

// TestWireForm: what the wire form refuses, and what it allows.
func TestWireForm(t *testing.T) {
	run, _ := json.Marshal(sampleOf(reflect.TypeFor[Run]()).Interface())
	set := func(field, value string) string {
		var m map[string]json.RawMessage
		json.Unmarshal(run, &m)
		if value == "" {
			delete(m, field)
		} else {
			m[field] = json.RawMessage(value)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	zeroRun, _ := json.Marshal(Run{})
	cases := []struct {
		name string
		typ  reflect.Type
		data string
		want string // "" for a value that decodes
	}{
		{"whole run", reflect.TypeFor[Run](), string(run), ""},
		{"missing", reflect.TypeFor[Run](), set("fingerprint", ""), `field fingerprint: missing`},
		{"null string", reflect.TypeFor[Run](), set("payload", "null"), `field payload: null where string is required`},
		{"null integer", reflect.TypeFor[Run](), set("version", "null"), `field version: null where integer is required`},
		{"string for an integer", reflect.TypeFor[Run](), set("version", `"1"`), `field version: "1" where integer is required`},
		{"fraction", reflect.TypeFor[Run](), set("version", "1.0"), `field version: 1.0 is not an integer literal`},
		{"exponent", reflect.TypeFor[Run](), set("created_at", "1e3"), `field created_at: 1e3 is not an integer literal`},
		{"int64 max", reflect.TypeFor[Run](), set("created_at", strconv.FormatInt(math.MaxInt64, 10)), ""},
		{"int64 min", reflect.TypeFor[Run](), set("created_at", strconv.FormatInt(math.MinInt64, 10)), ""},
		{"past int64", reflect.TypeFor[Run](), set("created_at", "9223372036854775808"), `out of range \[-9223372036854775808, 9223372036854775807\]`},
		{"int past int64", reflect.TypeFor[Run](), set("max_attempts", "-9223372036854775809"), `out of range`},
		{"unknown state", reflect.TypeFor[Run](), set("state", `"finished"`), `field state: "finished" is not one of "queued", "running"`},
		{"unknown field", reflect.TypeFor[Run](), set("colour", `"red"`), `field colour: not a field of this object`},
		{"a field in another case", reflect.TypeFor[Run](), strings.Replace(string(run), `"fingerprint"`, `"Fingerprint"`, 1), `field fingerprint: missing`},
		{"trailing data", reflect.TypeFor[Run](), string(run) + "{}", `trailing data`},
		{"null list", reflect.TypeFor[[]Lease](), `null`, ""},
		{"empty list", reflect.TypeFor[[]Lease](), `[]`, ""},
		{"list of null", reflect.TypeFor[[]string](), `[null]`, `field \[0\]: null where string is required`},
		{"snapshot with null tables", reflect.TypeFor[Snapshot](), `{"runs":null,"events":[],"jobs":null,"attempts":null,"idempotency":null,"effects":null,"outbox":null}`, ""},
		{"member completed", reflect.TypeFor[[]BatchOutcome](), `[{"run":` + string(run) + `}]`, ""},
		{"member refused with the zero run", reflect.TypeFor[[]BatchOutcome](), `[{"run":` + string(zeroRun) + `,"error":{"code":"lost_lease","message":"m"}}]`, ""},
		{"member refused with a run", reflect.TypeFor[[]BatchOutcome](), `[{"run":` + string(run) + `,"error":{"code":"lost_lease","message":"m"}}]`, `field \[0\]\.run: must be exactly \{"tenant":"".*\(the zero value: a member with an error has no run\)`},
		{"member completed with the zero run", reflect.TypeFor[[]BatchOutcome](), `[{"run":` + string(zeroRun) + `}]`, `field \[0\]\.run\.state: "" is not one of`},
		{"member with a null error", reflect.TypeFor[[]BatchOutcome](), `[{"run":` + string(zeroRun) + `,"error":null}]`, `field \[0\]\.error: null where object is required`},
		{"member error without a code", reflect.TypeFor[[]CreateOutcome](), `[{"result":{"run":` + string(zeroRun) + `,"replayed":false},"error":{"message":"m"}}]`, `field \[0\]\.error\.code: missing`},
		{"member error with an unknown code", reflect.TypeFor[[]CreateOutcome](), `[{"result":{"run":` + string(zeroRun) + `,"replayed":false},"error":{"code":"oops","message":"m"}}]`, `field \[0\]\.error\.code: "oops" is not one of`},
		{"bytes", reflect.TypeFor[Message](), `{"subject":"a","payload":"e30="}`, ""},
		{"bytes not base64", reflect.TypeFor[Message](), `{"subject":"a","payload":"{}"}`, `field payload: not base64`},
		{"map", reflect.TypeFor[Config](), `{"operations":{"work":{"schema_version":1}},"tenants":null,"idempotency_retention_ms":1,"run_retention_ms":0,"max_lease_ms":1,"max_replays":0,"backoff":{"base_ms":1,"cap_ms":1,"jitter_ms":0,"retry_after_cap_ms":0}}`, `field operations\.work\.default_max_attempts: missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := DecodeWire([]byte(c.data), reflect.New(c.typ).Interface())
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("%s: %v", c.data, err)
			case c.want != "" && err == nil:
				t.Fatalf("%s decoded; want %q", c.data, c.want)
			case c.want != "" && !regexpMatch(c.want, err.Error()):
				t.Fatalf("got %q, want %q", err, c.want)
			}
		})
	}
}

// TestReceivedEnumsAreExamples: a closed set of strings is enforced on
// what a store sends, and only listed on what it receives (the checks send
// other values to see them refused as invalid_argument).
func TestReceivedEnumsAreExamples(t *testing.T) {
	req := reflect.TypeFor[RecordEffectRequest]()
	sent, err := SchemaOf(req, SchemaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	received, err := SchemaOf(req, SchemaOptions{Received: true})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"lease":{"tenant":"a","run_id":"r","owner":"w","generation":1},"step":"s","key":"k","state":"bogus"}`)
	if err := sent.Validate(data); err == nil {
		t.Error("a sent effect state outside the set was accepted")
	}
	if err := received.Validate(data); err != nil {
		t.Errorf("a received effect state outside the set was refused: %v", err)
	}
	if got := received.Defs["EffectState"].Examples; !slices.Equal(got, strs(EffectReserved, EffectSucceeded, EffectFailed, EffectUnknown)) {
		t.Errorf("the received EffectState lists %v", got)
	}
}

// TestSchemaOfRefuses: a type the wire form cannot carry or does not
// describe is an error, not a schema that says less than the code.
func TestSchemaOfRefuses(t *testing.T) {
	type openString string
	type withOwnJSON struct{ BatchOutcome }
	cases := map[string]reflect.Type{
		"a named string without a set": reflect.TypeFor[struct {
			S openString `json:"s"`
		}](),
		"an interface": reflect.TypeFor[struct {
			E error `json:"e"`
		}](),
		"an int-keyed map":            reflect.TypeFor[map[int]string](),
		"a field without a json name": reflect.TypeFor[struct{ A int }](),
		"an embedded field": reflect.TypeFor[struct {
			Run `json:"run"`
		}](),
		"a JSON form not in wireForms": reflect.TypeFor[withOwnJSON](),
		"a nullable pointer": reflect.TypeFor[struct {
			P *Run `json:"p"`
		}](),
		"a channel": reflect.TypeFor[chan int](),
	}
	for name, typ := range cases {
		if _, err := SchemaOf(typ, SchemaOptions{}); err == nil {
			t.Errorf("%s (%v): SchemaOf gave a schema; want an error", name, typ)
		}
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

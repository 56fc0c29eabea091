package spec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The wire form of the contract's types: the JSON every request and result
// takes in history files, scenario files and the store protocol, stated as
// JSON Schema (draft 2020-12) and derived from the Go types by reflection,
// so that it cannot differ from what encoding/json writes. SchemaOf gives
// it; Schema.Validate checks a value against it; DecodeWire does both for a
// value received from elsewhere (every result the store protocol carries).
//
// The rules SchemaOf applies, one per Go kind:
//   - a struct is an object with one property per field, by its json name,
//     and no other; a field is required unless its tag says omitempty;
//   - a string of a named type of this package is one of a closed set of
//     values (wireEnums), enforced on what a store sends and only listed
//     (as examples) on what it receives, since the checks send invalid
//     values on purpose to see them refused;
//   - every integer is a signed 64-bit one and may take any value of that
//     range, written as an integer literal (no fraction, no exponent);
//   - []byte is a base64 string (RFC 4648, with padding);
//   - a slice, map or []byte without omitempty may be null (Go writes nil
//     as null); with omitempty it is left out instead, never null;
//   - a type with a JSON form of its own (BatchOutcome, CreateOutcome) is
//     described by wireForms.

// SchemaDialect is the JSON Schema dialect SchemaOf writes.
const SchemaDialect = "https://json-schema.org/draft/2020-12/schema"

// Schema is one JSON Schema, of the subset of draft 2020-12 that the wire
// form needs. Its JSON form is the schema document; Validate interprets it.
type Schema struct {
	Dialect         string          `json:"$schema,omitempty"`
	Title           string          `json:"title,omitempty"`
	Description     string          `json:"description,omitempty"`
	Comment         string          `json:"$comment,omitempty"`
	Ref             string          `json:"$ref,omitempty"`
	Type            Types           `json:"type,omitempty"`
	Enum            []string        `json:"enum,omitempty"`
	Examples        []string        `json:"examples,omitempty"`
	Const           json.RawMessage `json:"const,omitempty"`
	Minimum         json.Number     `json:"minimum,omitempty"`
	Maximum         json.Number     `json:"maximum,omitempty"`
	ContentEncoding string          `json:"contentEncoding,omitempty"`
	Properties      Properties      `json:"properties,omitempty"`
	Required        []string        `json:"required,omitempty"`
	// AdditionalProperties is false (a struct: no other property) or the
	// *Schema of every value (a map).
	AdditionalProperties any                `json:"additionalProperties,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	If                   *Schema            `json:"if,omitempty"`
	Then                 *Schema            `json:"then,omitempty"`
	Else                 *Schema            `json:"else,omitempty"`
	Defs                 map[string]*Schema `json:"$defs,omitempty"`
}

// Types is a schema's "type": one JSON type name, or several.
type Types []string

// MarshalJSON writes one type as a string, several as an array.
func (t Types) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]string(t))
}

// Property is one property of an object schema.
type Property struct {
	Name   string
	Schema *Schema
}

// Properties are an object schema's properties, in the Go type's field
// order (their JSON form is an object in that order).
type Properties []Property

// MarshalJSON writes the properties as one object, in order.
func (ps Properties) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(p.Name)
		v, err := json.Marshal(p.Schema)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (ps Properties) lookup(name string) *Schema {
	for _, p := range ps {
		if p.Name == name {
			return p.Schema
		}
	}
	return nil
}

// SchemaOptions adjust SchemaOf.
type SchemaOptions struct {
	// Received marks a value the store receives (a request, the open
	// request, a callback's answer): its closed sets of strings are listed
	// as examples, not enforced, because the checks send other values on
	// purpose and the store must refuse them as the contract says, not the
	// wire. A value a store sends (a result, an error, a callback) is held
	// to them.
	Received bool
	// Describe, when set, returns the description of a type (field "") or
	// of one of its fields (by Go name).
	Describe func(t reflect.Type, field string) string
}

// SchemaOf returns the JSON Schema of t's wire form, by the rules above,
// with a definition ($defs) for every named struct and closed string type
// it reaches. It fails on a type the wire form cannot carry (a channel, a
// map with keys that are not strings, an interface) or does not describe
// (a named string type with no closed set, a type with its own JSON form
// that wireForms does not list).
func SchemaOf(t reflect.Type, o SchemaOptions) (*Schema, error) {
	b := &schemaBuilder{opts: o, defs: map[string]*Schema{}, named: map[string]reflect.Type{}}
	root, err := b.schema(t, nullable(t.Kind()))
	if err != nil {
		return nil, err
	}
	root.Dialect = SchemaDialect
	if len(b.defs) > 0 {
		root.Defs = b.defs
	}
	return root, nil
}

// wireForm describes a type with a JSON form of its own that carries a
// value or an error: Wire is the struct its JSON has the fields of; the
// field Value is the zero value whenever the field Err is present.
type wireForm struct {
	Wire       reflect.Type
	Value, Err string // json names
}

// wireForms lists every type of the contract with a JSON form of its own.
var wireForms = map[reflect.Type]wireForm{
	reflect.TypeFor[BatchOutcome]():  {reflect.TypeFor[batchOutcomeJSON](), "run", "error"},
	reflect.TypeFor[CreateOutcome](): {reflect.TypeFor[createOutcomeJSON](), "result", "error"},
}

// wireEnums returns the values of every named string type of the wire form,
// in declaration order. TestWireEnumsAreTheConstants holds it to the
// constants of each type.
func wireEnums() map[reflect.Type][]string {
	codes := make([]string, len(Codes))
	for i, c := range Codes {
		codes[i] = string(c)
	}
	return map[reflect.Type][]string{
		reflect.TypeFor[Op]():             opNames,
		reflect.TypeFor[Code]():           codes,
		reflect.TypeFor[RunState]():       strs(RunQueued, RunRunning, RunCompleted, RunFailed, RunCancelled),
		reflect.TypeFor[JobState]():       strs(JobQueued, JobLeased, JobCompleted, JobDead, JobCancelled),
		reflect.TypeFor[EventKind]():      strs(EventRunQueued, EventRunCompleted, EventRunFailed, EventRunCancelled),
		reflect.TypeFor[AttemptOutcome](): strs(AttemptRunning, AttemptCompleted, AttemptRetried, AttemptDead, AttemptReleased, AttemptExpired, AttemptCancelled),
		reflect.TypeFor[ErrorClass]():     strs(ClassNone, ClassRetryable, ClassTerminal, ClassExpired),
		reflect.TypeFor[EffectState]():    strs(EffectReserved, EffectSucceeded, EffectFailed, EffectUnknown),
		reflect.TypeFor[EffectDecision](): strs(DecisionProceed, DecisionDone, DecisionReconcile),
		reflect.TypeFor[OutboxState]():    strs(OutboxPending, OutboxDelivered),
		reflect.TypeFor[HookPoint]():      strs(BeforeCommit, AfterCommit),
	}
}

// opNames are the operations of the table, in its order (set by init: the
// table's decoders use the wire form, which names them).
var opNames []string

func init() {
	for _, o := range operations {
		opNames = append(opNames, string(o.Op))
	}
}

func strs[S ~string](vs ...S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	marshalerType   = reflect.TypeFor[json.Marshaler]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

type schemaBuilder struct {
	opts  SchemaOptions
	defs  map[string]*Schema
	named map[string]reflect.Type // def name -> the type it describes
	enums map[reflect.Type][]string
}

// nullable reports whether Go writes a nil value of the kind as null.
func nullable(k reflect.Kind) bool {
	return k == reflect.Slice || k == reflect.Map || k == reflect.Pointer
}

// schema returns the schema of t; null is allowed too when orNull.
func (b *schemaBuilder) schema(t reflect.Type, orNull bool) (*Schema, error) {
	if w, ok := wireForms[t]; ok {
		return b.def(t, func() (*Schema, error) { return b.outcome(t, w) })
	}
	if t == rawMessageType {
		return &Schema{}, nil // any JSON value
	}
	if t.Implements(marshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil, fmt.Errorf("spec: %v has a JSON form of its own: describe it in wireForms", t)
	}
	withNull := func(name string) Types {
		if orNull {
			return Types{name, "null"}
		}
		return Types{name}
	}
	switch t.Kind() {
	case reflect.String:
		if t.PkgPath() == "" {
			return &Schema{Type: Types{"string"}}, nil
		}
		if b.enums == nil {
			b.enums = wireEnums()
		}
		vals, ok := b.enums[t]
		if !ok {
			return nil, fmt.Errorf("spec: the string type %v has no closed set of values: list them in wireEnums", t)
		}
		return b.def(t, func() (*Schema, error) {
			if b.opts.Received {
				return &Schema{Type: Types{"string"}, Examples: vals}, nil
			}
			return &Schema{Type: Types{"string"}, Enum: vals}, nil
		})
	case reflect.Bool:
		return &Schema{Type: Types{"boolean"}}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		// Every integer of the wire form is an int64: an int is 64 bits
		// wide on every platform leasehold builds for.
		bits := t.Bits()
		if t.Kind() == reflect.Int {
			bits = 64
		}
		lo := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), uint(bits-1)))
		hi := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(bits-1)), big.NewInt(1))
		return &Schema{Type: Types{"integer"}, Minimum: json.Number(lo.String()), Maximum: json.Number(hi.String())}, nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return &Schema{Type: withNull("string"), ContentEncoding: "base64"}, nil
		}
		items, err := b.schema(t.Elem(), nullable(t.Elem().Kind()))
		if err != nil {
			return nil, err
		}
		return &Schema{Type: withNull("array"), Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("spec: %v: a map's keys must be strings on the wire", t)
		}
		vals, err := b.schema(t.Elem(), nullable(t.Elem().Kind()))
		if err != nil {
			return nil, err
		}
		return &Schema{Type: withNull("object"), AdditionalProperties: vals}, nil
	case reflect.Pointer:
		if orNull {
			return nil, fmt.Errorf("spec: %v: a pointer on the wire must be omitempty (a null object is not described)", t)
		}
		return b.schema(t.Elem(), false)
	case reflect.Struct:
		if t.Name() == "" {
			return b.object(t, t)
		}
		return b.def(t, func() (*Schema, error) { return b.object(t, t) })
	}
	return nil, fmt.Errorf("spec: %v (%v) has no wire form", t, t.Kind())
}

// def returns a reference to t's definition, building it once.
func (b *schemaBuilder) def(t reflect.Type, build func() (*Schema, error)) (*Schema, error) {
	name := t.Name()
	ref := &Schema{Ref: "#/$defs/" + name}
	if prev, ok := b.named[name]; ok {
		if prev != t {
			return nil, fmt.Errorf("spec: two types named %s on the wire: %v and %v", name, prev, t)
		}
		return ref, nil
	}
	b.named[name] = t
	s, err := build()
	if err != nil {
		return nil, err
	}
	if b.opts.Describe != nil {
		s.Description = b.opts.Describe(t, "")
	}
	b.defs[name] = s
	return ref, nil
}

// object is the schema of struct type wire, whose fields are described as
// those of decl (the declared type when wire is its JSON form).
func (b *schemaBuilder) object(decl, wire reflect.Type) (*Schema, error) {
	s := &Schema{Type: Types{"object"}, AdditionalProperties: false}
	for i := 0; i < wire.NumField(); i++ {
		f := wire.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" && opts == "" {
			continue
		}
		if f.Anonymous {
			return nil, fmt.Errorf("spec: %v embeds %v: the wire form has no embedded fields", wire, f.Type)
		}
		if name == "" {
			return nil, fmt.Errorf("spec: field %v.%s has no json name", wire, f.Name)
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty")
		fs, err := b.schema(f.Type, !omit && nullable(f.Type.Kind()))
		if err != nil {
			return nil, err
		}
		if b.opts.Describe != nil {
			fs.Description = b.opts.Describe(decl, f.Name)
		}
		s.Properties = append(s.Properties, Property{name, fs})
		if !omit {
			s.Required = append(s.Required, name)
		}
	}
	return s, nil
}

// outcome is the schema of a type with a JSON form of its own (wireForms):
// its wire struct's, with the value field held to its zero value when the
// error field is present.
func (b *schemaBuilder) outcome(t reflect.Type, w wireForm) (*Schema, error) {
	s, err := b.object(t, w.Wire)
	if err != nil {
		return nil, err
	}
	var value *Schema
	var zero []byte
	for i, p := range s.Properties {
		if p.Name == w.Value {
			value = p.Schema
			f, _ := w.Wire.FieldByName(fieldOfJSON(w.Wire, w.Value))
			if zero, err = json.Marshal(reflect.Zero(f.Type).Interface()); err != nil {
				return nil, err
			}
			s.Properties[i].Schema = &Schema{Description: value.Description}
		}
	}
	if value == nil || s.Properties.lookup(w.Err) == nil {
		return nil, fmt.Errorf("spec: %v's JSON form %v has no field %q or %q", t, w.Wire, w.Value, w.Err)
	}
	value.Description = ""
	s.If = &Schema{Properties: Properties{{w.Err, &Schema{}}}, Required: []string{w.Err}}
	s.Then = &Schema{Properties: Properties{{w.Value, &Schema{Const: zero,
		Description: fmt.Sprintf("the zero value: a member with an %s has no %s", w.Err, w.Value)}}}}
	s.Else = &Schema{Properties: Properties{{w.Value, value}}}
	return s, nil
}

// fieldOfJSON returns the Go name of the field of t whose json name is name.
func fieldOfJSON(t reflect.Type, name string) string {
	for i := 0; i < t.NumField(); i++ {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return t.Field(i).Name
		}
	}
	return ""
}

// WireError says where and how a JSON value differs from its wire form.
type WireError struct {
	// Path locates the value: json names and [indexes] from the top
	// ("run.fingerprint", "[2].lease.generation"); "" is the whole value.
	Path string
	// Problem says what is wrong with it.
	Problem string
}

func (e *WireError) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return "field " + e.Path + ": " + e.Problem
}

// Validate checks one JSON value against s: its types, required and
// unknown properties, closed string sets, integer literals and ranges,
// base64 strings and constants. The error is a *WireError, for the first
// difference found.
func (s *Schema) Validate(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return &WireError{Problem: "not a JSON value: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &WireError{Problem: "trailing data after the JSON value"}
	}
	return s.check(s, v, "")
}

func (s *Schema) check(root *Schema, v any, path string) error {
	bad := func(format string, args ...any) error {
		return &WireError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	if s.Ref != "" {
		def := root.Defs[strings.TrimPrefix(s.Ref, "#/$defs/")]
		if def == nil {
			return bad("the schema has no definition %s", s.Ref)
		}
		if err := def.check(root, v, path); err != nil {
			return err
		}
	}
	if got := jsonType(v); len(s.Type) > 0 && !slices.Contains(s.Type, got) && !(got == "integer" && slices.Contains(s.Type, "number")) {
		if got == "number" && slices.Contains(s.Type, "integer") {
			return bad("%s is not an integer literal (no fraction, no exponent)", v)
		}
		return bad("%s where %s is required", describeJSON(v), strings.Join(s.Type, " or "))
	}
	if len(s.Const) > 0 {
		var want any
		dec := json.NewDecoder(bytes.NewReader(s.Const))
		dec.UseNumber()
		if err := dec.Decode(&want); err != nil || !reflect.DeepEqual(v, want) {
			if s.Description != "" {
				return bad("must be exactly %s (%s)", s.Const, s.Description)
			}
			return bad("must be exactly %s", s.Const)
		}
	}
	if len(s.Enum) > 0 {
		if str, _ := v.(string); !slices.Contains(s.Enum, str) {
			return bad("%s is not one of %s", describeJSON(v), quoteAll(s.Enum))
		}
	}
	switch v := v.(type) {
	case json.Number:
		if s.Minimum != "" || s.Maximum != "" {
			n, ok := new(big.Int).SetString(string(v), 10)
			lo, _ := new(big.Int).SetString(string(s.Minimum), 10)
			hi, _ := new(big.Int).SetString(string(s.Maximum), 10)
			if !ok || lo != nil && n.Cmp(lo) < 0 || hi != nil && n.Cmp(hi) > 0 {
				return bad("%s is out of range [%s, %s] (a signed 64-bit integer)", v, s.Minimum, s.Maximum)
			}
		}
	case string:
		if s.ContentEncoding == "base64" {
			if _, err := base64.StdEncoding.DecodeString(v); err != nil {
				return bad("not base64 (RFC 4648, with padding): %v", err)
			}
		}
	case map[string]any:
		for _, name := range s.Required {
			if _, ok := v[name]; !ok {
				return &WireError{Path: join(path, name), Problem: "missing: the field is required (an absent field is not its zero value)"}
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if s.Properties.lookup(k) != nil {
				continue
			}
			switch extra := s.AdditionalProperties.(type) {
			case bool:
				if !extra {
					return &WireError{Path: join(path, k), Problem: "not a field of this object (its fields are " + quoteAll(s.propertyNames()) + ")"}
				}
			case *Schema:
				if err := extra.check(root, v[k], join(path, k)); err != nil {
					return err
				}
			}
		}
		for _, p := range s.Properties {
			if x, ok := v[p.Name]; ok {
				if err := p.Schema.check(root, x, join(path, p.Name)); err != nil {
					return err
				}
			}
		}
	case []any:
		if s.Items != nil {
			for i, x := range v {
				if err := s.Items.check(root, x, path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	}
	if s.If != nil {
		branch := s.Else
		if s.If.check(root, v, path) == nil {
			branch = s.Then
		}
		if branch != nil {
			return branch.check(root, v, path)
		}
	}
	return nil
}

func (s *Schema) propertyNames() []string {
	out := make([]string, len(s.Properties))
	for i, p := range s.Properties {
		out[i] = p.Name
	}
	return out
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// jsonType names v's JSON type as a schema's "type" does ("integer" for a
// number written as an integer literal).
func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			return "number"
		}
		return "integer"
	}
	return "unknown"
}

// describeJSON shows a value briefly for a message.
func describeJSON(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	case json.Number:
		return "the number " + string(v)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprint(v)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// sentSchemas caches the schema of every type DecodeWire has decoded.
var sentSchemas sync.Map // reflect.Type -> *Schema or error

// DecodeWire decodes data into v (a pointer) after checking it against the
// wire form of v's type as a store sends it (SchemaOf): a missing field, a
// null where Go writes none, a value outside its type's closed set, an
// integer that is not an int64 literal or an unknown field is a
// *WireError that names the field, never a zero value.
func DecodeWire(data []byte, v any) error {
	t := reflect.TypeOf(v).Elem()
	cached, ok := sentSchemas.Load(t)
	if !ok {
		s, err := SchemaOf(t, SchemaOptions{})
		if err != nil {
			cached = err
		} else {
			cached = s
		}
		sentSchemas.Store(t, cached)
	}
	switch c := cached.(type) {
	case error:
		return c
	case *Schema:
		if err := c.Validate(data); err != nil {
			return err
		}
	}
	return decodeStrict(data, v)
}

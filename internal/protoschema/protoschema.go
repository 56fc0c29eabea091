// Package protoschema writes the published wire form of the store protocol
// (docs/PROTOCOL.md): docs/protocol/ holds one JSON Schema for the params
// and one for the result of every operation of spec.Operations, one for
// every other message of the protocol (open, exec, the contract error, the
// callbacks), and an index, README.md. Each schema is spec.SchemaOf of the
// Go type, with the type's and fields' doc comments as descriptions, so a
// porter reads the wire form without reading Go, and the harness checks
// every reply against exactly what is published (spec.DecodeWire).
//
// The files are generated (go generate ./internal/protoschema) and held to
// the code by TestPublishedSchemasAreCurrent: an operation added to the
// table, or a field added to a type, fails it until the files are
// regenerated.
package protoschema

//go:generate go run gen.go

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/storeproto"
)

// Dir is where the files go, from the repository root.
const Dir = "docs/protocol"

// Regenerate is the one command that rewrites the files.
const Regenerate = "go generate ./internal/protoschema"

// File is one generated file: its name in Dir and its content.
type File struct {
	Name string
	Data []byte
}

// message is one message of the protocol with a published schema.
type message struct {
	name     string // the file's name without .schema.json
	what     string // what it is, for the title and the index
	typ      reflect.Type
	received bool // the store receives it (spec.SchemaOptions.Received)
}

// messages lists every message with a schema: the operations' params and
// results, from the table, then the protocol's own.
func messages(ops []spec.Operation) []message {
	var out []message
	for _, o := range ops {
		method := o.Method
		if o.Capability != "" {
			method += ", optional"
		}
		out = append(out,
			message{string(o.Op) + ".params", fmt.Sprintf("params of %s (%s)", o.Op, method), o.Request, true},
			message{string(o.Op) + ".result", fmt.Sprintf("result of %s", o.Op), o.Result, false})
	}
	return append(out,
		message{"open.params", "params of open, every session's first request", reflect.TypeFor[storeproto.OpenParams](), true},
		message{"open.result", "result of open: what the store is and offers", reflect.TypeFor[storeproto.Hello](), false},
		message{"exec.params", "params of exec (the sql capability)", reflect.TypeFor[storeproto.ExecParams](), true},
		message{"error", "a contract error (a reply's \"error\", and a batch member's)", reflect.TypeFor[spec.Error](), false},
		message{"now.result", "the harness's answer to the now callback", reflect.TypeFor[storeproto.NowResult](), true},
		message{"random.params", "params of the random callback", reflect.TypeFor[storeproto.RandomParams](), false},
		message{"random.result", "the harness's answer to the random callback", reflect.TypeFor[storeproto.RandomResult](), true},
		message{"hook.params", "params of the hook callback", reflect.TypeFor[storeproto.HookParams](), false},
		message{"hook.error", "the harness's fault for a hook callback (its reply's \"error\")", reflect.TypeFor[storeproto.HookError](), true},
	)
}

// Generate returns every file of Dir for the operation table ops, with the
// descriptions read from the Go sources under root (the repository).
func Generate(root string, ops []spec.Operation) ([]File, error) {
	docs, err := readDocs(root, "spec", "storeproto")
	if err != nil {
		return nil, err
	}
	var files []File
	var index strings.Builder
	index.WriteString(indexHead)
	for _, m := range messages(ops) {
		s, err := spec.SchemaOf(m.typ, spec.SchemaOptions{Received: m.received, Describe: docs.describe})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		s.Title = fmt.Sprintf("leasehold store protocol %d: %s; Go type %s", storeproto.Version, m.what, m.typ)
		s.Comment = "Generated from the Go types by " + Regenerate + "; do not edit."
		data, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return nil, err
		}
		name := m.name + ".schema.json"
		files = append(files, File{name, append(data, '\n')})
		dir := "harness → store"
		if !m.received {
			dir = "store → harness"
		}
		fmt.Fprintf(&index, "| [`%s`](%s) | %s | %s | `%s` |\n", name, name, m.what, dir, m.typ)
	}
	index.WriteString(indexTail)
	files = append(files, File{"README.md", []byte(index.String())})
	return files, nil
}

const indexHead = `# The store protocol's wire form

<!-- Generated from the Go types by ` + Regenerate + `; do not edit. -->

One JSON Schema (draft 2020-12) per message of the [store protocol](../PROTOCOL.md), generated
from the Go types of [` + "`spec`" + `](../../spec) and [` + "`storeproto`" + `](../../storeproto): the operations'
params and results come from the operation table (` + "`spec.Operations`" + `), so an operation added
there appears here when the files are regenerated. ` + "`TestPublishedSchemasAreCurrent`" + ` fails while
they are not.

How to read them:

- Every property of an object is listed, and no other may appear. A property is **required**
  unless the Go field is ` + "`omitempty`" + `: a reply without a required field is a finding, never
  its zero value.
- **Integers** are signed 64-bit integers over their whole range (` + "`minimum`" + `/` + "`maximum`" + `), written as
  integer literals (no fraction, no exponent: ` + "`1.0`" + ` and ` + "`1e3`" + ` are findings). A JSON library that
  reads numbers as doubles rounds them above 2^53: read and write them exactly (spec/SPEC.md,
  "For porters").
- **Null** appears only where Go writes it: a list or map that may be null says so in its ` + "`type`" + `;
  ` + "`[]`" + ` is always as good as ` + "`null`" + ` there.
- **Bytes** are base64 strings (RFC 4648, with padding, ` + "`contentEncoding`" + `).
- A closed set of strings (a state, a code, an operation's name) is an ` + "`enum`" + ` in what the store
  sends, and only ` + "`examples`" + ` in what it receives: the checks send other values on purpose, and the
  store must refuse them as SPEC.md says (` + "`invalid_argument`" + `).
- A batch member with an ` + "`error`" + ` carries the zero value of its result (` + "`if`/`then`" + `).

The harness holds every message a store sends to these schemas (` + "`spec.DecodeWire`" + `); a
validator of your own (any draft 2020-12 implementation: the files compile in Ajv's strict mode)
gives the same verdict, but for two things JSON Schema does not say: an integer must be an integer
literal (` + "`1.0`" + ` is an integer to JSON Schema, a finding here), and a range near 2^63 holds only in a
validator that reads integers exactly.

| file | message | direction | Go type |
|---|---|---|---|
`

const indexTail = `
The envelope of every line (` + "`id`" + `, ` + "`in_reply_to`" + `, ` + "`op`" + `, ` + "`call`" + `, ` + "`params`" + `, ` + "`result`" + `, ` + "`error`" + `,
` + "`protocol_error`" + `) is in [PROTOCOL.md](../PROTOCOL.md#messages).
`

// Write writes the files into root's Dir and removes any other schema
// file there.
func Write(root string, files []File) error {
	dir := filepath.Join(root, Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, stale := range Stale(root, files) {
		if stale.extra {
			if err := os.Remove(filepath.Join(dir, stale.Name)); err != nil {
				return err
			}
		}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Difference is a file of Dir that is not what Generate gives.
type Difference struct {
	Name  string
	What  string
	extra bool
}

// Stale lists the files of root's Dir that differ from files: missing,
// different, or a schema file no message has.
func Stale(root string, files []File) []Difference {
	dir := filepath.Join(root, Dir)
	var out []Difference
	want := map[string]bool{}
	for _, f := range files {
		want[f.Name] = true
		have, err := os.ReadFile(filepath.Join(dir, f.Name))
		switch {
		case err != nil:
			out = append(out, Difference{Name: f.Name, What: "missing"})
		case !bytes.Equal(have, f.Data):
			out = append(out, Difference{Name: f.Name, What: "differs from the code (" + firstDifference(have, f.Data) + ")"})
		}
	}
	on, _ := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	for _, path := range on {
		if name := filepath.Base(path); !want[name] {
			out = append(out, Difference{Name: name, What: "describes no message of the code", extra: true})
		}
	}
	return out
}

// firstDifference shows the first line where have and want differ.
func firstDifference(have, want []byte) string {
	h, w := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(h), len(w)); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf("line %d: published %q, the code says %q", i+1, strings.TrimSpace(hl), strings.TrimSpace(wl))
		}
	}
	return "?"
}

// docs are the doc comments of the Go sources: text["spec.Run"] is the
// type's, text["spec.Run.Version"] a field's, text["spec.RunState=queued"]
// a constant's; values["spec.RunState"] are the type's constants in order.
type docs struct {
	text   map[string]string
	values map[string][]string
}

// readDocs reads the doc comments of the non-test Go files of root's
// packages.
func readDocs(root string, pkgs ...string) (docs, error) {
	d := docs{text: map[string]string{}, values: map[string][]string{}}
	fset := token.NewFileSet()
	for _, pkg := range pkgs {
		paths, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil || len(paths) == 0 {
			return d, fmt.Errorf("protoschema: no Go files in %s (run from the repository: %v)", filepath.Join(root, pkg), err)
		}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return d, err
			}
			for _, decl := range f.Decls {
				if g, ok := decl.(*ast.GenDecl); ok {
					d.read(pkg, g)
				}
			}
		}
	}
	return d, nil
}

// read takes the doc comments of one declaration.
func (d docs) read(pkg string, g *ast.GenDecl) {
	for _, sp := range g.Specs {
		switch sp := sp.(type) {
		case *ast.TypeSpec:
			doc := sp.Doc
			if doc == nil && len(g.Specs) == 1 {
				doc = g.Doc
			}
			key := pkg + "." + sp.Name.Name
			d.text[key] = text(doc)
			if st, ok := sp.Type.(*ast.StructType); ok {
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						d.text[key+"."+n.Name] = strings.TrimSpace(text(fl.Doc) + " " + text(fl.Comment))
					}
				}
			}
		case *ast.ValueSpec:
			id, ok := sp.Type.(*ast.Ident)
			if !ok || g.Tok != token.CONST {
				continue
			}
			key := pkg + "." + id.Name
			for _, v := range sp.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					val, _ := strconv.Unquote(lit.Value)
					d.values[key] = append(d.values[key], val)
					d.text[key+"="+val] = strings.TrimSpace(text(sp.Doc) + " " + text(sp.Comment))
				}
			}
		}
	}
}

// text is a comment group's text on one line.
func text(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

// describe is spec.SchemaOptions.Describe: the doc comment of t (field "")
// or of its field, with the struct's Go field names replaced by their json
// names; for a closed string type, each value's comment too.
func (d docs) describe(t reflect.Type, field string) string {
	key := filepath.Base(t.PkgPath()) + "." + t.Name()
	if field != "" {
		return jsonNames(t, d.text[key+"."+field])
	}
	desc := d.text[key]
	if t.Kind() == reflect.String {
		var vals []string
		for _, v := range d.values[key] {
			if c := d.text[key+"="+v]; c != "" {
				vals = append(vals, fmt.Sprintf("%q: %s", v, strings.TrimSuffix(c, ".")))
			}
		}
		if len(vals) > 0 {
			desc += " Values: " + strings.Join(vals, "; ") + "."
		}
	}
	return jsonNames(t, desc)
}

var word = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)

// jsonNames replaces the Go names of t's fields in s by their json names,
// in backquotes.
func jsonNames(t reflect.Type, s string) string {
	if t.Kind() != reflect.Struct || s == "" {
		return s
	}
	names := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n != "" && n != "-" {
			names[f.Name] = n
		}
	}
	var b strings.Builder
	last := 0
	for _, m := range word.FindAllStringIndex(s, -1) {
		w := s[m[0]:m[1]]
		// "(see Fingerprint)" names a function, not the field.
		if n, ok := names[w]; ok && !strings.HasSuffix(s[:m[0]], "see ") {
			b.WriteString(s[last:m[0]] + "`" + n + "`")
			last = m[1]
		}
	}
	return b.String() + s[last:]
}

package spec

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// notOperations are the methods of Store and its capabilities that are not
// operations of the contract, with the reason.
var notOperations = map[string]string{
	"Close":           "releases connections; no record is read or written",
	"Notifier.Listen": "a stream of hints, not an operation: nothing may depend on it (SPEC.md)",
}

// TestOperationTableComplete holds the table to the contract: every Op
// constant and every method of Store and its capabilities has exactly one
// complete row.
func TestOperationTableComplete(t *testing.T) {
	for _, p := range tableProblems(operations) {
		t.Error(p)
	}
}

// TestOperationTableCheckBites shows the completeness check failing on a
// table that lost a row, and on a row that lost a part.
func TestOperationTableCheckBites(t *testing.T) {
	for i, o := range operations {
		without := append(append([]Operation(nil), operations[:i]...), operations[i+1:]...)
		if len(tableProblems(without)) == 0 {
			t.Errorf("removing the row of %s went unnoticed", o.Op)
		}
		broken := append([]Operation(nil), operations...)
		broken[i].decodeResult = nil
		if len(tableProblems(broken)) == 0 {
			t.Errorf("a row of %s without its result decoder went unnoticed", o.Op)
		}
		broken[i] = o
		broken[i].Writes = !o.Writes
		if len(tableProblems(broken)) == 0 {
			t.Errorf("a row of %s with Writes flipped went unnoticed", o.Op)
		}
	}
}

// tableProblems lists everything wrong with a table.
func tableProblems(rows []Operation) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	byOp := map[Op]Operation{}
	byMethod := map[string]bool{}
	for _, o := range rows {
		if _, dup := byOp[o.Op]; dup {
			bad("operation %q has two rows", o.Op)
		}
		byOp[o.Op] = o
		byMethod[o.Method] = true
		if o.Request == nil || o.Result == nil || o.call == nil || o.decodeRequest == nil || o.decodeResult == nil || o.Method == "" {
			bad("row %q misses a part: %+v", o.Op, o)
			continue
		}
		zero, isRequest := reflect.Zero(o.Request).Interface().(Request)
		if !isRequest || zero.Op() != o.Op {
			bad("row %q: its request type %v does not name it", o.Op, o.Request)
		}
		if o.Writes == (o.Guard == GuardNone) {
			bad("row %q: a writing operation has a guard and a read has none (writes %v, guard %q)", o.Op, o.Writes, o.Guard.Name)
		}
		for i := 0; i < o.Request.NumField(); i++ {
			f := o.Request.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); f.IsExported() && (name == "" || name == "-") {
				bad("row %q: request field %s has no JSON name", o.Op, f.Name)
			}
		}
	}
	// Every method of Store and of each capability is an operation or listed
	// in notOperations.
	for _, iface := range []struct {
		prefix string
		t      reflect.Type
	}{{"", reflect.TypeFor[Store]()}, {"BatchCompleter.", reflect.TypeFor[BatchCompleter]()},
		{"BatchCreator.", reflect.TypeFor[BatchCreator]()}, {"RunLister.", reflect.TypeFor[RunLister]()},
		{"TxAdmitter.", reflect.TypeFor[TxAdmitter]()},
		{"Notifier.", reflect.TypeFor[Notifier]()}} {
		for i := 0; i < iface.t.NumMethod(); i++ {
			name := iface.prefix + iface.t.Method(i).Name
			if _, skip := notOperations[name]; !skip && !byMethod[name] {
				bad("method %s has no row in the operation table", name)
			}
		}
	}
	// Every Op constant of this package has a row.
	for _, op := range opConstants() {
		if _, ok := byOp[op]; !ok {
			bad("operation %q (an Op constant) has no row in the operation table", op)
		}
	}
	return problems
}

// opConstants parses this package's source for the constants of type Op.
func opConstants() []Op {
	var ops []Op
	for _, v := range typedConstants()["Op"] {
		ops = append(ops, Op(v))
	}
	return ops
}

// typedConstants parses this package's source for its string constants
// declared with a named type: type name -> values, in declaration order.
func typedConstants() map[string][]string {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	out := map[string][]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			panic(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				id, ok := v.Type.(*ast.Ident)
				if !ok {
					continue
				}
				for _, val := range v.Values {
					if lit, ok := val.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[id.Name] = append(out[id.Name], s)
					}
				}
			}
		}
	}
	return out
}

// TestOperationCodecs round-trips a request and a result of every row
// through JSON, and holds Call to its request type.
func TestOperationCodecs(t *testing.T) {
	for _, o := range Operations() {
		req := reflect.Zero(o.Request).Interface()
		data, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("%s: encode request: %v", o.Op, err)
		}
		back, err := o.DecodeRequest(data)
		if err != nil || !reflect.DeepEqual(back, req) {
			t.Errorf("%s: request %s decodes to %#v, %v", o.Op, data, back, err)
		}
		if _, err := o.DecodeRequest([]byte(`{"no_such_field":1}`)); err == nil {
			t.Errorf("%s: an unknown request field was accepted", o.Op)
		}
		res, err := json.Marshal(sampleOf(o.Result).Interface())
		if err != nil {
			t.Fatalf("%s: encode result: %v", o.Op, err)
		}
		if back, err := o.DecodeResult(res); err != nil || !reflect.DeepEqual(back, sampleOf(o.Result).Interface()) {
			t.Errorf("%s: result %s decodes to %#v, %v", o.Op, res, back, err)
		}
		if _, err := o.Call(context.Background(), nil, wrongRequest{}); err == nil || CodeOf(err) != CodeUnavailable {
			t.Errorf("%s: Call with the wrong request type returned %v, want an untyped error", o.Op, err)
		}
	}
}

type wrongRequest struct{}

func (wrongRequest) Op() Op                      { return "wrong" }
func (wrongRequest) TenantScope() (string, bool) { return "", false }
func (wrongRequest) Leases() []LeaseRef          { return nil }

// TestBatchOutcomeJSON round-trips a member's error.
func TestBatchOutcomeJSON(t *testing.T) {
	in := []BatchOutcome{{Run: Run{ID: "r1", State: RunCompleted}}, {Err: TerminalError(RunCancelled, "r2")}}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []BatchOutcome
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[0].Run.ID != "r1" || CodeOf(out[1].Err) != CodeCancelled || StateOf(out[1].Err) != RunCancelled {
		t.Errorf("round trip of %s gave %+v", data, out)
	}
}

// TestCreateOutcomeJSON round-trips a member's result and error.
func TestCreateOutcomeJSON(t *testing.T) {
	in := []CreateOutcome{{Result: CreateRunResult{Run: Run{ID: "r1", State: RunQueued}, Replayed: true}},
		{Err: Errorf(CodeIdempotencyConflict, "bound elsewhere")}}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []CreateOutcome
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[0].Result.Run.ID != "r1" || !out[0].Result.Replayed || CodeOf(out[1].Err) != CodeIdempotencyConflict {
		t.Errorf("round trip of %s gave %+v", data, out)
	}
}

package protoschema

import (
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

const root = "../.."

// TestPublishedSchemasAreCurrent holds docs/protocol to the code: every
// file is what the operation table and the Go types give today, and no
// other schema file is there.
func TestPublishedSchemasAreCurrent(t *testing.T) {
	files, err := Generate(root, spec.Operations())
	if err != nil {
		t.Fatal(err)
	}
	if stale := Stale(root, files); len(stale) > 0 {
		var b strings.Builder
		for _, d := range stale {
			b.WriteString("\n  " + Dir + "/" + d.Name + ": " + d.What)
		}
		t.Errorf("the published wire form is not the code's:%s\nregenerate it with: %s", b.String(), Regenerate)
	}
}

// TestStaleSchemasAreFound shows the check failing: a field planted in a
// result type, an operation added to the table and one taken out of it
// each leave docs/protocol stale, naming the file.
func TestStaleSchemasAreFound(t *testing.T) {
	ops := spec.Operations()
	run := reflect.TypeFor[spec.CreateRunResult]()
	fields := []reflect.StructField{}
	for i := 0; i < run.NumField(); i++ {
		fields = append(fields, run.Field(i))
	}
	planted := append(fields, reflect.StructField{Name: "Planted", Type: reflect.TypeFor[int64](), Tag: `json:"planted"`})
	withField := append([]spec.Operation(nil), ops...)
	withField[0].Result = reflect.StructOf(planted)

	renamed := append([]spec.Operation(nil), ops...)
	renamed[1].Op = "claim_more"

	cases := map[string]struct {
		ops  []spec.Operation
		want []string
	}{
		"a planted field":     {withField, []string{"create_run.result.schema.json"}},
		"an operation more":   {renamed, []string{"claim_more.params.schema.json", "claim_more.result.schema.json", "README.md"}},
		"an operation less":   {ops[1:], []string{"create_run.params.schema.json", "create_run.result.schema.json", "README.md"}},
		"the table unchanged": {ops, nil},
	}
	for name, c := range cases {
		files, err := Generate(root, c.ops)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range Stale(root, files) {
			got = append(got, d.Name)
		}
		for _, w := range c.want {
			if !strings.Contains(strings.Join(got, " "), w) {
				t.Errorf("%s: %s was not found stale (stale: %v)", name, w, got)
			}
		}
		if c.want == nil && len(got) > 0 {
			t.Errorf("%s: found stale %v", name, got)
		}
	}
}

package storeproto_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestProtocolDocListsEveryOperation holds docs/PROTOCOL.md's operation
// table to spec.Operations: one row per operation, in order, with its
// request and result types and whether it writes. An operation added to
// the contract fails this test until the protocol's page lists it.
func TestProtocolDocListsEveryOperation(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "<!-- operations")
	end := strings.Index(s, "<!-- /operations -->")
	if start < 0 || end < start {
		t.Fatal("docs/PROTOCOL.md has no <!-- operations … --> … <!-- /operations --> table")
	}
	var got []string
	for _, line := range strings.Split(s[start:end], "\n") {
		if strings.HasPrefix(line, "| `") {
			got = append(got, line)
		}
	}
	var want []string
	for _, o := range spec.Operations() {
		kind := "read"
		if o.Writes {
			kind = "write"
		}
		if o.Capability != "" {
			kind += " (optional: " + o.Capability + ")"
		}
		want = append(want, fmt.Sprintf("| `%s` | `%s` | `%s` | %s |", o.Op, typeName(o.Request), typeName(o.Result), kind))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/PROTOCOL.md's operation table is not spec.Operations; want exactly:\n%s\n\ngot:\n%s",
			strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// typeName names a request or result type as the table does.
func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Slice {
		return "[]" + typeName(t.Elem())
	}
	return t.Name()
}

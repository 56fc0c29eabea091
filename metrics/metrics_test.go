package metrics

import "testing"

// TestParse reads back what Report writes, as go test prints it.
func TestParse(t *testing.T) {
	want := Line{Check: "rapid", Store: "sqlite", Operations: 7, Seed: "9"}
	rec := &recorder{TB: t}
	Report(rec, want)
	got, ok := Parse("    property_test.go:56: " + rec.line)
	if !ok || got != want {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v", rec.line, got, ok, want)
	}
	if _, ok := Parse("a line without the prefix"); ok {
		t.Error("a line without the prefix parsed")
	}
	if _, ok := Parse(Prefix + "{not json"); ok {
		t.Error("a malformed line parsed")
	}
}

type recorder struct {
	testing.TB
	line string
}

func (r *recorder) Helper()         {}
func (r *recorder) Log(args ...any) { r.line = args[0].(string) }

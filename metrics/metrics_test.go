package metrics

import "testing"

// TestDecode reads back what Report writes, as go test -json delivers it
// (the attribute's value), and refuses what is not exactly a Line.
func TestDecode(t *testing.T) {
	want := Line{Check: "rapid", Store: "sqlite", Operations: 7, Rounds: 12, MinRounds: 1, Seed: "9", Replay: "go test -run 'x\ny'"}
	rec := &recorder{TB: t}
	Report(rec, want)
	if rec.key != Key {
		t.Fatalf("Report set attribute %q, want %q", rec.key, Key)
	}
	got, err := Decode(rec.value)
	if err != nil || got != want {
		t.Fatalf("Decode(%q) = %+v, %v; want %+v", rec.value, got, err, want)
	}
	for _, bad := range []string{"{not json", `{"check":"rapid","colour":1}`, `{"check":"rapid"} {}`, ""} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) succeeded, want an error", bad)
		}
	}
}

// recorder keeps the attribute Report sets.
type recorder struct {
	testing.TB
	key, value string
}

func (r *recorder) Helper()                {}
func (r *recorder) Attr(key, value string) { r.key, r.value = key, value }

// TestReportsFigures reports known figures on the real t: verify's own test
// (TestRunCheckReadsFigures in cmd/leasehold) runs it through go test -json
// and requires them back, whole.
func TestReportsFigures(t *testing.T) {
	Report(t, Line{Check: "self", Store: "none", Operations: 42, Rounds: 3, MinRounds: 1, Seed: "7", Replay: "go test ./metrics -run '^TestReportsFigures$'"})
}

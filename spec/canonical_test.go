package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// TestRFC8785Vectors checks Canonicalize byte for byte against the RFC
// author's own vectors (testdata/rfc8785, copied from shared/vectors).
func TestRFC8785Vectors(t *testing.T) {
	inputs, err := filepath.Glob("testdata/rfc8785/input/*.json")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no RFC 8785 vectors found under testdata/rfc8785/input (err %v)", err)
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata/rfc8785/output", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Canonicalize(input)
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", name, err)
			}
			if !bytes.Equal([]byte(got), want) {
				t.Fatalf("Canonicalize(%s)\n got %q\nwant %q", name, got, want)
			}
		})
	}
}

// TestRFC8785Numbers checks ES6 number serialization on the vectors'
// IEEE-754 bit patterns.
func TestRFC8785Numbers(t *testing.T) {
	f, err := os.Open("testdata/rfc8785/numbers.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("numbers.csv is empty")
	}
	for _, row := range rows {
		u, err := strconv.ParseUint(row[0], 16, 64)
		if err != nil {
			t.Fatalf("bad vector %q: %v", row[0], err)
		}
		f := math.Float64frombits(u)
		got, err := jcs.NumberToJSON(f)
		if err != nil {
			t.Fatalf("NumberToJSON(%s): %v", row[0], err)
		}
		if got != row[1] {
			t.Errorf("NumberToJSON(%s) = %s, want %s", row[0], got, row[1])
		}
		// And through Canonicalize, from a text that spells the value differently.
		canon, err := Canonicalize([]byte("[" + strings.ToUpper(got) + "]"))
		if err != nil || canon != "["+row[1]+"]" {
			t.Errorf("Canonicalize([%s]) = %q, %v; want [%s]", got, canon, err, row[1])
		}
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	cases := []struct {
		name  string
		input string
	}{
		{"empty", ""},
		{"duplicate key", `{"a":1,"a":2}`},
		{"duplicate key after escapes", `{"a":1,"\u0061":2}`},
		{"invalid utf-8", "{\"a\":\"\xff\"}"},
		{"lone high surrogate", `{"a":"\ud800"}`},
		{"trailing data", `{} {}`},
		{"not json", `{a:1}`},
		{"number out of range", `1e400`},
		{"too large", `"` + strings.Repeat("x", MaxPayloadBytes) + `"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(c.input))
			if CodeOf(err) != CodeInvalidArgument {
				t.Fatalf("Canonicalize(%.40q) = %q, %v; want invalid_argument", c.input, got, err)
			}
		})
	}
}

func TestCanonicalizeLimit(t *testing.T) {
	atLimit := `"` + strings.Repeat("x", MaxPayloadBytes-2) + `"`
	if _, err := Canonicalize([]byte(atLimit)); err != nil {
		t.Fatalf("a payload of exactly %d bytes was rejected: %v", MaxPayloadBytes, err)
	}
}

func TestFingerprint(t *testing.T) {
	base := FingerprintInput{Tenant: "acme", Operation: "work", SchemaVersion: 1, MaxAttempts: 3, TimeoutMs: 1000, Payload: `{"a":1}`}
	fp := Fingerprint(base)
	if !strings.HasPrefix(fp, FingerprintVersion+":") || len(fp) != len(FingerprintVersion)+1+64 {
		t.Fatalf("Fingerprint = %q, want %s:<64 hex digits>", fp, FingerprintVersion)
	}
	// The fingerprint is the hash of a canonical object: recompute it
	// independently through the JCS library from a differently ordered text.
	obj := map[string]any{"tenant": "acme", "operation": "work", "schema_version": 1, "max_attempts": 3, "timeout_ms": 1000, "payload": json.RawMessage(`{"a":1}`)}
	text, _ := json.Marshal(obj)
	canon, err := jcs.Transform(text)
	if err != nil {
		t.Fatal(err)
	}
	if want := Fingerprint(base); want != fp {
		t.Fatalf("Fingerprint is not deterministic: %s vs %s", fp, want)
	}
	if sum := sha256Hex(canon); fp != FingerprintVersion+":"+sum {
		t.Fatalf("Fingerprint = %s, want %s:%s (hash of %s)", fp, FingerprintVersion, sum, canon)
	}
	// Pinned: the fingerprint of an unscheduled request is byte for byte
	// what it was before requests could be scheduled, so records written
	// then still match their retries.
	const pinned = "fp1:a2a986ebd37be2c910bfbc35e1d96f85b42ad48d367fae48eae48c7d3ef6d828"
	if fp != pinned {
		t.Fatalf("Fingerprint(%+v) = %s, want the pinned %s: existing idempotency records would no longer match", base, fp, pinned)
	}
	seen := map[string]string{fp: "base"}
	for name, change := range map[string]func(*FingerprintInput){
		"tenant":         func(f *FingerprintInput) { f.Tenant = "other" },
		"operation":      func(f *FingerprintInput) { f.Operation = "other" },
		"schema version": func(f *FingerprintInput) { f.SchemaVersion = 2 },
		"max attempts":   func(f *FingerprintInput) { f.MaxAttempts = 4 },
		"timeout":        func(f *FingerprintInput) { f.TimeoutMs = 1001 },
		"payload":        func(f *FingerprintInput) { f.Payload = `{"a":2}` },
		"available at":   func(f *FingerprintInput) { f.AvailableAt = 5000 },
		"another time":   func(f *FingerprintInput) { f.AvailableAt = 5001 },
		"delay":          func(f *FingerprintInput) { f.DelayMs = 5000 },
		"another delay":  func(f *FingerprintInput) { f.DelayMs = 5001 },
	} {
		in := base
		change(&in)
		got := Fingerprint(in)
		if other, dup := seen[got]; dup {
			t.Errorf("changing the %s gave the fingerprint of %s (%s)", name, other, got)
		}
		seen[got] = name
	}
	// A schedule is a member of the canonical object only when set, by its
	// wire name: an absolute time and a delay of the same value differ.
	for _, sched := range []struct {
		in  FingerprintInput
		obj map[string]any
	}{
		{FingerprintInput{AvailableAt: 5000}, map[string]any{"available_at": 5000}},
		{FingerprintInput{DelayMs: 5000}, map[string]any{"delay_ms": 5000}},
	} {
		in := base
		in.AvailableAt, in.DelayMs = sched.in.AvailableAt, sched.in.DelayMs
		o := map[string]any{}
		for k, v := range obj {
			o[k] = v
		}
		for k, v := range sched.obj {
			o[k] = v
		}
		text, _ := json.Marshal(o)
		canon, err := jcs.Transform(text)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := Fingerprint(in), FingerprintVersion+":"+sha256Hex(canon); got != want {
			t.Errorf("Fingerprint(%+v) = %s, want %s (hash of %s)", in, got, want, canon)
		}
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

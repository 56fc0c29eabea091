package cmdtest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/spec"
)

// TestPythonCanonicalizerMatchesGo holds the Python port's RFC 8785
// canonicalizer to Go's (spec.Canonicalize) on the RFC vectors and on
// thousands of generated texts — numbers from random bit patterns, strings
// with every kind of escape, duplicate keys, deep nesting and corrupted
// texts: the same texts accepted, the same bytes out, the same texts
// refused. A fingerprint hashes the canonical payload, so any difference
// would make the two stores disagree about which requests are the same.
func TestPythonCanonicalizerMatchesGo(t *testing.T) {
	needPython(t)
	root, err := report.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	texts := canonicalCorpus(t, root)
	var in bytes.Buffer
	for _, x := range texts {
		in.WriteString(base64.StdEncoding.EncodeToString(x) + "\n")
	}
	cmd := exec.Command("python3", filepath.Join(root, "ports", "python-sqlite", "contract.py"), "canonicalize")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 contract.py canonicalize: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%d answers for %d texts", len(lines), len(texts))
	}
	accepted, mismatches := 0, 0
	for i, x := range texts {
		want, err := spec.Canonicalize(x)
		got := lines[i]
		switch {
		case err != nil && got != string(spec.CodeInvalidArgument):
			mismatches++
			if mismatches <= 10 {
				t.Errorf("text %q: Go refuses it (%v), Python answers %q", trim(x), err, got)
			}
		case err == nil:
			accepted++
			py, derr := base64.StdEncoding.DecodeString(strings.TrimPrefix(got, "ok "))
			if !strings.HasPrefix(got, "ok ") || derr != nil || string(py) != want {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("text %q: Go canonicalizes it to %q, Python answers %q (%q)", trim(x), trim([]byte(want)), got, trim(py))
				}
			}
		}
	}
	t.Logf("%d texts (%d canonicalizable, %d refused), %d mismatches", len(texts), accepted, len(texts)-accepted, mismatches)
	if accepted < len(texts)/10 || accepted > len(texts)*9/10 {
		t.Errorf("%d of %d texts canonicalizable: the corpus should exercise both outcomes", accepted, len(texts))
	}
}

func trim(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "…"
	}
	return string(b)
}

// canonicalCorpus is the RFC vectors, hand-picked edge cases and generated
// texts (a fixed seed: the corpus is the same on every run).
func canonicalCorpus(t *testing.T, root string) [][]byte {
	var texts [][]byte
	inputs, _ := filepath.Glob(filepath.Join(root, "spec", "testdata", "rfc8785", "input", "*.json"))
	if len(inputs) == 0 {
		t.Fatal("no RFC 8785 vectors under spec/testdata/rfc8785/input")
	}
	for _, f := range inputs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, b)
	}
	for _, s := range []string{"", " ", "{", "}", "null", " true ", "false\n", "-0", "-0.0", "0.0e0", "1E400", "-1e400", "1e-400",
		"5e-324", "2.5e-324", "1.7976931348623157e308", "1.7976931348623159e308", "9007199254740993", "0.1", "1e21", "1e20",
		"123456789012345678901234567890", "[1,]", "[,1]", "[01]", "[1.]", "[.5]", "[+1]", "[1e]", "[1e+]", "[0x10]", "[Infinity]",
		"[NaN]", `"\u0000"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83d\u0041"`, `"\/"`, `"\x"`, `"\u00e9"`, `"\U00e9"`,
		`"\u00G9"`, "\"\t\"", "\"\x7f\"", "\"\u2028\"", "\"é\"", "\"\xff\"", "\"\xed\xa0\x80\"", "\xef\xbb\xbf{}", `{"a":1,"a":2}`,
		`{"a":1,"\u0061":2}`, `{"é":1,"e":2,"\ud83d\ude00":3,"\uffff":4}`, `{"a" 1}`, `{"a":1 "b":2}`, `{1:2}`, `{"a":}`, "[true false]",
		"[tru]", "[true1]", "{} {}", "{}x", "[1]\t\r\n ", strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001), `"` + strings.Repeat("x", spec.MaxPayloadBytes-2) + `"`,
		`"` + strings.Repeat("x", spec.MaxPayloadBytes-1) + `"`, "[" + strings.TrimSuffix(strings.Repeat("1e20,", 3120), ",") + "]",
	} {
		texts = append(texts, []byte(s))
	}
	r := rand.New(rand.NewPCG(8785, 1))
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		genValue(r, &b, 0)
		x := []byte(b.String())
		if r.IntN(4) == 0 {
			x = corrupt(r, x)
		}
		texts = append(texts, x)
	}
	return texts
}

// genValue writes a random JSON value, with random insignificant
// whitespace, now and then a duplicate key or a lone surrogate.
func genValue(r *rand.Rand, b *strings.Builder, depth int) {
	ws := func() {
		for r.IntN(4) == 0 {
			b.WriteByte(" \t\n\r"[r.IntN(4)])
		}
	}
	ws()
	switch k := r.IntN(10); {
	case k < 3 && depth < 6:
		b.WriteByte('[')
		n := r.IntN(4)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			genValue(r, b, depth+1)
		}
		ws()
		b.WriteByte(']')
	case k < 5 && depth < 6:
		b.WriteByte('{')
		n := r.IntN(4)
		var keys []string
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			key := genString(r)
			if len(keys) > 0 && r.IntN(15) == 0 {
				key = keys[r.IntN(len(keys))] // a duplicate
			}
			keys = append(keys, key)
			ws()
			b.WriteString(key)
			ws()
			b.WriteByte(':')
			genValue(r, b, depth+1)
		}
		ws()
		b.WriteByte('}')
	case k < 7:
		b.WriteString(genNumber(r))
	case k < 9:
		b.WriteString(genString(r))
	default:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	}
	ws()
}

// genNumber spells a double: from random bits (finite ones) in Go's
// shortest form or in exponent form, or a random decimal.
func genNumber(r *rand.Rand) string {
	switch r.IntN(3) {
	case 0:
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = 1.5
		}
		return strconv.FormatFloat(f, "eEfg"[r.IntN(4)], -1, 64)
	case 1:
		s := strconv.Itoa(r.IntN(1000000))
		if r.IntN(2) == 0 {
			s = "-" + s
		}
		if r.IntN(2) == 0 {
			s += "." + strconv.Itoa(r.IntN(100000))
		}
		if r.IntN(2) == 0 {
			s += fmt.Sprintf("e%d", r.IntN(700)-350)
		}
		return s
	default:
		return strconv.FormatFloat(r.Float64()*math.Pow(10, float64(r.IntN(50)-25)), 'g', -1, 64)
	}
}

// genString spells a string with escapes of every kind, raw UTF-8 and
// control characters (escaped, and now and then raw: invalid).
func genString(r *rand.Rand) string {
	var b strings.Builder
	b.WriteByte('"')
	n := r.IntN(6)
	for i := 0; i < n; i++ {
		switch r.IntN(12) {
		case 0:
			fmt.Fprintf(&b, `\u%04x`, r.IntN(0x10000))
		case 1:
			fmt.Fprintf(&b, `\u%04X\u%04x`, 0xd800+r.IntN(0x400), 0xdc00+r.IntN(0x400))
		case 2:
			b.WriteString([]string{`\n`, `\t`, `\"`, `\\`, `\/`, `\b`, `\f`, `\r`}[r.IntN(8)])
		case 3:
			b.WriteString([]string{"é", "€", "😀", "\u2028", "\u007f", "\uffff", "Ω"}[r.IntN(7)])
		case 4:
			if r.IntN(8) == 0 {
				b.WriteByte(byte(r.IntN(0x20))) // raw control: invalid
			}
		default:
			b.WriteByte(byte('a' + r.IntN(26)))
		}
	}
	b.WriteByte('"')
	return b.String()
}

// corrupt breaks a text: a byte changed, inserted or dropped, or the text cut.
func corrupt(r *rand.Rand, x []byte) []byte {
	if len(x) == 0 {
		return x
	}
	i := r.IntN(len(x))
	y := append([]byte(nil), x...)
	const bytes = "{}[]\",:\\ \x00\xffae1-."
	switch r.IntN(4) {
	case 0:
		y[i] = bytes[r.IntN(len(bytes))]
	case 1:
		y = append(y[:i], append([]byte{bytes[r.IntN(len(bytes))]}, y[i:]...)...)
	case 2:
		y = append(y[:i], y[i+1:]...)
	default:
		y = y[:i]
	}
	return y
}

package httpadmit

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

func TestParseKeyValue(t *testing.T) {
	long := strings.Repeat("k", 255)
	tests := []struct {
		name, in string
		want     string         // the key, when ok
		reason   KeyErrorReason // 0: ok
	}{
		{"quoted uuid", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324", 0},
		{"bare uuid", `8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324", 0},
		{"escaped quote", `"a\"b"`, `a"b`, 0},
		{"escaped backslash", `"a\\b"`, `a\b`, 0},
		{"escapes at the end", `"k\\\""`, `k\"`, 0},
		{"comma inside quotes", `"a,b"`, "a,b", 0},
		{"semicolon inside quotes", `"a;b=1"`, "a;b=1", 0},
		{"spaces around", " \t\"k-1\" \t", "k-1", 0},
		{"bare with backslash", `a\b`, `a\b`, 0},
		{"bare with semicolon", `a;b`, `a;b`, 0},
		{"255 bytes", `"` + long + `"`, long, 0},
		{"255 bytes bare", long, long, 0},

		{"starts with punctuation", `"-k"`, "", KeyMalformed},
		{"starts with an escaped quote", `"\"k"`, "", KeyMalformed},
		{"bare, starts with punctuation", `_k`, "", KeyMalformed},
		{"empty", "", "", KeyMalformed},
		{"only spaces", "   ", "", KeyMalformed},
		{"empty quoted", `""`, "", KeyMalformed},
		{"256 bytes", `"` + long + `k"`, "", KeyMalformed},
		{"256 bytes bare", long + "k", "", KeyMalformed},
		{"no closing quote", `"abc`, "", KeyMalformed},
		{"ends in escape", `"abc\`, "", KeyMalformed},
		{"bad escape", `"a\nb"`, "", KeyMalformed},
		{"space in quoted key", `"a b"`, "", KeyMalformed},
		{"tab in quoted key", "\"a\tb\"", "", KeyMalformed},
		{"control byte", "\"a\x01b\"", "", KeyMalformed},
		{"obs-text", "\"a\xffb\"", "", KeyMalformed},
		{"parameters", `"k";v=1`, "", KeyMalformed},
		{"trailing garbage", `"k"x`, "", KeyMalformed},
		{"second string without comma", `"a" "b"`, "", KeyMalformed},
		{"quote in bare key", `a"b`, "", KeyMalformed},
		{"space in bare key", `a b`, "", KeyMalformed},
		{"obs-text bare", "a\x80", "", KeyMalformed},

		{"list of strings", `"a", "b"`, "", KeyDuplicate},
		{"same key twice", `"a","a"`, "", KeyDuplicate},
		{"trailing comma", `"a",`, "", KeyDuplicate},
		{"bare list", `a,b`, "", KeyDuplicate},
		{"bare list with spaces", `a , b`, "", KeyDuplicate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKeyValue(tt.in)
			if tt.reason == 0 {
				if err != nil || got != tt.want {
					t.Fatalf("ParseKeyValue(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
				}
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Reason != tt.reason {
				t.Fatalf("ParseKeyValue(%q) = %q, %v; want a *KeyError with reason %d", tt.in, got, err, tt.reason)
			}
			if got != "" {
				t.Fatalf("ParseKeyValue(%q) returned key %q with its error", tt.in, got)
			}
		})
	}
}

func TestParseKeyHeader(t *testing.T) {
	tests := []struct {
		name   string
		lines  []string // nil: no field at all
		want   string
		reason KeyErrorReason
	}{
		{"one line", []string{`"k-1"`}, "k-1", 0},
		{"missing", nil, "", KeyMissing},
		{"two lines", []string{`"a"`, `"b"`}, "", KeyDuplicate},
		{"two identical lines", []string{`"a"`, `"a"`}, "", KeyDuplicate},
		{"empty line", []string{""}, "", KeyMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tt.lines {
				h.Add("idempotency-key", l) // canonicalized to Idempotency-Key
			}
			got, err := ParseKey(h)
			if tt.reason == 0 {
				if err != nil || got != tt.want {
					t.Fatalf("ParseKey(%q) = %q, %v; want %q", tt.lines, got, err, tt.want)
				}
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Reason != tt.reason {
				t.Fatalf("ParseKey(%q) = %q, %v; want reason %d", tt.lines, got, err, tt.reason)
			}
		})
	}
}

func TestFormatKey(t *testing.T) {
	for _, tt := range []struct{ key, want string }{
		{"k-1", `"k-1"`},
		{`a"b\c`, `"a\"b\\c"`},
	} {
		got, err := FormatKey(tt.key)
		if err != nil || got != tt.want {
			t.Errorf("FormatKey(%q) = %q, %v; want %q", tt.key, got, err, tt.want)
		}
		if back, err := ParseKeyValue(got); err != nil || back != tt.key {
			t.Errorf("ParseKeyValue(FormatKey(%q)) = %q, %v", tt.key, back, err)
		}
	}
	for _, bad := range []string{"", "a b", strings.Repeat("k", 256), "a\x00", "-a"} {
		if got, err := FormatKey(bad); err == nil {
			t.Errorf("FormatKey(%q) = %q, nil; want an error", bad, got)
		}
	}
}

// sfString is an independent statement of a quoted key as RFC 9651 §3.3.3
// defines sf-string, with optional spaces and tabs around it.
var sfString = regexp.MustCompile(`^[ \t]*"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"[ \t]*$`)

var unescape = regexp.MustCompile(`\\(["\\])`)

// FuzzParseKeyValue holds the parser to: no panics; every accepted key is
// 1-255 bytes of 0x21-0x7E; a quoted value is accepted exactly when it is an
// sf-string whose unescaped value is a valid key, and decodes to that value;
// FormatKey of an accepted key parses back to it.
func FuzzParseKeyValue(f *testing.F) {
	for _, s := range []string{`"k-1"`, `k-1`, `"a\"b"`, `"a\\b"`, `"a b"`, `"a", "b"`, `"k";v=1`, `"abc\`, `a,b`, "", `""`, " \"x\" "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := ParseKeyValue(in)
		if err != nil {
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Reason < KeyMissing || ke.Reason > KeyDuplicate {
				t.Fatalf("ParseKeyValue(%q): error %v is not a *KeyError with a known reason", in, err)
			}
			if key != "" {
				t.Fatalf("ParseKeyValue(%q) returned key %q with its error", in, key)
			}
		} else {
			if len(key) < 1 || len(key) > 255 {
				t.Fatalf("ParseKeyValue(%q) = %q: %d bytes", in, key, len(key))
			}
			for i := 0; i < len(key); i++ {
				if key[i] < 0x21 || key[i] > 0x7e {
					t.Fatalf("ParseKeyValue(%q) = %q: byte 0x%02x at %d", in, key, key[i], i)
				}
			}
			// The store must accept every key the parser does: a key it
			// refuses would be a 500, not the client's 400.
			req := spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: key, RunID: "r1", Payload: []byte(`{}`)}
			if _, err := spec.DefaultConfig().NormalizeCreate(req, 0); err != nil {
				t.Fatalf("ParseKeyValue(%q) = %q, which the store refuses: %v", in, key, err)
			}
			formatted, ferr := FormatKey(key)
			if ferr != nil {
				t.Fatalf("FormatKey(%q) of an accepted key: %v", key, ferr)
			}
			if back, err := ParseKeyValue(formatted); err != nil || back != key {
				t.Fatalf("ParseKeyValue(FormatKey(%q)) = %q, %v", key, back, err)
			}
		}
		if strings.HasPrefix(strings.TrimLeft(in, " \t"), `"`) {
			m := sfString.FindStringSubmatch(in)
			want := ""
			if m != nil {
				want = unescape.ReplaceAllString(m[1], "$1")
			}
			valid := m != nil && want != "" && len(want) <= 255 && !strings.Contains(want, " ") && isAlnum(want[0])
			if valid != (err == nil) || (valid && key != want) {
				t.Fatalf("ParseKeyValue(%q) = %q, %v; the sf-string grammar says valid=%v, key %q", in, key, err, valid, want)
			}
		}
	})
}

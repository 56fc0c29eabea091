package httpadmit

import (
	"net/http"
	"strings"
	"testing"
)

func TestNewAPIKeysRefuses(t *testing.T) {
	const good = "sk_live_0123456789abcdef"
	tests := []struct {
		name string
		keys map[string]string
	}{
		{"no keys", map[string]string{}},
		{"short key", map[string]string{"sk_short": "acme"}},
		{"space in key", map[string]string{"sk_live 0123456789abcdef": "acme"}},
		{"comma in key", map[string]string{"sk_live,0123456789abcdef": "acme"}},
		{"only padding", map[string]string{strings.Repeat("=", 20): "acme"}},
		{"bad tenant", map[string]string{good: "Acme Corp"}},
		{"empty tenant", map[string]string{good: ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAPIKeys(tt.keys)
			if err == nil {
				t.Fatalf("NewAPIKeys(%v) = %v, nil; want an error", tt.keys, a)
			}
			for k := range tt.keys {
				if k != "" && strings.Contains(err.Error(), k) {
					t.Fatalf("error %q contains the key", err)
				}
			}
		})
	}
}

func TestAPIKeysAuthenticate(t *testing.T) {
	const keyA, keyA2, keyB = "sk_live_acme_0123456789", "sk_live_acme_rotated_01", "sk_live_globex_01234567"
	a, err := NewAPIKeys(map[string]string{keyA: "acme", keyA2: "acme", keyB: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		lines  []string // Authorization lines
		tenant string   // "": refused
	}{
		{"key of A", []string{"Bearer " + keyA}, "acme"},
		{"A's rotated key", []string{"Bearer " + keyA2}, "acme"},
		{"key of B", []string{"Bearer " + keyB}, "globex"},
		{"scheme is case-insensitive", []string{"bearer " + keyB}, "globex"},
		{"no header", nil, ""},
		{"unknown key", []string{"Bearer sk_live_nobody_0123456"}, ""},
		{"prefix of a key", []string{"Bearer " + keyA[:len(keyA)-1]}, ""},
		{"key with a suffix", []string{"Bearer " + keyA + "x"}, ""},
		{"basic scheme", []string{"Basic " + keyA}, ""},
		{"no scheme", []string{keyA}, ""},
		{"empty token", []string{"Bearer "}, ""},
		{"two headers", []string{"Bearer " + keyA, "Bearer " + keyA}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodGet, "/", nil)
			for _, l := range tt.lines {
				r.Header.Add("Authorization", l)
			}
			tenant, err := a.Authenticate(r)
			if tt.tenant != "" {
				if err != nil || tenant != tt.tenant {
					t.Fatalf("Authenticate = %q, %v; want %q", tenant, err, tt.tenant)
				}
				return
			}
			if err == nil || tenant != "" {
				t.Fatalf("Authenticate = %q, %v; want a refusal", tenant, err)
			}
			for _, k := range []string{keyA, keyA2, keyB} {
				if strings.Contains(err.Error(), k[8:]) {
					t.Fatalf("error %q echoes a key", err)
				}
			}
		})
	}
}

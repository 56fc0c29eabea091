package httpadmit

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// KeyHeader is the request header that carries the idempotency key.
const KeyHeader = "Idempotency-Key"

// KeyErrorReason says what is wrong with a request's Idempotency-Key.
type KeyErrorReason int

const (
	// KeyMissing: the request has no Idempotency-Key field.
	KeyMissing KeyErrorReason = iota + 1
	// KeyMalformed: the field value is not one key in either accepted form,
	// or the key breaks the store's limits (1-255 bytes of 0x21-0x7E, the
	// first a letter or digit).
	KeyMalformed
	// KeyDuplicate: more than one key: two field lines, or a comma-separated
	// list in one (which is what two lines become when a proxy combines them).
	KeyDuplicate
)

// KeyError is the error ParseKey and ParseKeyValue return. Detail says what
// is wrong and never contains the key.
type KeyError struct {
	Reason KeyErrorReason
	Detail string
}

func (e *KeyError) Error() string { return "Idempotency-Key: " + e.Detail }

func keyErrorf(reason KeyErrorReason, format string, args ...any) *KeyError {
	return &KeyError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ParseKey returns the idempotency key of a request's header. It takes
// exactly one Idempotency-Key field line and parses its value with
// ParseKeyValue. No field is KeyMissing; two or more lines are KeyDuplicate,
// even when they carry the same key (the draft: clients MUST NOT send more
// than one).
func ParseKey(h http.Header) (string, error) {
	lines := h.Values(KeyHeader)
	switch len(lines) {
	case 0:
		return "", keyErrorf(KeyMissing, "the header is missing; send one key per request, for example Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\", and the same key on every retry")
	case 1:
		return ParseKeyValue(lines[0])
	default:
		return "", keyErrorf(KeyDuplicate, "the request has %d Idempotency-Key header lines; send exactly one", len(lines))
	}
}

// ParseKeyValue parses one Idempotency-Key field value. Two forms are
// accepted; surrounding spaces and tabs are ignored in both:
//
//   - The draft's form, an RFC 9651 (RFC 8941) sf-string: a double-quoted
//     string of bytes 0x20-0x7E in which a backslash escapes only '"' and
//     '\' (so "a\"b" is the key a"b). Nothing may follow the closing quote:
//     a comma is KeyDuplicate (a list), parameters (";name=value") are
//     KeyMalformed, since this field defines none.
//   - The bare form many clients send (Stripe's): the value taken verbatim,
//     every byte 0x21-0x7E except '"' and ','. A comma is KeyDuplicate: it
//     is how two values look once combined into one line.
//
// "k-1" and k-1 are the same key. Either way the key itself must be what the
// store accepts: 1 to 255 bytes of 0x21-0x7E, the first a letter or digit,
// so a quoted key may not contain a space. Every failure is a *KeyError whose Detail names the
// offending byte's offset, never the key.
func ParseKeyValue(v string) (string, error) {
	s := strings.Trim(v, " \t")
	if s == "" {
		return "", keyErrorf(KeyMalformed, "the value is empty; send a key such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\"")
	}
	var key string
	if s[0] == '"' {
		k, rest, err := parseString(s)
		if err != nil {
			return "", err
		}
		rest = strings.TrimLeft(rest, " \t")
		switch {
		case rest == "":
		case rest[0] == ',':
			return "", keyErrorf(KeyDuplicate, "the value is a list (a comma after the quoted key); send exactly one key")
		case rest[0] == ';':
			return "", keyErrorf(KeyMalformed, "the key has parameters (';' after the closing quote); Idempotency-Key takes none")
		default:
			return "", keyErrorf(KeyMalformed, "unexpected byte 0x%02x after the closing quote; send one quoted key and nothing else", rest[0])
		}
		key = k
	} else {
		if strings.IndexByte(s, ',') >= 0 {
			return "", keyErrorf(KeyDuplicate, "the value is a list (it contains a comma); send exactly one key")
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '"' {
				return "", keyErrorf(KeyMalformed, "a double quote at offset %d in an unquoted key; quote the whole key and escape the quote as \\\"", i)
			}
			if c < 0x21 || c > 0x7e {
				return "", keyErrorf(KeyMalformed, "byte 0x%02x at offset %d is not allowed in an unquoted key (printable ASCII only)", c, i)
			}
		}
		key = s
	}
	if key == "" {
		return "", keyErrorf(KeyMalformed, "the key is empty")
	}
	if len(key) > spec.MaxKeyBytes {
		return "", keyErrorf(KeyMalformed, "the key is %d bytes; the limit is %d", len(key), spec.MaxKeyBytes)
	}
	if i := strings.IndexByte(key, ' '); i >= 0 {
		return "", keyErrorf(KeyMalformed, "the key has a space at offset %d of its unescaped value; keys are printable ASCII without spaces", i)
	}
	if !isAlnum(key[0]) {
		return "", keyErrorf(KeyMalformed, "the key starts with byte 0x%02x; keys start with a letter or digit", key[0])
	}
	return key, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// parseString parses the sf-string at the start of s (RFC 9651 §4.2.5) and
// returns its unescaped value and what follows the closing quote.
func parseString(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) {
				return "", "", keyErrorf(KeyMalformed, "the quoted key ends inside an escape (a backslash at offset %d)", i-1)
			}
			if c = s[i]; c != '"' && c != '\\' {
				return "", "", keyErrorf(KeyMalformed, "backslash at offset %d escapes byte 0x%02x; in a quoted key a backslash may only escape '\"' or '\\'", i-1, c)
			}
			b.WriteByte(c)
		case c == '"':
			return b.String(), s[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", keyErrorf(KeyMalformed, "byte 0x%02x at offset %d is not allowed in a quoted key (printable ASCII only)", c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", keyErrorf(KeyMalformed, "the quoted key has no closing double quote")
}

// FormatKey returns key as the draft's Idempotency-Key field value: an
// sf-string, quoted, with '"' and '\' escaped. A key the store would refuse
// (not 1-255 bytes of 0x21-0x7E starting with a letter or digit) is a
// *KeyError. ParseKeyValue(FormatKey(k))
// returns k.
func FormatKey(key string) (string, error) {
	if key == "" || len(key) > spec.MaxKeyBytes {
		return "", keyErrorf(KeyMalformed, "the key is %d bytes; want 1 to %d", len(key), spec.MaxKeyBytes)
	}
	if !isAlnum(key[0]) {
		return "", keyErrorf(KeyMalformed, "the key starts with byte 0x%02x; keys start with a letter or digit", key[0])
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x21 || c > 0x7e {
			return "", keyErrorf(KeyMalformed, "byte 0x%02x at offset %d is not allowed in a key (printable ASCII without spaces)", c, i)
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

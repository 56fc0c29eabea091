package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// FingerprintVersion is the version prefix of every fingerprint. Bump it when
// the fingerprint's inputs or encoding change.
const FingerprintVersion = "fp1"

// Canonicalize returns the RFC 8785 (JCS) canonical form of a JSON text.
// Invalid UTF-8, duplicate object keys, lone surrogates, numbers outside
// IEEE-754 doubles, trailing data and texts past MaxPayloadBytes are
// CodeInvalidArgument.
func Canonicalize(text []byte) (string, error) {
	if len(text) == 0 {
		return "", Errorf(CodeInvalidArgument, "JSON payload is empty (send null or {} for no payload)")
	}
	if len(text) > MaxPayloadBytes {
		return "", Errorf(CodeInvalidArgument, "JSON payload is %d bytes; the limit is %d", len(text), MaxPayloadBytes)
	}
	if !utf8.Valid(text) {
		return "", Errorf(CodeInvalidArgument, "JSON payload is not valid UTF-8")
	}
	out, err := canonicalJCS(text)
	if err != nil {
		return "", &Error{Code: CodeInvalidArgument, Message: "JSON payload is not canonicalizable JSON (RFC 8785)", Err: err}
	}
	if len(out) > MaxPayloadBytes {
		return "", Errorf(CodeInvalidArgument, "canonical JSON payload is %d bytes; the limit is %d", len(out), MaxPayloadBytes)
	}
	return string(out), nil
}

// canonicalJCS runs the JCS transform, turning a panic in the library into an
// error so that no input can crash a store.
func canonicalJCS(text []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Errorf(CodeInvalidArgument, "canonicalizer rejected the input: %v", r)
		}
	}()
	return jcs.Transform(text)
}

// FingerprintInput is everything the fingerprint binds: the operation and its
// schema version, the tenant scope, the normalized policy fields, the
// canonical payload and the schedule as the request gave it. Never the run
// id.
type FingerprintInput struct {
	Tenant        string
	Operation     string
	SchemaVersion int
	MaxAttempts   int
	TimeoutMs     int64
	Payload       string // canonical JSON
	// AvailableAt and DelayMs are the request's schedule, not the time it
	// resolved to (a delay resolves to another time on every retry); 0 is
	// not set.
	AvailableAt int64
	DelayMs     int64
	// Outbox is the canonical JSON array of the request's outbox messages
	// ([{"payload":…,"subject":…}, …]), "" for none.
	Outbox string
}

// Fingerprint returns "fp1:" + hex(SHA-256(JCS(object))) where object is
// {"max_attempts", "operation", "payload", "schema_version", "tenant",
// "timeout_ms"} built from in, with "available_at", "delay_ms" and
// "outbox" added only when set: an unscheduled request without messages
// has the fingerprint it had before either existed, so records written
// then still match.
func Fingerprint(in FingerprintInput) string {
	// The members are written in JCS key order, and every value is already
	// canonical, so this text is the canonical form of the object.
	b := make([]byte, 0, 160+len(in.Payload)+len(in.Outbox))
	b = append(b, '{')
	if in.AvailableAt != 0 {
		b = append(b, `"available_at":`...)
		b = strconv.AppendInt(b, in.AvailableAt, 10)
		b = append(b, ',')
	}
	if in.DelayMs != 0 {
		b = append(b, `"delay_ms":`...)
		b = strconv.AppendInt(b, in.DelayMs, 10)
		b = append(b, ',')
	}
	b = append(b, `"max_attempts":`...)
	b = strconv.AppendInt(b, int64(in.MaxAttempts), 10)
	b = append(b, `,"operation":`...)
	b = appendJSONString(b, in.Operation)
	if in.Outbox != "" {
		b = append(b, `,"outbox":`...)
		b = append(b, in.Outbox...)
	}
	b = append(b, `,"payload":`...)
	b = append(b, in.Payload...)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(in.SchemaVersion), 10)
	b = append(b, `,"tenant":`...)
	b = appendJSONString(b, in.Tenant)
	b = append(b, `,"timeout_ms":`...)
	b = strconv.AppendInt(b, in.TimeoutMs, 10)
	b = append(b, '}')
	sum := sha256.Sum256(b)
	return FingerprintVersion + ":" + hex.EncodeToString(sum[:])
}

// appendJSONString appends s as a JSON string. Validated names are plain ASCII
// with no characters that need escaping, so encoding/json's output is already
// the JCS form.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// ShortHash returns the first 12 hex digits of SHA-256(s): what logs show in
// place of an idempotency key or a fingerprint source.
func ShortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

package storeproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/leasehold/leasehold/spec"
)

// Version is the protocol version this package speaks (docs/PROTOCOL.md).
const Version = 1

// The harness's requests that are not operations of the contract.
const (
	// OpOpen is every process's first request: the session's database,
	// config and hooks; the reply says what the store offers.
	OpOpen = "open"
	// OpExec runs one SQL statement (the "sql" capability).
	OpExec = "exec"
)

// The store's callbacks.
const (
	CallNow    = "now"
	CallRandom = "random"
	CallHook   = "hook"
)

// The capabilities a store may declare in its open reply, besides the
// operations it lists.
const (
	CapHooks         = "hooks"
	CapSQL           = "sql"
	CapDatabaseClock = "database_clock"
)

// The SQL layouts a store with CapSQL may declare (storetest.Layout).
const (
	LayoutTablePerRecord = "table_per_record"
	LayoutJobRow         = "job_row"
)

// MaxLine bounds one message: a snapshot of a few thousand runs fits.
const MaxLine = 64 << 20

// message is one line in either direction. A request has id and op (the
// harness) or id and call (the store's callback); a reply has in_reply_to
// and exactly one of result, error, protocol_error.
type message struct {
	ID            *int64          `json:"id,omitempty"`
	InReplyTo     *int64          `json:"in_reply_to,omitempty"`
	Op            string          `json:"op,omitempty"`
	Call          string          `json:"call,omitempty"`
	Params        json.RawMessage `json:"params,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Error         json.RawMessage `json:"error,omitempty"`
	ProtocolError string          `json:"protocol_error,omitempty"`
}

// OpenParams are the params of the open request.
type OpenParams struct {
	// Protocol is the version the harness speaks.
	Protocol int `json:"protocol"`
	// Database is an absolute path to a directory that belongs to one
	// database: empty when Create is set (the first session), holding
	// whatever the first session put there otherwise.
	Database string `json:"database"`
	// Create is set for the first session on the database.
	Create bool        `json:"create"`
	Config spec.Config `json:"config"`
	// Hooks asks the store to call the hook callback at both hook points of
	// every writing operation.
	Hooks bool `json:"hooks"`
}

// Hello is the result of the open request.
type Hello struct {
	// Protocol is the version the store speaks; it must equal the
	// harness's.
	Protocol int `json:"protocol"`
	// Store names the store (and its version) for reports.
	Store string `json:"store"`
	// Operations lists the operations of the contract the store
	// implements, by their spec.Op names.
	Operations []string `json:"operations"`
	// Capabilities lists what else it offers: CapHooks, CapSQL,
	// CapDatabaseClock.
	Capabilities []string `json:"capabilities"`
	// Layout is the SQL layout of a store with CapSQL.
	Layout string `json:"layout,omitempty"`
}

// has reports whether the hello lists capability c.
func (h Hello) has(c string) bool {
	for _, x := range h.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// implements reports whether the hello lists operation op.
func (h Hello) implements(op spec.Op) bool {
	for _, x := range h.Operations {
		if x == string(op) {
			return true
		}
	}
	return false
}

// RandomParams are the params of the random callback; RandomResult its
// result: a draw in [0, N).
type RandomParams struct {
	N int64 `json:"n"`
}

// RandomResult is the random callback's result.
type RandomResult struct {
	Value int64 `json:"value"`
}

// NowResult is the now callback's result: the clock reading, in ms.
type NowResult struct {
	Now int64 `json:"now"`
}

// HookParams are the params of the hook callback.
type HookParams struct {
	Op    spec.Op        `json:"op"`
	Point spec.HookPoint `json:"point"`
}

// HookError is the error of a hook callback's reply: the fault to inject.
type HookError struct {
	Message string `json:"message"`
}

// ExecParams are the params of the exec request.
type ExecParams struct {
	Query string `json:"query"`
}

// decodeStrict decodes one JSON value into v: unknown fields and trailing
// data are errors.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// present reports whether a field held a value (null included).
func present(r json.RawMessage) bool { return len(r) > 0 }

// parseMessage decodes one line from the other side and checks its shape.
func parseMessage(line []byte) (message, error) {
	var m message
	if err := decodeStrict(line, &m); err != nil {
		return m, fmt.Errorf("not a protocol message (one JSON object per line): %w", err)
	}
	switch {
	case m.InReplyTo != nil:
		n := 0
		for _, p := range []bool{present(m.Result), present(m.Error), m.ProtocolError != ""} {
			if p {
				n++
			}
		}
		if n != 1 || m.ID != nil || m.Op != "" || m.Call != "" || present(m.Params) {
			return m, errors.New("a reply has in_reply_to and exactly one of result, error and protocol_error, and nothing else")
		}
	case m.ID != nil:
		if (m.Op == "") == (m.Call == "") || present(m.Result) || present(m.Error) || m.ProtocolError != "" {
			return m, errors.New("a request has id, op (or call) and params, and nothing else")
		}
	default:
		return m, errors.New("a message needs id (a request) or in_reply_to (a reply)")
	}
	return m, nil
}

// specError decodes and checks a contract error: its published wire form
// holds its code to the contract's codes and its state to the run states.
func specError(raw json.RawMessage) (*spec.Error, error) {
	var e spec.Error
	if err := spec.DecodeWire(raw, &e); err != nil {
		return nil, fmt.Errorf("the error is not a contract error {code, state, message} as %s publishes it: %w", schemaFile("error"), err)
	}
	if e.Message == "" {
		e.Message = "(the store gave no message)"
	}
	return &e, nil
}

// schemaFile names the published schema of a message (docs/protocol).
func schemaFile(message string) string { return "docs/protocol/" + message + ".schema.json" }

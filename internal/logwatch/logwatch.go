// Package logwatch is a test's barrier on what the code under test logs: a
// slog handler that reports the records whose message holds a substring.
package logwatch

import (
	"context"
	"log/slog"
	"strings"
)

// New returns a handler that sends the message of every record holding
// substr on the returned channel (buffered by one; a message that finds it
// full is dropped, so logging never blocks) and drops every other record.
func New(substr string) (slog.Handler, <-chan string) {
	seen := make(chan string, 1)
	return handler{substr: substr, seen: seen}, seen
}

type handler struct {
	substr string
	seen   chan<- string
}

func (h handler) Enabled(context.Context, slog.Level) bool { return true }
func (h handler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h handler) WithGroup(string) slog.Handler            { return h }
func (h handler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		select {
		case h.seen <- r.Message:
		default:
		}
	}
	return nil
}

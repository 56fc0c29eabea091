package storeproto

import (
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestProtocolDocSessionIsWellFormed holds the session of docs/PROTOCOL.md
// ("A session") to the published wire form: every reply in it has the
// wire form of its request's result (or of a contract error), as the
// harness would check it.
func TestProtocolDocSessionIsWellFormed(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "## A session")
	if start < 0 {
		t.Fatal("docs/PROTOCOL.md has no section \"A session\"")
	}
	ops := map[int64]string{}
	replies := 0
	for _, line := range strings.Split(s[start:], "\n") {
		if !strings.HasPrefix(line, "> ") && !strings.HasPrefix(line, "< ") {
			continue
		}
		m, err := parseMessage([]byte(line[2:]))
		if err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		switch {
		case m.Op != "":
			ops[*m.ID] = m.Op
		case m.InReplyTo != nil && strings.HasPrefix(line, "< "):
			op, ok := ops[*m.InReplyTo]
			if !ok {
				t.Errorf("%s: a reply to no request of the session", line)
				continue
			}
			replies++
			row, _ := spec.Lookup(spec.Op(op))
			switch {
			case present(m.Error):
				if _, err := specError(m.Error); err != nil {
					t.Errorf("%s: %v", line, err)
				}
			case present(m.Result):
				if _, err := row.DecodeResult(m.Result); err != nil {
					t.Errorf("%s: the result of %s is not its wire form: %v", line, op, err)
				}
			}
		}
	}
	if replies == 0 {
		t.Error("docs/PROTOCOL.md's session has no reply")
	}
}

package harness

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness/report"
)

// TestStaleFailfileRefused: a kept failfile replays only under the action
// map it was drawn against; an unstamped one or one of another map is
// refused with what to do.
func TestStaleFailfileRefused(t *testing.T) {
	v := ActionsVersion()
	if v != ActionsVersion() || !strings.HasPrefix(v, "r") {
		t.Fatalf("ActionsVersion is %q, then %q", v, ActionsVersion())
	}
	if why := StaleFailfile(report.Kept{File: "f.fail", Test: "TestX", Actions: v}); why != "" {
		t.Fatalf("a failfile of this map is refused: %s", why)
	}
	for _, k := range []report.Kept{{File: "f.fail", Test: "TestX"}, {File: "f.fail", Test: "TestX", Actions: "r0-000000000000"}} {
		why := StaleFailfile(k)
		if !strings.Contains(why, "delete") || !strings.Contains(why, "TestX") {
			t.Errorf("actions %q: refusal %q does not say what to do", k.Actions, why)
		}
	}
}

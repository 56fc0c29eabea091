package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness/report"
)

// actionsRevision is raised when an action of the property's map draws
// differently under the same name: ActionsVersion sees renamed, added and
// removed actions by itself, not a changed body.
const actionsRevision = 1

// ActionsVersion names the property's rapid action map: its revision and a
// hash of its sorted action names. A failfile is rapid's choices, which
// mean the same sequence only under the same map (rapid draws an action as
// an index into the sorted names), so a kept failfile is stamped with it
// (report.Kept.Actions) and refused under another.
func ActionsVersion() string {
	names := make([]string, 0, 64)
	for name := range (&machine{}).actions() {
		names = append(names, name)
	}
	slices.Sort(names)
	sum := sha256.Sum256([]byte(strings.Join(names, "\n")))
	return fmt.Sprintf("r%d-%s", actionsRevision, hex.EncodeToString(sum[:6]))
}

// StaleFailfile returns why a kept failfile cannot be replayed under this
// action map, or "" when it can: its sidecar's Actions must be
// ActionsVersion.
func StaleFailfile(k report.Kept) string {
	switch {
	case k.Actions == "":
		return fmt.Sprintf("%s was kept before failfiles were stamped with their action map; under this map (%s) its choices drive another sequence: delete %s and rerun %s to keep a fresh one",
			k.File, ActionsVersion(), k.File, k.Test)
	case k.Actions != ActionsVersion():
		return fmt.Sprintf("%s was drawn against the action map %s, this one is %s: its choices drive another sequence here; delete it and rerun %s to keep a fresh one (or make the failure a scenario, scenarios/testdata/kept_*)",
			k.File, k.Actions, ActionsVersion(), k.Test)
	}
	return ""
}

// refuseStaleFailfile fails t when -rapid.failfile names a kept failfile
// whose sidecar says it was drawn against another action map. A failfile
// with no sidecar (rapid's own, just written) is replayed as it is.
func refuseStaleFailfile(t testing.TB) {
	f := flag.Lookup("rapid.failfile")
	if f == nil || f.Value.String() == "" {
		return
	}
	k, err := report.ReadKept(f.Value.String() + ".json")
	if err != nil {
		if _, statErr := os.Stat(f.Value.String() + ".json"); statErr != nil {
			return
		}
		t.Fatalf("replay %s: %v", f.Value.String(), err)
	}
	if why := StaleFailfile(k); why != "" {
		t.Fatalf("refusing a stale failfile: %s", why)
	}
}

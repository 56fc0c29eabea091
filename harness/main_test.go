package harness

import (
	"flag"
	"os"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgtest"
)

// TestMain lengthens rapid's sequences (default 30 steps) unless the caller
// chose: the races worth finding need a claim, an expiry and a reclaim first.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("rapid.steps"); f != nil && f.Value.String() == f.DefValue && os.Getenv("RAPID_STEPS") == "" {
		flag.Set("rapid.steps", "80")
	}
	pgtest.Main(m)
}

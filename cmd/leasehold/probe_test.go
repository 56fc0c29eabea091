package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestProbeCommandLines: leasehold probe's usage errors say what is wrong
// and exit 2, before any adapter runs.
func TestProbeCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"probe", "-h"}, 0, "LEASEHOLD_REDIS_URL"},
		{[]string{"probe", "--runs", "0"}, 2, "--runs 0"},
		{[]string{"probe", "--probe", "kill-wroker"}, 2, `--probe "kill-wroker": no such probe`},
		{[]string{"probe", "--system", "mongo"}, 2, `no system "mongo" (the systems here: leasehold-sqlite, leasehold-postgres`},
		{[]string{"probe", "--broken", "typo"}, 2, `no broken variant "typo"`},
		{[]string{"probe", "--adapter", "x", "--system", "river"}, 2, "--adapter probes one queue"},
		{[]string{"probe", "--adapter", "exit 3"}, 1, "did not say hello"},
		{[]string{"probe", "stray"}, 2, "unexpected arguments"},
		{[]string{"probe-adapter", "--store", "mongo"}, 2, `store "mongo"`},
	} {
		var out bytes.Buffer
		status := run(context.Background(), tc.args, &out, &out)
		if status != tc.status || !strings.Contains(out.String(), tc.want) {
			t.Errorf("leasehold %s: exit status %d and output\n%s\nwant status %d and output containing %q",
				strings.Join(tc.args, " "), status, out.String(), tc.status, tc.want)
		}
	}
}

package harness

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// DiffSnapshots returns "" when want and got hold the same rows, else a
// readable account of the first differences in each table.
func DiffSnapshots(want, got spec.Snapshot) string {
	var b strings.Builder
	diffTable(&b, "runs", want.Runs, got.Runs)
	diffTable(&b, "events", want.Events, got.Events)
	diffTable(&b, "jobs", want.Jobs, got.Jobs)
	diffTable(&b, "attempts", want.Attempts, got.Attempts)
	diffTable(&b, "idempotency", want.Idempotency, got.Idempotency)
	diffTable(&b, "effects", want.Effects, got.Effects)
	diffTable(&b, "outbox", want.Outbox, got.Outbox)
	return b.String()
}

func diffTable[T any](b *strings.Builder, name string, want, got []T) {
	const maxRows = 3
	shown := 0
	for i := 0; i < max(len(want), len(got)) && shown < maxRows; i++ {
		switch {
		case i >= len(want):
			fmt.Fprintf(b, "  %s[%d]: unexpected row %+v\n", name, i, got[i])
		case i >= len(got):
			fmt.Fprintf(b, "  %s[%d]: missing row %+v\n", name, i, want[i])
		case !reflect.DeepEqual(want[i], got[i]):
			fmt.Fprintf(b, "  %s[%d]:\n    want %+v\n    got  %+v\n", name, i, want[i], got[i])
		default:
			continue
		}
		shown++
	}
	if len(want) != len(got) {
		fmt.Fprintf(b, "  %s: %d rows expected, %d found\n", name, len(want), len(got))
	}
}

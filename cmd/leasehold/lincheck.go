package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/model"
)

var lincheckCommand = &command{
	name:    "lincheck",
	summary: "re-check a recorded history (history.json of a report) with the linearizability and accounting checks",
	usage:   "lincheck [--timeout D] history.json",
	help: `Re-checks a history file as the harness wrote it (reports/latest/lin/<run>/history.json; the
format is docs/HISTORY.md): porcupine against the model, then the
accounting. A file that is not a history, has an unknown field or operation, a key twice, an
incomplete entry, a negative clock reading, no entries or no final snapshot is refused with its
code in brackets (docs/HISTORY.md lists them), never judged. Exit status 1 on a refusal or any
violation.`,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		timeout := fs.Duration("timeout", 5*time.Minute, "checker time limit (a timeout is a failure)")
		return func(_ context.Context, args []string) error {
			if len(args) != 1 {
				return usagef("give exactly one history file")
			}
			return lincheck(o.out, args[0], *timeout)
		}
	},
}

// lincheck re-checks a recorded history (history.json from a report; the
// format is docs/HISTORY.md) with the same layered checks the harness ran:
// linearizability against the model, then the accounting. A file that is
// not a complete history is an error, never a pass.
func lincheck(out io.Writer, path string, timeout time.Duration) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s could not be checked: panic: %v (a bug of leasehold's checker: please report it with the file)", path, r)
		}
	}()
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	h, f, err := history.Decode(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	v := validate.Judge(model.Model{Config: f.Config}, h, validate.Judgement{Partition: f.Partitioned, Timeout: timeout, Drained: f.Drained})
	fmt.Fprintf(out, "%s: %d operations from %s (seed %d): linearizability %s in %s; races %s\n",
		path, len(h.Entries), f.Store, f.Seed, v.Linearizable, v.CheckTime.Round(time.Millisecond), v.Races)
	v.Explain(model.Model{Config: f.Config}, h, timeout)
	if v.Culprit != nil {
		fmt.Fprint(out, v.Culprit)
	}
	for _, a := range v.Accounting {
		fmt.Fprintf(out, "  accounting: %s\n", a)
	}
	if n := v.Violations(); n > 0 {
		return fmt.Errorf("%d violations", n)
	}
	return nil
}

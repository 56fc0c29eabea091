package scenarios

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"testing"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/spec"
)

// corpusFiles is the scenario corpus, built into the package so that a
// store written elsewhere plays exactly these files.
//
//go:embed testdata/*.json
var corpusFiles embed.FS

// Corpus returns every scenario of the corpus (testdata/*.json), in file
// name order. A file that does not load is an error naming it.
func Corpus() ([]*Scenario, error) {
	names, err := fs.Glob(corpusFiles, "testdata/*.json")
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("scenarios: no corpus files built in (%v)", err)
	}
	var out []*Scenario
	for _, name := range names {
		body, err := corpusFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		sc, err := Parse(body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		sc.File = path.Join("scenarios", name)
		out = append(out, sc)
	}
	return out, nil
}

// RunCorpus plays every scenario of the corpus, each as a subtest on a
// fresh database that open returns for it (FromFactory turns a conformance
// factory into one), and fails each subtest whose scenario does not run as
// its file says or whose history the model does not accept. It reports the
// steps played and the scenarios failed as its figures (package metrics); store names the
// store there. Every scenario is played: the stores open must call their
// hooks, complete batches and admit in bulk (RunCorpusOn finds out); a
// scenario that waits for an operation to block (await_blocked) on stores
// that cannot report lock waits is not applicable (Run finds out).
func RunCorpus(t *testing.T, store string, open func(testing.TB) Opener) {
	runCorpus(t, harness.Target{Name: store}, open, []storetest.Capability{storetest.CapHooks, storetest.CapCompleteBatch, storetest.CapCreateRuns, storetest.CapLockWaits, storetest.CapCreateRunTx})
}

// RunCorpusOn plays the corpus on a Target, as RunCorpus does on
// FromFactory(target.Factory). A scenario that holds an operation at a hook
// point needs hooks (storetest.CapHooks); on a store without them it is
// not applicable, and so is one that waits for an operation to block
// (await_blocked) on a store that cannot report lock waits
// (storetest.CapLockWaits). A failing scenario's log ends with the command
// that plays it again. It returns how each scenario ended, by name.
func RunCorpusOn(t *testing.T, target harness.Target) storetest.Summary {
	return runCorpus(t, target, func(t testing.TB) Opener { return FromFactory(t, target.Factory) }, storetest.Declared(t, target.Factory))
}

// Needs returns the capabilities the scenario needs beyond spec.Store:
// hooks when it holds an operation at a hook point (pause_at), batch
// completion when it sends complete_batch, bulk admission when it sends
// create_runs, lock-wait reports when it waits for an operation to block
// (await_blocked), admission in the application's transaction when it
// sends create_run_tx.
func (sc *Scenario) Needs() []storetest.Capability {
	var hooks, batch, bulk, waits, inTx bool
	for _, st := range sc.Steps {
		hooks = hooks || st.PauseAt != ""
		batch = batch || st.Op == string(spec.OpCompleteBatch)
		bulk = bulk || st.Op == string(spec.OpCreateRuns)
		waits = waits || st.Op == opAwaitBlocked
		inTx = inTx || st.Op == string(spec.OpCreateRunTx)
	}
	var out []storetest.Capability
	if hooks {
		out = append(out, storetest.CapHooks)
	}
	if batch {
		out = append(out, storetest.CapCompleteBatch)
	}
	if bulk {
		out = append(out, storetest.CapCreateRuns)
	}
	if waits {
		out = append(out, storetest.CapLockWaits)
	}
	if inTx {
		out = append(out, storetest.CapCreateRunTx)
	}
	return out
}

func runCorpus(t *testing.T, target harness.Target, open func(testing.TB) Opener, offered []storetest.Capability) storetest.Summary {
	var sum storetest.Summary
	corpus, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	store := target.Name
	var steps, failed int64
	var replay string
	for _, sc := range corpus {
		missing := storetest.Missing(offered, sc.Needs()...)
		na := len(missing) > 0
		ok := t.Run(sc.Name, func(t *testing.T) {
			if na {
				storetest.NotApplicable(t, missing[0], "scenario "+sc.Name)
			}
			res := Run(context.Background(), sc, open(t))
			if res.NotApplicable != "" && len(res.Mismatches) == 0 {
				// The stores opened lack what the declared ones offered.
				na = true
				storetest.NotApplicable(t, storetest.CapLockWaits, "scenario "+sc.Name+" ("+res.NotApplicable+")")
			}
			steps += int64(len(res.Steps))
			var b bytes.Buffer
			res.Report(&b)
			if !res.OK() {
				failed++
				cmd := report.TestCommand(target.Env, target.Tags, t.Name())
				if replay == "" {
					replay = cmd
				}
				t.Errorf("scenario %s (%s) does not pass on %s:\n%s\nreplay: %s", sc.Name, sc.File, store, b.String(), cmd)
				return
			}
			t.Logf("%s\n%s", sc.Description, b.String())
		})
		switch {
		case !ok:
			sum.Failed = append(sum.Failed, sc.Name)
		case na:
			sum.NotApplicable = append(sum.NotApplicable, sc.Name)
		default:
			sum.Passed = append(sum.Passed, sc.Name)
		}
	}
	metrics.Report(t, metrics.Line{Check: "scenarios", Store: store, Operations: steps, Violations: failed, Replay: replay})
	return sum
}

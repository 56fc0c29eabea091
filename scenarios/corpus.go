package scenarios

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"testing"

	"github.com/leasehold/leasehold/metrics"
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
// steps played and the scenarios failed on a metrics line; store names the
// store there.
func RunCorpus(t *testing.T, store string, open func(testing.TB) Opener) {
	corpus, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	var steps, failed int64
	for _, sc := range corpus {
		t.Run(sc.Name, func(t *testing.T) {
			res := Run(context.Background(), sc, open(t))
			steps += int64(len(res.Steps))
			var b bytes.Buffer
			res.Report(&b)
			if !res.OK() {
				failed++
				t.Errorf("scenario %s (%s) does not pass on %s:\n%s", sc.Name, sc.File, store, b.String())
				return
			}
			t.Logf("%s\n%s", sc.Description, b.String())
		})
	}
	metrics.Report(t, metrics.Line{Check: "scenarios", Store: store, Operations: steps, Violations: failed})
}

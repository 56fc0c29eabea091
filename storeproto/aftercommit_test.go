package storeproto_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/storeproto"
)

// errInjected is the fault the session's hook returns at every point.
var errInjected = errors.New("injected at the hook")

// afterCommitAnswers runs a broken child per answer to a create_run whose
// hook failed at after_commit, and returns what the harness got wrong: the
// write committed before the fault, so only unknown_outcome is true (the
// injected error carried along); unavailable ("rolled back"), a success
// and any other code are findings.
func afterCommitAnswers(t *testing.T) (problems []string) {
	t.Helper()
	for _, answer := range []string{"unknown_outcome", "unavailable", "success", "not_found"} {
		fs := &storeproto.Findings{}
		hook := func(context.Context, spec.Op, spec.HookPoint) error { return errInjected }
		conn, err := childCommand("after_commit:"+answer).Start(context.Background(), storeproto.Session{Database: t.TempDir(), Create: true,
			Config: spec.DefaultConfig(), Clock: clock.NewManual(1), Hook: hook}, fs)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		_, err = storeproto.NewStore(conn).CreateRun(context.Background(), spec.CreateRunRequest{
			Tenant: "acme", Operation: "work", IdempotencyKey: "k", RunID: "r1", Payload: []byte(`{}`)})
		conn.Close()
		var f *storeproto.Finding
		isFinding := errors.As(err, &f)
		switch {
		case answer == "unknown_outcome" && (spec.CodeOf(err) != spec.CodeUnknownOutcome || !errors.Is(err, errInjected) || isFinding):
			problems = append(problems, fmt.Sprintf("a store answering unknown_outcome after the after_commit fault: got %v; want unknown_outcome carrying the hook's error", err))
		case answer != "unknown_outcome" && !isFinding:
			problems = append(problems, fmt.Sprintf("a store answering %s after the after_commit fault was accepted (%v); want a finding", answer, err))
		case answer != "unknown_outcome" && !strings.Contains(err.Error(), "the hook failed at after_commit, so the store must answer unknown_outcome; it answered "):
			problems = append(problems, fmt.Sprintf("a store answering %s after the after_commit fault: finding %q does not say what was wrong", answer, err))
		}
	}
	return problems
}

// TestAfterCommitFault: after a fault injected at after_commit the harness
// accepts unknown_outcome alone, shown by broken children that answer
// unavailable, success and not_found. The mutant
// storeproto_after_commit_accepts_unavailable
// (TestMutantAfterCommitAcceptsUnavailable) is caught by this check.
func TestAfterCommitFault(t *testing.T) {
	for _, p := range afterCommitAnswers(t) {
		t.Error(p)
	}
}

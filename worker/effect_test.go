package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// memProvider is an external system scripted per call: each Call applies
// the effect or not and returns the scripted error. It does not deduplicate,
// so a blindly repeated call would apply twice.
type memProvider struct {
	mu           sync.Mutex
	script       []providerStep
	calls        int
	applied      []string // references of applied calls
	statusUnsure bool     // Status answers unknown
}

type providerStep struct {
	apply bool
	err   error
}

func (p *memProvider) effect(key string) worker.Effect {
	return worker.Effect{Step: "charge", Key: key,
		Call: func(context.Context, worker.EffectRequest) (string, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			step := providerStep{apply: true}
			if p.calls < len(p.script) {
				step = p.script[p.calls]
			}
			p.calls++
			ref := ""
			if step.apply {
				ref = fmt.Sprintf("pay_%d", len(p.applied)+1)
				p.applied = append(p.applied, ref)
			}
			if step.err != nil {
				return "", step.err
			}
			return ref, nil
		},
		Status: func(context.Context, worker.EffectRequest) (worker.EffectStatus, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch {
			case p.statusUnsure:
				return worker.EffectStatus{State: spec.EffectUnknown}, nil
			case len(p.applied) > 0:
				return worker.EffectStatus{State: spec.EffectSucceeded, ProviderRef: p.applied[0]}, nil
			}
			return worker.EffectStatus{State: spec.EffectFailed}, nil
		},
	}
}

// TestEffectLedger: Job.Effect never repeats an external call blindly.
// Each case runs attempts until the listed outcomes were reported.
func TestEffectLedger(t *testing.T) {
	timeout := worker.Ambiguous(errors.New("provider timed out after the request was sent"))
	type attemptWant struct {
		outcome worker.Outcome
		code    string
	}
	completed := attemptWant{worker.OutcomeCompleted, ""}
	unknown := attemptWant{worker.OutcomeRetried, worker.CodeEffectUnknown}
	cases := []struct {
		name         string
		script       []providerStep
		statusUnsure bool
		loseRecord   bool // the first attempt's RecordEffect never gets through
		// recordUnknown, when set, fails the first RecordEffect at this
		// point with unknown_outcome (BeforeCommit: it did not apply;
		// AfterCommit: it did).
		recordUnknown spec.HookPoint
		attempts      []attemptWant
		wantCalls     int
		wantApplied   int
		wantEffect    spec.EffectState
		wantGen       int64
	}{
		{name: "the call succeeds and is recorded", script: []providerStep{{apply: true}},
			attempts: []attemptWant{completed}, wantCalls: 1, wantApplied: 1, wantEffect: spec.EffectSucceeded, wantGen: 1},
		{name: "ambiguous but applied: reconciled as succeeded, never called again",
			script:   []providerStep{{apply: true, err: timeout}},
			attempts: []attemptWant{unknown, completed}, wantCalls: 1, wantApplied: 1, wantEffect: spec.EffectSucceeded, wantGen: 2},
		{name: "ambiguous and not applied: reconciled as failed, called once more",
			script:   []providerStep{{apply: false, err: timeout}, {apply: true}},
			attempts: []attemptWant{unknown, completed}, wantCalls: 2, wantApplied: 1, wantEffect: spec.EffectSucceeded, wantGen: 2},
		{name: "applied but the record was lost: the attempt's own reservation is reconciled",
			script: []providerStep{{apply: true}}, loseRecord: true,
			attempts: []attemptWant{unknown, completed}, wantCalls: 1, wantApplied: 1, wantEffect: spec.EffectSucceeded, wantGen: 2},
		{name: "the record's answer was lost after it committed: read back as applied, completed at once",
			script: []providerStep{{apply: true}}, recordUnknown: spec.AfterCommit,
			attempts: []attemptWant{completed}, wantCalls: 1, wantApplied: 1, wantEffect: spec.EffectSucceeded, wantGen: 1},
		{name: "the record's outcome unknown but not applied: read back, sent again, completed at once",
			script: []providerStep{{apply: true}}, recordUnknown: spec.BeforeCommit,
			attempts: []attemptWant{completed}, wantCalls: 1, wantApplied: 1, wantEffect: spec.EffectSucceeded, wantGen: 1},
		{name: "a definite failure is recorded and called again",
			script:   []providerStep{{apply: false, err: worker.Retryable(errors.New("503"), 0)}, {apply: true}},
			attempts: []attemptWant{{worker.OutcomeRetried, worker.CodeRetryable}, completed}, wantCalls: 2, wantApplied: 1,
			wantEffect: spec.EffectSucceeded, wantGen: 2},
		{name: "the provider cannot tell yet: retried without calling",
			script: []providerStep{{apply: false, err: timeout}}, statusUnsure: true,
			attempts: []attemptWant{unknown, unknown}, wantCalls: 1, wantApplied: 0, wantEffect: spec.EffectUnknown, wantGen: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, b backend) {
				e := newEnv(t, b)
				e.create("r1")
				p := &memProvider{script: c.script, statusUnsure: c.statusUnsure}
				var mu sync.Mutex
				loseRecord, unknown := c.loseRecord, c.recordUnknown
				hook := func(_ context.Context, op spec.Op, pt spec.HookPoint) error {
					mu.Lock()
					defer mu.Unlock()
					switch {
					case op != spec.OpRecordEffect:
					case loseRecord && pt == spec.BeforeCommit:
						return errors.New("injected: connection lost before the record committed")
					case unknown != "" && pt == unknown:
						unknown = ""
						return spec.Errorf(spec.CodeUnknownOutcome, "injected: the record's outcome is unknown")
					}
					return nil
				}
				e.start(e.config("w1", e.storeFor(hook), func(ctx context.Context, job *worker.Job) ([]byte, error) {
					ref, err := job.Effect(ctx, p.effect("pay-"+job.RunID))
					if err != nil {
						return nil, err
					}
					return json.Marshal(map[string]string{"ref": ref})
				}))
				for i, w := range c.attempts {
					// A lost record is sent again with backoff until the
					// lease runs out: move the clock through the waits.
					r := e.driveUntilResult(2_000)
					if r.Attempt != i+1 || r.Outcome != w.outcome || r.ErrorCode != w.code {
						t.Fatalf("attempt %d: result %+v (err %v), want outcome %s, code %q", i+1, r, r.Err, w.outcome, w.code)
					}
					mu.Lock()
					loseRecord = false
					mu.Unlock()
					if i+1 < len(c.attempts) {
						now := e.wc.Now()
						e.due(now+1_000, "the idle wait after the retry")
						e.advance(r.RetryAt - now)
					}
				}
				p.mu.Lock()
				calls, applied := p.calls, len(p.applied)
				p.mu.Unlock()
				if calls != c.wantCalls || applied != c.wantApplied {
					t.Fatalf("provider: %d calls, %d applied; want %d calls, %d applied", calls, applied, c.wantCalls, c.wantApplied)
				}
				effs, err := e.s.Effects(e.ctx, "acme", "r1")
				if err != nil || len(effs) != 1 || effs[0].State != c.wantEffect || effs[0].Generation != c.wantGen {
					t.Fatalf("effects %+v, %v; want one %s by generation %d", effs, err, c.wantEffect, c.wantGen)
				}
				if c.wantEffect == spec.EffectSucceeded {
					if run := e.run("r1"); run.Result != `{"ref":"pay_1"}` {
						t.Fatalf("run result %q, want the first (only) applied reference", run.Result)
					}
				}
			})
		})
	}
}

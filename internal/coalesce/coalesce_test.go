package coalesce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is a Func that records every batch and, while gated, holds each
// batch until the test lets it go.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	ctxs    []context.Context
	gate    chan struct{} // nil: batches run at once
	started chan int      // each batch's size when it starts (buffered)
	err     error
	short   bool // return one result too few
}

func newRecorder(gated bool) *recorder {
	r := &recorder{started: make(chan int, 100)}
	if gated {
		r.gate = make(chan struct{})
	}
	return r
}

func (r *recorder) run(ctx context.Context, reqs []int) ([]string, error) {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(reqs))
	r.ctxs = append(r.ctxs, ctx)
	r.mu.Unlock()
	r.started <- len(reqs)
	if r.gate != nil {
		<-r.gate
	}
	if r.err != nil {
		return nil, r.err
	}
	out := make([]string, len(reqs))
	for i, q := range reqs {
		out[i] = fmt.Sprintf("r%d", q)
	}
	if r.short {
		out = out[1:]
	}
	return out, nil
}

func (r *recorder) release() { r.gate <- struct{}{} }

func (r *recorder) got() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

var errAbandoned = errors.New("abandoned")

func abandon(ctxErr error) error { return fmt.Errorf("%w: %w", errAbandoned, ctxErr) }

// result is what one Do returned.
type result struct {
	res string
	err error
}

// start runs Do(req) on a goroutine and returns where its result arrives.
func start[Req, Res any](ctx context.Context, g *Group[Req, Res], req Req) <-chan result {
	ch := make(chan result, 1)
	go func() {
		res, err := g.Do(ctx, req)
		ch <- result{fmt.Sprint(res), err}
	}()
	return ch
}

// waitQueued waits until n calls wait in g's queue.
func waitQueued[Req, Res any](t *testing.T, g *Group[Req, Res], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		q := len(g.queue)
		g.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued after 10s, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// queueBehind starts call 0, waits until its batch runs (held by r's
// gate), then starts call i with ctxs[i-1] and waits until it is queued; it
// returns where each call's result arrives, call 0's first.
func queueBehind(t *testing.T, g *Group[int, string], r *recorder, ctxs ...context.Context) []<-chan result {
	t.Helper()
	out := []<-chan result{start(context.Background(), g, 0)}
	<-r.started
	for i, ctx := range ctxs {
		out = append(out, start(ctx, g, i+1))
		waitQueued(t, g, i+1) // in call order
	}
	return out
}

func expect(t *testing.T, ch <-chan result, want string) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.res != want {
			t.Fatalf("Do returned (%q, %v), want (%q, nil)", r.res, r.err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Do did not return %q within 10s", want)
	}
}

func TestLoneCallRunsAlone(t *testing.T) {
	r := newRecorder(false)
	g := New(r.run, 10, 1, abandon)
	for i := range 3 {
		res, err := g.Do(context.Background(), i)
		if err != nil || res != fmt.Sprintf("r%d", i) {
			t.Fatalf("Do(%d) = (%q, %v), want (r%d, nil)", i, res, err, i)
		}
	}
	if got, want := r.got(), [][]int{{0}, {1}, {2}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v: a call alone must run at once, alone", got, want)
	}
	if calls, batches := g.Stats(); calls != 3 || batches != 3 {
		t.Fatalf("Stats() = (%d, %d), want (3, 3)", calls, batches)
	}
}

func TestWaitingCallsShareTheNextBatch(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxBatch int
		want     [][]int
	}{
		{"all waiting", 10, [][]int{{0}, {1, 2, 3, 4, 5}}},
		{"at most maxBatch", 2, [][]int{{0}, {1, 2}, {3, 4}, {5}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRecorder(true)
			g := New(r.run, c.maxBatch, 1, abandon)
			bg := context.Background()
			results := queueBehind(t, g, r, bg, bg, bg, bg, bg)
			for range c.want {
				r.release()
			}
			for i, ch := range results {
				expect(t, ch, fmt.Sprintf("r%d", i))
			}
			if got := r.got(); !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Fatalf("batches %v, want %v", got, c.want)
			}
		})
	}
}

func TestSlotsBoundBatchesInFlight(t *testing.T) {
	r := newRecorder(true)
	g := New(r.run, 10, 2, abandon)
	ctx := context.Background()
	a := start(ctx, g, 0)
	<-r.started
	b := start(ctx, g, 1)
	<-r.started // two batches in flight at once
	c := start(ctx, g, 2)
	waitQueued(t, g, 1) // the third waits for a slot
	select {
	case n := <-r.started:
		t.Fatalf("a third batch (of %d) started with both slots busy", n)
	default:
	}
	r.release()
	r.release()
	r.release()
	expect(t, a, "r0")
	expect(t, b, "r1")
	expect(t, c, "r2")
}

func TestCallCancelledWhileWaitingIsDropped(t *testing.T) {
	r := newRecorder(true)
	g := New(r.run, 10, 1, abandon)
	first := start(context.Background(), g, 0)
	<-r.started
	ctx, cancel := context.WithCancel(context.Background())
	dropped := start(ctx, g, 1)
	waitQueued(t, g, 1)
	kept := start(context.Background(), g, 2)
	waitQueued(t, g, 2)
	cancel()
	select {
	case res := <-dropped:
		if !errors.Is(res.err, context.Canceled) || errors.Is(res.err, errAbandoned) {
			t.Fatalf("a call cancelled while waiting returned (%q, %v), want context.Canceled", res.res, res.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call cancelled while waiting did not return")
	}
	r.release()
	r.release()
	expect(t, first, "r0")
	expect(t, kept, "r2")
	if got, want := r.got(), [][]int{{0}, {2}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v: a dropped call must join no batch", got, want)
	}
}

func TestCallCancelledWhileItsBatchRuns(t *testing.T) {
	r := newRecorder(true)
	g := New(r.run, 10, 1, abandon)
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	calls := queueBehind(t, g, r, ctxA, ctxB)
	first, a, b := calls[0], calls[1], calls[2]
	r.release() // the first batch ends; {1, 2} starts
	expect(t, first, "r0")
	if n := <-r.started; n != 2 {
		t.Fatalf("the second batch has %d calls, want 2", n)
	}
	batchCtx := r.ctxs[1]

	cancelA()
	select {
	case res := <-a:
		if !errors.Is(res.err, errAbandoned) || !errors.Is(res.err, context.Canceled) {
			t.Fatalf("a call cancelled while its batch ran returned (%q, %v), want the abandoned error", res.res, res.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call cancelled while its batch ran did not return at once")
	}
	if batchCtx.Err() != nil {
		t.Fatal("the batch's context ended while one of its calls still waited for it")
	}
	cancelB()
	select {
	case <-batchCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the batch's context did not end when every call's context had")
	}
	if res := <-b; !errors.Is(res.err, errAbandoned) {
		t.Fatalf("the second cancelled call returned (%q, %v), want the abandoned error", res.res, res.err)
	}
	r.release()
}

func TestBatchErrorReachesEveryCall(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		set  func(*recorder)
		want func(error) bool
	}{
		{"the batch's error", func(r *recorder) { r.err = boom }, func(err error) bool { return errors.Is(err, boom) }},
		{"a result missing", func(r *recorder) { r.short = true }, func(err error) bool {
			return err != nil && err.Error() == "coalesce: a batch of 2 requests returned 1 results"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRecorder(true)
			g := New(r.run, 10, 1, abandon)
			bg := context.Background()
			calls := queueBehind(t, g, r, bg, bg)
			c.set(r)
			r.release()
			r.release()
			for i, ch := range calls {
				if res := <-ch; i > 0 && !c.want(res.err) {
					t.Fatalf("call %d returned (%q, %v), want %s", i, res.res, res.err, c.name)
				}
			}
		})
	}
}

func TestCancelledBeforeCallDoesNothing(t *testing.T) {
	r := newRecorder(false)
	g := New(r.run, 10, 1, abandon)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Do(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with an ended context returned %v, want context.Canceled", err)
	}
	if got := r.got(); len(got) != 0 {
		t.Fatalf("batches %v, want none", got)
	}
}

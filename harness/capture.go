package harness

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
)

// CaptureTB is a rapid.TB that records a failure instead of failing the test
// that owns it. The mutant tests run a property with it and assert that it
// failed: a broken store that passes is the test's failure.
type CaptureTB struct {
	name   string
	mu     sync.Mutex
	failed bool
	log    strings.Builder
}

// NewCaptureTB returns a CaptureTB reporting the given test name (rapid
// names its failfiles after it).
func NewCaptureTB(name string) *CaptureTB { return &CaptureTB{name: name} }

func (c *CaptureTB) Helper()                         {}
func (c *CaptureTB) Name() string                    { return c.name }
func (c *CaptureTB) Logf(format string, args ...any) { c.write(fmt.Sprintf(format, args...)) }
func (c *CaptureTB) Log(args ...any)                 { c.write(fmt.Sprintln(args...)) }
func (c *CaptureTB) Skipf(format string, args ...any) {
	c.write("skip: " + fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (c *CaptureTB) Skip(args ...any) { c.Skipf("%s", fmt.Sprint(args...)) }
func (c *CaptureTB) SkipNow()         { runtime.Goexit() }
func (c *CaptureTB) Errorf(format string, args ...any) {
	c.write(fmt.Sprintf(format, args...))
	c.Fail()
}
func (c *CaptureTB) Error(args ...any) { c.Errorf("%s", fmt.Sprint(args...)) }
func (c *CaptureTB) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	c.FailNow()
}
func (c *CaptureTB) Fatal(args ...any) { c.Fatalf("%s", fmt.Sprint(args...)) }

// FailNow marks the failure and ends the calling goroutine, so Run must be
// used to call into rapid.
func (c *CaptureTB) FailNow() {
	c.Fail()
	runtime.Goexit()
}
func (c *CaptureTB) Fail() {
	c.mu.Lock()
	c.failed = true
	c.mu.Unlock()
}

// Failed reports whether anything failed.
func (c *CaptureTB) Failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// Output returns everything logged.
func (c *CaptureTB) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

func (c *CaptureTB) write(s string) {
	c.mu.Lock()
	c.log.WriteString(strings.TrimRight(s, "\n") + "\n")
	c.mu.Unlock()
}

// Run calls f on a new goroutine and waits for it, so that FailNow and
// SkipNow (runtime.Goexit) end f and not the caller.
func (c *CaptureTB) Run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

package harness

import "testing"

// scopedTB hands a store factory a testing.TB whose cleanups run when one
// property check ends rather than when the whole test does, so a thousand
// checks do not keep a thousand databases open.
type scopedTB struct {
	testing.TB
	cleanups []func()
}

func (s *scopedTB) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *scopedTB) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

package storeproto

import "time"

// SetTimeout sets how long c waits for a silent store from now on: a test
// of the silence guard opens with the default patience, then shortens it
// for a request the store will never answer.
func SetTimeout(c *Conn, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timeout = d
}

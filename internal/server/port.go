// Package server starts database servers of a caller's own on free
// loopback ports, for checks that crash and restart their database: never
// the shared servers other checks use. A Redis server here; a PostgreSQL
// cluster in package impl/postgres/pgcluster.
package server

import (
	"fmt"
	"net"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

package pgcluster_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres/pgcluster"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/hang"
)

// TestStartAndRemove: a started cluster accepts connections with the
// settings it was given; after Crash and Start the same DSN reaches a new
// postmaster; removing it stops it and leaves no directory behind.
func TestStartAndRemove(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		if pgtest.Required() {
			t.Fatalf("no PostgreSQL server binaries (%v); under CI they are installed", err)
		}
		t.Skipf("NO POSTGRESQL SERVER BINARIES: %v", err)
	}
	c, err := pgcluster.Start(pgcluster.Options{Durable: true, MaxConnections: 42, Settings: []string{"autovacuum_naptime=7"}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		c.Remove()
		t.Fatalf("connect to the cluster: %v", err)
	}
	var got []string
	rows, err := conn.Query(ctx, "SELECT name || '=' || setting FROM pg_settings WHERE name IN ('fsync', 'max_connections', 'autovacuum', 'autovacuum_naptime') ORDER BY name")
	if err == nil {
		for rows.Next() {
			var s string
			rows.Scan(&s)
			got = append(got, s)
		}
		err = rows.Err()
	}
	conn.Close(ctx)
	if want := "autovacuum=on autovacuum_naptime=7 fsync=on max_connections=42"; err != nil || strings.Join(got, " ") != want {
		t.Errorf("settings = %q, %v; want %q", got, err, want)
	}
	// A crash and a start: the same DSN reaches a new postmaster.
	before, err := c.PID()
	if err != nil {
		c.Remove()
		t.Fatalf("PID: %v", err)
	}
	if err := c.Crash(); err != nil {
		c.Remove()
		t.Fatalf("Crash: %v", err)
	}
	if _, err := c.PID(); err == nil {
		c.Remove()
		t.Fatal("postmaster.pid is still there after Crash")
	}
	if err := c.Start(); err != nil {
		c.Remove()
		t.Fatalf("Start after Crash: %v", err)
	}
	after, err := c.PID()
	if err != nil || after == before {
		t.Errorf("postmaster after the restart = %d, %v; before it %d: want a new one", after, err, before)
	}
	if conn, err := pgx.Connect(ctx, c.DSN()); err != nil {
		t.Errorf("connect after the restart: %v", err)
	} else {
		conn.Close(ctx)
	}
	if err := c.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory %s is still there (%v)", c.Dir(), err)
	}
	if _, err := pgx.Connect(ctx, c.DSN()); err == nil {
		t.Errorf("the removed cluster still accepts connections on %s", c.DSN())
	}
}

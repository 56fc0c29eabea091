package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/hang"
)

// TestPrivateCluster: with no DSN configured, DSN's server is a private
// cluster that accepts connections, and removing it stops it and leaves no
// directory behind.
func TestPrivateCluster(t *testing.T) {
	if _, err := binDir(); err != nil {
		if Required() {
			t.Fatalf("no PostgreSQL server binaries (%v); under CI they are installed", err)
		}
		t.Skipf("NO POSTGRESQL SERVER BINARIES: %v", err)
	}
	c, err := startPrivate()
	if err != nil {
		t.Fatalf("startPrivate: %v", err)
	}
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		c.remove()
		t.Fatalf("connect to the private cluster: %v", err)
	}
	var one int
	err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	conn.Close(ctx)
	if err != nil || one != 1 {
		t.Errorf("SELECT 1 on the private cluster = %d, %v", one, err)
	}
	if err := c.remove(); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory %s is still there (%v)", c.dir, err)
	}
	if _, err := pgx.Connect(ctx, c.DSN()); err == nil {
		t.Errorf("the removed cluster still accepts connections on %s", c.DSN())
	}
}

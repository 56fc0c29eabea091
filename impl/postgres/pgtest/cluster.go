package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres/pgcluster"
	"github.com/leasehold/leasehold/internal/hang"
)

// EnvBin names the directory holding initdb and pg_ctl for Cluster; default
// DefaultBin.
const EnvBin = pgcluster.EnvBin

// DefaultBin is where Debian's postgresql-15 package installs its server
// binaries.
const DefaultBin = pgcluster.DefaultBin

// Cluster is a PostgreSQL server of one test's own (a pgcluster.Cluster),
// for fault tests that stop, restart or crash their server: never the
// shared server of DSN. fsync is off unless ClusterOptions.Durable: a
// Cluster is for restarts and lost connections, not for durability across
// a power loss. Its methods fail the test they are given.
type Cluster struct {
	c *pgcluster.Cluster
}

// ClusterOptions configures NewClusterWith; the zero value is NewCluster's
// cluster.
type ClusterOptions = pgcluster.Options

// NewCluster initializes and starts a Cluster for t; it is stopped and
// removed when t ends. Without the binaries (EnvBin, default DefaultBin) it
// skips t, or fails it when Required.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	return NewClusterWith(t, ClusterOptions{})
}

// NewClusterWith is NewCluster with options.
func NewClusterWith(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c := newCluster(t, opts)
	if !opts.Initialized {
		c.initdb(t)
	}
	c.Start(t)
	return c
}

// InitDB initializes a data directory that no server runs on, removed when
// t ends: a template that clusters copy (ClusterOptions.Initialized), one
// initdb for many of them.
func InitDB(t testing.TB) string {
	t.Helper()
	c := newCluster(t, ClusterOptions{})
	c.initdb(t)
	return c.c.Data()
}

// newCluster finds the binaries and makes the cluster's directory, removed
// when t ends.
func newCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if _, err := pgcluster.BinDir(); err != nil {
		msg := fmt.Sprintf("NO POSTGRESQL SERVER BINARIES FOR THIS FAULT TEST: %v. It starts, stops and restarts a PostgreSQL server of its own "+
			"(never the shared one).", err)
		if Required() {
			t.Fatalf("%s (%s=1 or %s=true: a PostgreSQL suite may not skip)", msg, EnvRequire, EnvCI)
		}
		t.Skip(msg)
	}
	c, err := pgcluster.New(opts)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Remove(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return &Cluster{c}
}

func (c *Cluster) initdb(t testing.TB) {
	t.Helper()
	if err := c.c.InitDB(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// DSN is the connection string of the cluster's postgres database (user
// postgres, no password, plain TCP on loopback).
func (c *Cluster) DSN() string { return c.c.DSN() }

// Start starts the stopped cluster and waits until it accepts connections,
// on the port of its first start.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.c.Start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Log is the server's log so far.
func (c *Cluster) Log() string { return c.c.Log() }

// Stop shuts the cluster down in pg_ctl's fast mode: every session is
// terminated (its transaction rolled back), and the server exits once it
// has written a checkpoint.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.c.Stop(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Restart is Stop then Start, on the same port.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.Stop(t)
	c.Start(t)
}

// Conn opens a plain connection to the cluster (closed when t ends), for a
// test's own queries, such as pg_stat_activity.
func (c *Cluster) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN()+"&application_name=leasehold-pgtest")
	if err != nil {
		t.Fatalf("pgtest: connect to the cluster: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

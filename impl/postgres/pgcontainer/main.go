// Command pgcontainer starts PostgreSQL in a Docker container for
// leasehold's tests and prints the line that points them at it:
//
//	go run ./impl/postgres/pgcontainer   # prints export LEASEHOLD_PG_DSN='…'
//
// The container runs until the command is stopped (Ctrl-C or SIGTERM), which
// removes it; testcontainers' reaper removes it too if the command dies. It
// is a module of its own so that testcontainers and the Docker client are
// never a requirement of leasehold's library (docs/MODULES.md). Like the
// tests' own private cluster, the server runs with fsync=off: not for a test
// of durability across a server crash.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

func main() {
	image := flag.String("image", "postgres:16-alpine", "the PostgreSQL image to run")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, *image,
		tcpostgres.WithDatabase("leasehold"),
		tcpostgres.WithUsername("leasehold"),
		tcpostgres.WithPassword("leasehold"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgcontainer: starting %s failed: %v\n(is a Docker engine running and reachable? `docker info` says)\n", *image, err)
		if ctr != nil {
			testcontainers.TerminateContainer(ctr)
		}
		os.Exit(1)
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgcontainer: the container's connection string: %v\n", err)
		testcontainers.TerminateContainer(ctr)
		os.Exit(1)
	}
	fmt.Printf("export LEASEHOLD_PG_DSN='%s'\n", dsn)
	fmt.Fprintln(os.Stderr, "pgcontainer: PostgreSQL runs until this command stops (Ctrl-C); run the export line above in the shell of your tests")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	if err := testcontainers.TerminateContainer(ctr); err != nil {
		fmt.Fprintf(os.Stderr, "pgcontainer: removing the container: %v\n", err)
		os.Exit(1)
	}
}

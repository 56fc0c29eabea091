// Command leasehold runs leasehold's demo, checks and tools.
//
//	leasehold demo [--dir DIR]     the companion example on a fresh SQLite file
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

const usage = `usage: leasehold <command> [flags]

commands:
  demo      run the durable-job example on a fresh SQLite file
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ExitOnError)
		dir := fs.String("dir", "", "directory for demo.db (default: a temporary directory, removed afterwards)")
		fs.Parse(args)
		err = demo(ctx, os.Stdout, *dir)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "leasehold: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasehold:", err)
		os.Exit(1)
	}
}

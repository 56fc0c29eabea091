// Command leasehold runs leasehold's demo, checks and tools.
//
//	leasehold verify [--store S] [--budget D]  every check (the main job)
//	leasehold verify --store-cmd CMD           the checks on a store in any language (docs/PROTOCOL.md)
//	leasehold doctor --sqlite F | --dsn D      diagnose (and --repair) a live database
//	leasehold demo [--dir DIR]                 the companion example on a fresh SQLite file
//	leasehold relay --sqlite FILE | --dsn DSN  publish the outbox to NATS JetStream
//	leasehold replay [FILE...]                 replay kept failing seeds (reports/failfiles)
//	leasehold lincheck FILE                    re-check a recorded history
//	leasehold scenario run FILE|DIR...         play race scenarios against a store
//	leasehold bench [--quick]                  leasehold vs River vs the commit ceiling
//	leasehold testsum                          summarize `go test -json` (make test)
//	leasehold help [COMMAND]                   this help, or a command's
//
// Exit status: 0 on success, 1 when the command ran and failed (or could not
// complete), 2 on a usage error; verify also 3 for INCOMPLETE and 4 when
// its verdicts differ from --same-verdicts-as. -h prints a command's help
// and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	// usage is the synopsis line after "usage: leasehold ".
	usage string
	// help says what the command does, after the synopsis.
	help string
	// env lists the environment variables it reads, each with its meaning.
	env []string
	// flags defines the command's flags on fs and returns the function that
	// runs it with the positional arguments.
	flags func(fs *flag.FlagSet, o *streams) func(ctx context.Context, args []string) error
}

// streams is where a command writes.
type streams struct {
	out, err io.Writer
}

// usageError is a command line the command cannot run: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

var pgEnv = []string{
	"LEASEHOLD_PG_DSN   the PostgreSQL server, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"DATABASE_URL       used when LEASEHOLD_PG_DSN is unset",
}

// commands is every subcommand, in help order.
var commands []*command

func init() {
	commands = []*command{verifyCommand, doctorCommand, uiCommand, demoCommand, relayCommand, replayCommand, lincheckCommand, scenarioCommand, benchCommand, testsumCommand}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeHelp(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			writeHelp(stdout)
			return 0
		}
		if c := find(rest[0]); c != nil {
			writeCommandHelp(stdout, c, nil)
			return 0
		}
		fmt.Fprintf(stderr, "leasehold help: unknown command %q (commands: %s)\n", rest[0], names())
		return 2
	}
	c := find(name)
	if c == nil {
		fmt.Fprintf(stderr, "leasehold: unknown command %q (commands: %s); run leasehold help\n", name, names())
		return 2
	}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runFn := c.flags(fs, &streams{out: stdout, err: stderr})
	fs.Usage = func() {} // run prints the error and where to find the help
	err := fs.Parse(rest)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeCommandHelp(stdout, c, fs)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "leasehold %s: %v\nrun leasehold help %s\n", c.name, err, c.name)
		return 2
	}
	err = runFn(ctx, fs.Args())
	var ue usageError
	var es interface{ ExitStatus() int }
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "leasehold %s: %v\nrun leasehold help %s\n", c.name, ue.msg, c.name)
		return 2
	case errors.As(err, &es):
		fmt.Fprintf(stderr, "leasehold %s: %v\n", c.name, err)
		return es.ExitStatus()
	default:
		fmt.Fprintf(stderr, "leasehold %s: %v\n", c.name, err)
		return 1
	}
}

func find(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func names() string {
	var n []string
	for _, c := range commands {
		n = append(n, c.name)
	}
	return strings.Join(n, ", ")
}

func writeHelp(w io.Writer) {
	fmt.Fprint(w, "usage: leasehold <command> [flags] [arguments]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nenvironment:\n")
	for _, e := range pgEnv {
		fmt.Fprintf(w, "  %s\n", e)
	}
	fmt.Fprint(w, "\nleasehold help COMMAND (or leasehold COMMAND -h) lists a command's flags and environment.\n"+
		"Exit status: 0 success, 1 the command failed, 2 a usage error.\n")
}

// writeCommandHelp prints a command's synopsis, help, flags and
// environment. fs is nil when the flags are not defined yet.
func writeCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	if fs == nil {
		fs = flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs, &streams{out: io.Discard, err: io.Discard})
	}
	fmt.Fprintf(w, "usage: leasehold %s\n\n%s\n", c.usage, strings.TrimSpace(c.help))
	var any bool
	fs.VisitAll(func(*flag.Flag) { any = true })
	if any {
		fmt.Fprint(w, "\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if len(c.env) > 0 {
		fmt.Fprint(w, "\nenvironment:\n")
		for _, e := range c.env {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// noArgs refuses positional arguments for a command that takes none.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %q", args)
	}
	return nil
}

var demoCommand = &command{
	name:    "demo",
	summary: "run the durable-job example on a fresh SQLite file",
	usage:   "demo [--dir DIR]",
	help: `Reproduces the seed's companion example: one request sent twice with different proposed run
ids resolves to one run, which a worker claims at generation 1 and completes. It ends with
"created + replayed; generation=1; status=completed; events=2".`,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		dir := fs.String("dir", "", "directory for demo.db (default: a temporary directory, removed afterwards)")
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			return demo(ctx, o.out, *dir)
		}
	},
}

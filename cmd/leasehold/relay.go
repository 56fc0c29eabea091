package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/relay"
	"github.com/leasehold/leasehold/spec"
)

var relayCommand = &command{
	name:    "relay",
	summary: "publish a store's outbox to NATS JetStream (Nats-Msg-Id deduplication), marking messages delivered",
	usage:   "relay (--dsn DSN | --sqlite FILE) [--nats URL] [--stream NAME] [--subject-prefix P] [--batch N] [flags]",
	help: `Claims pending outbox messages, publishes each to PREFIX.SUBJECT with its message id as
Nats-Msg-Id, and marks delivered only what JetStream acknowledged. Run as many as you like: a
claim keeps relays off each other's batches, and a relay killed between its publish and its
mark has its batch taken again once its claim expires; JetStream's duplicate window drops the
repeat. The stream is created (file storage, the --duplicates window) unless --create-stream=false.

The stream holds each message once only if every republish falls within the duplicate window:
keep --duplicates longer than --claim plus the longest time no relay may run. Run the server
with jetstream { sync_interval: always } (nats-server 2.10+): with the default lazy fsync an
acknowledged publish can be lost on a power failure. Stops on an interrupt.`,
	env: pgEnv,
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		dsn := fs.String("dsn", "", "the PostgreSQL store's database (see LEASEHOLD_PG_DSN)")
		schema := fs.String("schema", postgres.DefaultSchema, "the PostgreSQL store's schema")
		path := fs.String("sqlite", "", "the SQLite store's database file")
		url := fs.String("nats", nats.DefaultURL, "the NATS server")
		stream := fs.String("stream", "LEASEHOLD_OUTBOX", "the JetStream stream the messages go to")
		prefix := fs.String("subject-prefix", "leasehold", "put before every subject (PREFIX.SUBJECT); \"\" for none")
		batch := fs.Int("batch", 100, "messages per claim (1-1000)")
		claim := fs.Duration("claim", 30*time.Second, "how long a claim holds its messages")
		duplicates := fs.Duration("duplicates", 10*time.Minute, "the stream's duplicate window, when the relay creates or updates it")
		create := fs.Bool("create-stream", true, "create or update the stream (file storage, PREFIX.> subjects)")
		tenant := fs.String("tenant", "", "relay only this tenant's messages (default: every tenant)")
		name := fs.String("name", "", "the relay's name in its claims (default: relay-HOST-PID)")
		once := fs.Bool("once", false, "relay until nothing is pending, then exit")
		verbose := fs.Bool("v", false, "log every retry")
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if (*dsn == "") == (*path == "") {
				return usagef("give exactly one store: --dsn for PostgreSQL or --sqlite for a SQLite file")
			}
			if *batch < 1 || *batch > spec.MaxBatch {
				return usagef("--batch %d: want 1 to %d", *batch, spec.MaxBatch)
			}
			if *claim < time.Millisecond || *duplicates <= *claim {
				return usagef("--claim %s, --duplicates %s: want a claim of at least 1ms and a duplicate window longer than it", *claim, *duplicates)
			}
			if *create && *prefix == "" {
				return usagef("--create-stream needs a --subject-prefix for the stream's subjects (PREFIX.>)")
			}
			level := slog.LevelInfo
			if *verbose {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(o.err, &slog.HandlerOptions{Level: level}))
			cfg := spec.DefaultConfig()
			cfg.MaxLeaseMs = max(cfg.MaxLeaseMs, claim.Milliseconds())
			var store spec.Store
			var err error
			if *dsn != "" {
				store, err = postgres.Open(ctx, *dsn, postgres.Options{Config: cfg, Schema: *schema, ApplicationName: "leasehold-relay",
					WaitForServer: time.Minute, Logger: log})
			} else {
				store, err = sqlite.Open(ctx, *path, sqlite.Options{Config: cfg, Logger: log})
			}
			if err != nil {
				return err
			}
			defer store.Close()
			nc, err := nats.Connect(*url, nats.MaxReconnects(-1), nats.Name("leasehold-relay"))
			if err != nil {
				return fmt.Errorf("connect to NATS at %s: %w", *url, err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			if *create {
				if _, err := relay.EnsureStream(ctx, js, relay.StreamSettings{Name: *stream, Subjects: []string{*prefix + ".>"},
					Duplicates: *duplicates}); err != nil {
					return fmt.Errorf("create stream %s: %w", *stream, err)
				}
			}
			r, err := relay.New(relay.Config{Store: store, JetStream: js, Stream: *stream, SubjectPrefix: *prefix, Name: *name,
				Tenant: *tenant, Batch: *batch, ClaimMs: claim.Milliseconds(), Logger: log})
			if err != nil {
				return usagef("%v", err)
			}
			if *once {
				for {
					n, err := r.Once(ctx)
					if err != nil {
						return err
					}
					if n == 0 {
						break
					}
				}
			} else if err := r.Run(ctx); err != nil {
				return err
			}
			st := r.Stats()
			fmt.Fprintf(o.out, "relay: %d published, %d duplicates dropped by the stream, %d marked delivered\n", st.Published, st.Duplicates, st.Marked)
			return nil
		}
	},
}

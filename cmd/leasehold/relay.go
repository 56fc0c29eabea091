package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
acknowledged publish can be lost on a power failure (powerloss/jetstream shows every message
acknowledged since the last flush gone). With --nats-monitor the relay reads the server's
setting from its monitoring endpoint at the start and warns when it is not always.

A NATS server that cannot be reached at the start (or a stream that cannot be created yet) is
tried again with capped backoff (from 100ms, doubling, up to 5s), each failure said on stderr;
once connected, the client reconnects on its own and failed publishes are tried again. The relay
exits only on a usage error or a signal (interrupt, SIGTERM), or with --once when nothing is
pending.`,
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
		monitor := fs.String("nats-monitor", "", "the NATS server's HTTP monitoring endpoint (nats-server -m PORT, e.g. http://127.0.0.1:8222), "+
			"read at the start to say whether the server flushes every publish (sync_interval: always)")
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
			// Refused now, not after waiting for NATS.
			if *prefix != "" {
				if err := spec.CheckSubject(*prefix); err != nil {
					return usagef("--subject-prefix %q: %v", *prefix, err)
				}
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
			var ensure func(context.Context, jetstream.JetStream) error
			if *create {
				ensure = func(ctx context.Context, js jetstream.JetStream) error {
					_, err := relay.EnsureStream(ctx, js, relay.StreamSettings{Name: *stream, Subjects: []string{*prefix + ".>"}, Duplicates: *duplicates})
					return err
				}
			}
			nc, js, err := dialNATS(ctx, *url, ensure, log, natsBackoff)
			if err != nil {
				return nil // the signal came while NATS was unreachable: nothing was relayed
			}
			defer nc.Close()
			if *monitor != "" {
				switch sync, err := relay.ReadServerSync(ctx, *monitor); {
				case err != nil:
					log.Warn("relay: cannot tell whether the server flushes every publish", "err", err)
				case sync.Durable():
					log.Info("relay: " + sync.String())
				default:
					log.Warn("relay: " + sync.String())
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

// natsBackoff bounds the waits between tries to reach NATS at the start.
var natsBackoff = backoff{base: 100 * time.Millisecond, cap: 5 * time.Second}

// backoff is a capped exponential backoff with the upper half jittered.
type backoff struct{ base, cap time.Duration }

// wait is the wait before try n+1.
func (b backoff) wait(n int) time.Duration {
	d := b.cap
	if n < 30 && b.base<<uint(n-1) < d {
		d = b.base << uint(n-1)
	}
	return d/2 + rand.N(d/2+1)
}

// dialNATS connects to url and, with ensure set, makes the stream ready,
// trying again with capped backoff while either fails, each failure logged,
// until both succeed or ctx ends (a signal; ctx's error is returned). The
// connection reconnects on its own once made (MaxReconnects -1).
func dialNATS(ctx context.Context, url string, ensure func(context.Context, jetstream.JetStream) error, log *slog.Logger, b backoff) (*nats.Conn, jetstream.JetStream, error) {
	for try := 1; ; try++ {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.Name("leasehold-relay"), nats.Timeout(5*time.Second))
		what := "NATS is not reachable at " + url
		var js jetstream.JetStream
		if err == nil {
			if js, err = jetstream.New(nc); err == nil && ensure != nil {
				what = "the stream cannot be created or updated on NATS at " + url
				ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = ensure(ectx, js)
				cancel()
			}
			if err == nil {
				if try > 1 {
					log.Info("relay: NATS is ready; relaying", "url", url, "tries", try)
				}
				return nc, js, nil
			}
			nc.Close()
		}
		wait := b.wait(try)
		log.Warn("relay: "+what+"; trying again", "in", wait.Round(time.Millisecond), "try", try, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		case <-t.C:
		}
	}
}

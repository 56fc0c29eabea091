package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/leasehold/leasehold/doctor"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/ui"
)

// uiTokenEnv holds the access token when --token is not given.
const uiTokenEnv = "LEASEHOLD_UI_TOKEN"

var uiCommand = &command{
	name:    "ui",
	summary: "a web page on a live database: runs by state per tenant, a run's timeline, cancel and replay, the doctor's findings",
	usage:   "ui (--sqlite FILE | --dsn DSN [--schema S]) [--listen HOST:PORT] [--actor NAME] [--token TOKEN]",
	help: `Serves an operator's view of a live leasehold database: a tenant's runs by state with live
counts, paged with ListRuns' cursor and filtered by state, operation and creation time; a run's
page with its timeline (attempts by generation, their lease windows and owners, the writes under
each, events), effect ledger rows and outbox messages; dead (failed) runs with the replay action;
cancel; and the doctor's findings. Every page is of one tenant; another tenant's run is not found.

It is read-only unless --actor NAME is given: then cancel and replay go through the store's own
guarded operations (Store.Cancel, Store.Replay) and are recorded with the actor in the
leasehold_doctor_audit table, as leasehold doctor's repairs are. Like the doctor it never creates
or migrates a database.

It refuses to listen on a non-loopback address without an access token (--token, or
LEASEHOLD_UI_TOKEN); with one, every request must carry it: open the address once with
?token=TOKEN (a cookie keeps it), or send Authorization: Bearer TOKEN. Actions are POSTs that
must come from its own pages (a CSRF token, and Go's cross-origin protection).`,
	env: []string{uiTokenEnv + " the access token when --token is not given"},
	flags: func(fs *flag.FlagSet, o *streams) func(context.Context, []string) error {
		sqlitePath := fs.String("sqlite", "", "the SQLite database `FILE` (must exist)")
		dsn := fs.String("dsn", "", "the PostgreSQL database, e.g. postgres://user@host:5432/db?sslmode=disable")
		schema := fs.String("schema", postgres.DefaultSchema, "the PostgreSQL schema holding leasehold's tables (with --dsn)")
		listen := fs.String("listen", "127.0.0.1:8427", "the address to serve on (`host:port`)")
		actor := fs.String("actor", "", "who acts, recorded in the audit trail; without it the UI is read-only")
		token := fs.String("token", "", "the access token every request must carry (default $"+uiTokenEnv+"); required off loopback")
		return func(ctx context.Context, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if (*sqlitePath == "") == (*dsn == "") {
				return usagef("give exactly one of --sqlite FILE and --dsn DSN")
			}
			if *token == "" {
				*token = os.Getenv(uiTokenEnv)
			}
			l, err := ui.Listen(*listen, *token)
			if err != nil {
				return err
			}
			var t *doctor.Target
			if *sqlitePath != "" {
				t, err = doctor.OpenSQLite(ctx, *sqlitePath)
			} else {
				t, err = doctor.OpenPostgres(ctx, *dsn, *schema)
			}
			if err != nil {
				l.Close()
				return err
			}
			defer t.Close()
			s, err := ui.New(ui.Options{Target: t, Actor: *actor, Token: *token})
			if err != nil {
				l.Close()
				return err
			}
			mode := "read-only (start with --actor NAME to act)"
			if *actor != "" {
				mode = "acting as " + *actor + ", audited in leasehold_doctor_audit"
			}
			fmt.Fprintf(o.err, "leasehold ui: serving http://%s/ (%s); interrupt to stop\n", l.Addr(), mode)
			srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-ctx.Done()
				shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(shut)
			}()
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
	},
}

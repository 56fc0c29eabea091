package storeproto_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/storeproto"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// goSQLite is leasehold's SQLite store served through the protocol, by
// this test binary as its child process: the whole proof must pass on it
// exactly as on the store itself, which shows that the protocol carries
// every check (clock readings, jitter draws, hooks and barriers, SQL).
var goSQLite = leaseholdtest.Store{Name: "go-sqlite-via-protocol", Factory: childCommand("sqlite").Factory()}

func TestProtocolConformance(t *testing.T) { leaseholdtest.Conformance(t, goSQLite) }

func TestProtocolProperty(t *testing.T) { leaseholdtest.Property(t, goSQLite) }

func TestProtocolLinearizable(t *testing.T) { leaseholdtest.Linearizability(t, goSQLite) }

func TestProtocolScenarios(t *testing.T) { leaseholdtest.Scenarios(t, goSQLite) }

// plainSQLite is the SQLite store served without its optional
// capabilities: it lists neither complete_batch nor create_runs.
var plainSQLite = leaseholdtest.Store{Name: "go-sqlite-plain-via-protocol", Factory: childCommand("sqlite_plain").Factory()}

// TestProtocolLinearizableWithoutBatches: the linearizability check runs
// on a store without the optional operations, leaving batches out of its
// workload (reported not applicable), instead of failing every history on
// the first batch.
func TestProtocolLinearizableWithoutBatches(t *testing.T) {
	if got := storetest.Describe(storetest.Declared(t, plainSQLite.Factory)); got != "hooks, sql" {
		t.Fatalf("the plain store offers %q, want %q", got, "hooks, sql")
	}
	leaseholdtest.Linearizability(t, plainSQLite)
}

// TestProtocolDeclaresCapabilities: what the served store declares reaches
// the Handle.
func TestProtocolDeclaresCapabilities(t *testing.T) {
	got := storetest.Describe(storetest.Declared(t, goSQLite.Factory))
	if want := "hooks, sql, complete_batch, create_runs, list_runs"; got != want {
		t.Errorf("the served SQLite store offers %q, want %q", got, want)
	}
}

// TestFindings: whatever a store process does wrong is a *Finding that
// says what, never a panic, a hang or a *spec.Error; and the finding is
// kept for the report.
func TestFindings(t *testing.T) {
	cases := []struct {
		mode string
		// atOpen: the finding comes from the open handshake.
		atOpen bool
		want   string // a regular expression the finding must match
	}{
		{"wrong_protocol", true, `speaks protocol 2; this harness speaks 1`},
		{"missing_op", true, `does not implement operation create_run \(Store.CreateRun\)`},
		{"unknown_capability", true, `unknown capability "telepathy"`},
		{"open_error", true, `refused to open: unavailable: no database for you`},
		{"garbage", false, `create_run #2\): not a protocol message .*"this is not JSON"`},
		{"unknown_id", false, `a reply to request 999, which is not in flight \(want in_reply_to 2\)`},
		{"hello_missing_field", true, `the open result is not a storeproto.Hello as docs/protocol/open.result.schema.json publishes it: field capabilities: missing`},
		{"bad_result", false, `create_run #2\): the result is not a spec.CreateRunResult as docs/protocol/create_run.result.schema.json publishes it: field extra: not a field`},
		{"missing_field", false, `create_run #2\): the result is not a spec.CreateRunResult as docs/protocol/create_run.result.schema.json publishes it: field run.fingerprint: missing`},
		{"null_field", false, `create_run #2\): the result is not a spec.CreateRunResult .*: field run.version: null where integer is required`},
		{"error_without_message", false, `the error is not a contract error .*docs/protocol/error.schema.json.*: field message: missing`},
		{"bad_code", false, `field code: "oops" is not one of "invalid_argument"`},
		{"bad_state", false, `field state: "finished" is not one of "queued"`},
		{"result_and_error", false, `exactly one of result, error and protocol_error`},
		{"protocol_error", false, `answered with a protocol error: I do not know create_run`},
		{"crash", false, `(?s)the store process ended while reading the reply \(exit status 3\).*about to crash on purpose`},
		{"half_line", false, `the output ended in the middle of a line`},
		{"silent", false, `create_run #2\): hung: waiting for a reply or a callback \(nothing after 300ms`},
		{"hook_ignored", false, `the hook failed at before_commit, so the store must roll back and answer unavailable; it answered success`},
		{"bad_callback", false, `unknown callback "teleport"`},
		{"bad_random", false, `callback "random" \(id 1\) wants params \{"n": n\} with n >= 1`},
		{"store_request", false, `the store sent a request \(op "snapshot"\)`},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			cmd := childCommand(c.mode)
			fs := &storeproto.Findings{}
			hook := func(context.Context, spec.Op, spec.HookPoint) error { return errors.New("injected") }
			sess := storeproto.Session{Database: t.TempDir(), Create: true, Config: spec.DefaultConfig(),
				Clock: clock.NewManual(1), Hook: hook}
			conn, err := cmd.Start(context.Background(), sess, fs)
			if !c.atOpen {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				defer conn.Close()
				if c.mode == "silent" {
					// The one case that must time out: the child, which
					// answered open, now never answers, so the guard fires
					// however loaded the machine (open had the patience).
					storeproto.SetTimeout(conn, 300*time.Millisecond)
				}
				_, err = storeproto.NewStore(conn).CreateRun(context.Background(), spec.CreateRunRequest{
					Tenant: "acme", Operation: "work", IdempotencyKey: "k", RunID: "r1", Payload: []byte(`{}`)})
			}
			var f *storeproto.Finding
			if !errors.As(err, &f) {
				t.Fatalf("want a *storeproto.Finding, got %T: %v", err, err)
			}
			var se *spec.Error
			if errors.As(err, &se) {
				t.Fatalf("a finding must not be a *spec.Error (a check could take it for an outcome): %v", err)
			}
			if !regexp.MustCompile(c.want).MatchString(err.Error()) {
				t.Fatalf("finding %q does not match %q", err, c.want)
			}
			if list := fs.List(); len(list) != 1 || list[0] != f {
				t.Fatalf("want exactly this finding kept, got %v", list)
			}
			if !c.atOpen {
				// Broken: the next request fails at once with the same finding.
				_, err2 := storeproto.NewStore(conn).GetRun(context.Background(), "acme", "r1")
				if !errors.As(err2, &f) {
					t.Fatalf("after a finding, want the connection broken, got %v", err2)
				}
			}
		})
	}
}

// TestReadMustNotReadTheClock: a read that calls back for the clock is a
// finding (reads never read it).
func TestReadMustNotReadTheClock(t *testing.T) {
	fs := &storeproto.Findings{}
	conn, err := childCommand("read_clock").Start(context.Background(), storeproto.Session{Database: t.TempDir(), Create: true,
		Config: spec.DefaultConfig()}, fs)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = storeproto.NewStore(conn).GetRun(context.Background(), "acme", "r1")
	if err == nil || !strings.Contains(err.Error(), `callback "now" (id 1) during get_run: a read (and open) must not read the clock`) {
		t.Fatalf("want the clock read of a read reported, got %v", err)
	}
}

// TestExitStatus: a store that exits non-zero after its input closes is a
// finding of Close.
func TestExitStatus(t *testing.T) {
	fs := &storeproto.Findings{}
	conn, err := childCommand("exit_1").Start(context.Background(), storeproto.Session{Database: t.TempDir(), Create: true,
		Config: spec.DefaultConfig()}, fs)
	if err != nil {
		t.Fatal(err)
	}
	_, err = storeproto.NewStore(conn).GetRun(context.Background(), "acme", "r1")
	if spec.CodeOf(err) != spec.CodeNotFound {
		t.Fatalf("want not_found, got %v", err)
	}
	err = conn.Close()
	if err == nil || !strings.Contains(err.Error(), "the store exited with exit status 1 after its input closed; want exit status 0") {
		t.Fatalf("want the exit status reported, got %v", err)
	}
}

// TestCancelledRequest: when the caller's context ends while the store is
// silent, the request's outcome is unknown, the process is stopped, and no
// finding is made (the harness stopped it, not the store).
func TestCancelledRequest(t *testing.T) {
	fs := &storeproto.Findings{}
	conn, err := childCommand("silent").Start(context.Background(), storeproto.Session{Database: t.TempDir(), Create: true,
		Config: spec.DefaultConfig()}, fs)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = storeproto.NewStore(conn).GetRun(ctx, "acme", "r1")
	if spec.CodeOf(err) != spec.CodeUnknownOutcome || !errors.Is(err, context.Canceled) {
		t.Fatalf("want unknown_outcome wrapping context.Canceled, got %v", err)
	}
	if n := len(fs.List()); n != 0 {
		t.Fatalf("want no finding for a request the harness cancelled, got %v", fs.List())
	}
}

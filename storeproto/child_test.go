package storeproto_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/storeproto"
)

// The test binary is its own store process: with envChild set, TestMain
// serves one session on stdin and stdout instead of running the tests.
const envChild = "STOREPROTO_TEST_CHILD"

// childCommand is the command that runs the test binary as a child in mode.
func childCommand(mode string) storeproto.Command {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return storeproto.Command{Line: envChild + "=" + report.ShellQuote(mode) + " exec " + report.ShellQuote(exe)}
}

// child runs the test binary as a store process and returns its exit status.
func child(mode string) int {
	if mode == "sqlite" || mode == "sqlite_plain" {
		open := serveSQLite
		if mode == "sqlite_plain" {
			open = servePlainSQLite
		}
		err := storeproto.Serve(context.Background(), os.Stdin, os.Stdout, open)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		return 0
	}
	return misbehave(mode)
}

// serveSQLite opens the SQLite store of the session's database directory.
func serveSQLite(ctx context.Context, s storeproto.Session) (storeproto.Served, error) {
	st, err := sqlite.Open(ctx, filepath.Join(s.Database, "leasehold.db"), sqlite.Options{
		Config: s.Config, Clock: s.Clock, Random: s.Random, Hook: s.Hook})
	if err != nil {
		return storeproto.Served{}, err
	}
	return storeproto.Served{Store: st, Name: "go-sqlite", Hooks: true, Layout: storeproto.LayoutTablePerRecord,
		Exec: func(ctx context.Context, q string) error { _, err := st.DB().ExecContext(ctx, q); return err }}, nil
}

// servePlainSQLite is serveSQLite without the optional capabilities
// (complete_batch, create_runs): a store that implements spec.Store only.
func servePlainSQLite(ctx context.Context, s storeproto.Session) (storeproto.Served, error) {
	served, err := serveSQLite(ctx, s)
	served.Store = struct{ spec.Store }{served.Store}
	return served, err
}

// allOps lists every operation of the table, as a store that implements
// them all says in its open reply.
func allOps() []string {
	var out []string
	for _, o := range spec.Operations() {
		out = append(out, string(o.Op))
	}
	return out
}

// misbehave is a store that answers open correctly (unless the mode is
// about open) and then misbehaves as mode says on its first operation.
func misbehave(mode string) int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	read := func() map[string]json.RawMessage {
		if !in.Scan() {
			os.Exit(0)
		}
		var m map[string]json.RawMessage
		json.Unmarshal(in.Bytes(), &m)
		return m
	}
	hello := map[string]any{"protocol": 1, "store": "misbehaving-" + mode, "operations": allOps(), "capabilities": []string{"hooks"}}
	switch mode {
	case "wrong_protocol":
		hello["protocol"] = 2
	case "missing_op":
		hello["operations"] = allOps()[1:]
	case "unknown_capability":
		hello["capabilities"] = []string{"hooks", "telepathy"}
	case "hello_missing_field":
		delete(hello, "capabilities")
	}
	open := read()
	if mode == "open_error" {
		say(`{"in_reply_to":%s,"error":{"code":"unavailable","message":"no database for you"}}`, open["id"])
		return 0
	}
	b, _ := json.Marshal(hello)
	say(`{"in_reply_to":%s,"result":%s}`, open["id"], b)
	for {
		req := read()
		id := string(req["id"])
		switch mode {
		case "garbage":
			say("this is not JSON")
		case "unknown_id":
			say(`{"in_reply_to":999,"result":{}}`)
		case "bad_result":
			say(`{"in_reply_to":%s,"result":{"run":{"state":"queued"},"replayed":false,"extra":1}}`, id)
		case "missing_field":
			// A whole run but for its fingerprint: it would decode as "".
			say(`{"in_reply_to":%s,"result":{"run":{"tenant":"acme","run_id":"r1","operation":"work","state":"queued","version":1,"last_seq":1,"payload":"{}","max_attempts":3,"error_code":"","result":"","created_at":1,"deadline_at":2,"replay_of":"","replay_depth":0},"replayed":false}}`, id)
		case "null_field":
			say(`{"in_reply_to":%s,"result":{"run":{"tenant":"acme","run_id":"r1","operation":"work","state":"queued","version":null,"last_seq":1,"payload":"{}","fingerprint":"fp1:x","max_attempts":3,"error_code":"","result":"","created_at":1,"deadline_at":2,"replay_of":"","replay_depth":0},"replayed":false}}`, id)
		case "error_without_message":
			say(`{"in_reply_to":%s,"error":{"code":"not_found"}}`, id)
		case "bad_code":
			say(`{"in_reply_to":%s,"error":{"code":"oops","message":"made up"}}`, id)
		case "bad_state":
			say(`{"in_reply_to":%s,"error":{"code":"already_terminal","state":"finished","message":"made up"}}`, id)
		case "result_and_error":
			say(`{"in_reply_to":%s,"result":{},"error":{"code":"not_found","message":"x"}}`, id)
		case "protocol_error":
			say(`{"in_reply_to":%s,"protocol_error":"I do not know create_run"}`, id)
		case "crash":
			fmt.Fprintln(os.Stderr, "store: about to crash on purpose")
			os.Exit(3)
		case "half_line":
			fmt.Fprint(out, `{"in_reply_to":`)
			out.Flush()
			return 0
		case "silent":
			time.Sleep(time.Hour)
		case "hook_ignored":
			say(`{"id":1,"call":"hook","params":{"op":"create_run","point":"before_commit"}}`)
			read()
			say(`{"in_reply_to":%s,"result":{"run":{"tenant":"acme","run_id":"r1","operation":"work","state":"queued","version":1,"last_seq":1,"payload":"{}","fingerprint":"fp1:x","max_attempts":3,"error_code":"","result":"","created_at":1,"deadline_at":2,"replay_of":"","replay_depth":0},"replayed":false}}`, id)
		case "read_clock":
			say(`{"id":1,"call":"now"}`)
			read()
		case "bad_callback":
			say(`{"id":1,"call":"teleport"}`)
		case "bad_random":
			say(`{"id":1,"call":"random","params":{"n":0}}`)
		case "store_request":
			say(`{"id":1,"op":"snapshot","params":{}}`)
		case "after_commit:unknown_outcome", "after_commit:unavailable", "after_commit:success", "after_commit:not_found":
			// The hook fails at after_commit (the session's hook fails
			// everywhere), then the store answers as mode says.
			say(`{"id":1,"call":"hook","params":{"op":"create_run","point":"after_commit"}}`)
			read()
			if answer := strings.TrimPrefix(mode, "after_commit:"); answer == "success" {
				say(`{"in_reply_to":%s,"result":{"run":{"tenant":"acme","run_id":"r1","operation":"work","state":"queued","version":1,"last_seq":1,"payload":"{}","fingerprint":"fp1:x","max_attempts":3,"error_code":"","result":"","created_at":1,"deadline_at":2,"replay_of":"","replay_depth":0},"replayed":false}}`, id)
			} else {
				say(`{"in_reply_to":%s,"error":{"code":%q,"message":"answered by the broken child"}}`, id, answer)
			}
		case "exit_1":
			say(`{"in_reply_to":%s,"error":{"code":"not_found","message":"run r1 not found"}}`, id)
			in.Scan()
			os.Exit(1)
		}
	}
}

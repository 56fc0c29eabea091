package httpadmit_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/httpadmit"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// TestBusyStoreAnswersInBoundedTime: while another connection holds the
// SQLite database's write lock, an admission gets 503 with Retry-After once
// the handler's Timeout (injected small) has passed, though the store itself
// would wait for the lock for ten minutes; nothing was admitted, and the
// same request, retried once the lock is released, is created. The test
// waits on events (the lock taken, the response); the client's two-minute
// bound only guards against a hang, which is what a handler without the
// timeout would do here.
func TestBusyStoreAnswersInBoundedTime(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	store, err := sqlite.Open(ctx, path, sqlite.Options{Config: testConfig(), BusyTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	keys, err := httpadmit.NewAPIKeys(map[string]string{apiKeyA: tenantA})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpadmit.New(httpadmit.Config{Store: store, Operation: op, Auth: keys, Timeout: 50 * time.Millisecond, RetryAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// Another connection pool on the file (as another process would be)
	// takes the write lock and holds it.
	holder, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}

	busy := doAt(t, srv.URL, post(`"k-busy"`, order), &syncBuffer{})
	p := wantProblem(t, busy, http.StatusServiceUnavailable, httpadmit.TypeUnavailable, "", string(spec.CodeUnavailable))
	if got := busy.header.Get("Retry-After"); got != "2" {
		t.Fatalf("Retry-After %q, want \"2\"", got)
	}
	if !strings.Contains(p.Detail, "did not answer within 50ms") {
		t.Fatalf("detail %q: want it to say the store did not answer within the timeout", p.Detail)
	}

	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	wantCreated(t, doAt(t, srv.URL, post(`"k-busy"`, order), &syncBuffer{}), false)
}

// TestTimeoutRefused: a negative Timeout is a configuration error.
func TestTimeoutRefused(t *testing.T) {
	keys, _ := httpadmit.NewAPIKeys(map[string]string{apiKeyA: tenantA})
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), sqlite.Options{Config: testConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := httpadmit.Config{Store: store, Operation: op, Auth: keys}
	if _, err := httpadmit.New(cfg); err != nil {
		t.Fatalf("the default Timeout: %v", err)
	}
	cfg.Timeout = -time.Second
	if _, err := httpadmit.New(cfg); err == nil || !strings.Contains(err.Error(), "Config.Timeout") {
		t.Fatalf("a negative Timeout: %v, want an error naming Config.Timeout", err)
	}
}

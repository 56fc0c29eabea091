// Command httpservice is a small HTTP service on leasehold: it accepts
// orders idempotently and charges them with a worker.
//
//	HTTPSERVICE_API_KEYS='sk_test_shop_0123456789=shop' go run ./examples/httpservice -addr localhost:8080
//	curl -i -X POST localhost:8080/orders -H 'Authorization: Bearer sk_test_shop_0123456789' \
//	     -H 'Idempotency-Key: "order-1"' -d '{"amount":1200,"currency":"EUR"}'
//	curl -i localhost:8080/orders/<run_id> -H 'Authorization: Bearer sk_test_shop_0123456789'
//
// The HTTP edge is package httpadmit. POST /orders admits the order as a run
// for the tenant of the caller's API key, and writes the order's row in the
// same transaction (Orders: the order and its charge commit together or not
// at all, so no crash between them can leave one without the other): 201 with
// Location; the same Idempotency-Key with the same order returns the
// original 201 and body again, marked "Idempotent-Replayed: true", however
// often the client retries; the same key with another order is 422; a retry
// while the first request is still being admitted is 409; errors are
// application/problem+json naming the field at fault. GET /orders/{id}
// shows the run as it is now, to its own tenant only (another tenant's run
// is 404). The key is the draft's quoted form ("order-1") or bare (order-1).
//
// API keys come from -api-keys or, when that is empty, HTTPSERVICE_API_KEYS:
// comma-separated key=tenant pairs (keys of at least 16 characters); the
// worker serves every tenant named there.
//
// A worker (package worker) runs each order once per attempt and charges it
// through the effect ledger (Job.Effect), so a crash, a lost lease or a
// retry never charges twice. SIGINT or SIGTERM shuts the server and the
// worker down gracefully.
//
// The store is SQLite (a file; -db). On PostgreSQL, Orders would begin a
// pgx.Tx and admit with postgres.Store.CreateRunTx; the rest is the same
// (and the worker also wakes on LISTEN/NOTIFY).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/httpadmit"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// operation is the run operation of an order.
const operation = "charge_order"

// Config is the store policy: one operation, "charge_order".
func Config() spec.Config {
	cfg := spec.DefaultConfig()
	cfg.Operations = map[string]spec.OperationPolicy{
		operation: {SchemaVersion: 1, DefaultMaxAttempts: 5, MaxMaxAttempts: 10, DefaultTimeoutMs: 3_600_000, MaxTimeoutMs: 86_400_000},
	}
	return cfg
}

// Orders is the store the HTTP edge admits through: its CreateRun writes
// the order's row and admits the order's charge in one transaction of the
// store's (sqlite.Store.BeginTx, CreateRunTx). The order and its run commit
// together or not at all: a crash, or a failed write of the row, between
// the two is impossible by construction. A replay of the Idempotency-Key
// returns the original run and writes no second row.
type Orders struct {
	*sqlite.Store
}

// createOrders is the application's own table: one row per admitted order.
const createOrders = `CREATE TABLE IF NOT EXISTS orders (
	tenant TEXT NOT NULL, run_id TEXT NOT NULL, amount INTEGER NOT NULL, currency TEXT NOT NULL,
	PRIMARY KEY (tenant, run_id))`

// OpenOrders creates the orders table beside the store's.
func OpenOrders(ctx context.Context, s *sqlite.Store) (Orders, error) {
	if _, err := s.DB().ExecContext(ctx, createOrders); err != nil {
		return Orders{}, fmt.Errorf("create the orders table: %w", err)
	}
	return Orders{s}, nil
}

// CreateRun implements spec.Store: the order's run and its row, in one
// transaction. A refused admission (a reused key, say) writes neither.
func (o Orders) CreateRun(ctx context.Context, req spec.CreateRunRequest) (spec.CreateRunResult, error) {
	tx, err := o.BeginTx(ctx)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	defer tx.Rollback()
	res, err := o.CreateRunTx(ctx, tx, req)
	if err != nil || res.Replayed {
		return res, err // a replay wrote nothing: its order row is there
	}
	var ord order
	if err := json.Unmarshal(req.Payload, &ord); err != nil {
		return spec.CreateRunResult{}, spec.Errorf(spec.CodeInvalidArgument, "order: %v", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (tenant, run_id, amount, currency) VALUES (?, ?, ?, ?)`,
		req.Tenant, res.Run.ID, ord.Amount, ord.Currency); err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable,
			Message: "the order's row could not be written, so neither it nor its run was committed; retry", Err: err}
	}
	if err := tx.Commit(); err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "the order's transaction did not commit; retry", Err: err}
	}
	return res, nil
}

// Service is the HTTP edge: httpadmit's handlers for charge_order.
type Service struct {
	Store spec.Store
	// Auth decides each request's tenant (httpadmit.NewAPIKeys in main).
	Auth   httpadmit.Authenticator
	Logger *slog.Logger
}

// Routes returns the service's handler: POST /orders admits an order, GET
// /orders/{id} shows one.
func (s *Service) Routes() (http.Handler, error) {
	h, err := httpadmit.New(httpadmit.Config{Store: s.Store, Operation: operation, Auth: s.Auth,
		Payload: orderPayload, RunID: newRunID, Logger: s.Logger})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", h)
	mux.Handle("GET /orders/{id}", h.Status("id"))
	return mux, nil
}

// orderPayload refuses an order the worker could never charge, naming the
// field, before it becomes a run.
func orderPayload(_ *http.Request, body []byte) ([]byte, error) {
	var o order
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, &httpadmit.FieldError{Field: "body", Detail: "send a JSON object {\"amount\": <cents>, \"currency\": \"EUR\"}"}
	}
	if o.Amount <= 0 {
		return nil, &httpadmit.FieldError{Field: "/amount", Detail: "amount must be a positive number of cents"}
	}
	if len(o.Currency) != 3 {
		return nil, &httpadmit.FieldError{Field: "/currency", Detail: "currency must be a 3-letter ISO 4217 code"}
	}
	return body, nil
}

func newRunID(*http.Request) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "ord_" + hex.EncodeToString(b[:]), nil
}

// parseAPIKeys reads comma-separated key=tenant pairs.
func parseAPIKeys(s string) (map[string]string, error) {
	keys := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		key, tenant, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || key == "" || tenant == "" {
			return nil, errors.New("API keys: want comma-separated key=tenant pairs, e.g. HTTPSERVICE_API_KEYS='sk_test_shop_0123456789=shop'")
		}
		if _, dup := keys[key]; dup {
			return nil, fmt.Errorf("API keys: a key of tenant %q is listed twice", tenant)
		}
		keys[key] = tenant
	}
	return keys, nil
}

// order is the payload of a charge_order run.
type order struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// ChargeHandler runs one attempt of a charge_order run: a bad order fails
// the run at once; the charge goes through the effect ledger under a key
// derived from the run, so every attempt of the run uses the same one.
func ChargeHandler(p *Payments) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, job *worker.Job) ([]byte, error) {
		var o order
		if err := json.Unmarshal(job.Payload, &o); err != nil || o.Amount <= 0 || len(o.Currency) != 3 {
			return nil, worker.Terminal("invalid_order", fmt.Errorf("order %s: want a positive amount and a 3-letter currency", job.RunID))
		}
		ref, err := job.Effect(ctx, worker.Effect{Step: "charge", Key: "charge/" + job.RunID,
			Call: func(_ context.Context, req worker.EffectRequest) (string, error) {
				return p.Charge(req.Key, req.Generation, o)
			},
			Status: func(_ context.Context, req worker.EffectRequest) (worker.EffectStatus, error) {
				return p.Status(req.Key, req.Generation), nil
			},
		})
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"payment": ref})
	})
}

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	db := flag.String("db", filepath.Join(os.TempDir(), "leasehold-httpservice.db"), "SQLite database file")
	apiKeys := flag.String("api-keys", os.Getenv("HTTPSERVICE_API_KEYS"), "comma-separated key=tenant pairs (default $HTTPSERVICE_API_KEYS)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *db, *apiKeys, log); err != nil {
		log.Error("httpservice", "err", err)
		os.Exit(1)
	}
}

func run(addr, db, apiKeys string, log *slog.Logger) error {
	keys, err := parseAPIKeys(apiKeys)
	if err != nil {
		return err
	}
	auth, err := httpadmit.NewAPIKeys(keys)
	if err != nil {
		return err
	}
	tenants := slices.Sorted(maps.Values(keys))
	tenants = slices.Compact(tenants)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := sqlite.Open(ctx, db, sqlite.Options{Config: Config()})
	if err != nil {
		return err
	}
	defer store.Close()
	w, err := worker.New(worker.Config{Store: store, Tenants: tenants, Handler: ChargeHandler(&Payments{}),
		Concurrency: 4, Batch: worker.BatchPolicy{Size: 16}, Idle: 200 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	orders, err := OpenOrders(ctx, store)
	if err != nil {
		return err
	}
	routes, err := (&Service{Store: orders, Auth: auth, Logger: log}).Routes()
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: routes, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	log.Info("listening", "addr", addr, "db", db, "tenants", tenants)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		stop()
		<-done
		return err
	}
	return <-done
}

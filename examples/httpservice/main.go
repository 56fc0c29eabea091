// Command httpservice is a small HTTP service on leasehold: it accepts
// orders idempotently and charges them with a worker.
//
//	go run ./examples/httpservice -addr :8080
//	curl -i -X POST localhost:8080/orders -H 'Idempotency-Key: order-1' -d '{"amount":1200,"currency":"EUR"}'
//	curl -i localhost:8080/orders/<run_id>
//
// POST /orders admits the order as a run (Store.CreateRun): the same
// Idempotency-Key with the same body returns the original run (200, replayed
// true) however often the client retries; the same key with another body is
// 409 idempotency_conflict. A worker (package worker) runs each order once
// per attempt and charges it through the effect ledger (Job.Effect), so a
// crash, a lost lease or a retry never charges twice. SIGINT or SIGTERM
// shuts the server and the worker down gracefully.
//
// The store is SQLite (a file; -db); the same code runs on PostgreSQL with
// postgres.Open, where the worker also wakes on LISTEN/NOTIFY.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// tenant is this example's only tenant; a real service takes it from the
// authenticated caller, so that keys never cross tenants.
const tenant = "shop"

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

// Service is the HTTP edge.
type Service struct {
	Store spec.Store
}

// Routes returns the service's handler.
func (s *Service) Routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.createOrder)
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	return mux
}

// orderView is what the API shows of a run. It never echoes the idempotency key.
type orderView struct {
	RunID     string          `json:"run_id"`
	State     spec.RunState   `json:"state"`
	Replayed  bool            `json:"replayed,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	ErrorCode string          `json:"error_code,omitempty"`
}

func view(run spec.Run) orderView {
	v := orderView{RunID: run.ID, State: run.State, ErrorCode: run.ErrorCode}
	if run.Result != "" {
		v.Result = json.RawMessage(run.Result)
	}
	return v
}

func (s *Service) createOrder(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		writeError(w, http.StatusBadRequest, "missing_idempotency_key", "send an Idempotency-Key header; retry with the same key")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, spec.MaxPayloadBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "payload_too_large", "the order is over 64 KiB")
		return
	}
	// A fresh id per request: a replayed request returns the original run
	// whatever id it proposes.
	res, err := s.Store.CreateRun(r.Context(), spec.CreateRunRequest{Tenant: tenant, Operation: operation,
		IdempotencyKey: key, RunID: newRunID(), Payload: body})
	switch spec.CodeOf(err) {
	case "":
	case spec.CodeIdempotencyConflict:
		writeError(w, http.StatusConflict, string(spec.CodeIdempotencyConflict), "this Idempotency-Key was used for a different order; use a new key")
		return
	case spec.CodeInvalidArgument:
		writeError(w, http.StatusBadRequest, string(spec.CodeInvalidArgument), "the order or the key is not valid")
		return
	case spec.CodeUnavailable, spec.CodeUnknownOutcome:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, string(spec.CodeOf(err)), "retry with the same Idempotency-Key")
		return
	default:
		writeError(w, http.StatusInternalServerError, string(spec.CodeOf(err)), "")
		return
	}
	v := view(res.Run)
	v.Replayed = res.Replayed
	w.Header().Set("Location", "/orders/"+res.Run.ID)
	status := http.StatusAccepted
	if res.Replayed {
		status = http.StatusOK
	}
	writeJSON(w, status, v)
}

func (s *Service) getOrder(w http.ResponseWriter, r *http.Request) {
	run, err := s.Store.GetRun(r.Context(), tenant, r.PathValue("id"))
	switch spec.CodeOf(err) {
	case "":
		writeJSON(w, http.StatusOK, view(run))
	case spec.CodeNotFound, spec.CodeInvalidArgument:
		writeError(w, http.StatusNotFound, string(spec.CodeNotFound), "no such order")
	default:
		writeError(w, http.StatusServiceUnavailable, string(spec.CodeOf(err)), "")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

func newRunID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ord_" + hex.EncodeToString(b[:])
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
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *db, log); err != nil {
		log.Error("httpservice", "err", err)
		os.Exit(1)
	}
}

func run(addr, db string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := sqlite.Open(ctx, db, sqlite.Options{Config: Config()})
	if err != nil {
		return err
	}
	defer store.Close()
	w, err := worker.New(worker.Config{Store: store, Tenants: []string{tenant}, Handler: ChargeHandler(&Payments{}),
		Concurrency: 4, Batch: worker.BatchPolicy{Size: 16}, Idle: 200 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: (&Service{Store: store}).Routes(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	log.Info("listening", "addr", addr, "db", db)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		stop()
		<-done
		return err
	}
	return <-done
}

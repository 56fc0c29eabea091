package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/worker"
)

// Example runs the service against a throwaway SQLite file: a client sends
// one order twice with the same Idempotency-Key (one run), then reuses the
// key for another order (409), and the worker charges the order once.
func Example() {
	dir, _ := os.MkdirTemp("", "httpservice-example-")
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	store, err := sqlite.Open(ctx, filepath.Join(dir, "orders.db"), sqlite.Options{Config: Config()})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	payments := &Payments{}
	results := make(chan worker.Result, 1)
	w, err := worker.New(worker.Config{Store: store, Tenants: []string{tenant}, Handler: ChargeHandler(payments),
		Idle: 10 * time.Millisecond, OnResult: func(r worker.Result) { results <- r }})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	srv := httptest.NewServer((&Service{Store: store}).Routes())
	defer srv.Close()
	post := func(key, body string) (int, orderView) {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var v orderView
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &v)
		return resp.StatusCode, v
	}

	status, first := post("order-1", `{"amount": 1200, "currency": "EUR"}`)
	fmt.Println("first POST:", status, first.State, "replayed:", first.Replayed)
	status, again := post("order-1", `{"currency":"EUR","amount":1200}`) // same order, other key order
	fmt.Println("retried POST:", status, "replayed:", again.Replayed, "same run:", again.RunID == first.RunID)
	status, _ = post("order-1", `{"amount": 9900, "currency": "EUR"}`)
	fmt.Println("same key, other order:", status)

	r := <-results
	fmt.Println("worker:", r.Outcome, "at generation", r.Generation)
	resp, err := http.Get(srv.URL + "/orders/" + first.RunID)
	if err != nil {
		panic(err)
	}
	var v orderView
	_ = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	fmt.Println("GET:", v.State, string(v.Result))
	fmt.Println("charges taken:", payments.Calls())

	stop()
	<-stopped
	// Output:
	// first POST: 202 queued replayed: false
	// retried POST: 200 replayed: true same run: true
	// same key, other order: 409
	// worker: completed at generation 1
	// GET: completed {"payment":"pay_1"}
	// charges taken: 1
}

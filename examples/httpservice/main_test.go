package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/httpadmit"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/worker"
)

// Example runs the service against a throwaway SQLite file with two
// tenants' API keys: a client of shop sends one order twice with the same
// Idempotency-Key (one run, the original response replayed), reuses the key
// for another order (422) and sends an order the edge refuses (400 naming
// the field); the worker charges the order once; the other tenant cannot
// see it.
func Example() {
	dir, _ := os.MkdirTemp("", "httpservice-example-")
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	store, err := sqlite.Open(ctx, filepath.Join(dir, "orders.db"), sqlite.Options{Config: Config()})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	keys, err := parseAPIKeys("sk_test_shop_0123456789=shop,sk_test_other_0123456789=other")
	if err != nil {
		panic(err)
	}
	auth, err := httpadmit.NewAPIKeys(keys)
	if err != nil {
		panic(err)
	}
	payments := &Payments{}
	results := make(chan worker.Result, 1)
	w, err := worker.New(worker.Config{Store: store, Tenants: []string{"shop"}, Handler: ChargeHandler(payments),
		Idle: 10 * time.Millisecond, OnResult: func(r worker.Result) { results <- r }})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	orders, err := OpenOrders(ctx, store)
	if err != nil {
		panic(err)
	}
	routes, err := (&Service{Store: orders, Auth: auth}).Routes()
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(routes)
	defer srv.Close()
	call := func(method, path, apiKey, key, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	const shop, other = "sk_test_shop_0123456789", "sk_test_other_0123456789"

	first, firstBody := call("POST", "/orders", shop, `"order-1"`, `{"amount": 1200, "currency": "EUR"}`)
	var v httpadmit.RunView
	_ = json.Unmarshal(firstBody, &v)
	fmt.Println("first POST:", first.StatusCode, v.State)
	again, againBody := call("POST", "/orders", shop, `"order-1"`, `{"currency":"EUR","amount":1200}`) // same order, other key order
	fmt.Println("retried POST:", again.StatusCode, "replayed:", again.Header.Get(httpadmit.ReplayedHeader),
		"same body:", bytes.Equal(againBody, firstBody))
	reused, _ := call("POST", "/orders", shop, `"order-1"`, `{"amount": 9900, "currency": "EUR"}`)
	fmt.Println("same key, other order:", reused.StatusCode)
	bad, badBody := call("POST", "/orders", shop, `"order-2"`, `{"amount": 0, "currency": "EUR"}`)
	var p httpadmit.Problem
	_ = json.Unmarshal(badBody, &p)
	fmt.Println("invalid order:", bad.StatusCode, p.Field)

	r := <-results
	fmt.Println("worker:", r.Outcome, "at generation", r.Generation)
	got, gotBody := call("GET", first.Header.Get("Location"), shop, "", "")
	_ = json.Unmarshal(gotBody, &v)
	fmt.Println("GET:", got.StatusCode, v.State, string(v.Result))
	foreign, _ := call("GET", first.Header.Get("Location"), other, "", "")
	fmt.Println("GET as another tenant:", foreign.StatusCode)
	fmt.Println("charges taken:", payments.Calls())

	stop()
	<-stopped
	// Output:
	// first POST: 201 queued
	// retried POST: 201 replayed: true same body: true
	// same key, other order: 422
	// invalid order: 400 /amount
	// worker: completed at generation 1
	// GET: 200 completed {"payment":"pay_1"}
	// GET as another tenant: 404
	// charges taken: 1
}

func TestParseAPIKeys(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string // nil: an error
	}{
		{"k1=shop", map[string]string{"k1": "shop"}},
		{"k1=shop, k2=other", map[string]string{"k1": "shop", "k2": "other"}},
		{"", nil},
		{"k1", nil},
		{"k1=", nil},
		{"=shop", nil},
		{"k1=shop,k1=other", nil},
	}
	for _, tt := range tests {
		got, err := parseAPIKeys(tt.in)
		if (err == nil) != (tt.want != nil) || !maps.Equal(got, tt.want) {
			t.Errorf("parseAPIKeys(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

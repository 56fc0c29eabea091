package httpadmit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/httpadmit"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// ExampleNew mounts the admission and status handlers on a mux, in front of
// a SQLite store, with API-key authentication. A client sends one order,
// retries it (the original response, marked as a replay), reuses the key
// for another order (422), and reads the run's status.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "httpadmit-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := spec.DefaultConfig()
	cfg.Operations["charge_order"] = spec.OperationPolicy{SchemaVersion: 1, DefaultMaxAttempts: 5, MaxMaxAttempts: 10,
		DefaultTimeoutMs: 3_600_000, MaxTimeoutMs: 86_400_000}
	store, err := sqlite.Open(context.Background(), filepath.Join(dir, "runs.db"), sqlite.Options{Config: cfg})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	keys, err := httpadmit.NewAPIKeys(map[string]string{"sk_test_acme_0123456789": "acme"})
	if err != nil {
		panic(err)
	}
	h, err := httpadmit.New(httpadmit.Config{Store: store, Operation: "charge_order", Auth: keys})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", h)
	mux.Handle("GET /orders/{id}", h.Status("id"))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	call := func(method, path, key, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_acme_0123456789")
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

	first, firstBody := call("POST", "/orders", `"order-1"`, `{"amount":1200,"currency":"EUR"}`)
	fmt.Println("first:", first.StatusCode, first.Header.Get("Content-Type"))
	retry, retryBody := call("POST", "/orders", `"order-1"`, `{"currency":"EUR","amount":1200}`)
	fmt.Println("retry:", retry.StatusCode, httpadmit.ReplayedHeader+":", retry.Header.Get(httpadmit.ReplayedHeader),
		"same body:", bytes.Equal(firstBody, retryBody))
	reused, reusedBody := call("POST", "/orders", `"order-1"`, `{"amount":9900,"currency":"EUR"}`)
	var p httpadmit.Problem
	_ = json.Unmarshal(reusedBody, &p)
	fmt.Println("reused key:", reused.StatusCode, reused.Header.Get("Content-Type"), p.Code, p.Field)

	status, statusBody := call("GET", first.Header.Get("Location"), "", "")
	var v httpadmit.RunView
	_ = json.Unmarshal(statusBody, &v)
	fmt.Println("status:", status.StatusCode, v.State)
	// Output:
	// first: 201 application/json
	// retry: 201 Idempotent-Replayed: true same body: true
	// reused key: 422 application/problem+json idempotency_conflict Idempotency-Key
	// status: 200 queued
}

// ExampleParseKeyValue shows the two accepted forms of the header and a
// refused one.
func ExampleParseKeyValue() {
	for _, v := range []string{`"8e03978e-40d5"`, `8e03978e-40d5`, `"order-\"7\""`, `"a", "b"`} {
		key, err := httpadmit.ParseKeyValue(v)
		fmt.Printf("%-17s -> %q %v\n", v, key, err)
	}
	// Output:
	// "8e03978e-40d5"   -> "8e03978e-40d5" <nil>
	// 8e03978e-40d5     -> "8e03978e-40d5" <nil>
	// "order-\"7\""     -> "order-\"7\"" <nil>
	// "a", "b"          -> "" Idempotency-Key: the value is a list (a comma after the quoted key); send exactly one key
}

// ExampleFormatKey writes a key as the draft's quoted form, for a client.
func ExampleFormatKey() {
	v, err := httpadmit.FormatKey(`order-"7"`)
	fmt.Println(v, err)
	// Output: "order-\"7\"" <nil>
}

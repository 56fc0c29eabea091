package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/httpadmit"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// TestOrderAndRunCommitTogether: the service writes an order's row and
// admits its run in one transaction. When the row's write fails after the
// admission (a trigger refuses it, as a full disk or a bug would), neither
// commits: 503, no run, no row, and the retry with the same key, once the
// row can be written, creates both. Every run has its order row and every
// row its run, after each request. An application that commits the two
// apart (twoCommits) is caught by the same check.
func TestOrderAndRunCommitTogether(t *testing.T) {
	for _, c := range []struct {
		name   string
		broken bool
	}{{"order row and run in one transaction", false}, {"two commits (broken)", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "orders.db"), sqlite.Options{Config: Config()})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			orders, err := OpenOrders(ctx, store)
			if err != nil {
				t.Fatal(err)
			}
			var admit spec.Store = orders
			if c.broken {
				admit = twoCommits{orders}
			}
			auth, err := httpadmit.NewAPIKeys(map[string]string{"sk_test_shop_0123456789": "shop"})
			if err != nil {
				t.Fatal(err)
			}
			routes, err := (&Service{Store: admit, Auth: auth}).Routes()
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(routes)
			defer srv.Close()
			post := func(key, body string) int {
				req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk_test_shop_0123456789")
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			var problems []string
			check := func(after string, runs int) {
				t.Helper()
				got, err := orderProblems(ctx, store, runs)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range got {
					problems = append(problems, after+": "+p)
				}
			}
			exec := func(q string) {
				if _, err := store.DB().ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}

			if code := post(`"order-1"`, `{"amount": 1200, "currency": "EUR"}`); code != http.StatusCreated {
				t.Fatalf("first order: %d, want 201", code)
			}
			check("the first order", 1)
			if code := post(`"order-1"`, `{"currency":"EUR","amount":1200}`); code != http.StatusCreated {
				t.Fatalf("the first order again: %d, want 201 (replayed)", code)
			}
			check("the first order replayed", 1)
			exec(`CREATE TRIGGER refuse_orders BEFORE INSERT ON orders BEGIN SELECT RAISE(ABORT, 'orders refused'); END`)
			if code := post(`"order-2"`, `{"amount": 500, "currency": "EUR"}`); code != http.StatusServiceUnavailable {
				t.Fatalf("an order whose row cannot be written: %d, want 503", code)
			}
			check("an order whose row could not be written", 1)
			exec(`DROP TRIGGER refuse_orders`)
			if code := post(`"order-2"`, `{"amount": 500, "currency": "EUR"}`); code != http.StatusCreated {
				problems = append(problems, fmt.Sprintf("the order retried: %d, want 201", code))
			}
			check("the order retried", 2)

			switch {
			case !c.broken && len(problems) > 0:
				t.Errorf("order rows and runs apart: %v", problems)
			case c.broken && len(problems) == 0:
				t.Error("an application committing the order row and its run apart went unnoticed")
			case c.broken:
				t.Logf("the broken application is caught: %s", problems[0])
			}
		})
	}
}

// orderProblems lists every run without its order row and every order row
// without its run, and a number of runs other than want.
func orderProblems(ctx context.Context, s *sqlite.Store, want int) ([]string, error) {
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.DB().QueryContext(ctx, `SELECT tenant || '/' || run_id FROM orders`)
	if err != nil {
		return nil, err
	}
	var orderRows []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		orderRows = append(orderRows, k)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	var problems, runs []string
	for _, r := range snap.Runs {
		runs = append(runs, r.Tenant+"/"+r.ID)
		if !slices.Contains(orderRows, r.Tenant+"/"+r.ID) {
			problems = append(problems, fmt.Sprintf("run %s/%s has no order row", r.Tenant, r.ID))
		}
	}
	for _, k := range orderRows {
		if !slices.Contains(runs, k) {
			problems = append(problems, fmt.Sprintf("order row %s has no run", k))
		}
	}
	if len(runs) != want {
		problems = append(problems, fmt.Sprintf("%d runs, want %d", len(runs), want))
	}
	return problems, nil
}

// twoCommits is the broken application: it admits the run (its own
// commit), then writes the order row in a transaction of its own.
type twoCommits struct{ Orders }

func (o twoCommits) CreateRun(ctx context.Context, req spec.CreateRunRequest) (spec.CreateRunResult, error) {
	res, err := o.Store.CreateRun(ctx, req)
	if err != nil || res.Replayed {
		return res, err
	}
	if _, err := o.DB().ExecContext(ctx, `INSERT INTO orders (tenant, run_id, amount, currency) VALUES (?, ?, 0, 'EUR')`,
		req.Tenant, res.Run.ID); err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "the order's row", Err: err}
	}
	return res, nil
}

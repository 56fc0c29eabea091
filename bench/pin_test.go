package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/spec"
)

// scratchDatabase creates a database of t's own on the test server (the
// horizon is per database: another test's open transaction in the shared
// one would pin it too) and returns its DSN, its name and the admin
// connection.
func scratchDatabase(t *testing.T) (string, string, *server) {
	t.Helper()
	ctx := context.Background()
	pg, err := openServer(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "lh_bench_pin_" + hex.EncodeToString(b)
	if err := pg.recreate(ctx, name); err != nil {
		pg.close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.drop(context.Background(), name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		pg.close()
	})
	dsn, err := withDatabase(pgtest.DSN(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn, name, pg
}

// TestPinHoldsTheHorizon: with the horizon pinned for the whole drain,
// every claim steps over the claim-index entries of every job claimed
// before it (none can be marked dead), exactly as counted: a drain of N jobs
// in claims of B, one after another, reads at least N + B·C(C-1)/2 entries
// for C claims, and leaves the row versions it replaced; unpinned, the same
// drain reads less than half that. The pin is still held at the end.
func TestPinHoldsTheHorizon(t *testing.T) {
	ctx := context.Background()
	dsn, db, pg := scratchDatabase(t)
	const n, b = 1000, 50
	c := n / b
	reads := map[pinMode]claimCounters{}
	for _, pm := range []pinMode{pinNone, pinWhole} {
		schema := "bench_pin_" + string(pm)
		if pm == pinNone {
			schema += "none"
		}
		s, err := postgres.Open(ctx, dsn, postgres.Options{Config: config(), Schema: schema, MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := loadQueued(ctx, s.Pool(), 1, n); err != nil {
			t.Fatal(err)
		}
		target := leaseholdClaims(schema)
		before, err := readClaims(ctx, dsn, target)
		if err != nil {
			t.Fatal(err)
		}
		p, err := openPin(ctx, dsn, pm, n)
		if err != nil {
			t.Fatal(err)
		}
		for range c {
			ls, err := s.Claim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "w", LeaseMs: leaseMs, Limit: b})
			if err != nil || len(ls) != b {
				t.Fatalf("claim: %d leases, %v", len(ls), err)
			}
			var reqs []spec.CompleteRequest
			for _, l := range ls {
				reqs = append(reqs, spec.CompleteRequest{Lease: l.Ref()})
			}
			if _, err := s.CompleteBatch(ctx, reqs); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.held(ctx, pg.conn); err != nil {
			t.Errorf("%s: %v", pm.text(), err)
		}
		s.Close()
		p.release()
		if err := pg.awaitNoBackends(ctx, db); err != nil {
			t.Fatal(err)
		}
		after, err := readClaims(ctx, dsn, target)
		if err != nil {
			t.Fatal(err)
		}
		reads[pm] = claimCounters{indexReads: after.indexReads - before.indexReads, deadTuples: after.deadTuples}
		t.Logf("%s: %d claim-index entries read for %d jobs in %d claims, %d dead row versions", pm.text(), reads[pm].indexReads, n, c, after.deadTuples)
	}
	pinned, unpinned := reads[pinWhole], reads[pinNone]
	if least := int64(n + b*c*(c-1)/2); pinned.indexReads < least {
		t.Errorf("pinned: %d claim-index entries read, want at least %d (every claim steps over every earlier claim's entries)", pinned.indexReads, least)
	}
	if unpinned.indexReads*2 >= pinned.indexReads {
		t.Errorf("unpinned: %d claim-index entries read, want less than half the pinned drain's %d", unpinned.indexReads, pinned.indexReads)
	}
	if pinned.deadTuples != 2*n {
		t.Errorf("pinned: %d dead row versions at the end, want the claim's and the completion's old version of every job (%d): none can be pruned", pinned.deadTuples, 2*n)
	}
}

// TestPinGuards: a pin taken mid-drain is taken once half the jobs are
// completed, not before; a drain that ends before its pin was taken, or
// whose pin lost its session, fails the phase.
func TestPinGuards(t *testing.T) {
	ctx := context.Background()
	dsn, _, pg := scratchDatabase(t)

	mid, err := openPin(ctx, dsn, pinMid, 10)
	if err != nil {
		t.Fatal(err)
	}
	mid.progress(ctx, 4)
	if err := mid.held(ctx, pg.conn); err == nil || !strings.Contains(err.Error(), "ended before its snapshot was taken") {
		t.Errorf("a mid-drain pin not yet taken at 4 of 10: held = %v", err)
	}
	mid.progress(ctx, 5)
	if err := mid.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mid.held(ctx, pg.conn); err != nil {
		t.Errorf("a mid-drain pin taken at 5 of 10: %v", err)
	}
	mid.release()
	mid.release() // a second release is harmless (a phase's end and its defer)

	whole, err := openPin(ctx, dsn, pinWhole, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.release()
	if err := whole.held(ctx, pg.conn); err != nil {
		t.Fatalf("a whole-drain pin: %v", err)
	}
	if _, err := pg.conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, whole.pid); err != nil {
		t.Fatal(err)
	}
	var gone bool
	for !gone {
		if err := pg.conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, whole.pid).Scan(&gone); err != nil {
			t.Fatal(err)
		}
	}
	if err := whole.held(ctx, pg.conn); err == nil || !strings.Contains(err.Error(), "no longer holds the horizon") {
		t.Errorf("a pin whose session was terminated: held = %v", err)
	}

	if p, err := openPin(ctx, dsn, pinNone, 10); p != nil || err != nil {
		t.Errorf("pinNone: %v, %v; want no pin", p, err)
	}
	var none *pin
	none.progress(ctx, 10)
	if err := none.held(ctx, pg.conn); err != nil {
		t.Errorf("no pin: held = %v", err)
	}
	none.release()
}

// TestPinnedRatios: each system's pinned drain is divided by its own
// unpinned drain of the same round, and the goal is leasehold's share kept
// over the peer's, round by round (a round with a side missing is left
// out, the others stay paired); a noisy goal is not readable; the dead
// entries stepped over are printed beside; without pinned drains the
// goals say they were not measured.
func TestPinnedRatios(t *testing.T) {
	r := &Report{Mode: "full", PeerName: "River vX", Settings: Settings{Rounds: 3}}
	add := func(system, variant string, pm pinMode, rates, reads []float64) {
		for i, v := range rates {
			r.Drains = append(r.Drains, DrainResult{System: system, Store: "postgres", Variant: variant, Round: i + 1, Pin: string(pm), Jobs: 100,
				JobsPerSec: v, ClaimIndexReadsPerJob: reads[i]})
		}
	}
	add("leasehold", bestPG, pinNone, []float64{100, 200, 100}, []float64{2, 2, 2})
	add("River vX", "peer", pinNone, []float64{50, 50, 50}, []float64{3, 3, 3})
	add("leasehold", bestPG, pinWhole, []float64{80, 160, 90}, []float64{11, 12, 13}) // kept 0.8, 0.8, 0.9
	add("River vX", "peer", pinWhole, []float64{20, 20, 25}, []float64{40, 41, 42})   // kept 0.4, 0.4, 0.5
	add("leasehold", bestPG, pinMid, []float64{50, 200, 90}, []float64{5, 5, 5})      // kept 0.5, 1.0, 0.9
	add("River vX", "peer", pinMid, []float64{25, 25, 25}, []float64{9, 9, 9})        // kept 0.5, 0.5, 0.5
	r.computeRatios()
	byName := map[string]Ratio{}
	for _, x := range r.Ratios {
		byName[x.Name] = x
	}
	for _, tc := range []struct {
		name   string
		rounds []float64
		status string
		beside string
	}{
		{"leasehold drain, horizon pinned for the whole drain / unpinned", []float64{0.8, 0.8, 0.9}, "",
			"leasehold steps over 11.0 dead claim-index entries per claimed job pinned, 1.0 unpinned (medians)"},
		{"River vX drain, horizon pinned for the whole drain / unpinned", []float64{0.4, 0.4, 0.5}, "",
			"River vX steps over 40.0 dead claim-index entries per claimed job pinned, 2.0 unpinned (medians)"},
		{"leasehold / River vX: share of the unpinned drain kept, horizon pinned for the whole drain", []float64{2, 2, 1.8}, "met",
			"leasehold steps over 11.0 dead claim-index entries per claimed job pinned, 1.0 unpinned (medians), River vX steps over 40.0 dead claim-index entries per claimed job pinned, 2.0 unpinned (medians)"},
		{"leasehold / River vX: share of the unpinned drain kept, horizon pinned from the drain's midpoint", []float64{1, 2, 1.8}, "not readable",
			"leasehold steps over 4.0 dead claim-index entries per claimed job pinned, 1.0 unpinned (medians), River vX steps over 8.0 dead claim-index entries per claimed job pinned, 2.0 unpinned (medians)"},
	} {
		x, ok := byName[tc.name]
		if !ok {
			t.Errorf("no ratio %q", tc.name)
			continue
		}
		if x.Spread == nil || len(x.Spread.Rounds) != len(tc.rounds) {
			t.Errorf("%s: %+v; want rounds %v", tc.name, x, tc.rounds)
			continue
		}
		for i := range tc.rounds {
			if !near(x.Spread.Rounds[i], tc.rounds[i]) {
				t.Errorf("%s: rounds %v, want %v", tc.name, x.Spread.Rounds, tc.rounds)
				break
			}
		}
		if x.Status != tc.status || x.Beside != tc.beside {
			t.Errorf("%s: status %q, beside %q; want %q, %q", tc.name, x.Status, x.Beside, tc.status, tc.beside)
		}
	}

	// A round with the peer's pinned drain missing: the other two stay
	// paired with leasehold's rounds of the same number.
	r.Drains = slices.DeleteFunc(r.Drains, func(d DrainResult) bool { return d.System == "River vX" && d.Pin == "whole" && d.Round == 1 })
	r.Drains = append(r.Drains, DrainResult{System: "River vX", Store: "postgres", Variant: "peer", Round: 1, Pin: "whole", NotMeasured: "x"})
	slices.SortStableFunc(r.Drains, func(a, b DrainResult) int { return a.Round - b.Round })
	r.computeRatios()
	for _, x := range r.Ratios {
		if x.Name == "leasehold / River vX: share of the unpinned drain kept, horizon pinned for the whole drain" {
			if x.Spread == nil || !slices.Equal(x.Spread.Rounds, []float64{2, 1.8}) {
				t.Errorf("with round 1 of the peer's pinned drain missing: %+v; want rounds 2 and 1.8", x.Spread)
			}
		}
	}

	none := &Report{Mode: "full", PeerName: "River vX", Settings: Settings{Rounds: 3}}
	none.computeRatios()
	for _, g := range none.Goals {
		if strings.Contains(g.Goal, "share of the unpinned drain kept") && (g.Status != "not measured" || g.Detail != "not measured (--no-pin)") {
			t.Errorf("no pinned drains: %+v", g)
		}
	}
}

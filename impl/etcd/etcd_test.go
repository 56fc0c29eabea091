package etcd_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/impl/etcd"
	"github.com/leasehold/leasehold/impl/etcd/etcdtest"
	"github.com/leasehold/leasehold/leaseholdtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
}

// members is the size of the cluster every check runs on.
const members = 3

var prefixes atomic.Int64

// factory opens a fresh store per call: a new key prefix on the shared
// three-member cluster, each store with its own client. sharedLocks says
// whether the stores of one database queue their writers in process (as
// the scenarios' barriers need) or are each on their own, as if each ran
// in a process of its own (only the Txns' compares order them).
func factory(sharedLocks bool) leaseholdtest.Factory {
	return func(t testing.TB, opts leaseholdtest.Options) leaseholdtest.Handle {
		c := etcdtest.Shared(t, members)
		prefix := fmt.Sprintf("lh-%d-%d", os.Getpid(), prefixes.Add(1))
		open := func(t testing.TB, o leaseholdtest.Options) leaseholdtest.Contract {
			cli, err := c.Client()
			if err != nil {
				t.Fatalf("etcd client: %v", err)
			}
			s, err := etcd.Open(cli, prefix, etcd.Options{Config: o.Config, Clock: o.Clock, Random: o.Random, Hook: o.Hook, SharedLocks: sharedLocks})
			if err != nil {
				cli.Close()
				t.Fatalf("open etcd store: %v", err)
			}
			t.Cleanup(func() { cli.Close() })
			return s
		}
		s := open(t, opts)
		t.Cleanup(func() { dropPrefix(s.(*etcd.Store).Client(), prefix) })
		return leaseholdtest.Handle{
			Store:    s,
			Reopen:   func(t testing.TB) leaseholdtest.Contract { return open(t, opts) },
			OpenWith: func(t testing.TB, o leaseholdtest.Options) leaseholdtest.Contract { return open(t, o) },
			Caps:     leaseholdtest.Caps{Hooks: true, DatabaseClock: true},
		}
	}
}

// dropPrefix deletes a test database's keys.
func dropPrefix(cli *clientv3.Client, prefix string) {
	cli.Delete(context.Background(), prefix+"\x00", clientv3.WithPrefix())
}

func store(sharedLocks bool) leaseholdtest.Store {
	return leaseholdtest.Store{Name: "etcd", Factory: factory(sharedLocks)}
}

// TestConformance runs the conformance suite on a three-member cluster.
func TestConformance(t *testing.T) { leaseholdtest.Conformance(t, store(true)) }

// TestProperty runs rapid's model-vs-store property on the cluster. Every
// step is a few quorum round trips, so a round is 30 sequences here unless
// -rapid.checks (or RAPID_CHECKS) says otherwise; LEASEHOLD_BUDGET adds
// rounds as for the other stores.
func TestProperty(t *testing.T) {
	if fl := flag.Lookup("rapid.checks"); fl != nil && fl.Value.String() == fl.DefValue && os.Getenv("RAPID_CHECKS") == "" {
		flag.Set("rapid.checks", "30")
	}
	leaseholdtest.Property(t, store(true))
}

// TestLinearizable records concurrent histories with every client on a
// store of its own (no in-process queue: only the Txns' compares order
// them) and checks them against the model.
func TestLinearizable(t *testing.T) { leaseholdtest.Linearizability(t, store(false)) }

// TestScenarios plays the scenario corpus; its barriers hold an operation
// inside its transaction, which the in-process queue makes others wait for.
func TestScenarios(t *testing.T) { leaseholdtest.Scenarios(t, store(true)) }

// TestRuntime runs the worker runtime on the cluster, each worker's store
// on its own.
func TestRuntime(t *testing.T) { leaseholdtest.Runtime(t, store(false)) }

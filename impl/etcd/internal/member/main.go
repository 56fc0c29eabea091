// Command member runs one etcd member (embed.Etcd) for leasehold's tests
// and benchmarks, so that a test can SIGKILL it and start it again on its
// data directory. It prints "ready" on stdout once the member serves
// clients, and runs until it is killed.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	name := flag.String("name", "m0", "member name")
	dir := flag.String("dir", "", "data directory (kept across restarts)")
	client := flag.String("client", "http://127.0.0.1:2379", "client URL")
	peer := flag.String("peer", "http://127.0.0.1:2380", "peer URL")
	cluster := flag.String("cluster", "", "initial cluster (name=peer,...)")
	state := flag.String("state", "new", "initial cluster state: new or existing")
	quota := flag.Int64("quota", 2<<30, "backend quota, bytes")
	txnOps := flag.Uint("max-txn-ops", 16384, "operations per Txn")
	reqBytes := flag.Uint("max-request-bytes", 8<<20, "request size, bytes")
	tick := flag.Uint("tick-ms", 100, "heartbeat interval")
	election := flag.Uint("election-ms", 1000, "election timeout")
	flag.Parse()

	cu, err := url.Parse(*client)
	if err != nil {
		log.Fatal(err)
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		log.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *cluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = *name + "=" + *peer
	}
	cfg.ClusterState = *state
	cfg.InitialClusterToken = "leasehold-test"
	cfg.QuotaBackendBytes = *quota
	cfg.MaxTxnOps = *txnOps
	cfg.MaxRequestBytes = *reqBytes
	cfg.TickMs, cfg.ElectionMs = *tick, *election
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("member %s: %v", *name, err)
	}
	<-e.Server.ReadyNotify()
	fmt.Fprintln(os.Stdout, "ready")
	err = <-e.Err()
	log.Fatalf("member %s stopped: %v", *name, err)
}

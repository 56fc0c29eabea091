package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ServerSync is how a JetStream server flushes its store, as its monitoring
// endpoint's /varz says (jetstream.config.sync_interval and sync_always).
type ServerSync struct {
	Version string // the server's version
	// JetStream is false when the server runs without JetStream.
	JetStream bool
	// Always: sync_interval: always, every write flushed before the
	// publish is acknowledged.
	Always bool
	// Interval is how often the server flushes otherwise; 0 when /varz
	// names no interval (nats-server before 2.10, which has no setting).
	Interval time.Duration
}

// Durable reports whether a message the server acknowledged survives a
// power loss of its machine: only with sync_interval: always.
func (s ServerSync) Durable() bool { return s.JetStream && s.Always }

// String says how the server flushes and what that means for the relay.
func (s ServerSync) String() string {
	switch {
	case !s.JetStream:
		return fmt.Sprintf("nats-server %s runs without JetStream", s.Version)
	case s.Always:
		return fmt.Sprintf("nats-server %s flushes every write before acknowledging it (sync_interval: always): a delivered message survives a power loss", s.Version)
	case s.Interval > 0:
		return fmt.Sprintf("nats-server %s flushes its JetStream store every %s (sync_interval), not at each publish: a message the relay marked delivered "+
			"can be lost to a power loss or a kernel crash; run the server with jetstream { sync_interval: always }", s.Version, s.Interval)
	}
	return fmt.Sprintf("nats-server %s has no sync_interval setting (2.10 and later have it) and flushes its JetStream store on its own schedule: "+
		"a message the relay marked delivered can be lost to a power loss; run nats-server 2.10 or later with jetstream { sync_interval: always }", s.Version)
}

// ReadServerSync reads how the server flushes from its HTTP monitoring
// endpoint (nats-server -m PORT; monitorURL such as http://127.0.0.1:8222).
// The client protocol does not carry the setting, so without a monitoring
// endpoint it cannot be read.
func ReadServerSync(ctx context.Context, monitorURL string) (ServerSync, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(monitorURL, "/")+"/varz", nil)
	if err != nil {
		return ServerSync{}, fmt.Errorf("relay: the NATS monitoring URL %q: %w", monitorURL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ServerSync{}, fmt.Errorf("relay: reading the NATS server's /varz: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ServerSync{}, fmt.Errorf("relay: the NATS server's /varz at %s answered %s", monitorURL, resp.Status)
	}
	var varz struct {
		Version   string `json:"version"`
		JetStream struct {
			Config *struct {
				SyncInterval time.Duration `json:"sync_interval"`
				SyncAlways   bool          `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&varz); err != nil {
		return ServerSync{}, fmt.Errorf("relay: the NATS server's /varz at %s: %w", monitorURL, err)
	}
	s := ServerSync{Version: varz.Version}
	if c := varz.JetStream.Config; c != nil {
		s.JetStream, s.Always, s.Interval = true, c.SyncAlways, c.SyncInterval
	}
	return s, nil
}

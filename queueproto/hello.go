package queueproto

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var systemName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Validate checks a hello beyond its decoding: the protocol version, a
// declaration of every feature with a citation for each absent one, a known
// database and delivery promise, and references to known probes (probes,
// the runner's list). It returns every problem at once.
func (h Hello) Validate(probes []string) error {
	var bad []string
	if h.Protocol != Version {
		bad = append(bad, fmt.Sprintf("protocol %d: the runner speaks %d", h.Protocol, Version))
	}
	if !systemName.MatchString(h.System) {
		bad = append(bad, fmt.Sprintf("system %q: want [a-z][a-z0-9-]*", h.System))
	}
	if h.Version == "" {
		bad = append(bad, "no version: say which version of the queue the adapter pins")
	}
	if !slices.Contains([]string{NeedPostgres, NeedRedis, NeedDir}, h.Needs) {
		bad = append(bad, fmt.Sprintf("needs %q: want %s, %s or %s", h.Needs, NeedPostgres, NeedRedis, NeedDir))
	}
	for _, name := range Features {
		f, ok := h.Features[name]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("feature %q is not declared (declare every feature, supported or not)", name))
		case !f.Supported && f.Doc == "":
			bad = append(bad, fmt.Sprintf("feature %q is absent without a doc: cite the queue's documentation", name))
		}
	}
	for name := range h.Features {
		if !slices.Contains(Features, name) {
			bad = append(bad, fmt.Sprintf("unknown feature %q (the features are %v)", name, Features))
		}
	}
	if !slices.Contains([]string{AtLeastOnce, ExactlyOnce, AtMostOnce}, h.Delivery.Semantics) {
		bad = append(bad, fmt.Sprintf("delivery semantics %q: want %s, %s or %s", h.Delivery.Semantics, AtLeastOnce, ExactlyOnce, AtMostOnce))
	}
	if h.Delivery.Doc == "" {
		bad = append(bad, "delivery without a doc")
	}
	if h.Exhausted.RawState == "" || h.Exhausted.Doc == "" {
		bad = append(bad, "exhausted needs raw_state and doc")
	}
	if h.RecoveryMs < 0 {
		bad = append(bad, fmt.Sprintf("recovery_ms %d is negative", h.RecoveryMs))
	}
	for _, r := range h.References {
		if !slices.Contains(probes, r.Probe) {
			bad = append(bad, fmt.Sprintf("reference %s names unknown probe %q (the probes are %v)", r.URL, r.Probe, probes))
		}
		if r.URL == "" || r.Title == "" {
			bad = append(bad, fmt.Sprintf("reference for %q needs url and title", r.Probe))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("hello: %s", strings.Join(bad, "; "))
	}
	return nil
}

// Package scenarios plays named race scenarios against real stores.
//
// A scenario is a language-neutral JSON file (FORMAT.md describes it for
// ports in other languages): a policy, a start time, a list of steps —
// operations by named clients, clock moves, and asynchronous operations held
// at a store's hook points by barriers — each with its exact expected
// outcome, and the exact final state of every run. Run plays one scenario on
// any store an Opener opens, giving every client its own store (its own
// connections) with its own barrier hook, all sharing one manual clock, and
// reports every step's outcome and every mismatch. Nothing in it sleeps:
// operations are ordered by barriers, awaits and the database's own locks.
package scenarios

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// Scenario is one parsed and validated scenario file.
type Scenario struct {
	// File is the path the scenario was loaded from ("" when parsed from bytes).
	File        string
	Name        string
	Description string
	// ConfigName is the named policy ("default") or "" for an inline one.
	ConfigName string
	Config     spec.Config
	Tenant     string
	Start      int64
	// Races are the races the scenario claims to exercise; Run reports a
	// mismatch for each one it did not observe (the vacuity guard).
	Races []Race
	Steps []*Step
	Final Final
}

// Step is one step of a scenario. Which fields are set depends on Op; the
// loader rejects a field that does not belong to the step's op.
type Step struct {
	// Index is the step's 1-based position in the file.
	Index   int
	Op      string
	Client  string
	Async   string
	PauseAt spec.HookPoint
	Note    string

	RunID        string
	Key          string
	Payload      json.RawMessage
	Operation    string
	MaxAttempts  int
	TimeoutMs    int64
	Worker       string
	LeaseMs      int64
	Limit        int
	Bind         []string
	Lease        string
	Result       json.RawMessage
	ErrorCode    string
	RetryAfterMs int64
	Jitter       int64
	Run          string
	Reason       string
	Effect       string
	State        string
	ProviderRef  string
	NewRunID     string
	Actor        string
	Ms           int64
	Of           string
	Fault        string

	Expect *Expect
}

// Expect is a step's expected outcome: either success (OK) with the values
// of some of the result's fields, or an error code and the error's run state.
type Expect struct {
	OK         bool
	Error      spec.Code
	ErrorState spec.RunState
	// Fields maps a result field name (FORMAT.md) to its expected value:
	// string, int64, bool, []string, or []map[string]any for "leases". The
	// "result" field holds the canonical JSON text ("" for null).
	Fields map[string]any
}

// Final is what the store must hold once every step has run.
type Final struct {
	Runs   map[string]*FinalRun
	Absent []string
}

// FinalRun is the expected final state of one run, its job and its rows.
type FinalRun struct {
	State           spec.RunState         `json:"state"`
	JobState        spec.JobState         `json:"job_state"`
	Generation      int64                 `json:"generation"`
	Attempts        int                   `json:"attempts"`
	Events          []spec.EventKind      `json:"events"`
	AttemptOutcomes []spec.AttemptOutcome `json:"attempt_outcomes"`
	Effects         []FinalEffect         `json:"effects"`

	ErrorCode     *string           `json:"error_code"`
	Result        json.RawMessage   `json:"result"`
	Owner         *string           `json:"owner"`
	ExpiresAt     *int64            `json:"expires_at"`
	AvailableAt   *int64            `json:"available_at"`
	ReplayOf      *string           `json:"replay_of"`
	EventPayloads []json.RawMessage `json:"event_payloads"`
}

// FinalEffect is the expected state of one effect ledger row.
type FinalEffect struct {
	Effect      string           `json:"effect"`
	Key         string           `json:"key"`
	State       spec.EffectState `json:"state"`
	Generation  *int64           `json:"generation"`
	ProviderRef *string          `json:"provider_ref"`
}

// Race names a race a scenario claims to exercise. Run counts each one it
// observes (see FORMAT.md for the exact definitions).
type Race string

// The races Run can observe.
const (
	// RaceContended: a store operation was started while another client's
	// operation was held at before_commit, inside its open transaction.
	RaceContended Race = "contended"
	// RaceCommittedNotReturned: a store operation was started while another
	// client's operation was held at after_commit: committed, not yet returned.
	RaceCommittedNotReturned Race = "committed_not_returned"
	// RaceStaleWriteRefused: a guarded write presented a lease that was
	// superseded by a later claim or had expired, and was refused lost_lease.
	RaceStaleWriteRefused Race = "stale_write_refused"
	// RaceLeaseReclaimed: a claim took a job that an observer read as leased
	// (to an expired lease) just before the claim started.
	RaceLeaseReclaimed Race = "lease_reclaimed"
	// RaceFaultRolledBack: an operation failed at before_commit by a fault
	// returned unavailable.
	RaceFaultRolledBack Race = "fault_rolled_back"
	// RaceUnknownOutcome: an operation failed at after_commit by a fault
	// returned unknown_outcome.
	RaceUnknownOutcome Race = "unknown_outcome"
)

// Races lists every race, in FORMAT.md's order.
var Races = []Race{RaceContended, RaceCommittedNotReturned, RaceStaleWriteRefused,
	RaceLeaseReclaimed, RaceFaultRolledBack, RaceUnknownOutcome}

// Named policies a scenario may give as "config".
var namedConfigs = map[string]func() spec.Config{
	"default": spec.DefaultConfig,
}

// step fields shared by every store operation.
var opCommon = []string{"op", "client", "async", "pause_at", "note", "expect"}

// opFields lists, per op, the fields it takes besides opCommon (store
// operations) or besides "op" and "note" (everything else); a leading "!"
// marks a required field.
var opFields = map[string][]string{
	"create":           {"!run_id", "!key", "payload", "operation", "max_attempts", "timeout_ms"},
	"claim":            {"!lease_ms", "limit", "bind", "worker"},
	"renew":            {"!lease", "!lease_ms"},
	"complete":         {"!lease", "result"},
	"retry":            {"!lease", "!error_code", "retry_after_ms", "jitter"},
	"fail":             {"!lease", "!error_code"},
	"release":          {"!lease"},
	"cancel":           {"!run", "reason"},
	"reserve_effect":   {"!lease", "!effect", "!key"},
	"record_effect":    {"!lease", "!effect", "!key", "!state", "provider_ref"},
	"reconcile_effect": {"!lease", "!effect", "!key", "!state", "provider_ref"},
	"reap":             {"limit"},
	"purge":            {"limit"},
	"replay":           {"!run", "!new_run_id", "!actor"},
	"get_run":          {"!run", "!expect"},
	"get_job":          {"!run", "!expect"},
	"advance":          {"!ms"},
	"await_arrival":    {"!of"},
	"resume":           {"!of", "fault"},
	"await":            {"!of", "!expect"},
}

// storeOps maps the file's store operations to the spec's operation names
// (the names the stores pass to their hooks).
var storeOps = map[string]spec.Op{
	"create": spec.OpCreateRun, "claim": spec.OpClaim, "renew": spec.OpRenew,
	"complete": spec.OpComplete, "retry": spec.OpRetry, "fail": spec.OpFail,
	"release": spec.OpRelease, "cancel": spec.OpCancel, "reserve_effect": spec.OpReserveEffect,
	"record_effect": spec.OpRecordEffect, "reconcile_effect": spec.OpReconcileEffect,
	"reap": spec.OpReap, "purge": spec.OpPurge, "replay": spec.OpReplay,
}

// resultKinds maps each op that returns something to the kind of result it
// returns, which fixes the fields an expectation may name.
var resultKinds = map[string]string{
	"create": "create", "claim": "claim", "renew": "lease", "complete": "run", "fail": "run",
	"cancel": "run", "replay": "run", "get_run": "run", "retry": "job", "release": "job",
	"get_job": "job", "reap": "reap", "purge": "purge", "reserve_effect": "reservation",
	"record_effect": "effect", "reconcile_effect": "effect",
}

var (
	runFields    = []string{"run_id", "state", "version", "last_seq", "error_code", "result", "replay_of", "replay_depth", "created_at", "deadline_at"}
	leaseFields  = []string{"run_id", "owner", "generation", "attempt", "max_attempts", "expires_at", "deadline_at"}
	jobFields    = []string{"run_id", "state", "generation", "attempts", "max_attempts", "available_at", "owner", "expires_at", "error_code"}
	effectFields = []string{"effect", "key", "state", "generation", "provider_ref", "updated_at"}
)

// kindFields lists the fields of each result kind, headline fields first
// (those are always shown in a step's outcome).
var kindFields = map[string][]string{
	"create":      append([]string{"replayed"}, runFields...),
	"claim":       {"leases"},
	"lease":       leaseFields,
	"run":         runFields,
	"job":         jobFields,
	"reap":        {"run_ids"},
	"purge":       {"count"},
	"reservation": append([]string{"decision"}, effectFields...),
	"effect":      effectFields,
}

// headline is how many of kindFields a step's printed outcome always shows.
var headline = map[string]int{"create": 3, "claim": 1, "lease": 4, "run": 2, "job": 4, "reap": 1, "purge": 1, "reservation": 4, "effect": 4}

type fieldType int

const (
	tString fieldType = iota
	tInt
	tBool
	tJSON
	tStrings
	tLeases
)

var fieldTypes = map[string]fieldType{
	"run_id": tString, "state": tString, "version": tInt, "last_seq": tInt, "error_code": tString,
	"result": tJSON, "replay_of": tString, "replay_depth": tInt, "created_at": tInt, "deadline_at": tInt,
	"replayed": tBool, "owner": tString, "generation": tInt, "attempt": tInt, "max_attempts": tInt,
	"expires_at": tInt, "attempts": tInt, "available_at": tInt, "leases": tLeases, "run_ids": tStrings,
	"count": tInt, "effect": tString, "key": tString, "provider_ref": tString, "updated_at": tInt,
	"decision": tString,
}

var (
	scenarioName = regexp.MustCompile(`^[a-z0-9][a-z0-9_]{0,63}$`)
	clientName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)
)

// Load reads and validates the scenario file at path.
func Load(path string) (*Scenario, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc, err := Parse(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sc.File = path
	return sc, nil
}

// Parse decodes and validates one scenario. Decoding is strict: an unknown
// field, a field that does not belong to a step's op, a duplicate key, a
// value of the wrong type or trailing data is an error that names the place.
func Parse(body []byte) (*Scenario, error) {
	if err := checkDuplicateKeys(body); err != nil {
		return nil, err
	}
	var f struct {
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Config      json.RawMessage   `json:"config"`
		Tenant      string            `json:"tenant"`
		Start       *int64            `json:"start"`
		Races       []Race            `json:"races"`
		Steps       []json.RawMessage `json:"steps"`
		Final       json.RawMessage   `json:"final"`
	}
	if err := strictDecode(body, &f); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	sc := &Scenario{Name: f.Name, Description: f.Description, Tenant: f.Tenant, Races: f.Races}
	switch {
	case !scenarioName.MatchString(f.Name):
		return nil, fmt.Errorf("scenario: name %q must match %s", f.Name, scenarioName)
	case strings.TrimSpace(f.Description) == "":
		return nil, fmt.Errorf("scenario %s: description is required", f.Name)
	case f.Start == nil || *f.Start < 0:
		return nil, fmt.Errorf("scenario %s: start (the clock's first reading, ms >= 0) is required", f.Name)
	case len(f.Steps) == 0:
		return nil, fmt.Errorf("scenario %s: steps are required", f.Name)
	case f.Final == nil:
		return nil, fmt.Errorf("scenario %s: final is required", f.Name)
	}
	sc.Start = *f.Start
	if err := spec.DefaultConfig().CheckTenant(f.Tenant); err != nil {
		return nil, fmt.Errorf("scenario %s: tenant: %v", f.Name, err)
	}
	cfg, name, err := parseConfig(f.Config)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: config: %w", f.Name, err)
	}
	sc.Config, sc.ConfigName = cfg, name
	seen := map[Race]bool{}
	for _, r := range f.Races {
		if !slices.Contains(Races, r) {
			return nil, fmt.Errorf("scenario %s: unknown race %q (known: %v)", f.Name, r, Races)
		}
		if seen[r] {
			return nil, fmt.Errorf("scenario %s: race %q named twice", f.Name, r)
		}
		seen[r] = true
	}
	for i, raw := range f.Steps {
		st, err := parseStep(i+1, raw)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: step %d: %w", f.Name, i+1, err)
		}
		sc.Steps = append(sc.Steps, st)
	}
	if err := checkFlow(sc); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", f.Name, err)
	}
	if sc.Final, err = parseFinal(f.Final); err != nil {
		return nil, fmt.Errorf("scenario %s: final: %w", f.Name, err)
	}
	return sc, nil
}

func parseConfig(raw json.RawMessage) (spec.Config, string, error) {
	if raw == nil {
		return spec.Config{}, "", errors.New(`required: a named policy ("default") or an object`)
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		mk, ok := namedConfigs[name]
		if !ok {
			return spec.Config{}, "", fmt.Errorf("unknown named policy %q (known: default)", name)
		}
		return mk(), name, nil
	}
	var c struct {
		Operations map[string]struct {
			SchemaVersion      int   `json:"schema_version"`
			DefaultMaxAttempts int   `json:"default_max_attempts"`
			MaxMaxAttempts     int   `json:"max_max_attempts"`
			DefaultTimeoutMs   int64 `json:"default_timeout_ms"`
			MaxTimeoutMs       int64 `json:"max_timeout_ms"`
		} `json:"operations"`
		Tenants                []string `json:"tenants"`
		IdempotencyRetentionMs int64    `json:"idempotency_retention_ms"`
		MaxLeaseMs             int64    `json:"max_lease_ms"`
		MaxReplays             int      `json:"max_replays"`
		Backoff                struct {
			BaseMs          int64 `json:"base_ms"`
			CapMs           int64 `json:"cap_ms"`
			JitterMs        int64 `json:"jitter_ms"`
			RetryAfterCapMs int64 `json:"retry_after_cap_ms"`
		} `json:"backoff"`
	}
	if err := strictDecode(raw, &c); err != nil {
		return spec.Config{}, "", err
	}
	cfg := spec.Config{Operations: map[string]spec.OperationPolicy{}, Tenants: c.Tenants,
		IdempotencyRetentionMs: c.IdempotencyRetentionMs, MaxLeaseMs: c.MaxLeaseMs, MaxReplays: c.MaxReplays,
		Backoff: spec.Backoff{BaseMs: c.Backoff.BaseMs, CapMs: c.Backoff.CapMs, JitterMs: c.Backoff.JitterMs, RetryAfterCapMs: c.Backoff.RetryAfterCapMs}}
	for op, p := range c.Operations {
		cfg.Operations[op] = spec.OperationPolicy{SchemaVersion: p.SchemaVersion, DefaultMaxAttempts: p.DefaultMaxAttempts,
			MaxMaxAttempts: p.MaxMaxAttempts, DefaultTimeoutMs: p.DefaultTimeoutMs, MaxTimeoutMs: p.MaxTimeoutMs}
	}
	if err := cfg.Validate(); err != nil {
		return spec.Config{}, "", err
	}
	return cfg, "", nil
}

// stepJSON is a step as written; parseStep checks which fields are present.
type stepJSON struct {
	Op           string          `json:"op"`
	Client       string          `json:"client"`
	Async        string          `json:"async"`
	PauseAt      spec.HookPoint  `json:"pause_at"`
	Note         string          `json:"note"`
	RunID        string          `json:"run_id"`
	Key          string          `json:"key"`
	Payload      json.RawMessage `json:"payload"`
	Operation    string          `json:"operation"`
	MaxAttempts  int             `json:"max_attempts"`
	TimeoutMs    int64           `json:"timeout_ms"`
	Worker       string          `json:"worker"`
	LeaseMs      int64           `json:"lease_ms"`
	Limit        int             `json:"limit"`
	Bind         []string        `json:"bind"`
	Lease        string          `json:"lease"`
	Result       json.RawMessage `json:"result"`
	ErrorCode    string          `json:"error_code"`
	RetryAfterMs int64           `json:"retry_after_ms"`
	Jitter       int64           `json:"jitter"`
	Run          string          `json:"run"`
	Reason       string          `json:"reason"`
	Effect       string          `json:"effect"`
	State        string          `json:"state"`
	ProviderRef  string          `json:"provider_ref"`
	NewRunID     string          `json:"new_run_id"`
	Actor        string          `json:"actor"`
	Ms           int64           `json:"ms"`
	Of           string          `json:"of"`
	Fault        string          `json:"fault"`
	Expect       json.RawMessage `json:"expect"`
}

func parseStep(index int, raw json.RawMessage) (*Step, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("a step must be an object: %v", err)
	}
	var j stepJSON
	if err := strictDecode(raw, &j); err != nil {
		return nil, err
	}
	fields, known := opFields[j.Op]
	if !known {
		return nil, fmt.Errorf("unknown op %q (known: %s)", j.Op, strings.Join(slices.Sorted(maps.Keys(opFields)), ", "))
	}
	_, isStoreOp := storeOps[j.Op]
	allowed := map[string]bool{"op": true, "note": true}
	if isStoreOp {
		for _, k := range opCommon {
			allowed[k] = true
		}
	}
	for _, f := range fields {
		name := strings.TrimPrefix(f, "!")
		allowed[name] = true
		if strings.HasPrefix(f, "!") && keys[name] == nil {
			return nil, fmt.Errorf("%s: field %q is required", j.Op, name)
		}
	}
	for k := range keys {
		if !allowed[k] {
			return nil, fmt.Errorf("%s: field %q does not belong to this op (allowed: %s)", j.Op, k, strings.Join(slices.Sorted(maps.Keys(allowed)), ", "))
		}
	}
	st := &Step{Index: index, Op: j.Op, Client: j.Client, Async: j.Async, PauseAt: j.PauseAt, Note: j.Note,
		RunID: j.RunID, Key: j.Key, Payload: j.Payload, Operation: j.Operation, MaxAttempts: j.MaxAttempts,
		TimeoutMs: j.TimeoutMs, Worker: j.Worker, LeaseMs: j.LeaseMs, Limit: j.Limit, Bind: j.Bind,
		Lease: j.Lease, Result: j.Result, ErrorCode: j.ErrorCode, RetryAfterMs: j.RetryAfterMs, Jitter: j.Jitter,
		Run: j.Run, Reason: j.Reason, Effect: j.Effect, State: j.State, ProviderRef: j.ProviderRef,
		NewRunID: j.NewRunID, Actor: j.Actor, Ms: j.Ms, Of: j.Of, Fault: j.Fault}
	if isStoreOp {
		if !clientName.MatchString(j.Client) {
			return nil, fmt.Errorf("%s: client %q is required and must match %s", j.Op, j.Client, clientName)
		}
		switch {
		case j.Async == "" && j.PauseAt != "":
			return nil, fmt.Errorf("%s: pause_at needs async (a held operation must be awaited later)", j.Op)
		case j.Async == "" && keys["async"] != nil:
			return nil, fmt.Errorf("%s: async must name the operation", j.Op)
		case j.Async != "" && keys["expect"] != nil:
			return nil, fmt.Errorf("%s: an async operation's expectation goes on its await step", j.Op)
		case j.Async == "" && keys["expect"] == nil:
			return nil, fmt.Errorf("%s: expect is required (every outcome is checked)", j.Op)
		case j.PauseAt != "" && j.PauseAt != spec.BeforeCommit && j.PauseAt != spec.AfterCommit:
			return nil, fmt.Errorf("%s: pause_at %q must be before_commit or after_commit", j.Op, j.PauseAt)
		}
	}
	if j.Op == "resume" && j.Fault != "" && j.Fault != "abort" {
		return nil, fmt.Errorf("resume: fault %q is unknown (the only fault is \"abort\")", j.Fault)
	}
	if j.Op == "advance" && j.Ms < 0 {
		return nil, fmt.Errorf("advance: ms must be >= 0 (the clock never goes back)")
	}
	if j.Op == "create" && keys["payload"] == nil {
		st.Payload = json.RawMessage("{}")
	}
	if keys["limit"] == nil {
		st.Limit = 1
	}
	if j.Op == "claim" && j.Worker == "" {
		st.Worker = j.Client
	}
	if keys["expect"] != nil {
		kind := resultKinds[j.Op]
		exp, err := parseExpect(kind, j.Expect)
		if err != nil {
			return nil, fmt.Errorf("%s: expect: %w", j.Op, err)
		}
		st.Expect = exp
	}
	return st, nil
}

// parseExpect decodes an expectation for a result of kind ("" for an await,
// whose kind is checked once its operation is known).
func parseExpect(kind string, raw json.RawMessage) (*Expect, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("must be an object: %v", err)
	}
	e := &Expect{Fields: map[string]any{}}
	if v, ok := keys["ok"]; ok {
		if string(v) != "true" {
			return nil, errors.New(`"ok" must be true (write "error" for a failure)`)
		}
		e.OK = true
	}
	if v, ok := keys["error"]; ok {
		if err := strictDecode(v, &e.Error); err != nil {
			return nil, fmt.Errorf("error: %v", err)
		}
		if !slices.Contains(spec.Codes, e.Error) {
			return nil, fmt.Errorf("error %q is not a spec error code", e.Error)
		}
	}
	if e.OK == (e.Error != "") {
		return nil, errors.New(`exactly one of "ok": true and "error": CODE is required`)
	}
	if v, ok := keys["error_state"]; ok {
		if e.OK {
			return nil, errors.New(`"error_state" belongs to an error expectation`)
		}
		if err := strictDecode(v, &e.ErrorState); err != nil {
			return nil, fmt.Errorf("error_state: %v", err)
		}
	}
	allowed := map[string]bool{}
	if kind != "" {
		for _, f := range kindFields[kind] {
			allowed[f] = true
		}
	}
	for k, v := range keys {
		if k == "ok" || k == "error" || k == "error_state" {
			continue
		}
		if e.Error != "" {
			return nil, fmt.Errorf("field %q: an error expectation has only error and error_state", k)
		}
		if kind != "" && !allowed[k] {
			return nil, fmt.Errorf("field %q is not part of a %s result (fields: %s)", k, kind, strings.Join(kindFields[kind], ", "))
		}
		val, err := decodeField(k, v)
		if err != nil {
			return nil, err
		}
		e.Fields[k] = val
	}
	return e, nil
}

// checkKind checks an await's expectation against its operation's result kind.
func (e *Expect) checkKind(kind string) error {
	for k := range e.Fields {
		if !slices.Contains(kindFields[kind], k) {
			return fmt.Errorf("field %q is not part of a %s result (fields: %s)", k, kind, strings.Join(kindFields[kind], ", "))
		}
	}
	return nil
}

func decodeField(name string, raw json.RawMessage) (any, error) {
	t, ok := fieldTypes[name]
	if !ok {
		return nil, fmt.Errorf("unknown field %q", name)
	}
	bad := func(err error) (any, error) { return nil, fmt.Errorf("field %q: %v", name, err) }
	switch t {
	case tString:
		var s string
		if err := strictDecode(raw, &s); err != nil {
			return bad(err)
		}
		return s, nil
	case tInt:
		var n int64
		if err := strictDecode(raw, &n); err != nil {
			return bad(err)
		}
		return n, nil
	case tBool:
		var b bool
		if err := strictDecode(raw, &b); err != nil {
			return bad(err)
		}
		return b, nil
	case tStrings:
		var l []string
		if err := strictDecode(raw, &l); err != nil {
			return bad(err)
		}
		if l == nil {
			l = []string{}
		}
		return l, nil
	case tJSON:
		if string(bytes.TrimSpace(raw)) == "null" {
			return "", nil
		}
		c, err := spec.Canonicalize(raw)
		if err != nil {
			return bad(err)
		}
		return c, nil
	case tLeases:
		var l []map[string]json.RawMessage
		if err := strictDecode(raw, &l); err != nil {
			return bad(err)
		}
		out := []map[string]any{}
		for i, m := range l {
			lm := map[string]any{}
			for k, v := range m {
				if !slices.Contains(leaseFields, k) {
					return nil, fmt.Errorf("leases[%d]: field %q is not part of a lease (fields: %s)", i, k, strings.Join(leaseFields, ", "))
				}
				val, err := decodeField(k, v)
				if err != nil {
					return nil, fmt.Errorf("leases[%d]: %v", i, err)
				}
				lm[k] = val
			}
			out = append(out, lm)
		}
		return out, nil
	}
	return nil, fmt.Errorf("field %q: no decoder", name)
}

var finalRunRequired = []string{"state", "job_state", "generation", "attempts", "events", "attempt_outcomes", "effects"}

func parseFinal(raw json.RawMessage) (Final, error) {
	var f struct {
		Runs   map[string]json.RawMessage `json:"runs"`
		Absent []string                   `json:"absent"`
	}
	if err := strictDecode(raw, &f); err != nil {
		return Final{}, err
	}
	out := Final{Runs: map[string]*FinalRun{}, Absent: f.Absent}
	if len(f.Runs) == 0 {
		return Final{}, errors.New("runs: at least one run's final state is required")
	}
	for id, r := range f.Runs {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(r, &keys); err != nil {
			return Final{}, fmt.Errorf("runs.%s: must be an object: %v", id, err)
		}
		for _, k := range finalRunRequired {
			if keys[k] == nil {
				return Final{}, fmt.Errorf("runs.%s: field %q is required (the final state is exact)", id, k)
			}
		}
		var fr FinalRun
		if err := strictDecode(r, &fr); err != nil {
			return Final{}, fmt.Errorf("runs.%s: %w", id, err)
		}
		if fr.Result != nil {
			if _, err := decodeField("result", fr.Result); err != nil {
				return Final{}, fmt.Errorf("runs.%s: %w", id, err)
			}
		}
		if fr.EventPayloads != nil && len(fr.EventPayloads) != len(fr.Events) {
			return Final{}, fmt.Errorf("runs.%s: event_payloads has %d entries for %d events", id, len(fr.EventPayloads), len(fr.Events))
		}
		for i, e := range fr.Effects {
			if e.Effect == "" || e.Key == "" || e.State == "" || e.Generation == nil {
				return Final{}, fmt.Errorf("runs.%s: effects[%d]: effect, key, state and generation are required", id, i)
			}
		}
		if fr.Effects == nil {
			fr.Effects = []FinalEffect{}
		}
		out.Runs[id] = &fr
	}
	for _, id := range f.Absent {
		if out.Runs[id] != nil {
			return Final{}, fmt.Errorf("run %s is both in runs and absent", id)
		}
	}
	return out, nil
}

// checkFlow checks the order of steps: async names are unique, every
// asynchronous operation is awaited once, a held one is awaited at its barrier
// and resumed before it is awaited, a client runs one operation at a time,
// and every lease is bound by a claim before it is used.
func checkFlow(sc *Scenario) error {
	type asyncState struct {
		step                     *Step
		arrived, resumed, waited bool
	}
	async := map[string]*asyncState{}
	busy := map[string]string{} // client -> async name in flight
	bound := map[string]bool{}  // usable lease names
	named := map[string]bool{}  // every bind name, usable or not yet
	for _, st := range sc.Steps {
		at := fmt.Sprintf("step %d (%s)", st.Index, st.Op)
		if _, ok := storeOps[st.Op]; ok {
			if name, ok := busy[st.Client]; ok {
				return fmt.Errorf("%s: client %s still has operation %q in flight; a client runs one operation at a time (use another client)", at, st.Client, name)
			}
			if st.Lease != "" && !bound[st.Lease] {
				return fmt.Errorf("%s: lease %q is not bound by an earlier claim (bind it, and await an async claim first)", at, st.Lease)
			}
			if st.Async != "" {
				if async[st.Async] != nil {
					return fmt.Errorf("%s: async name %q is already used by step %d", at, st.Async, async[st.Async].step.Index)
				}
				async[st.Async] = &asyncState{step: st}
				busy[st.Client] = st.Async
			}
			for _, b := range st.Bind {
				if named[b] {
					return fmt.Errorf("%s: lease name %q is bound twice", at, b)
				}
				named[b] = true
				if st.Async == "" {
					bound[b] = true
				}
			}
			continue
		}
		if st.Op != "await_arrival" && st.Op != "resume" && st.Op != "await" {
			continue
		}
		a := async[st.Of]
		if a == nil {
			return fmt.Errorf("%s: no earlier async operation is named %q", at, st.Of)
		}
		held := a.step.PauseAt != ""
		switch st.Op {
		case "await_arrival":
			if !held || a.arrived {
				return fmt.Errorf("%s: %q has no pending pause_at to arrive at", at, st.Of)
			}
			a.arrived = true
		case "resume":
			if !a.arrived || a.resumed {
				return fmt.Errorf("%s: %q must be awaited at its barrier (await_arrival) once before it is resumed once", at, st.Of)
			}
			a.resumed = true
		case "await":
			if a.waited {
				return fmt.Errorf("%s: %q is awaited twice", at, st.Of)
			}
			if held && !a.resumed {
				return fmt.Errorf("%s: %q is held at %s and must be resumed before it is awaited", at, st.Of, a.step.PauseAt)
			}
			if err := st.Expect.checkKind(resultKinds[a.step.Op]); err != nil {
				return fmt.Errorf("%s: expect: %w", at, err)
			}
			a.waited = true
			delete(busy, a.step.Client)
			for _, b := range a.step.Bind {
				bound[b] = true
			}
		}
	}
	for name, a := range async {
		if !a.waited {
			return fmt.Errorf("async operation %q (step %d) is never awaited", name, a.step.Index)
		}
	}
	return nil
}

// Package scenarios plays named race scenarios against real stores, and
// judges each run twice: by the exact outcomes its file states, and by the
// model, through the same linearizability check and accounting as the
// harness's concurrent runs.
//
// A scenario is a language-neutral JSON file (FORMAT.md describes it for
// ports in other languages): a policy, a start time, a list of steps —
// operations by named clients, clock moves, and asynchronous operations held
// at a store's hook points by barriers — each with its expected outcome, and
// the final state of every run. A store operation is any row of the
// contract's operation table (spec.Operations), written with its request's
// JSON fields, so the format knows no operation by name. Run plays one
// scenario on any store an Opener opens, giving every client its own store
// (its own connections) with its own barrier hook, all sharing one manual
// clock, records what happened as a history.History (package harness/history), and reports every
// step's outcome and every mismatch. Nothing in it sleeps: operations are
// ordered by barriers, awaits and the database's own locks.
package scenarios

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/harness/validate"
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
	// mismatch for each one the history does not contain (the vacuity guard).
	Races []validate.Race
	Steps []*Step
	Final Final
}

// Step is one step of a scenario: a store operation (Op names a row of
// spec.Operations) or a control step (advance, await_arrival,
// await_blocked, resume, await). The loader rejects a field that does not belong to the step.
type Step struct {
	// Index is the step's 1-based position in the file.
	Index int
	Op    string
	Note  string

	// A store operation.
	Client  string
	Async   string
	PauseAt spec.HookPoint
	// Fields holds the request's fields as written, by their JSON names
	// (tenant excluded: it is the scenario's).
	Fields map[string]json.RawMessage
	// Bind names the leases a claim returns, in order.
	Bind []string
	// Jitter is a retry's random draw.
	Jitter int64

	// Control steps.
	Ms    int64
	Of    string
	Fault string

	Expect *Expect

	row spec.Operation // a store operation's table row
}

// Store reports whether the step is a store operation.
func (st *Step) Store() bool { return st.row.Op != "" }

// Expect is an expected outcome: success, with a pattern the result must
// match (nil: any success), or an error code and the error's run state.
type Expect struct {
	OK         bool
	Pattern    any // decoded JSON (numbers as json.Number)
	Error      spec.Code
	ErrorState spec.RunState
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

	ErrorCode      *string           `json:"error_code"`
	Result         json.RawMessage   `json:"result"`
	LeaseOwner     *string           `json:"lease_owner"`
	LeaseExpiresAt *int64            `json:"lease_expires_at"`
	AvailableAt    *int64            `json:"available_at"`
	ReplayOf       *string           `json:"replay_of"`
	EventPayloads  []json.RawMessage `json:"event_payloads"`
}

// FinalEffect is the expected state of one effect ledger row.
type FinalEffect struct {
	Step        string           `json:"step"`
	Key         string           `json:"key"`
	State       spec.EffectState `json:"state"`
	Generation  *int64           `json:"generation"`
	ProviderRef *string          `json:"provider_ref"`
}

// Named policies a scenario may give as "config".
var namedConfigs = map[string]func() spec.Config{
	"default": spec.DefaultConfig,
}

// commonFields are the fields of every store operation step besides its
// request's.
var commonFields = []string{"op", "client", "async", "pause_at", "note", "expect"}

// controlFields lists the fields of each control step; a leading "!" marks
// a required one.
var controlFields = map[string][]string{
	"advance":       {"!ms"},
	"await_arrival": {"!of"},
	"await_blocked": {"!of"},
	"resume":        {"!of", "fault"},
	"await":         {"!of", "!expect"},
}

// readerClient runs a read step that names no client: the runner's own
// store, with no hook.
const readerClient = "reader"

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
		Races       []validate.Race   `json:"races"`
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
	seen := map[validate.Race]bool{}
	for _, r := range f.Races {
		if r.Meaning() == "" {
			return nil, fmt.Errorf("scenario %s: unknown race %q (known: %v)", f.Name, r, validate.AllRaces())
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

// parseConfig reads a named policy or an inline spec.Config (its JSON form).
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
	var cfg spec.Config
	if err := strictDecode(raw, &cfg); err != nil {
		return spec.Config{}, "", err
	}
	if err := cfg.Validate(); err != nil {
		return spec.Config{}, "", err
	}
	return cfg, "", nil
}

// parseStep decodes one step: the control step's fields, or the common
// fields and the request fields of its operation.
func parseStep(index int, raw json.RawMessage) (*Step, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("a step must be an object: %v", err)
	}
	st := &Step{Index: index}
	if err := decodeField(fields, "op", &st.Op); err != nil || st.Op == "" {
		return nil, errors.New(`"op" (a string) is required`)
	}
	if err := decodeField(fields, "note", &st.Note); err != nil {
		return nil, err
	}
	if row, isStore := spec.Lookup(spec.Op(st.Op)); isStore {
		st.row = row
		return st, parseStoreStep(st, fields)
	}
	allowed, isControl := controlFields[st.Op]
	if !isControl {
		return nil, fmt.Errorf("unknown op %q (known: %s)", st.Op, strings.Join(knownOps(), ", "))
	}
	names := map[string]bool{"op": true, "note": true}
	for _, f := range allowed {
		name := strings.TrimPrefix(f, "!")
		names[name] = true
		if strings.HasPrefix(f, "!") && fields[name] == nil {
			return nil, fmt.Errorf("%s: field %q is required", st.Op, name)
		}
	}
	if err := onlyFields(st.Op, fields, names); err != nil {
		return nil, err
	}
	for _, err := range []error{decodeField(fields, "ms", &st.Ms), decodeField(fields, "of", &st.Of), decodeField(fields, "fault", &st.Fault)} {
		if err != nil {
			return nil, err
		}
	}
	switch {
	case st.Op == "resume" && st.Fault != "" && st.Fault != "abort":
		return nil, fmt.Errorf("resume: fault %q is unknown (the only fault is \"abort\")", st.Fault)
	case st.Op == "advance" && st.Ms < 0:
		return nil, fmt.Errorf("advance: ms must be >= 0 (the clock never goes back)")
	}
	if fields["expect"] != nil {
		exp, err := parseExpect(fields["expect"])
		if err != nil {
			return nil, fmt.Errorf("%s: expect: %w", st.Op, err)
		}
		st.Expect = exp
	}
	return st, nil
}

// parseStoreStep decodes a store operation's fields.
func parseStoreStep(st *Step, fields map[string]json.RawMessage) error {
	names := map[string]bool{}
	for _, f := range commonFields {
		names[f] = true
	}
	if st.leaseResult() {
		names["bind"] = true
	}
	if st.drawsJitter() {
		names["jitter"] = true
	}
	st.Fields = map[string]json.RawMessage{}
	for _, f := range requestFields(st.row.Request) {
		names[f.name] = true
		if v, set := fields[f.name]; set {
			st.Fields[f.name] = v
		} else if f.required && fieldDefault(f.name) == nil {
			return fmt.Errorf("%s: field %q is required", st.Op, f.name)
		}
	}
	if err := onlyFields(st.Op, fields, names); err != nil {
		return err
	}
	for _, err := range []error{decodeField(fields, "client", &st.Client), decodeField(fields, "async", &st.Async),
		decodeField(fields, "pause_at", &st.PauseAt), decodeField(fields, "bind", &st.Bind), decodeField(fields, "jitter", &st.Jitter)} {
		if err != nil {
			return err
		}
	}
	_, hasAsync := fields["async"]
	_, hasExpect := fields["expect"]
	switch {
	case st.Client == "" && st.row.Writes:
		return fmt.Errorf("%s: client is required for a writing operation (it names the store that runs it)", st.Op)
	case st.Client != "" && !clientName.MatchString(st.Client):
		return fmt.Errorf("%s: client %q must match %s", st.Op, st.Client, clientName)
	case st.Client == readerClient:
		return fmt.Errorf("%s: the client name %q is the runner's own; use another", st.Op, readerClient)
	case st.Client == "" && st.Async != "":
		return fmt.Errorf("%s: an async operation needs a client", st.Op)
	case st.Async == "" && st.PauseAt != "":
		return fmt.Errorf("%s: pause_at needs async (a held operation must be awaited later)", st.Op)
	case st.Async == "" && hasAsync:
		return fmt.Errorf("%s: async must name the operation", st.Op)
	case st.Async != "" && hasExpect:
		return fmt.Errorf("%s: an async operation's expectation goes on its await step", st.Op)
	case st.Async == "" && !hasExpect:
		return fmt.Errorf("%s: expect is required (every outcome is checked)", st.Op)
	case st.PauseAt != "" && st.PauseAt != spec.BeforeCommit && st.PauseAt != spec.AfterCommit:
		return fmt.Errorf("%s: pause_at %q must be before_commit or after_commit", st.Op, st.PauseAt)
	case st.PauseAt != "" && !st.row.Writes:
		return fmt.Errorf("%s: a read calls no hook, so it cannot be held at %s", st.Op, st.PauseAt)
	}
	if st.Client == "" {
		st.Client = readerClient
	}
	// The request must decode as its type, with any bound lease.
	if _, err := st.request("t", func(string) (spec.LeaseRef, error) { return spec.LeaseRef{}, nil }); err != nil {
		return fmt.Errorf("%s: %v", st.Op, err)
	}
	if hasExpect {
		exp, err := parseExpect(fields["expect"])
		if err == nil {
			err = exp.checkShape(st.row)
		}
		if err != nil {
			return fmt.Errorf("%s: expect: %w", st.Op, err)
		}
		st.Expect = exp
	}
	return nil
}

// leaseResult reports an operation that returns leases, which a step may bind.
func (st *Step) leaseResult() bool { return st.row.Result == reflectLeases }

// drawsJitter reports the one operation that draws from the random source.
func (st *Step) drawsJitter() bool { return st.row.Op == spec.OpRetry }

func onlyFields(op string, fields map[string]json.RawMessage, allowed map[string]bool) error {
	for k := range fields {
		if !allowed[k] {
			return fmt.Errorf("%s: field %q does not belong to this op (allowed: %s)", op, k, strings.Join(slices.Sorted(maps.Keys(allowed)), ", "))
		}
	}
	return nil
}

// decodeField decodes fields[name] strictly into v when present.
func decodeField(fields map[string]json.RawMessage, name string, v any) error {
	raw, ok := fields[name]
	if !ok {
		return nil
	}
	if err := strictDecode(raw, v); err != nil {
		return fmt.Errorf("field %q: %v", name, err)
	}
	return nil
}

// knownOps lists the ops a step may name.
func knownOps() []string {
	var out []string
	for _, o := range spec.Operations() {
		out = append(out, string(o.Op))
	}
	return append(out, slices.Sorted(maps.Keys(controlFields))...)
}

// parseExpect decodes an expectation.
func parseExpect(raw json.RawMessage) (*Expect, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("must be an object: %v", err)
	}
	e := &Expect{}
	for k := range keys {
		if k != "ok" && k != "error" && k != "error_state" {
			return nil, fmt.Errorf(`field %q: an expectation has "ok" (true, or a pattern of the result), or "error" and optionally "error_state"`, k)
		}
	}
	if v, ok := keys["ok"]; ok {
		pattern, err := decodeJSON(v)
		if err != nil {
			return nil, fmt.Errorf("ok: %v", err)
		}
		switch p := pattern.(type) {
		case bool:
			if !p {
				return nil, errors.New(`"ok" must be true or a pattern (write "error" for a failure)`)
			}
		default:
			e.Pattern = p
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
		return nil, errors.New(`exactly one of "ok" and "error": CODE is required`)
	}
	if v, ok := keys["error_state"]; ok {
		if e.OK {
			return nil, errors.New(`"error_state" belongs to an error expectation`)
		}
		if err := strictDecode(v, &e.ErrorState); err != nil {
			return nil, fmt.Errorf("error_state: %v", err)
		}
	}
	return e, nil
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
			if _, err := canonicalOrNull(fr.Result); err != nil {
				return Final{}, fmt.Errorf("runs.%s: result: %w", id, err)
			}
		}
		if fr.EventPayloads != nil && len(fr.EventPayloads) != len(fr.Events) {
			return Final{}, fmt.Errorf("runs.%s: event_payloads has %d entries for %d events", id, len(fr.EventPayloads), len(fr.Events))
		}
		for i, e := range fr.Effects {
			if e.Step == "" || e.Key == "" || e.State == "" || e.Generation == nil {
				return Final{}, fmt.Errorf("runs.%s: effects[%d]: step, key, state and generation are required", id, i)
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
// and resumed before it is awaited, one seen blocked (await_blocked) is a
// write seen so at most once, before its barrier and its await, a client runs
// one operation at a time, and every lease is bound by a claim before it is
// used.
func checkFlow(sc *Scenario) error {
	type asyncState struct {
		step                              *Step
		arrived, blocked, resumed, waited bool
	}
	async := map[string]*asyncState{}
	busy := map[string]string{} // client -> async name in flight
	bound := map[string]bool{}  // usable lease names
	named := map[string]bool{}  // every bind name, usable or not yet
	for _, st := range sc.Steps {
		at := fmt.Sprintf("step %d (%s)", st.Index, st.Op)
		if st.Store() {
			if name, ok := busy[st.Client]; ok {
				return fmt.Errorf("%s: client %s still has operation %q in flight; a client runs one operation at a time (use another client)", at, st.Client, name)
			}
			for _, l := range st.leaseNames() {
				if !bound[l] {
					return fmt.Errorf("%s: lease %q is not bound by an earlier claim (bind it, and await an async claim first)", at, l)
				}
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
		if st.Op == "advance" {
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
		case "await_blocked":
			switch {
			case !a.step.row.Writes:
				return fmt.Errorf("%s: %q is a read, which waits for no lock; only a writing operation can be seen blocked", at, st.Of)
			case a.waited:
				return fmt.Errorf("%s: %q is already awaited; await_blocked must come before its await", at, st.Of)
			case a.blocked:
				return fmt.Errorf("%s: %q already has an await_blocked (at most one per operation)", at, st.Of)
			case a.arrived:
				return fmt.Errorf("%s: %q is already at its barrier %s, past every lock it takes; await_blocked must come before its await_arrival", at, st.Of, a.step.PauseAt)
			}
			a.blocked = true
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
			if err := st.Expect.checkShape(a.step.row); err != nil {
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

package spec

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// nameChecks run the validation of one name of SPEC.md's porter table
// ("For porters") on s, inside a request that is valid otherwise, by the
// field's JSON name.
var nameChecks = map[string]func(s string) error{
	"tenant": func(s string) error { return DefaultConfig().CheckTenant(s) },
	"run_id": func(s string) error { return CheckRunID("run id", s) },
	"new_run_id": func(s string) error {
		return DefaultConfig().CheckReplay(ReplayRequest{Tenant: "t", RunID: "r", NewRunID: s, Actor: "ops"}, 0)
	},
	"idempotency_key": func(s string) error {
		_, err := DefaultConfig().NormalizeCreate(CreateRunRequest{Tenant: "t", Operation: "work", IdempotencyKey: s, RunID: "r", Payload: []byte(`{}`)}, 0)
		return err
	},
	"worker": CheckWorker,
	"lease.owner": func(s string) error {
		return DefaultConfig().CheckLeaseRef(LeaseRef{Tenant: "t", RunID: "r", Owner: s, Generation: 1})
	},
	"actor": func(s string) error {
		return DefaultConfig().CheckReplay(ReplayRequest{Tenant: "t", RunID: "r", NewRunID: "n", Actor: s}, 0)
	},
	"relay": func(s string) error {
		_, err := DefaultConfig().CheckClaimOutbox(ClaimOutboxRequest{Relay: s, LeaseMs: 1, Limit: 1}, 0)
		return err
	},
	"error_code": func(s string) error { return DefaultConfig().CheckFail(FailRequest{Lease: okLease, ErrorCode: s}, 0) },
	"reason": func(s string) error {
		_, err := DefaultConfig().CheckCancel(CancelRequest{Tenant: "t", RunID: "r", Reason: s}, 0)
		return err
	},
	"operation": func(s string) error {
		c := DefaultConfig()
		c.Operations = map[string]OperationPolicy{s: c.Operations["work"]}
		return c.Validate()
	},
	"step": func(s string) error {
		return DefaultConfig().CheckReserveEffect(ReserveEffectRequest{Lease: okLease, Step: s, Key: "k"}, 0)
	},
	"key": func(s string) error {
		return DefaultConfig().CheckReserveEffect(ReserveEffectRequest{Lease: okLease, Step: "s", Key: s}, 0)
	},
	"provider_ref": func(s string) error {
		return DefaultConfig().CheckRecordEffect(RecordEffectRequest{Lease: okLease, Step: "s", Key: "k", State: EffectSucceeded, ProviderRef: s}, 0, false)
	},
	"subject": CheckSubject,
}

var okLease = LeaseRef{Tenant: "t", RunID: "r", Owner: "w", Generation: 1}

// notNames are the string fields of the requests that are not names of
// the porter table, with the reason.
var notNames = map[string]string{
	"state":  "a closed set (docs/protocol: EffectState, RunState): another value is invalid_argument",
	"cursor": "opaque: a list_runs page's next, passed back unchanged (ParseCursor); any other string is invalid_argument",
}

// porterRow is one row of the porter table.
type porterRow struct {
	fields      []string // the JSON names the row is about
	lo, hi      int      // length bounds
	class       [256]bool
	first       [256]bool
	emptyOK     bool
	space       bool // a space accepted inside
	leadingDash bool
}

// porterTable reads the rows between <!-- porter-names and
// <!-- /porter-names --> of SPEC.md.
func porterTable(t *testing.T) []porterRow {
	doc, err := os.ReadFile("SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start, end := strings.Index(s, "<!-- porter-names"), strings.Index(s, "<!-- /porter-names -->")
	if start < 0 || end < start {
		t.Fatal("SPEC.md has no <!-- porter-names … --> … <!-- /porter-names --> table")
	}
	ticks := regexp.MustCompile("`([^`]*)`")
	var rows []porterRow
	for _, line := range strings.Split(s[start:end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 8 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.Contains(cells[1], "JSON names") {
			continue
		}
		var r porterRow
		for _, m := range ticks.FindAllStringSubmatch(strings.Split(cells[1], "(")[0], -1) {
			r.fields = append(r.fields, m[1])
		}
		r.emptyOK = strings.Contains(cells[1], "empty")
		lo, hi, _ := strings.Cut(strings.TrimSpace(cells[2]), "–")
		r.lo, _ = strconv.Atoi(lo)
		r.hi, _ = strconv.Atoi(hi)
		r.class = byteClass(t, ticks.FindStringSubmatch(cells[3])[1])
		switch first := strings.TrimSpace(cells[4]); first {
		case "letter or digit":
			for c := range 256 {
				r.first[c] = r.class[c] && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
			}
		case "any of the class":
			r.first = r.class
		case "any of the class but `.`":
			r.first = r.class
			r.first['.'] = false
		default:
			t.Fatalf("SPEC.md's porter table: first byte %q is none of the forms this test reads", first)
		}
		r.space = strings.TrimSpace(cells[5]) == "allowed"
		r.leadingDash = strings.TrimSpace(cells[6]) == "allowed"
		rows = append(rows, r)
	}
	return rows
}

// byteClass reads a bracket expression: [a-z0-9_-], [!-~].
func byteClass(t *testing.T, expr string) [256]bool {
	var set [256]bool
	body := strings.TrimSuffix(strings.TrimPrefix(expr, "["), "]")
	for i := 0; i < len(body); i++ {
		if i+2 < len(body) && body[i+1] == '-' {
			for c := int(body[i]); c <= int(body[i+2]); c++ {
				set[c] = true
			}
			i += 2
			continue
		}
		set[body[i]] = true
	}
	return set
}

// TestPorterNamesTable holds SPEC.md's table of names to the validation
// code: for each row and each field it names, the length bounds, every
// byte inside a name and as its first byte, a space and a leading '-'
// are accepted or refused exactly as the row says; and every string field
// of every request type has a row (or is in notNames).
func TestPorterNamesTable(t *testing.T) {
	rows := porterTable(t)
	if len(rows) < 10 {
		t.Fatalf("read %d rows of SPEC.md's porter table; want one per kind of name", len(rows))
	}
	covered := map[string]bool{}
	for _, r := range rows {
		for _, field := range r.fields {
			check, ok := nameChecks[field]
			if !ok {
				t.Errorf("SPEC.md's porter table names %q, which this test cannot check (add it to nameChecks)", field)
				continue
			}
			covered[field] = true
			checkRow(t, field, r, check)
		}
	}
	for field := range nameChecks {
		if !covered[field] {
			t.Errorf("%s: checked here but in no row of SPEC.md's porter table", field)
		}
	}
	for _, o := range Operations() {
		for _, path := range stringFields(o.Request, "") {
			if !coveredBy(covered, path) && notNames[path[strings.LastIndex(path, ".")+1:]] == "" {
				t.Errorf("%s params: the string field %s has no row in SPEC.md's porter table (\"For porters\"): add one, "+
					"with its limits from the validation code, or list it in notNames with why", o.Op, path)
			}
		}
	}
}

// coveredBy reports whether a row names the field at path: by its whole
// path or a tail of it ("lease.owner" covers "requests.lease.owner").
func coveredBy(covered map[string]bool, path string) bool {
	for f := range covered {
		if path == f || strings.HasSuffix(path, "."+f) {
			return true
		}
	}
	return false
}

func checkRow(t *testing.T, field string, r porterRow, check func(string) error) {
	t.Helper()
	accepts := func(s string) bool { return check(s) == nil }
	fill := func(n int) string { return strings.Repeat("a", n) }
	if got := accepts(""); got != (r.lo == 0 || r.emptyOK) {
		t.Errorf("%s: the empty name accepted %v; the table says %d–%d bytes (empty allowed: %v)", field, got, r.lo, r.hi, r.emptyOK)
	}
	if r.lo > 0 && !accepts(fill(r.lo)) || !accepts(fill(r.hi)) || accepts(fill(r.hi+1)) {
		t.Errorf("%s: %d, %d and %d bytes accepted %v, %v, %v; the table says %d–%d",
			field, r.lo, r.hi, r.hi+1, accepts(fill(r.lo)), accepts(fill(r.hi)), accepts(fill(r.hi+1)), r.lo, r.hi)
	}
	var inside, first []string
	for c := range 256 {
		b := string([]byte{byte(c)})
		if accepts("a"+b+"a") != r.class[c] {
			inside = append(inside, fmt.Sprintf("0x%02x", c))
		}
		if accepts(b+"a") != r.first[c] {
			first = append(first, fmt.Sprintf("0x%02x", c))
		}
	}
	if len(inside) > 0 {
		t.Errorf("%s: inside a name, the bytes %v are not as the table's class says", field, inside)
	}
	if len(first) > 0 {
		t.Errorf("%s: as the first byte, %v are not as the table says", field, first)
	}
	if accepts("a a") != r.space || accepts("-a") != r.leadingDash {
		t.Errorf("%s: a space accepted %v, a leading '-' %v; the table says %v, %v", field, accepts("a a"), accepts("-a"), r.space, r.leadingDash)
	}
}

// stringFields lists the JSON paths of the plain string fields of t.
func stringFields(t reflect.Type, path string) []string {
	var out []string
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 {
			out = stringFields(t.Elem(), path)
		}
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			out = append(out, stringFields(f.Type, join(path, name))...)
		}
	case reflect.String:
		out = append(out, path)
	}
	return slices.Compact(out)
}

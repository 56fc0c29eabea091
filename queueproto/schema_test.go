package queueproto

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

type schemaDef struct {
	Properties map[string]struct {
		Enum  []string `json:"enum"`
		Const any      `json:"const"`
	} `json:"properties"`
	Required []string `json:"required"`
}

func loadSchema(t *testing.T) map[string]schemaDef {
	t.Helper()
	raw, err := os.ReadFile("../docs/adapter.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]schemaDef `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/adapter.schema.json: %v", err)
	}
	return doc.Defs
}

// jsonFields returns a struct type's wire names and the ones that are
// always present (no omitempty), following embedded structs.
func jsonFields(t reflect.Type) (all, always []string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			a, b := jsonFields(ft)
			all, always = append(all, a...), append(always, b...)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		all = append(all, name)
		if !strings.Contains(opts, "omitempty") {
			always = append(always, name)
		}
	}
	return all, always
}

// TestSchemaMatchesTheTypes holds docs/adapter.schema.json to the Go types:
// every definition named for a type has exactly its fields, and requires
// exactly the ones the type always writes; every enum is the Go list.
func TestSchemaMatchesTheTypes(t *testing.T) {
	defs := loadSchema(t)
	types := map[string]any{
		"Request": Request{}, "Error": Error{}, "Started": Started{}, "HelloParams": HelloParams{},
		"Hello": Hello{}, "Feature": Feature{}, "Delivery": Delivery{}, "Exhausted": Exhausted{},
		"Setting": Setting{}, "Reference": Reference{}, "OpenParams": OpenParams{},
		"EnqueueParams": EnqueueParams{}, "EnqueueResult": EnqueueResult{}, "JobParams": JobParams{},
		"JobInfo": JobInfo{}, "JobsResult": JobsResult{}, "RowsResult": RowsResult{},
		"CancelResult": CancelResult{}, "StartParams": StartParams{}, "FinishParams": FinishParams{},
		"HandleParams": HandleParams{}, "HeartbeatResult": HeartbeatResult{},
		"CompleteInTxParams": CompleteInTxParams{}, "CompleteInTxResult": CompleteInTxResult{}, "Empty": Empty{},
	}
	for name, v := range types {
		def, ok := defs[name]
		if !ok {
			t.Errorf("schema has no $defs/%s", name)
			continue
		}
		all, always := jsonFields(reflect.TypeOf(v))
		if name == "Started" {
			all, always = append(all, "event"), append(always, "event")
		}
		var props []string
		for p := range def.Properties {
			props = append(props, p)
		}
		sort.Strings(all)
		sort.Strings(always)
		sort.Strings(props)
		req := slices.Sorted(slices.Values(def.Required))
		if !slices.Equal(all, props) {
			t.Errorf("$defs/%s has properties %v, the Go type %v", name, props, all)
		}
		if !slices.Equal(always, req) {
			t.Errorf("$defs/%s requires %v, the Go type always writes %v", name, req, always)
		}
	}
	// The reply is the reply half of Message.
	reply := defs["Reply"]
	for _, f := range []string{"in_reply_to", "result", "error"} {
		if _, ok := reply.Properties[f]; !ok {
			t.Errorf("$defs/Reply lacks %s", f)
		}
	}
	enums := []struct {
		def, prop string
		want      []string
	}{
		{"Request", "op", Ops},
		{"Error", "code", ErrorCodes},
		{"JobInfo", "state", States},
		{"FinishParams", "do", []string{DoComplete, DoRetry}},
		{"CancelResult", "outcome", []string{CancelCancelled, CancelRequested, CancelRefused}},
		{"EnqueueParams", "tx", []string{TxCommit, TxRollback}},
		{"Delivery", "semantics", []string{AtLeastOnce, ExactlyOnce, AtMostOnce}},
		{"Hello", "needs", []string{NeedPostgres, NeedRedis, NeedDir}},
	}
	for _, e := range enums {
		got := defs[e.def].Properties[e.prop].Enum
		if !slices.Equal(got, e.want) {
			t.Errorf("$defs/%s.%s enum is %v, the Go list %v", e.def, e.prop, got, e.want)
		}
	}
	raw, _ := os.ReadFile("../docs/adapter.schema.json")
	var hello struct {
		Defs struct {
			Hello struct {
				Properties struct {
					Features struct {
						Required []string `json:"required"`
					} `json:"features"`
				} `json:"properties"`
			} `json:"Hello"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &hello); err != nil {
		t.Fatal(err)
	}
	if got := hello.Defs.Hello.Properties.Features.Required; !slices.Equal(got, Features) {
		t.Errorf("$defs/Hello.features requires %v, the Go list %v", got, Features)
	}
}

// TestDocListsEveryOp holds docs/ADAPTERS.md's request table to Ops, in order.
func TestDocListsEveryOp(t *testing.T) {
	raw, err := os.ReadFile("../docs/ADAPTERS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "## Requests")
	if !ok {
		t.Fatal("docs/ADAPTERS.md has no ## Requests section")
	}
	table, _, _ := strings.Cut(after, "\n\n### ")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(table, -1) {
		got = append(got, m[1])
	}
	if !slices.Equal(got, Ops) {
		t.Errorf("docs/ADAPTERS.md's request table lists %v; queueproto.Ops is %v", got, Ops)
	}
}

// opTypes is each request's params and result type.
var opTypes = map[string]struct{ params, result any }{
	OpHello: {&HelloParams{}, &Hello{}}, OpOpen: {&OpenParams{}, &Empty{}}, OpEnqueue: {&EnqueueParams{}, &EnqueueResult{}},
	OpState: {&JobParams{}, &JobInfo{}}, OpJobs: {&Empty{}, &JobsResult{}}, OpRows: {&JobParams{}, &RowsResult{}},
	OpCancel: {&JobParams{}, &CancelResult{}}, OpExpire: {&JobParams{}, &Empty{}}, OpMakeDue: {&JobParams{}, &Empty{}},
	OpStart: {&StartParams{}, &Empty{}}, OpStop: {&Empty{}, &Empty{}}, OpFinish: {&FinishParams{}, &Empty{}},
	OpHeartbeat: {&HandleParams{}, &HeartbeatResult{}}, OpCompleteInTx: {&CompleteInTxParams{}, &CompleteInTxResult{}},
}

// TestDocTranscriptDecodes holds docs/ADAPTERS.md's session to the types:
// every request decodes strictly with its op's params, every reply with its
// op's result, every event as a started event (abridged hellos excepted).
func TestDocTranscriptDecodes(t *testing.T) {
	for _, op := range Ops {
		if _, ok := opTypes[op]; !ok {
			t.Errorf("opTypes lacks %s", op)
		}
	}
	raw, err := os.ReadFile("../docs/ADAPTERS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(raw), "## A session")
	block, _, _ := strings.Cut(strings.SplitN(after, "```\n", 2)[1], "```")
	line := regexp.MustCompile(`^([A-Z][0-9]*)([<>]) +(\{.*\})$`)
	inFlight := map[string]string{} // process -> op in flight
	n := 0
	for _, l := range strings.Split(block, "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil || strings.Contains(l, "…") {
			continue
		}
		n++
		proc, dir, msg := m[1], m[2], []byte(m[3])
		if dir == ">" {
			var r Request
			if err := strictUnmarshal(msg, &r); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			types, ok := opTypes[r.Op]
			if !ok {
				t.Fatalf("%s: unknown op", l)
			}
			if err := strictUnmarshal(r.Params, types.params); err != nil {
				t.Errorf("%s: params: %v", l, err)
			}
			inFlight[proc] = r.Op
			continue
		}
		var mm Message
		if err := strictUnmarshal(msg, &mm); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if mm.Event != "" {
			continue
		}
		op := inFlight[proc]
		if err := strictUnmarshal(mm.Result, opTypes[op].result); err != nil {
			t.Errorf("%s: result of %s: %v", l, op, err)
		}
	}
	if n < 20 {
		t.Fatalf("read %d lines of the transcript; the section moved?", n)
	}
}

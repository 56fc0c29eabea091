package scenarios

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// A store operation step is its request written with the request type's JSON
// field names (spec), with three conveniences, each decided by the field's
// Go type rather than by the operation: the tenant is the scenario's; a
// lease (spec.LeaseRef) is the name a claim bound; bytes (a payload or a
// result) are the JSON value itself, passed byte for byte.

var (
	reflectLeaseRef  = reflect.TypeFor[spec.LeaseRef]()
	reflectBytes     = reflect.TypeFor[[]byte]()
	reflectLeases    = reflect.TypeFor[[]spec.Lease]()
	reflectCreateRun = reflect.TypeFor[spec.CreateRunRequest]()
)

// field is one field of a request type as a scenario writes it.
type field struct {
	name     string
	typ      reflect.Type
	required bool // the request has no use for its zero value (no omitempty)
}

// requestFields lists the fields of a request type a step writes: every
// JSON field but the tenant.
func requestFields(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "tenant" || name == "" || name == "-" {
			continue
		}
		out = append(out, field{name: name, typ: f.Type, required: opts != "omitempty"})
	}
	return out
}

// fieldDefault is the value a step's request field takes when the step
// does not write it (nil: no default). The worker of a claim defaults to the
// client (see request).
func fieldDefault(name string) any {
	switch name {
	case "operation":
		return "work"
	case "limit":
		return 1
	case "payload":
		return json.RawMessage("{}")
	case "worker":
		return "" // the client's name
	}
	return nil
}

// request builds the step's request for tenant, resolving each lease name
// with lease.
func (st *Step) request(tenant string, lease func(name string) (spec.LeaseRef, error)) (spec.Request, error) {
	obj := map[string]any{}
	if _, hasTenant := st.row.Request.FieldByName("Tenant"); hasTenant {
		obj["tenant"] = tenant
	}
	for _, f := range requestFields(st.row.Request) {
		raw, set := st.Fields[f.name]
		if !set {
			switch d := fieldDefault(f.name); {
			case f.name == "worker":
				obj[f.name] = st.Client
			case d != nil:
				raw, _ = json.Marshal(d)
			default:
				continue
			}
			if raw == nil {
				continue
			}
		}
		v, err := convert(f.typ, raw, f.name, tenant, lease)
		if err != nil {
			return nil, err
		}
		obj[f.name] = v
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return st.row.DecodeRequest(body)
}

// convert turns the JSON a step wrote for a value of type t into the JSON of
// the request: a lease name into the lease, a JSON value into its bytes,
// recursively through structs and slices; anything else as written.
//
// A member of create_runs (a spec.CreateRunRequest inside a request) is
// written as a create_run step's request: without its tenant (the
// scenario's), with the defaults of operation and payload.
func convert(t reflect.Type, raw json.RawMessage, path, tenant string, lease func(string) (spec.LeaseRef, error)) (any, error) {
	switch {
	case t == reflectLeaseRef:
		var name string
		if err := strictDecode(raw, &name); err != nil {
			return nil, fmt.Errorf("field %q: a lease is the name a claim bound: %v", path, err)
		}
		return lease(name)
	case t == reflectBytes:
		return []byte(bytes.TrimSpace(raw)), nil
	case t.Kind() == reflect.Struct:
		var obj map[string]json.RawMessage
		if err := strictDecode(raw, &obj); err != nil {
			return nil, fmt.Errorf("field %q: %v", path, err)
		}
		out := map[string]any{}
		for _, f := range requestFields(t) {
			if v, set := obj[f.name]; set {
				c, err := convert(f.typ, v, path+"."+f.name, tenant, lease)
				if err != nil {
					return nil, err
				}
				out[f.name] = c
				delete(obj, f.name)
			}
		}
		if t == reflectCreateRun {
			out["tenant"] = tenant
			if _, set := out["operation"]; !set {
				out["operation"] = fieldDefault("operation")
			}
			if _, set := out["payload"]; !set {
				out["payload"] = []byte(fieldDefault("payload").(json.RawMessage))
			}
		}
		return out, nil
	case t.Kind() == reflect.Slice:
		var list []json.RawMessage
		if err := strictDecode(raw, &list); err != nil {
			return nil, fmt.Errorf("field %q: %v", path, err)
		}
		out := make([]any, len(list))
		for i, v := range list {
			c, err := convert(t.Elem(), v, fmt.Sprintf("%s[%d]", path, i), tenant, lease)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return raw, nil
}

// leaseNames returns the lease names the step's request presents.
func (st *Step) leaseNames() []string {
	var names []string
	if st.Store() {
		_, _ = st.request("t", func(name string) (spec.LeaseRef, error) {
			names = append(names, name)
			return spec.LeaseRef{}, nil
		})
	}
	return names
}

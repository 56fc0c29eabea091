package queueproto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
)

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// strictUnmarshal decodes data into v refusing what the protocol forbids:
// an unknown field, trailing data, and a missing field that v's type always
// writes (one without omitempty), at any depth.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value")
	}
	var raw any
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	return present(raw, reflect.TypeOf(v).Elem(), "")
}

// present checks that raw, decoded from JSON, has every field that t always
// writes.
func present(raw any, t reflect.Type, path string) error {
	if raw == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := raw.(map[string]any)
		if !ok {
			return nil // the decoder already refused a mistyped value
		}
		return presentFields(obj, t, path)
	case reflect.Slice:
		list, _ := raw.([]any)
		for i, e := range list {
			if err := present(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, _ := raw.(map[string]any)
		for k, e := range obj {
			if err := present(e, t.Elem(), path+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

func presentFields(obj map[string]any, t reflect.Type, path string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				continue // an optional group (Message's event fields), checked by its reader
			}
			if err := presentFields(obj, ft, path); err != nil {
				return err
			}
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		val, ok := obj[name]
		if !ok {
			if !strings.Contains(opts, "omitempty") {
				return fmt.Errorf("missing field %q", strings.TrimPrefix(path+"."+name, "."))
			}
			continue
		}
		if err := present(val, f.Type, path+"."+name); err != nil {
			return err
		}
	}
	return nil
}

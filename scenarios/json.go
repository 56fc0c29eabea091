package scenarios

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// strictDecode decodes one JSON value into v, rejecting unknown object fields
// and anything after the value.
func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// checkDuplicateKeys rejects a text in which an object repeats a key. Go's
// decoder would silently keep the last one, and a port's parser might keep
// the first; a scenario must mean one thing.
func checkDuplicateKeys(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := walkValue(dec, "$"); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func walkValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("invalid JSON at %s: %w", path, err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return fmt.Errorf("invalid JSON at %s: %w", path, err)
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("duplicate key %q in the object at %s", key, path)
			}
			seen[key] = true
			if err := walkValue(dec, path+"."+key); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return fmt.Errorf("invalid JSON at %s: %w", path, err)
	}
	return nil
}

package bootstrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// JSON kinds, as named in ErrWrongType messages.
const (
	kindObject = "object"
	kindArray  = "array"
	kindString = "string"
	kindBool   = "boolean"
	kindNull   = "null"
	kindNumber = "number"
)

// jsonKind returns the JSON type of raw, which must be valid JSON.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindNull
	}
	switch raw[0] {
	case '{':
		return kindObject
	case '[':
		return kindArray
	case '"':
		return kindString
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	default:
		return kindNumber
	}
}

// wrongType returns the error for a value at path that is not of kind want.
func wrongType(path, want string, raw json.RawMessage) error {
	return fieldError(path, fmt.Errorf("%w: want %s, got %s", ErrWrongType, want, jsonKind(raw)))
}

// missing returns the error for a required field at path.
func missing(path string) error {
	return fieldError(path, ErrMissingField)
}

// join appends a member name to a JSON path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// index appends an array index to a JSON path.
func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// mapKey appends a map key to a JSON path; keys are quoted because authority
// and certificate provider names may contain dots.
func mapKey(path, k string) string { return fmt.Sprintf("%s[%q]", path, k) }

// object is a decoded JSON object whose members are still raw.
type object map[string]json.RawMessage

// decodeObject decodes raw, which must be a JSON object.
func decodeObject(path string, raw json.RawMessage) (object, error) {
	if jsonKind(raw) != kindObject {
		return nil, wrongType(path, kindObject, raw)
	}
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fieldError(path, err)
	}
	return o, nil
}

// decodeArray decodes raw, which must be a JSON array.
func decodeArray(path string, raw json.RawMessage) ([]json.RawMessage, error) {
	if jsonKind(raw) != kindArray {
		return nil, wrongType(path, kindArray, raw)
	}
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fieldError(path, err)
	}
	return a, nil
}

// decodeString decodes raw, which must be a JSON string.
func decodeString(path string, raw json.RawMessage) (string, error) {
	if jsonKind(raw) != kindString {
		return "", wrongType(path, kindString, raw)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fieldError(path, err)
	}
	return s, nil
}

// get returns the member name of o; ok is false when it is absent or null,
// which the bootstrap treats alike.
func (o object) get(name string) (raw json.RawMessage, ok bool) {
	raw, ok = o[name]
	if !ok || jsonKind(raw) == kindNull {
		return nil, false
	}
	return raw, true
}

// str returns the string member name of o (at path), or "" when it is absent
// or null.
func (o object) str(path, name string) (string, error) {
	raw, ok := o.get(name)
	if !ok {
		return "", nil
	}
	return decodeString(join(path, name), raw)
}

// obj returns the object member name of o (at path), or nil when it is absent
// or null.
func (o object) obj(path, name string) (object, error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, nil
	}
	return decodeObject(join(path, name), raw)
}

// sortedKeys returns the member names of o in order, so that the first error
// reported for a map is the same on every run.
func (o object) sortedKeys() []string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// quoteList formats names as ["a", "b"] for error messages.
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

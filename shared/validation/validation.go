// Package validation is how the domain packages report a request that breaks
// their rules: every broken rule, by field, so the HTTP edge can answer one
// RFC 9457 problem listing them all.
package validation

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Field is one rule a request broke.
type Field struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error lists every rule a request broke; nothing was stored.
type Error struct {
	Errors []Field
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Errors))
	for i, f := range e.Errors {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Add records a broken rule.
func (e *Error) Add(field, format string, args ...any) {
	e.Errors = append(e.Errors, Field{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err returns e if it holds any broken rule, else nil.
func (e *Error) Err() error {
	if len(e.Errors) == 0 {
		return nil
	}
	return e
}

// New returns an Error of one field.
func New(field, format string, args ...any) *Error {
	e := &Error{}
	e.Add(field, format, args...)
	return e
}

// Object reads body as one JSON object whose fields are all in known,
// recording what is wrong in e; nil means the body is not such an object. An
// empty body is an empty object when emptyOK.
func (e *Error) Object(body []byte, known map[string]bool, emptyOK bool) map[string]json.RawMessage {
	if emptyOK && len(bytes.TrimSpace(body)) == 0 {
		return map[string]json.RawMessage{}
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil || raw == nil {
		e.Add("body", "must be a JSON object")
		return nil
	}
	if dec.More() {
		e.Add("body", "must hold one JSON object and nothing after it")
		return nil
	}
	// A key given twice is refused, not settled by its last value: of a
	// signed body, the sender and a reader that keeps the first value
	// would disagree on what was signed.
	for _, k := range duplicates(body, len(raw)) {
		e.Add(cmp.Or(k, "body"), "is given more than once")
	}
	var unknown []string
	for k := range raw {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		if k == "" {
			// A problem's field names what the client sent; "" names nothing.
			e.Add("body", "holds a field with an empty name")
			continue
		}
		if name, ok := foldedName(k, known); ok {
			e.Add(k, "unknown field: field names are case-sensitive (%s)", name)
			continue
		}
		e.Add(k, "unknown field")
	}
	return raw
}

// foldedName is the known field k spells in another case, if any.
func foldedName(k string, known map[string]bool) (string, bool) {
	for name := range known {
		if strings.EqualFold(name, k) {
			return name, true
		}
	}
	return "", false
}

// duplicates lists, sorted, the keys given more than once in body, one
// valid JSON object that decoded into a map of n keys. It costs one scan
// without allocation when there are none: the object has as many members
// as colons at its own depth outside strings.
func duplicates(body []byte, n int) []string {
	members, depth, inString, escaped := 0, 0, false, false
	for _, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ':' && depth == 1:
			members++
		}
	}
	if members <= n {
		return nil
	}
	// The rare case: name them, by the keys as the map holds them
	// (unescaped), so that "st\u0061tus" counts as "status".
	dec := json.NewDecoder(bytes.NewReader(body))
	seen, dup := map[string]bool{}, map[string]bool{}
	if _, err := dec.Token(); err != nil { // {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := t.(string)
		if seen[k] {
			dup[k] = true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	out := make([]string, 0, len(dup))
	for k := range dup {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// String reads a required string field.
func (e *Error) String(raw map[string]json.RawMessage, name string) (string, bool) {
	v, ok := raw[name]
	if !ok {
		e.Add(name, "is required")
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		e.Add(name, "must be a string")
		return "", false
	}
	return s, true
}

// OptionalString reads a string field that may be absent or null (then
// ""); ok is false when it is something else (and then e says so).
func (e *Error) OptionalString(raw map[string]json.RawMessage, name string) (string, bool) {
	v, ok := raw[name]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return "", true
	}
	return e.String(raw, name)
}

// Int reads an integer field within lo..hi; an absent one is def, unless
// required.
func (e *Error) Int(raw map[string]json.RawMessage, name string, def, lo, hi int64, required bool) (int64, bool) {
	v, ok := raw[name]
	if !ok {
		if required {
			e.Add(name, "is required")
			return def, false
		}
		return def, true
	}
	var x any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	_ = dec.Decode(&x)
	n, isNumber := x.(json.Number)
	i, err := n.Int64()
	if !isNumber || err != nil || i < lo || i > hi {
		e.Add(name, "must be a whole number within %d..%d", lo, hi)
		return def, false
	}
	return i, true
}

// Time reads an RFC 3339 time field, kept to the millisecond, in UTC; ok is
// false when it is absent or wrong (and then e says which).
func (e *Error) Time(raw map[string]json.RawMessage, name string) (t time.Time, present, ok bool) {
	v, present := raw[name]
	if !present {
		return time.Time{}, false, false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		e.Add(name, "must be an RFC 3339 time string")
		return time.Time{}, true, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		e.Add(name, "must be an RFC 3339 time such as \"2026-11-29T10:00:00.250Z\"")
		return time.Time{}, true, false
	}
	return t.UTC().Truncate(time.Millisecond), true, true
}

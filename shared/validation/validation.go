// Package validation is how the domain packages report a request that breaks
// their rules: every broken rule, by field, so the HTTP edge can answer one
// RFC 9457 problem listing them all.
package validation

import (
	"bytes"
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
		e.Add(k, "unknown field")
	}
	return raw
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

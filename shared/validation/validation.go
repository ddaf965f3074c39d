// Package validation is how the domain packages report a request that breaks
// their rules: every broken rule, by field, so the HTTP edge can answer one
// RFC 9457 problem listing them all.
package validation

import (
	"fmt"
	"strings"
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

package validation_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/validation"
)

// TestObjectReadsExactly: a body is one JSON object whose keys are known,
// spelled as they are (case-sensitive) and given once each; a key given
// twice is refused whatever its spelling in the JSON text, and only keys of
// the object itself count (a nested object's, or a colon in a string, do
// not).
func TestObjectReadsExactly(t *testing.T) {
	known := map[string]bool{"status": true, "reason": true}
	for _, c := range []struct {
		name, body string
		want       []validation.Field
	}{
		{"exact", `{"status":"paid","reason":"a:b {\"c\":1}"}`, nil},
		{"nested keys are the value's own", `{"status":"paid","reason":{"x":1,"x":2,"y":[{"z":1}]}}`, nil},
		{"a duplicate", `{"status":"paid","status":"failed"}`, []validation.Field{{Field: "status", Message: "is given more than once"}}},
		{"an escaped duplicate", `{"status":"paid","st\u0061tus":"failed"}`, []validation.Field{{Field: "status", Message: "is given more than once"}}},
		{"two duplicates, sorted", `{"status":1,"reason":2,"status":3,"reason":4,"reason":5}`, []validation.Field{
			{Field: "reason", Message: "is given more than once"}, {Field: "status", Message: "is given more than once"}}},
		{"another case", `{"status":"paid","Status":"failed"}`, []validation.Field{
			{Field: "Status", Message: "unknown field: field names are case-sensitive (status)"}}},
		{"unknown", `{"status":"paid","amount":"1"}`, []validation.Field{{Field: "amount", Message: "unknown field"}}},
		{"an empty name twice", `{"":1,"":2}`, []validation.Field{
			{Field: "body", Message: "is given more than once"}, {Field: "body", Message: "holds a field with an empty name"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &validation.Error{}
			if raw := e.Object([]byte(c.body), known, false); raw == nil {
				t.Fatalf("not read as an object: %v", e)
			}
			if diff := cmp.Diff(c.want, e.Errors); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkObject: the duplicate check on a body without duplicates (a
// withdrawal create's) allocates nothing of its own.
func BenchmarkObject(b *testing.B) {
	known := map[string]bool{"amount": true, "currency": true, "destination": true, "delay_seconds": true}
	body := []byte(`{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`)
	b.ReportAllocs()
	for b.Loop() {
		e := &validation.Error{}
		_ = e.Object(body, known, false)
	}
}

package withdrawal_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func TestParseReschedule(t *testing.T) {
	cases := []struct {
		name   string
		body   string
		fields []string
		due    time.Duration
	}{
		{name: "delay", body: `{"delay_seconds":600}`, due: 600 * time.Second},
		{name: "delay 0", body: `{"delay_seconds":0}`},
		{name: "process_at, to the ms", body: `{"process_at":"2026-11-29T11:00:00.257Z"}`, due: time.Hour + 7*time.Millisecond},
		{name: "process_at now", body: `{"process_at":"2026-11-29T10:00:00.250Z"}`},
		{name: "neither", body: `{}`, fields: []string{"delay_seconds"}},
		{name: "both", body: `{"delay_seconds":1,"process_at":"2026-11-29T11:00:00Z"}`, fields: []string{"process_at"}},
		{name: "another field", body: `{"delay_seconds":1,"destination":"d"}`, fields: []string{"destination"}},
		{name: "only another field", body: `{"amount":"1"}`, fields: []string{"amount", "delay_seconds"}},
		{name: "negative", body: `{"delay_seconds":-1}`, fields: []string{"delay_seconds"}},
		{name: "over the maximum", body: `{"delay_seconds":2592001}`, fields: []string{"delay_seconds"}},
		{name: "past", body: `{"process_at":"2026-11-29T10:00:00.249Z"}`, fields: []string{"process_at"}},
		{name: "too far", body: `{"process_at":"2026-12-29T10:00:01Z"}`, fields: []string{"process_at"}},
		{name: "not JSON", body: `{"delay_seconds":`, fields: []string{"body"}},
		{name: "empty", body: ``, fields: []string{"body"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			due, err := rules().ParseReschedule([]byte(tc.body), t0)
			var verr *validation.Error
			if tc.fields == nil {
				if err != nil || !due.Equal(t0.Add(tc.due)) {
					t.Fatalf("due %v %v, want %v", due, err, t0.Add(tc.due))
				}
				return
			}
			if !errors.As(err, &verr) {
				t.Fatalf("err %v, want a validation error", err)
			}
			var got []string
			for _, f := range verr.Errors {
				got = append(got, f.Field)
			}
			if diff := cmp.Diff(tc.fields, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseIfMatch(t *testing.T) {
	id := withdrawal.NewID(t0)
	rev := func(r int64) *int64 { return &r }
	cases := []struct {
		header  string
		want    *int64
		invalid bool
	}{
		{header: ""},
		{header: "*"},
		{header: " * "},
		{header: withdrawal.ETagOf(id, 0), want: rev(0)},
		{header: withdrawal.ETagOf(id, 12), want: rev(12)},
		{header: "W/" + withdrawal.ETagOf(id, 12), want: rev(-1)},           // weak never matches
		{header: withdrawal.ETagOf(withdrawal.NewID(t0), 3), want: rev(-1)}, // another's
		{header: `"` + id + `.07"`, want: rev(-1)},                          // not one we made
		{header: `"` + id + `.-1"`, want: rev(-1)},
		{header: `"opaque"`, want: rev(-1)},
		{header: id + ".0", invalid: true},
		{header: `"` + id, invalid: true},
		{header: `""`, want: rev(-1)}, // an empty tag is one, and matches nothing
		{header: `"a b"`, invalid: true},
		{header: withdrawal.ETagOf(id, 0) + ", " + withdrawal.ETagOf(id, 1), invalid: true},
	}
	for _, tc := range cases {
		got, err := withdrawal.ParseIfMatch(tc.header, id)
		var verr *validation.Error
		switch {
		case tc.invalid:
			if !errors.As(err, &verr) || verr.Errors[0].Field != "If-Match" {
				t.Errorf("If-Match %q: %v, want a validation error of If-Match", tc.header, err)
			}
		case err != nil:
			t.Errorf("If-Match %q: %v", tc.header, err)
		case (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want):
			t.Errorf("If-Match %q: revision %v, want %v", tc.header, deref(got), deref(tc.want))
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

package withdrawal_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
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
			// The API parses the body; the service's clock judges the time.
			when, err := httpapi.ParseReschedule(rules(), []byte(tc.body))
			var due time.Time
			if err == nil {
				due, err = rules().Due(when, t0)
			}
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
		got, err := httpapi.ParseIfMatch(tc.header, id)
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

// TestOperatorReschedule: an operator moves anyone's withdrawal with a
// name and a reason, by the rules of process_at; a bad request stores
// nothing.
func TestOperatorReschedule(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b, clock.NewFake(t0))
		c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k1", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name       string
			due        time.Time
			by, reason string
			fields     []string
		}{
			{"no reason", t0.Add(time.Hour), "jane", " ", []string{"reason"}},
			{"no operator", t0.Add(time.Hour), "", "r", []string{"by"}},
			{"as the user", t0.Add(time.Hour), withdrawal.ByUser, "r", []string{"by"}},
			{"in the past", t0.Add(-time.Millisecond), "jane", "r", []string{"due"}},
			{"too far", t0.Add(31 * 24 * time.Hour), "jane", "", []string{"due", "reason"}},
		} {
			_, err := e.svc.RescheduleBy(ctx, c.ID, tc.due, tc.by, tc.reason)
			var verr *validation.Error
			if !errors.As(err, &verr) {
				t.Fatalf("%s: %v, want a validation error", tc.name, err)
			}
			var got []string
			for _, f := range verr.Errors {
				got = append(got, f.Field)
			}
			if diff := cmp.Diff(tc.fields, got); diff != "" {
				t.Errorf("%s: fields (-want +got):\n%s", tc.name, diff)
			}
		}
		if w, _ := e.svc.Get(ctx, "alice", c.ID); w.Revision != 0 {
			t.Fatalf("a refused reschedule wrote: %+v", w)
		}
		due := t0.Add(2*time.Hour + 3*time.Millisecond)
		w, err := e.svc.RescheduleBy(ctx, c.ID, due, "jane", "customer called")
		if err != nil || !w.DueAt.Equal(due) || w.RescheduledBy != "jane" || w.RescheduleReason != "customer called" || w.UserID != "alice" {
			t.Fatalf("operator reschedule: %+v %v", w, err)
		}
		if _, err := e.svc.RescheduleBy(ctx, withdrawal.NewID(t0), due, "jane", "r"); !errors.Is(err, withdrawal.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	})
}

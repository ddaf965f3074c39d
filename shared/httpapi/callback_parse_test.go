package httpapi_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// TestSignedCallbacksAreReadExactly: a signed callback means one thing. A
// key spelled in another case, a key given twice (even as an escape of the
// same name) and a field the contract does not have are refused with 400
// validation_failed naming the key, and nothing is applied; before, the
// decoder matched keys case-insensitively and kept the last duplicate, so
// {"status":"paid","Status":"failed"} settled the withdrawal as failed.
func TestSignedCallbacksAreReadExactly(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		v, _ := s.create(t, key("exact"))
		sent(t, s, v.ID)
		for _, c := range []struct {
			name, body string
			fields     []string
		}{
			{"a key in another case", `{"event_id":"ev-1","withdrawal_id":"` + v.ID + `","status":"paid","Status":"failed"}`, []string{"Status"}},
			{"only the other case", `{"event_id":"ev-1","withdrawal_id":"` + v.ID + `","Status":"failed"}`, []string{"Status", "status"}},
			{"a key twice", `{"event_id":"ev-1","withdrawal_id":"` + v.ID + `","status":"paid","status":"failed"}`, []string{"status"}},
			{"a key twice, escaped", `{"event_id":"ev-1","withdrawal_id":"` + v.ID + `","status":"paid","st\u0061tus":"failed"}`, []string{"status"}},
			{"the id twice", `{"event_id":"ev-1","withdrawal_id":"wd_other","withdrawal_id":"` + v.ID + `","status":"failed"}`, []string{"withdrawal_id"}},
			{"an unknown field", `{"event_id":"ev-1","withdrawal_id":"` + v.ID + `","status":"failed","amount":"1.00"}`, []string{"amount"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				checkProblem(t, s.invoke(t, callback(t, webhookSecret, c.body, time.Time{})),
					want{status: 400, code: "validation_failed", fields: c.fields})
			})
		}
		if got := wantView(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)).Body); got.Status != withdrawal.Processing {
			t.Fatalf("after refused callbacks the withdrawal is %s, want processing", got.Status)
		}
		// The same event, read exactly, applies.
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-1", v.ID, "paid"), time.Time{})), "paid", "applied")
	})
}

// TestParseCallback: what the callback parser takes and what it refuses,
// field by field.
func TestParseCallback(t *testing.T) {
	const id = "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z"
	for _, c := range []struct {
		name, body string
		want       withdrawal.Callback
		errs       []validation.Field
	}{
		{name: "all fields", body: `{"event_id":"e","withdrawal_id":"` + id + `","payout_id":"po","status":"returned","reason":"r"}`,
			want: withdrawal.Callback{EventID: "e", PayoutID: "po", Status: withdrawal.Returned, Reason: "r"}},
		{name: "optional fields absent or null", body: `{"event_id":"e","withdrawal_id":"` + id + `","payout_id":null,"status":"paid"}`,
			want: withdrawal.Callback{EventID: "e", Status: withdrawal.Paid}},
		{name: "case differs", body: `{"Event_ID":"e","withdrawal_id":"` + id + `","status":"paid"}`, errs: []validation.Field{
			{Field: "Event_ID", Message: "unknown field: field names are case-sensitive (event_id)"},
			{Field: "event_id", Message: "is required"}}},
		{name: "duplicates", body: `{"event_id":"e","event_id":"e","withdrawal_id":"` + id + `","status":"paid","status":"paid"}`, errs: []validation.Field{
			{Field: "event_id", Message: "is given more than once"}, {Field: "status", Message: "is given more than once"}}},
		{name: "a nested duplicate is the value's own", body: `{"event_id":"e","withdrawal_id":"` + id + `","status":"paid","reason":{"a":1,"a":2}}`,
			errs: []validation.Field{{Field: "reason", Message: "must be a string"}}},
		{name: "colons in strings are no members", body: `{"event_id":"e:1","withdrawal_id":"` + id + `","status":"paid","reason":"a\":b"}`,
			want: withdrawal.Callback{EventID: "e:1", Status: withdrawal.Paid, Reason: `a":b`}},
		{name: "null required", body: `{"event_id":null,"withdrawal_id":"` + id + `","status":"paid"}`,
			errs: []validation.Field{{Field: "event_id", Message: "must be a string"}}},
		{name: "two objects", body: `{"event_id":"e"}{}`, errs: []validation.Field{{Field: "body", Message: "must hold one JSON object and nothing after it"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gotID, got, err := httpapi.ParseCallback([]byte(c.body))
			if c.errs != nil {
				verr, ok := err.(*validation.Error)
				if !ok {
					t.Fatalf("err %v, want a *validation.Error", err)
				}
				if diff := cmp.Diff(c.errs, verr.Errors); diff != "" {
					t.Fatalf("errors (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil || gotID != id {
				t.Fatalf("ParseCallback = %q, %v", gotID, err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("callback (-want +got):\n%s", diff)
			}
		})
	}
}

// lenientCallback is how encoding/json reads a callback into a struct:
// keys matched case-insensitively, the last duplicate kept, unknown keys
// dropped. The reader a provider or a proxy may well use.
type lenientCallback struct {
	EventID      string `json:"event_id"`
	WithdrawalID string `json:"withdrawal_id"`
	PayoutID     string `json:"payout_id"`
	Status       string `json:"status"`
	Reason       string `json:"reason"`
}

// FuzzParseCallback: a body the parser takes reads the same to any other
// reader: the lenient struct decoder agrees with it field by field, so a
// signed callback cannot mean one thing here and another to its sender.
func FuzzParseCallback(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"e","withdrawal_id":"wd_1","status":"paid"}`,
		`{"event_id":"e","withdrawal_id":"wd_1","status":"paid","Status":"failed"}`,
		`{"event_id":"e","withdrawal_id":"wd_1","status":"paid","st\u0061tus":"failed"}`,
		`{"event_id":"e","withdrawal_id":"wd_1","payout_id":"p","status":"returned","reason":"r\"}:"}`,
		`{"event_id":"e","withdrawal_id":"wd_1","status":"paid","STATUS":"paid"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, c, err := httpapi.ParseCallback(body)
		if err != nil {
			return
		}
		var l lenientCallback
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("taken %q, which encoding/json refuses: %v", body, err)
		}
		if l.WithdrawalID != id || l.EventID != c.EventID || l.PayoutID != c.PayoutID || l.Status != string(c.Status) || l.Reason != c.Reason {
			t.Fatalf("%q: taken as %s %+v, read leniently as %+v", body, id, c, l)
		}
	})
}

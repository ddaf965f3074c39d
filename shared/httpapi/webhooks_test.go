package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// webhookSecret is PAYOUT_WEBHOOK_SECRET's default, which newStack leaves.
const webhookSecret = "dev-webhook-secret"

// callback is the provider's signed callback about withdrawal id, signed at
// at (zero: now) with secret.
func callback(t *testing.T, secret, raw string, at time.Time) []byte {
	t.Helper()
	return signedPayload(t, "webhook-payout", secret, raw, at)
}

// signedPayload is fixture name with body raw, signed at at (zero: now)
// with secret.
func signedPayload(t *testing.T, name, secret, raw string, at time.Time, mods ...mod) []byte {
	t.Helper()
	if at.IsZero() {
		at = time.Now()
	}
	mods = append(mods, body(raw), header("x-hourglass-signature", signature.Sign([]byte(secret), at, []byte(raw))))
	return payload(t, name, "", mods...)
}

func callbackBody(event, id, status string) string {
	return fmt.Sprintf(`{"event_id":%q,"withdrawal_id":%q,"payout_id":"po_77","status":%q,"reason":"r"}`, event, id, status)
}

type callbackAnswer struct {
	WithdrawalID string `json:"withdrawal_id"`
	Status       string `json:"status"`
	Result       string `json:"result"`
}

func wantCallback(t *testing.T, resp events.APIGatewayV2HTTPResponse, status, result string) {
	t.Helper()
	wantJSON(t, resp, 200)
	var a callbackAnswer
	decodeStrict(t, resp.Body, &a)
	if a.Status != status || a.Result != result {
		t.Fatalf("callback answered %+v, want status %s, result %s", a, status, result)
	}
}

// TestPayoutCallbacks: the provider's callbacks settle a withdrawal, once
// per event, never backwards, and finance hears of each outcome; anything
// not signed with the webhook secret, fresh, is refused.
func TestPayoutCallbacks(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		v, _ := s.create(t, key("cb"))
		sent(t, s, v.ID) // a callback is about a payout asked for
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-1", v.ID, "paid"), time.Time{})), "paid", "applied")
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-1", v.ID, "paid"), time.Time{})), "paid", "duplicate")
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-2", v.ID, "failed"), time.Time{})), "paid", "conflict")
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-3", v.ID, "returned"), time.Time{})), "returned", "applied")
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-0", v.ID, "paid"), time.Time{})), "returned", "unchanged")
		got := wantView(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)).Body)
		if got.Status != withdrawal.Returned || got.PayoutID == nil || *got.PayoutID != "po_77" {
			t.Fatalf("after the callbacks: %+v", got)
		}
		// The withdrawal's job is due: the consumer tells finance.
		w, err := s.app.Ledger.Find(t.Context(), v.ID)
		if err != nil || !w.Untold() {
			t.Fatalf("finance must hear of the return: %+v %v", w, err)
		}
		if at, ok, err := s.app.Withdrawals.DueAt(t.Context(), w.Shard, w.ID); err != nil || !ok || at.After(time.Now()) {
			t.Fatalf("the job to tell finance is due %v (%v, %v), want now", at, ok, err)
		}
		unauthenticated := want{status: 401, code: "unauthenticated"}
		signed := callbackBody("ev-9", v.ID, "paid")
		for name, p := range map[string][]byte{
			"another secret":        callback(t, "not-the-secret", signed, time.Time{}),
			"6 minutes old":         callback(t, webhookSecret, signed, time.Now().Add(-6*time.Minute)),
			"6 minutes ahead":       callback(t, webhookSecret, signed, time.Now().Add(6*time.Minute)),
			"292 years ahead":       callback(t, webhookSecret, signed, time.Unix(9_223_372_036, 0)),
			"no signature":          payload(t, "webhook-payout", "", func(ev *events.APIGatewayV2HTTPRequest) { delete(ev.Headers, "x-hourglass-signature") }),
			"the fixture's (stale)": rawFixture(t, "webhook-payout"),
		} {
			t.Run(name, func(t *testing.T) { checkProblem(t, s.invoke(t, p), unauthenticated) })
		}
		checkProblem(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-x", withdrawal.NewID(time.Now()), "paid"), time.Time{})),
			want{status: 404, code: "not_found"})
		checkProblem(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-x", "garbage", "paid"), time.Time{})),
			want{status: 404, code: "not_found"})
		checkProblem(t, s.invoke(t, callback(t, webhookSecret, `{"event_id":"","withdrawal_id":"x","status":"lost"}`, time.Time{})),
			want{status: 400, code: "validation_failed", fields: []string{"event_id", "status"}})
		checkProblem(t, s.invoke(t, callback(t, webhookSecret, `[]`, time.Time{})),
			want{status: 400, code: "validation_failed", fields: []string{"body"}})
		// Nothing of the refused ones was applied.
		if got := wantView(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)).Body); got.Status != withdrawal.Returned {
			t.Fatalf("after refused callbacks: %+v", got)
		}
	})
}

// sent starts withdrawal id's payout attempt as the payout step does when
// it falls due: its call to the provider may be on its way.
func sent(t *testing.T, s *stack, id string) withdrawal.Withdrawal {
	t.Helper()
	w, err := s.app.Ledger.Find(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	got, start, err := s.app.Ledger.Begin(t.Context(), w.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(w.DueAt),
		Now: w.DueAt, Until: w.DueAt.Add(time.Minute)})
	if err != nil || start != withdrawal.StartAttempt {
		t.Fatalf("begin %s: %v %v", id, start, err)
	}
	return got
}

// TestPayoutCallbackForAWithdrawalNeverSent: a signed callback about a
// withdrawal never sent to the provider (scheduled, or cancelled before any
// call) is refused, 409 not_sent, and changes nothing; it is logged at
// error and counted (PayoutCallbacks with Result not_sent, and
// PayoutConflicts, which alarms). After a real send the same event applies.
func TestPayoutCallbackForAWithdrawalNeverSent(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		emf := &lockedBuffer{}
		s.app.EmitMetricsTo(emf)
		v, _ := s.create(t, key("never-sent"))
		before, err := s.app.Ledger.Find(t.Context(), v.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []string{"failed", "paid", "returned"} {
			p := checkProblem(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-"+st, v.ID, st), time.Time{})),
				want{status: 409, code: "not_sent"})
			if !strings.Contains(p.Detail, "scheduled") {
				t.Errorf("%s callback: detail %q does not say where the withdrawal stands", st, p.Detail)
			}
		}
		after, err := s.app.Ledger.Find(t.Context(), v.ID)
		if err != nil || after.Status != withdrawal.Scheduled || after.Revision != before.Revision || after.Op != before.Op {
			t.Fatalf("refused callbacks changed the withdrawal: %+v -> %+v %v", before, after, err)
		}
		if at, ok, err := s.app.Withdrawals.DueAt(t.Context(), after.Shard, after.ID); err != nil || !ok || !at.Equal(before.DueAt) {
			t.Fatalf("after refused callbacks the job is due %v (%v, %v), want still %v", at, ok, err, before.DueAt)
		}
		if got := wantView(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)).Body); got.Status != withdrawal.Scheduled {
			t.Fatalf("the user sees %s", got.Status)
		}
		var refusedLogs, notSent, conflicts int
		for _, l := range strings.Split(s.log.String(), "\n") {
			if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, "never sent") && strings.Contains(l, v.ID) {
				refusedLogs++
			}
		}
		for _, l := range strings.Split(emf.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil {
				continue
			}
			if m["PayoutCallbacks"] == 1.0 && m["Result"] == "not_sent" {
				notSent++
			}
			if m["PayoutConflicts"] == 1.0 {
				conflicts++
			}
		}
		if refusedLogs != 3 || notSent != 3 || conflicts != 3 {
			t.Fatalf("3 refused callbacks: %d error lines, %d PayoutCallbacks not_sent, %d PayoutConflicts; want 3 each\nlogs:\n%s\nmetrics:\n%s",
				refusedLogs, notSent, conflicts, s.log.String(), emf.String())
		}

		// Sent for real, the same event is applied.
		sent(t, s, v.ID)
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-failed", v.ID, "failed"), time.Time{})), "failed", "applied")

		// Cancelled before any call: never sent either.
		c, _ := s.create(t, key("cancelled"))
		if resp := s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", c.ID)); resp.StatusCode != 200 {
			t.Fatalf("cancel: %d %s", resp.StatusCode, resp.Body)
		}
		checkProblem(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-c", c.ID, "paid"), time.Time{})),
			want{status: 409, code: "not_sent"})
		if got := wantView(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", c.ID)).Body); got.Status != withdrawal.Cancelled {
			t.Fatalf("after a refused callback the cancelled withdrawal is %s", got.Status)
		}
	})
}

// TestPayoutCallbackSettlesAnUnknownOutcome: a withdrawal whose call may
// have paid (processing to the user) is settled by the provider's word.
func TestPayoutCallbackSettlesAnUnknownOutcome(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		v, _ := s.create(t, key("unknown"))
		ref := withdrawal.Ref{Shard: s.app.Withdrawals.ShardFor(fixtureUser), ID: v.ID}
		w, err := s.app.Ledger.Find(t.Context(), v.ID)
		if err != nil {
			t.Fatal(err)
		}
		now := w.DueAt // the payout step runs when it falls due
		a := withdrawal.NewAttemptID(now)
		if _, _, err := s.app.Ledger.Begin(t.Context(), ref, withdrawal.Begin{Attempt: a, Now: now, Until: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.app.Ledger.Retry(t.Context(), ref, a, withdrawal.RetryAt{At: now.Add(time.Hour), Now: now,
			LastError: "no answer", MaybePaid: true}); err != nil {
			t.Fatal(err)
		}
		if got := wantView(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)).Body); got.Status != withdrawal.Processing {
			t.Fatalf("a withdrawal that may have been paid shows %s", got.Status)
		}
		checkProblem(t, s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", v.ID)), want{status: 409, code: "not_cancellable"})
		wantCallback(t, s.invoke(t, callback(t, webhookSecret, callbackBody("ev-f", v.ID, "failed"), time.Time{})), "failed", "applied")
		got := wantView(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)).Body)
		if got.Status != withdrawal.Failed || got.LastError == nil || !strings.Contains(*got.LastError, "r") {
			t.Fatalf("after a failed callback: %+v", got)
		}
		var raw map[string]any
		_ = json.Unmarshal([]byte(s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)).Body), &raw)
		if raw["status"] != "failed" {
			t.Fatalf("view %v", raw)
		}
	})
}

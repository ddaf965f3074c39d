package httpapi_test

import (
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// newClockedStack is newStack with the withdrawal routes served by a
// service on clk.
func newClockedStack(t *testing.T, redisURL string, clk *clock.Fake) *stack {
	t.Helper()
	s := newStack(t, redisURL, nil)
	rules, err := s.cfg.WithdrawalRules()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := withdrawal.NewService(withdrawal.Config{Ledger: s.app.Ledger, Clock: clk, Rules: rules,
		ShardFor: s.app.Withdrawals.ShardFor, Logger: s.app.Log})
	if err != nil {
		t.Fatal(err)
	}
	roles, err := httpapi.ParseAdminRoles(s.cfg.AdminRoleARNs)
	if err != nil {
		t.Fatal(err)
	}
	rt := httpapi.NewRouter(httpapi.Auth{Mode: httpapi.AuthMode(s.cfg.Auth), AdminToken: string(s.cfg.AdminToken), AdminRoles: roles},
		s.app.Log, 5*time.Second)
	httpapi.Withdrawals{Service: svc}.Register(rt)
	cs := *s
	cs.rt, cs.h = rt, lambda.NewHandler(rt.Serve)
	return &cs
}

// TestReplayAfterProcessAtPassed: a create due 2 s ahead, sent again with
// its key 3 s later (its answer was lost), is answered 202 with the first
// response and Idempotent-Replayed, not 400 "must not be in the past",
// which would tell the client nothing was stored. A new key with that body
// is still refused, and writes nothing.
func TestReplayAfterProcessAtPassed(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		clk := clock.NewFake(time.Now().UTC().Truncate(time.Millisecond))
		s := newClockedStack(t, redisURL, clk)
		late := body(`{"amount":"125.50","currency":"CNY","destination":"bank_6222","process_at":"` +
			clock.Format(clk.Now().Add(2*time.Second)) + `"}`)
		_, first := s.create(t, key("late-replay"), late)
		clk.Advance(3 * time.Second)

		before := snapshot(t, s.rdb)
		replay := s.invoke(t, payload(t, "withdrawal-create", "", key("late-replay"), late))
		wantJSON(t, replay, 202)
		if replay.Body != first.Body {
			t.Errorf("replay body differs:\n first %s\nreplay %s", first.Body, replay.Body)
		}
		for _, h := range []string{"Location", "ETag"} {
			if replay.Headers[h] != first.Headers[h] {
				t.Errorf("replay's %s %q, first %q", h, replay.Headers[h], first.Headers[h])
			}
		}
		if got := replay.Headers["Idempotent-Replayed"]; got != "true" {
			t.Errorf("Idempotent-Replayed %q, want true", got)
		}
		wantUnchanged(t, before, snapshot(t, s.rdb))

		before = snapshot(t, s.rdb)
		checkProblem(t, s.invoke(t, payload(t, "withdrawal-create", "", key("late-new"), late)),
			want{status: 400, code: "validation_failed", fields: []string{"process_at"}})
		wantUnchanged(t, before, snapshot(t, s.rdb))
	})
}

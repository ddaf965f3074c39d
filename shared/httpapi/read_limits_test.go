package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// TestReadsAreRateLimited: the routes on one's own records (list, get,
// reschedule, cancel of a withdrawal, the buyer's purchase) share one
// budget per user and one per address (HOURGLASS_RATE_READ_USER,
// HOURGLASS_RATE_READ_SOURCE): past it, 429 rate_limited with Retry-After,
// nothing changed; other users and addresses go on; the budget comes back
// as time passes. Time is driven by hand: Redis's (miniredis, whose TIME
// the limiter's script reads) and the limiter's clock. Before, these
// routes had only API Gateway's route-wide throttle.
func TestReadsAreRateLimited(t *testing.T) {
	mr := miniredis.RunT(t)
	clk := clock.NewFake(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	mr.SetTime(clk.Now())
	advance := func(d time.Duration) { clk.Advance(d); mr.SetTime(clk.Now()) }

	s := newStack(t, "redis://"+mr.Addr(), map[string]string{
		"HOURGLASS_RATE_READ_USER": "3/m", "HOURGLASS_RATE_READ_SOURCE": "5/m",
	})
	rules, err := s.cfg.RateRules()
	if err != nil {
		t.Fatal(err)
	}
	if got := rules[ratelimit.Read]; ratelimit.Format(got.User) != "3/m" || ratelimit.Format(got.Source) != "5/m" {
		t.Fatalf("read rule %+v", got)
	}
	lim := ratelimit.New(s.rdb, s.cfg.RedisPrefix, rules, clk)
	rt := httpapi.NewRouter(httpapi.Auth{Mode: httpapi.AuthJWT}, s.app.Log, 5*time.Second)
	httpapi.Withdrawals{Service: s.app.Service, Limiter: lim}.Register(rt)
	httpapi.Seckill{Service: s.app.Seckill, Limiter: lim}.Register(rt)
	s.rt, s.h = rt, lambda.NewHandler(rt.Serve)

	const home, other = "203.0.113.7", "198.51.100.1"
	v, _ := s.create(t, sub("alice"), fromSource(home), key("read-limits"))
	as := func(user, ip string) []mod { return []mod{sub(user), fromSource(ip)} }
	get := func(user, ip string) events.APIGatewayV2HTTPResponse {
		return s.invoke(t, payload(t, "withdrawal-get", v.ID, as(user, ip)...))
	}
	refused := func(resp events.APIGatewayV2HTTPResponse, who string) {
		t.Helper()
		p := checkProblem(t, resp, want{status: 429, code: "rate_limited", retryAfter: true})
		if !strings.Contains(p.Detail, "requests about your withdrawals and purchases from "+who) {
			t.Errorf("detail %q does not name %s", p.Detail, who)
		}
	}

	// alice: 3 a minute over every read route together.
	wantJSON(t, get("alice", home), 200)
	wantJSON(t, s.invoke(t, payload(t, "withdrawal-list", "", as("alice", home)...)), 200)
	checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase-me", "phone", as("alice", home)...)), want{status: 404, code: "not_found"})
	resp := get("alice", home)
	refused(resp, "you")
	if got := resp.Headers["Retry-After"]; got != "20" {
		t.Errorf("Retry-After %q, want 20 (3 a minute)", got)
	}
	refused(s.invoke(t, payload(t, "withdrawal-list", "", as("alice", home)...)), "you")
	refused(s.invoke(t, itemPayload(t, "seckill-purchase-me", "phone", as("alice", home)...)), "you")
	before := snapshot(t, s.rdb)
	refused(s.invoke(t, payload(t, "withdrawal-cancel", v.ID, as("alice", home)...)), "you")
	refused(s.invoke(t, payload(t, "withdrawal-reschedule", v.ID, append(as("alice", home), body(`{"delay_seconds":60}`))...)), "you")
	wantUnchanged(t, before, snapshot(t, s.rdb))

	// The address: alice's 3 taken (her refusals took nothing), 2 left.
	for _, user := range []string{"bob", "carol"} {
		checkProblem(t, get(user, home), want{status: 404, code: "not_found"}) // not theirs, but read
	}
	refused(get("dave", home), "your network address")
	// Another address and another user are on their own budgets.
	checkProblem(t, get("dave", other), want{status: 404, code: "not_found"})

	// 20 s later alice has one more; the cancel goes through.
	advance(20 * time.Second)
	wantJSON(t, s.invoke(t, payload(t, "withdrawal-cancel", v.ID, as("alice", other)...)), 200)
	refused(get("alice", other), "you")
	if w, err := s.app.Ledger.Find(t.Context(), v.ID); err != nil || w.Status != withdrawal.Cancelled {
		t.Fatalf("after the cancel: %+v %v", w, err)
	}
	st := lim.Stats()[ratelimit.Read]
	if st.RefusedUser != 6 || st.RefusedSource != 1 || st.PerUser != "3/m" || st.PerSource != "5/m" {
		t.Errorf("read stats %+v", st)
	}
}

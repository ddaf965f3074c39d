package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ratelimit"
)

// ---- JWT scopes ----

// scopes replaces the token's scope claims and the authorizer's scope list.
func scopes(scope string, list ...string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		jwt := ev.RequestContext.Authorizer.JWT
		claims := map[string]string{}
		for k, v := range jwt.Claims {
			if k != "scope" {
				claims[k] = v
			}
		}
		if scope != "" {
			claims["scope"] = scope
		}
		jwt.Claims, jwt.Scopes = claims, list
	}
}

func claim(name, value string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		claims := map[string]string{}
		for k, v := range ev.RequestContext.Authorizer.JWT.Claims {
			claims[k] = v
		}
		claims[name] = value
		ev.RequestContext.Authorizer.JWT.Claims = claims
	}
}

// idToken makes the token a Cognito ID token: who the user is, no scope.
func idToken(ev *events.APIGatewayV2HTTPRequest) {
	ev.RequestContext.Authorizer.JWT.Claims = map[string]string{
		"sub": fixtureUser, "iss": "https://auth.example.com/", "aud": "hourglass-app",
		"token_use": "id", "email": "user@example.com", "cognito:username": "user",
	}
	ev.RequestContext.Authorizer.JWT.Scopes = nil
}

// TestJWTScope: in jwt mode every user route wants an access token granting
// HOURGLASS_JWT_SCOPE; an ID token, a token without the scope or with
// another one is 403 forbidden, and nothing is stored.
func TestJWTScope(t *testing.T) {
	u, _ := backends[0].start(t)
	s := newStack(t, u, nil)
	now := time.Now()
	wantJSON(t, s.invoke(t, itemPayload(t, "seckill-preheat", fixtureItem,
		body(saleJSON(100, now.Add(-time.Minute), now.Add(time.Hour), 1, 1)))), 200)
	created, _ := s.create(t)

	userRoutes := map[string]func(mods ...mod) []byte{
		"POST /v1/withdrawals": func(mods ...mod) []byte {
			return payload(t, "withdrawal-create", "", append([]mod{key("scope-test")}, mods...)...)
		},
		"GET /v1/withdrawals":      func(mods ...mod) []byte { return payload(t, "withdrawal-list", "", mods...) },
		"GET /v1/withdrawals/{id}": func(mods ...mod) []byte { return payload(t, "withdrawal-get", created.ID, mods...) },
		"DELETE /v1/withdrawals/{id}": func(mods ...mod) []byte {
			return payload(t, "withdrawal-cancel", created.ID, mods...)
		},
		"POST /v1/seckill/items/{item_id}/purchases": func(mods ...mod) []byte {
			return itemPayload(t, "seckill-purchase", fixtureItem, mods...)
		},
		"GET /v1/seckill/items/{item_id}/purchases/me": func(mods ...mod) []byte {
			return itemPayload(t, "seckill-purchase-me", fixtureItem, mods...)
		},
	}
	refused := []struct {
		name string
		mods []mod
	}{
		{"an ID token", []mod{idToken}},
		{"an ID token that claims the scope", []mod{claim("token_use", "id")}},
		{"no scope at all", []mod{scopes("")}},
		{"another scope", []mod{scopes("withdrawals", "withdrawals")}},
		{"the scope as a prefix of another", []mod{scopes("hourglass/user.read", "hourglass/user.read")}},
		{"the scope's name inside another claim", []mod{scopes("", nil...), claim("note", "hourglass/user")}},
	}
	for route, req := range userRoutes {
		for _, tc := range refused {
			t.Run(route+": "+tc.name, func(t *testing.T) {
				before := snapshot(t, s.rdb)
				p := checkProblem(t, s.invoke(t, req(tc.mods...)), want{status: http.StatusForbidden, code: "forbidden"})
				if !strings.Contains(p.Detail, "token") {
					t.Errorf("detail %q does not say what is wrong with the token", p.Detail)
				}
				wantUnchanged(t, before, snapshot(t, s.rdb))
			})
		}
	}
	// Where API Gateway or the issuer put the scope does not matter.
	accepted := []struct {
		name string
		mods []mod
	}{
		{"the scope claim among others", []mod{scopes("openid hourglass/user email")}},
		{"the authorizer's list only", []mod{scopes("", "profile", "hourglass/user")}},
		{"an scp array claim", []mod{scopes(""), claim("scp", "[profile hourglass/user]")}},
		{"an access token", []mod{claim("token_use", "access")}},
	}
	for _, tc := range accepted {
		t.Run("accepted: "+tc.name, func(t *testing.T) {
			resp := s.invoke(t, userRoutes["GET /v1/withdrawals"](tc.mods...))
			wantJSON(t, resp, 200)
		})
	}
	// Public and dev-mode routes know nothing of scopes.
	wantJSON(t, s.invoke(t, itemPayload(t, "seckill-item", fixtureItem)), 200)
	dev := newStack(t, u, devMode)
	wantJSON(t, dev.invoke(t, payload(t, "withdrawal-list", "", devUser("someone"))), 200)

	t.Run("HOURGLASS_JWT_SCOPE names the scope", func(t *testing.T) {
		other := newStack(t, u, map[string]string{"HOURGLASS_JWT_SCOPE": "payments/app"})
		checkProblem(t, other.invoke(t, rawFixture(t, "withdrawal-list")), want{status: 403, code: "forbidden"})
		wantJSON(t, other.invoke(t, payload(t, "withdrawal-list", "", scopes("payments/app"))), 200)
	})
}

// ---- rate limits ----

// fromSource sets the client address API Gateway saw.
func fromSource(ip string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.RequestContext.HTTP.SourceIP = ip }
}

// outcome counts answers by status.
type outcome struct {
	mu     sync.Mutex
	counts map[int]int
	// limited is one 429, kept to inspect.
	limited *events.APIGatewayV2HTTPResponse
}

func (o *outcome) add(resp events.APIGatewayV2HTTPResponse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[int]int{}
	}
	o.counts[resp.StatusCode]++
	if resp.StatusCode == http.StatusTooManyRequests && o.limited == nil {
		o.limited = &resp
	}
}

// hammer sends n requests made by ev(i) at rate per second, in waves of
// rate/10 every 100 ms, each wave concurrent; it returns how long it took.
func hammer(t *testing.T, s *stack, n, rate int, ev func(i int) events.APIGatewayV2HTTPRequest, o *outcome) time.Duration {
	t.Helper()
	wave := max(1, rate/10)
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < n; sent += wave {
		var wg sync.WaitGroup
		for i := sent; i < min(n, sent+wave); i++ {
			e := ev(i)
			wg.Go(func() {
				resp, err := s.rt.Serve(context.Background(), e)
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
				o.add(resp)
			})
		}
		wg.Wait()
		if sent+wave < n {
			<-tick.C
		}
	}
	return time.Since(start)
}

// allowedAtMost is what a GCRA limit lets through in d: its burst, then its
// rate, plus one emission for the edges.
func allowedAtMost(l ratelimit.Limit, d time.Duration) int {
	return l.Burst + int(float64(l.Rate)*d.Seconds()/l.Period.Seconds()) + 1
}

// TestBotsAreRateLimited is the bot of OWASP API6: 1,000 purchases a second
// as one user, then as 1,000 users from one address (X-Forwarded-For forged
// at random, which counts for nothing). Each is refused 429 rate_limited
// beyond its budget while ordinary buyers, from their own addresses, all
// buy; the refusals show in /v1/admin/stats.
func TestBotsAreRateLimited(t *testing.T) {
	srv := redistest.Start(t)
	perUser, perSource := "5/s", "100/s"
	s := newStack(t, srv.URL(), map[string]string{
		"HOURGLASS_RATE_PURCHASE_USER": perUser, "HOURGLASS_RATE_PURCHASE_SOURCE": perSource,
	})
	userLimit, _ := ratelimit.Parse(perUser)
	sourceLimit, _ := ratelimit.Parse(perSource)
	now := time.Now()
	const stock = 5000
	wantJSON(t, s.invoke(t, itemPayload(t, "seckill-preheat", fixtureItem,
		body(saleJSON(stock, now.Add(-time.Minute), now.Add(time.Hour), 1, 1)))), 200)
	base := itemEvent(t, "seckill-purchase", fixtureItem)
	purchase := func(user, ip, xff string) events.APIGatewayV2HTTPRequest {
		ev := base
		ev.Headers = map[string]string{}
		for k, v := range base.Headers {
			ev.Headers[k] = v
		}
		ev.Headers["x-forwarded-for"] = xff
		jwt := *base.RequestContext.Authorizer.JWT
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &jwt}
		sub(user)(&ev)
		fromSource(ip)(&ev)
		return ev
	}

	// Ordinary buyers, each from their own address, buy while the bot runs.
	ordinary := func(round string, o *outcome) func() {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 40 * time.Millisecond)
				resp, err := s.rt.Serve(context.Background(),
					purchase(fmt.Sprintf("shopper-%s-%d", round, i), fmt.Sprintf("198.51.100.%d", i+1), ""))
				if err != nil {
					t.Error(err)
				}
				o.add(resp)
			})
		}
		return wg.Wait
	}

	// What each bot run saw, for the stats and the stock to agree with.
	var userRefused, sourceRefused, sybilsAdmitted int
	t.Run("one user, 1,000 purchases a second", func(t *testing.T) {
		var bot, shoppers outcome
		wait := ordinary("a", &shoppers)
		took := hammer(t, s, 1000, 1000, func(i int) events.APIGatewayV2HTTPRequest {
			return purchase("bot", "203.0.113.66", fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		}, &bot)
		wait()
		through := bot.counts[202] + bot.counts[409]
		t.Logf("bot: %v in %s; shoppers: %v", bot.counts, took, shoppers.counts)
		if through < 1 || through > allowedAtMost(userLimit, took) {
			t.Errorf("%d of the bot's purchases got past the limit (202 or 409) in %s; want 1..%d",
				through, took, allowedAtMost(userLimit, took))
		}
		if bot.counts[202] != 1 {
			t.Errorf("bot admitted %d times, want once (per-user limit 1)", bot.counts[202])
		}
		if bot.counts[429] != 1000-through {
			t.Errorf("bot got %d 429s, want every other answer (%d)", bot.counts[429], 1000-through)
		}
		if shoppers.counts[202] != 20 {
			t.Errorf("ordinary buyers: %v, want 20 admitted", shoppers.counts)
		}
		userRefused = bot.counts[429]
		if bot.limited != nil {
			p := checkProblem(t, *bot.limited, want{status: 429, code: "rate_limited", retryAfter: true})
			if !strings.Contains(p.Detail, "from you") {
				t.Errorf("detail %q does not say the user is limited", p.Detail)
			}
		}
	})

	t.Run("1,000 users from one address, 1,000 purchases a second", func(t *testing.T) {
		var bot, shoppers outcome
		wait := ordinary("b", &shoppers)
		took := hammer(t, s, 1000, 1000, func(i int) events.APIGatewayV2HTTPRequest {
			return purchase(fmt.Sprintf("sybil-%d", i), "203.0.113.99", fmt.Sprintf("192.0.2.%d", i%256))
		}, &bot)
		wait()
		t.Logf("bot: %v in %s; shoppers: %v", bot.counts, took, shoppers.counts)
		if bot.counts[202] < 1 || bot.counts[202] > allowedAtMost(sourceLimit, took) {
			t.Errorf("%d of 1,000 users from one address admitted in %s, want 1..%d",
				bot.counts[202], took, allowedAtMost(sourceLimit, took))
		}
		if bot.counts[202]+bot.counts[429] != 1000 {
			t.Errorf("answers %v, want only 202 and 429", bot.counts)
		}
		if shoppers.counts[202] != 20 {
			t.Errorf("ordinary buyers: %v, want 20 admitted", shoppers.counts)
		}
		sourceRefused, sybilsAdmitted = bot.counts[429], bot.counts[202]
		if bot.limited != nil {
			p := checkProblem(t, *bot.limited, want{status: 429, code: "rate_limited", retryAfter: true})
			if !strings.Contains(p.Detail, "network address") {
				t.Errorf("detail %q does not say the address is limited", p.Detail)
			}
		}
	})

	t.Run("the stock is what was admitted, and stats show the refusals", func(t *testing.T) {
		var snap struct {
			Items      map[string]struct{ StockLeft, Admitted int64 } `json:"items"`
			RateLimits map[string]ratelimit.FamilyStats               `json:"rate_limits"`
		}
		resp := s.invoke(t, rawFixture(t, "admin-stats"))
		wantJSON(t, resp, 200)
		if err := json.Unmarshal([]byte(resp.Body), &snap); err != nil {
			t.Fatal(err)
		}
		st := s.state(t, fixtureItem)
		sold := stock - st.StockLeft
		p := snap.RateLimits["purchase"]
		if p.PerUser != perUser || p.PerSource != perSource {
			t.Errorf("stats settings %+v, want per user %s, per source %s", p, perUser, perSource)
		}
		// Exactly the refusals the bots were answered (how many that is
		// depends on how fast this machine sent them; the runs above bound it).
		if int(p.RefusedUser) != userRefused || int(p.RefusedSource) != sourceRefused || p.Errors != 0 {
			t.Errorf("stats counters %+v, want %d refused per user, %d per source, no errors", p, userRefused, sourceRefused)
		}
		if w := snap.RateLimits["withdrawal"]; w.PerUser != "off" || w.PerSource != "off" {
			t.Errorf("withdrawal limits %+v, want off", w)
		}
		// 1 (the bot) + 40 shoppers + what the sybils got through.
		if want := int64(41 + sybilsAdmitted); sold != want {
			t.Errorf("%d sold, want the admitted purchases only (%d)", sold, want)
		}
	})
}

// TestWithdrawalRateLimits: creation is limited per user and per address;
// a refusal stores nothing, other users and other addresses go on.
func TestWithdrawalRateLimits(t *testing.T) {
	eachBackend(t, func(t *testing.T, u string) {
		s := newStack(t, u, map[string]string{
			"HOURGLASS_RATE_WITHDRAWAL_USER": "3/m", "HOURGLASS_RATE_WITHDRAWAL_SOURCE": "5/m",
		})
		create := func(user, ip string, n int) events.APIGatewayV2HTTPResponse {
			return s.invoke(t, payload(t, "withdrawal-create", "", sub(user), fromSource(ip), key(fmt.Sprintf("k-%s-%d", user, n))))
		}
		for i := range 3 {
			wantJSON(t, create("alice", "203.0.113.7", i), 202)
		}
		before := snapshot(t, s.rdb)
		p := checkProblem(t, create("alice", "203.0.113.7", 3), want{status: 429, code: "rate_limited", retryAfter: true})
		if !strings.Contains(p.Detail, "withdrawal requests from you") {
			t.Errorf("detail %q", p.Detail)
		}
		wantUnchanged(t, before, snapshot(t, s.rdb))
		// Replaying an accepted request is a request too.
		checkProblem(t, create("alice", "203.0.113.7", 0), want{status: 429, code: "rate_limited", retryAfter: true})

		// The address has 2 left of its 5 (alice's refusals did not use it).
		wantJSON(t, create("bob", "203.0.113.7", 0), 202)
		wantJSON(t, create("carol", "203.0.113.7", 0), 202)
		checkProblem(t, create("dave", "203.0.113.7", 0), want{status: 429, code: "rate_limited", retryAfter: true})
		// Another address, and an IPv6 client, are on their own budgets.
		wantJSON(t, create("dave", "198.51.100.1", 0), 202)
		wantJSON(t, create("erin", "2001:db8::1", 0), 202)
		// Purchases are another family, and off.
		if got := s.app.Limiter.Stats(); got[ratelimit.Withdrawal].RefusedUser != 2 || got[ratelimit.Withdrawal].RefusedSource != 1 ||
			got[ratelimit.Purchase].PerUser != "off" {
			t.Errorf("stats %+v", got)
		}
		// Every budget lives under the key prefix and expires on its own.
		for _, k := range s.rdb.Keys(context.Background(), "*rl:*").Val() {
			if !strings.HasPrefix(k, "hg:rl:withdrawal:") {
				t.Errorf("rate-limit key %q outside hg:rl:withdrawal:", k)
			}
			if ttl := s.rdb.TTL(context.Background(), k).Val(); ttl <= 0 {
				t.Errorf("rate-limit key %q has no TTL (%s)", k, ttl)
			}
		}
	})
}

// scriptCounter counts EVALSHA/EVAL calls on rate-limit keys.
type scriptCounter struct{ n atomic.Int64 }

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(cmd.Args()) > 3 &&
			strings.Contains(fmt.Sprint(cmd.Args()[3]), ":rl:") {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRateLimitsOffCostNothing: with the limits off (the local default) a
// purchase makes no rate-limit call to Redis; with both on it makes two.
func TestRateLimitsOffCostNothing(t *testing.T) {
	u, _ := backends[0].start(t)
	for _, tc := range []struct {
		name  string
		vars  map[string]string
		calls int64
	}{
		{"off", nil, 0},
		{"per user and per source", map[string]string{
			"HOURGLASS_RATE_PURCHASE_USER": "10/s", "HOURGLASS_RATE_PURCHASE_SOURCE": "1000/s",
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, u, tc.vars)
			now := time.Now()
			item := "cost-" + strings.ReplaceAll(tc.name, " ", "-")
			wantJSON(t, s.invoke(t, itemPayload(t, "seckill-preheat", item,
				body(saleJSON(10, now.Add(-time.Minute), now.Add(time.Hour), 1, 1)))), 200)
			s.buy(t, item, "first") // loads the script
			var c scriptCounter
			s.rdb.AddHook(&c)
			s.buy(t, item, "someone")
			if got := c.n.Load(); got != tc.calls {
				t.Errorf("%d rate-limit calls to Redis, want %d", got, tc.calls)
			}
			if tc.calls == 0 {
				// Nothing limited: stats keep SPEC's shape.
				if strings.Contains(s.invoke(t, rawFixture(t, "admin-stats")).Body, "rate_limits") {
					t.Error("stats show rate_limits while every limit is off")
				}
			}
		})
	}
}

// TestRateLimitsFailOpen: with Redis gone the limiter lets the request
// through to the handler (which answers 503 itself); it does not invent an
// outage of its own or leak the error.
func TestRateLimitsFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	s := newStack(t, srv.URL(), map[string]string{"HOURGLASS_RATE_WITHDRAWAL_USER": "10/m"})
	srv.Kill()
	resp := s.invoke(t, rawFixture(t, "withdrawal-create"))
	checkProblem(t, resp, want{status: 503, code: "unavailable", retryAfter: true})
	if got := s.app.Limiter.Stats()[ratelimit.Withdrawal].Errors; got != 1 {
		t.Errorf("limiter errors %d, want 1", got)
	}
	if !strings.Contains(s.log.String(), "rate limit not checked") {
		t.Errorf("no warning logged:\n%s", s.log.String())
	}
}

func TestRateLimitStatsShape(t *testing.T) {
	u, _ := backends[1].start(t)
	s := newStack(t, u, map[string]string{"HOURGLASS_RATE_PURCHASE_SOURCE": "50/s:100"})
	resp := s.invoke(t, rawFixture(t, "admin-stats"))
	wantJSON(t, resp, 200)
	var snap struct {
		RateLimits map[string]map[string]any `json:"rate_limits"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &snap); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{
		"purchase": {"per_user": "off", "per_source": "50/s:100", "refused_user": 0.0, "refused_source": 0.0, "errors": 0.0},
		"withdrawal": {"per_user": "off", "per_source": "off", "refused_user": 0.0, "refused_source": 0.0,
			"errors": 0.0},
		"webhook": {"per_user": "off", "per_source": "off", "refused_user": 0.0, "refused_source": 0.0, "errors": 0.0},
		"read":    {"per_user": "off", "per_source": "off", "refused_user": 0.0, "refused_source": 0.0, "errors": 0.0},
	}
	if diff := cmp.Diff(want, snap.RateLimits); diff != "" {
		t.Errorf("rate_limits (-want +got):\n%s", diff)
	}
}

// TestSameSecret: the admin token compare accepts the token only, whatever
// the length of what is presented.
func TestSameSecret(t *testing.T) {
	for _, tc := range []struct {
		presented string
		ok        bool
	}{
		{"dev-admin", true}, {"dev-admi", false}, {"dev-admin ", false}, {"", false}, {"DEV-ADMIN", false},
		{strings.Repeat("x", 10_000), false},
	} {
		if got := httpapi.SameSecret(tc.presented, "dev-admin"); got != tc.ok {
			t.Errorf("SameSecret(%q) = %v", tc.presented, got)
		}
	}
}

// ---- Problem size ----

// TestManyErrorsAreCapped: a 16 KiB body of nothing but unknown fields gets a
// problem of a few KiB, its errors list cut at httpapi.MaxProblemErrors and
// errors_omitted saying how many more there were; nothing is stored.
func TestManyErrorsAreCapped(t *testing.T) {
	const listed = 20 // httpapi.MaxProblemErrors, as api/openapi.yaml states it
	s := newStack(t, redistest.Start(t).URL(), nil)
	var b strings.Builder
	b.WriteString(`{"amount":"1.00","currency":"CNY","destination":"bank_1"`)
	n := 0
	for ; b.Len() < httpapi.MaxBody-16; n++ {
		fmt.Fprintf(&b, `,"x%d":0`, n)
	}
	b.WriteString("}")
	resp := s.invoke(t, payload(t, "withdrawal-create", "", key("many-errors"), body(b.String())))
	if resp.StatusCode != 400 {
		t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, resp.Body)
	}
	if len(resp.Body) > 4<<10 {
		t.Errorf("problem of %d bytes for %d unknown fields, want at most 4 KiB", len(resp.Body), n)
	}
	var p struct {
		Code    string `json:"code"`
		Errors  []struct{ Field, Message string }
		Omitted int `json:"errors_omitted"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatalf("decode %.300s: %v", resp.Body, err)
	}
	if p.Code != "validation_failed" || len(p.Errors) != listed || len(p.Errors)+p.Omitted != n {
		t.Errorf("code %s, %d errors + %d omitted, want validation_failed, %d + %d", p.Code, len(p.Errors), p.Omitted,
			listed, n-listed)
	}
	loadSpec(t).checkSchema(t, "ValidationProblem", resp.Body)
	if p.Errors[0].Field != "x0" {
		t.Errorf("first error %+v, want the first unknown field", p.Errors[0])
	}
	if keys, _ := s.rdb.Keys(t.Context(), "*").Result(); len(keys) > 0 {
		t.Errorf("stored %v", keys)
	}
}

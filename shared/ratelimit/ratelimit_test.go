package ratelimit_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/ratelimit"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ratelimit.Limit
		bad  bool
	}{
		{in: "", want: ratelimit.Limit{}},
		{in: "0", want: ratelimit.Limit{}},
		{in: " off ", want: ratelimit.Limit{}},
		{in: "5/s", want: ratelimit.Limit{Rate: 5, Burst: 5, Period: time.Second}},
		{in: "30/m:10", want: ratelimit.Limit{Rate: 30, Burst: 10, Period: time.Minute}},
		{in: "100/h", want: ratelimit.Limit{Rate: 100, Burst: 100, Period: time.Hour}},
		{in: "3/10s:1", want: ratelimit.Limit{Rate: 3, Burst: 1, Period: 10 * time.Second}},
		{in: "5", bad: true},
		{in: "0/s", bad: true},
		{in: "-1/s", bad: true},
		{in: "5/s:0", bad: true},
		{in: "5/d", bad: true},
		{in: "5/0s", bad: true},
		{in: "5/48h", bad: true},
		{in: "1000001/s", bad: true},
		{in: "5/s:", bad: true},
		{in: "x/s", bad: true},
	} {
		got, err := ratelimit.Parse(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		// What Format writes, Parse reads back.
		back, err := ratelimit.Parse(ratelimit.Format(got))
		if err != nil || back != got {
			t.Errorf("Parse(Format(%+v)) = %+v, %v", got, back, err)
		}
	}
}

func TestSourceKey(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":              "203.0.113.7",
		"::ffff:203.0.113.7":       "203.0.113.7",
		"2001:db8:1:2:3:4:5:6":     "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1":     "2001:db8:1:2::/64",
		"fe80::1%eth0":             "fe80::/64",
		"":                         "",
		"not-an-ip":                "",
		"203.0.113.7:443":          "",
		"203.0.113.7, 198.51.100.": "",
	} {
		got, ok := ratelimit.SourceKey(in)
		if got != want || ok != (want != "") {
			t.Errorf("SourceKey(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// TestAllow runs on miniredis and on a real redis-server: per user and per
// source budgets, refusals with a retry time, and keys under the prefix.
func TestAllow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		l := ratelimit.New(b.Client, "hg:", map[ratelimit.Family]ratelimit.Rule{
			ratelimit.Purchase: {User: ratelimit.Limit{Rate: 3, Burst: 3, Period: time.Minute},
				Source: ratelimit.Limit{Rate: 5, Burst: 5, Period: time.Minute}},
		}, nil)
		allow := func(user, src string) ratelimit.Decision {
			t.Helper()
			d, err := l.Allow(ctx, ratelimit.Purchase, user, src)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		// One user: 3 a minute, then refused by the user limit.
		for i := range 3 {
			if d := allow("bot", "198.51.100.1"); !d.Allowed {
				t.Fatalf("request %d refused: %+v", i, d)
			}
		}
		d := allow("bot", "198.51.100.1")
		if d.Allowed || d.By != ratelimit.ByUser || d.RetryAfter <= 0 || d.RetryAfter > 21*time.Second {
			t.Fatalf("4th request of one user: %+v, want refused by user with a retry within 20s", d)
		}
		if d.RetryAfterSeconds() < 1 {
			t.Fatalf("RetryAfterSeconds %d", d.RetryAfterSeconds())
		}
		// The refused request did not use up the source: two more users
		// from it get through, the third is refused by the source limit.
		for _, u := range []string{"a", "b"} {
			if d := allow(u, "198.51.100.1"); !d.Allowed {
				t.Fatalf("user %s refused: %+v", u, d)
			}
		}
		if d := allow("c", "198.51.100.1"); d.Allowed || d.By != ratelimit.BySource {
			t.Fatalf("6th request of the source: %+v, want refused by source", d)
		}
		// Another source and another family are untouched.
		if d := allow("c", "198.51.100.2"); !d.Allowed {
			t.Fatalf("other source refused: %+v", d)
		}
		if d, err := l.Allow(ctx, ratelimit.Withdrawal, "bot", "198.51.100.1"); err != nil || !d.Allowed {
			t.Fatalf("unlimited family: %+v %v", d, err)
		}
		// Every key is under the prefix, none under the library's "rate:".
		keys, err := b.Client.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "hg:rl:purchase:") {
				t.Errorf("key %q outside hg:rl:purchase:", k)
			}
			if ttl := b.Client.TTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
				t.Errorf("key %q has TTL %s, want one within a minute: budgets vanish on their own", k, ttl)
			}
		}
		want := map[ratelimit.Family]ratelimit.FamilyStats{
			ratelimit.Purchase:   {PerUser: "3/m", PerSource: "5/m", RefusedUser: 1, RefusedSource: 1},
			ratelimit.Withdrawal: {PerUser: "off", PerSource: "off"},
			ratelimit.Webhook:    {PerUser: "off", PerSource: "off"},
			ratelimit.Read:       {PerUser: "off", PerSource: "off"},
		}
		if diff := cmp.Diff(want, l.Stats()); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
	})
}

// TestOffNeedsNoRedis: with every limit off, Allow answers without a
// round trip (a closed client would fail any).
func TestOffNeedsNoRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	_ = rdb.Close()
	l := ratelimit.New(rdb, "hg:", map[ratelimit.Family]ratelimit.Rule{ratelimit.Purchase: {}}, nil)
	var nilLimiter *ratelimit.Limiter
	for _, lim := range []*ratelimit.Limiter{l, nilLimiter} {
		d, err := lim.Allow(context.Background(), ratelimit.Purchase, "u", "203.0.113.7")
		if err != nil || !d.Allowed {
			t.Fatalf("off: %+v %v", d, err)
		}
	}
}

// TestErrorFailsOpen: an unreachable Redis lets the request through, says
// why, and is counted.
func TestErrorFailsOpen(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	l := ratelimit.New(rdb, "hg:", map[ratelimit.Family]ratelimit.Rule{
		ratelimit.Withdrawal: {User: ratelimit.Limit{Rate: 1, Burst: 1, Period: time.Second}},
	}, nil)
	d, err := l.Allow(context.Background(), ratelimit.Withdrawal, "u", "203.0.113.7")
	if err == nil || !d.Allowed {
		t.Fatalf("unreachable Redis: %+v %v, want allowed with an error", d, err)
	}
	if got := l.Stats()[ratelimit.Withdrawal].Errors; got != 1 {
		t.Fatalf("errors counted %d, want 1", got)
	}
}

// countingHook counts the commands sent.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRefusalsAreRemembered: once Redis says a budget is spent until some
// time, the Limiter refuses it until then without asking again: a bot's
// flood costs Redis one call per retry time, not one per request.
func TestRefusalsAreRemembered(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var hook countingHook
	rdb.AddHook(&hook)
	clk := clock.NewFake(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	l := ratelimit.New(rdb, "hg:", map[ratelimit.Family]ratelimit.Rule{
		ratelimit.Purchase: {User: mustParse(t, "1/300ms")},
	}, clk)
	ctx := context.Background()
	if d, err := l.Allow(ctx, ratelimit.Purchase, "bot", ""); err != nil || !d.Allowed {
		t.Fatalf("first: %+v %v", d, err)
	}
	refused, _ := l.Allow(ctx, ratelimit.Purchase, "bot", "")
	if refused.Allowed || refused.RetryAfter <= 0 || refused.RetryAfter > 300*time.Millisecond {
		t.Fatalf("second: %+v, want refused for at most 300ms", refused)
	}
	calls := hook.n.Load()
	for i := range 100 {
		// The refusal is remembered until the time Redis gave, and counts
		// down on the limiter's clock.
		clk.Advance(refused.RetryAfter / 200)
		d, err := l.Allow(ctx, ratelimit.Purchase, "bot", "")
		elapsed := refused.RetryAfter / 200 * time.Duration(i+1)
		if err != nil || d.Allowed || d.By != ratelimit.ByUser || d.RetryAfter != refused.RetryAfter-elapsed {
			t.Fatalf("remembered refusal %d: %+v %v, want retry in %s", i, d, err, refused.RetryAfter-elapsed)
		}
	}
	if got := hook.n.Load() - calls; got != 0 {
		t.Errorf("%d Redis calls for 100 refusals of a spent budget, want 0", got)
	}
	if got := l.Stats()[ratelimit.Purchase].RefusedUser; got != 101 {
		t.Errorf("refused %d, want 101", got)
	}
	// Other users are not affected.
	if d, _ := l.Allow(ctx, ratelimit.Purchase, "someone", ""); !d.Allowed {
		t.Error("another user refused")
	}
	// Once its retry time has passed on the clock, the limiter asks Redis
	// again, and Redis decides: here the budget has refilled (its bucket is
	// gone, as it is once the period has passed on Redis's own clock).
	keys, err := rdb.Keys(ctx, "hg:rl:*:u:bot").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the bot's bucket: %v %v", keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(refused.RetryAfter)
	calls = hook.n.Load()
	if d, err := l.Allow(ctx, ratelimit.Purchase, "bot", ""); err != nil || !d.Allowed {
		t.Errorf("after the retry time: %+v %v", d, err)
	}
	if got := hook.n.Load() - calls; got == 0 {
		t.Error("past its retry time the refusal was still answered from memory")
	}
}

func mustParse(t *testing.T, s string) ratelimit.Limit {
	t.Helper()
	l, err := ratelimit.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

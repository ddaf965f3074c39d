// Package ratelimit holds the per-user and per-source rate limits of the
// routes bots go for (purchase admission, withdrawal creation, the reads
// and changes of a caller's own records). The counting
// is github.com/go-redis/redis_rate's GCRA in Redis, so every container of
// every function shares one budget per caller; this package adds the
// configuration, the key names and the counters operators see.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/clock"
)

// Family is a group of routes that share a budget.
type Family string

// The limited families.
const (
	// Purchase: POST /v1/seckill/items/{item_id}/purchases, over all items.
	Purchase Family = "purchase"
	// Withdrawal: POST /v1/withdrawals.
	Withdrawal Family = "withdrawal"
	// Webhook: POST /v1/webhooks/payouts, per source only (the caller is
	// the payout provider, authenticated by its signature).
	Webhook Family = "webhook"
	// Read: the routes on a caller's own records, GET /v1/withdrawals (up
	// to 100 a page), GET, PATCH and DELETE /v1/withdrawals/{id}, and GET
	// /v1/seckill/items/{item_id}/purchases/me: cheap one by one, but one
	// token holder looping on them can fill a route and take the
	// concurrency the poller and the consumer need.
	Read Family = "read"
)

// Families lists every family, in a stable order.
var Families = []Family{Purchase, Withdrawal, Webhook, Read}

// Limit is a rate: Rate events per Period with bursts up to Burst. The zero
// Limit is off.
type Limit = redis_rate.Limit

// Rule is the limits of one family: per user (the authenticated identity) and
// per source (the client address API Gateway saw). A zero Limit is off.
type Rule struct {
	User   Limit
	Source Limit
}

// Off reports whether neither limit is on.
func (r Rule) Off() bool { return r.User.IsZero() && r.Source.IsZero() }

// By says which limit refused a request.
type By string

// What refuses.
const (
	ByUser   By = "user"
	BySource By = "source"
)

// Decision is the outcome of Allow.
type Decision struct {
	Allowed bool
	// By and RetryAfter are set when refused.
	By         By
	RetryAfter time.Duration
}

// RetryAfterSeconds is RetryAfter rounded up to whole seconds, at least 1:
// what the Retry-After header carries.
func (d Decision) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(d.RetryAfter.Seconds())))
}

type counters struct {
	refusedUser, refusedSource, errors atomic.Int64
}

// Limiter applies the rules. A nil *Limiter allows everything.
type Limiter struct {
	lim    *redis_rate.Limiter
	prefix string
	rules  map[Family]Rule
	counts map[Family]*counters
	clock  clock.Clock
	// refused remembers, per budget key, until when Redis said it is spent:
	// GCRA allows nothing before its retry time (a refusal changes nothing,
	// other containers only push it later), so until then a bot's requests
	// are refused here without a round trip.
	mu      sync.Mutex
	refused map[string]time.Time
}

// maxRemembered bounds the refusals a Limiter remembers; past it, expired
// ones are swept and, if still full, new ones go to Redis every time.
const maxRemembered = 100_000

// New returns a Limiter over rdb whose keys start with prefix (the
// HOURGLASS_REDIS_PREFIX). Families without a rule are not limited. clk
// (nil: the system clock) is the time a refusal is remembered by; the
// budgets themselves count in Redis's time, which every container shares.
func New(rdb redis.Scripter, prefix string, rules map[Family]Rule, clk clock.Clock) *Limiter {
	if clk == nil {
		clk = clock.System{}
	}
	l := &Limiter{
		lim:    redis_rate.NewLimiter(keyspace{rdb}),
		prefix: prefix,
		rules:  make(map[Family]Rule, len(rules)),
		counts: make(map[Family]*counters, len(Families)),
		clock:  clk,
		// refused starts empty; see remembered.
		refused: map[string]time.Time{},
	}
	for _, f := range Families {
		l.counts[f] = &counters{}
	}
	for f, r := range rules {
		l.rules[f] = r
		if l.counts[f] == nil {
			l.counts[f] = &counters{}
		}
	}
	return l
}

// Allow takes one event from user's and from source's budget of family.
// With both limits of the family off it returns at once, without Redis. The
// user's budget is asked first, so a user refused on their own does not use
// up what their address (a NAT shared with others) may still do. An error
// (Redis unreachable) comes with an allowing Decision: callers may fail open.
func (l *Limiter) Allow(ctx context.Context, family Family, user, source string) (Decision, error) {
	if l == nil {
		return Decision{Allowed: true}, nil
	}
	rule := l.rules[family]
	if rule.Off() {
		return Decision{Allowed: true}, nil
	}
	c := l.counts[family]
	if !rule.User.IsZero() && user != "" {
		d, err := l.take(ctx, l.userKey(family, user), rule.User, ByUser)
		if err != nil {
			c.errors.Add(1)
			return d, fmt.Errorf("ratelimit: %s per user: %w", family, err)
		}
		if !d.Allowed {
			c.refusedUser.Add(1)
			return d, nil
		}
	}
	if !rule.Source.IsZero() {
		if src, ok := SourceKey(source); ok {
			d, err := l.take(ctx, l.sourceKey(family, src), rule.Source, BySource)
			if err != nil {
				c.errors.Add(1)
				return d, fmt.Errorf("ratelimit: %s per source: %w", family, err)
			}
			if !d.Allowed {
				c.refusedSource.Add(1)
				return d, nil
			}
		}
	}
	return Decision{Allowed: true}, nil
}

// take takes one event from the budget key, unless it is known spent.
func (l *Limiter) take(ctx context.Context, key string, limit Limit, by By) (Decision, error) {
	now := l.clock.Now()
	l.mu.Lock()
	until, known := l.refused[key]
	l.mu.Unlock()
	if known && now.Before(until) {
		return Decision{By: by, RetryAfter: until.Sub(now)}, nil
	}
	res, err := l.lim.Allow(ctx, key, limit)
	if err != nil {
		return Decision{Allowed: true}, err
	}
	if res.Allowed > 0 {
		return Decision{Allowed: true}, nil
	}
	l.remember(key, now.Add(res.RetryAfter), now)
	return Decision{By: by, RetryAfter: res.RetryAfter}, nil
}

func (l *Limiter) remember(key string, until, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.refused) >= maxRemembered {
		for k, u := range l.refused {
			if !now.Before(u) {
				delete(l.refused, k)
			}
		}
		if len(l.refused) >= maxRemembered {
			return
		}
	}
	l.refused[key] = until
}

// Key names. A user id is any printable text the identity layer accepted; it
// sits last in the key, so no user can reach another one's key.
func (l *Limiter) userKey(f Family, user string) string {
	return l.prefix + "rl:" + string(f) + ":u:" + user
}

func (l *Limiter) sourceKey(f Family, src string) string {
	return l.prefix + "rl:" + string(f) + ":s:" + src
}

// SourceKey is the budget a client address counts against: an IPv4 address
// as it is, an IPv6 address by its /64 (one subscriber's usual allocation,
// which a bot can otherwise walk through address by address). ok is false
// for what is not an address: such a request is limited per user only.
func SourceKey(ip string) (string, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", false
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String(), true
	}
	p, _ := a.WithZone("").Prefix(64) // a valid IPv6 address always has a /64
	return p.String(), true
}

// FamilyStats is what /v1/admin/stats shows of one family: its settings and
// what this process refused since it started (each Lambda container counts
// its own).
type FamilyStats struct {
	PerUser       string `json:"per_user"`
	PerSource     string `json:"per_source"`
	RefusedUser   int64  `json:"refused_user"`
	RefusedSource int64  `json:"refused_source"`
	// Errors counts checks that failed (Redis unreachable) and let the
	// request through.
	Errors int64 `json:"errors"`
}

// Stats returns every family's settings and counters; nil when every limit
// is off (so /v1/admin/stats keeps SPEC.md's shape where nothing is limited).
func (l *Limiter) Stats() map[Family]FamilyStats {
	if l == nil {
		return nil
	}
	on := false
	for _, r := range l.rules {
		on = on || !r.Off()
	}
	if !on {
		return nil
	}
	out := make(map[Family]FamilyStats, len(l.counts))
	for f, c := range l.counts {
		r := l.rules[f]
		out[f] = FamilyStats{
			PerUser: Format(r.User), PerSource: Format(r.Source),
			RefusedUser: c.refusedUser.Load(), RefusedSource: c.refusedSource.Load(), Errors: c.errors.Load(),
		}
	}
	return out
}

// Format writes a Limit the way Parse reads it; the zero Limit is "off".
func Format(l Limit) string {
	if l.IsZero() {
		return "off"
	}
	var period string
	switch l.Period {
	case time.Second:
		period = "s"
	case time.Minute:
		period = "m"
	case time.Hour:
		period = "h"
	default:
		period = l.Period.String()
	}
	s := strconv.Itoa(l.Rate) + "/" + period
	if l.Burst != l.Rate {
		s += ":" + strconv.Itoa(l.Burst)
	}
	return s
}

// MaxRate bounds the rate and burst Parse accepts.
const MaxRate = 1_000_000

// Parse reads a limit: "RATE/PERIOD" or "RATE/PERIOD:BURST", where PERIOD is
// s, m, h or a Go duration ("10s", "1m30s") and BURST defaults to RATE; "",
// "0" and "off" are off. "5/s" allows 5 a second, up to 5 at once;
// "30/m:10" allows 30 a minute, up to 10 at once.
func Parse(s string) (Limit, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || strings.EqualFold(s, "off") {
		return Limit{}, nil
	}
	rate, rest, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, fmt.Errorf("%q is not RATE/PERIOD[:BURST] (e.g. 5/s, 30/m:10) or off", s)
	}
	period, burst, hasBurst := strings.Cut(rest, ":")
	var l Limit
	var err error
	if l.Rate, err = count(rate); err != nil {
		return Limit{}, fmt.Errorf("%q: rate %w", s, err)
	}
	l.Burst = l.Rate
	if hasBurst {
		if l.Burst, err = count(burst); err != nil {
			return Limit{}, fmt.Errorf("%q: burst %w", s, err)
		}
	}
	switch period {
	case "s":
		l.Period = time.Second
	case "m":
		l.Period = time.Minute
	case "h":
		l.Period = time.Hour
	default:
		d, err := time.ParseDuration(period)
		if err != nil || d < time.Millisecond || d > 24*time.Hour {
			return Limit{}, fmt.Errorf("%q: period must be s, m, h or a duration within 1ms..24h", s)
		}
		l.Period = d
	}
	return l, nil
}

func count(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxRate {
		return 0, fmt.Errorf("must be a whole number within 1..%d", MaxRate)
	}
	return n, nil
}

// libraryPrefix is what redis_rate puts before every key it is given.
const libraryPrefix = "rate:"

// keyspace hands redis_rate's commands to Redis with the library's own "rate:"
// key prefix taken off, so the keys are the ones Limiter names: under
// HOURGLASS_REDIS_PREFIX like every other key (ACL key patterns, SCAN by
// prefix and the soak's leak check see them).
type keyspace struct{ rdb redis.Scripter }

func rekey(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.TrimPrefix(k, libraryPrefix)
	}
	return out
}

func (k keyspace) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return k.rdb.Eval(ctx, script, rekey(keys), args...)
}

func (k keyspace) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return k.rdb.EvalSha(ctx, sha1, rekey(keys), args...)
}

func (k keyspace) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return k.rdb.EvalRO(ctx, script, rekey(keys), args...)
}

func (k keyspace) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return k.rdb.EvalShaRO(ctx, sha1, rekey(keys), args...)
}

func (k keyspace) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return k.rdb.ScriptExists(ctx, hashes...)
}

func (k keyspace) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return k.rdb.ScriptLoad(ctx, script)
}

// Del is part of redis_rate's client interface (its Reset); Limiter never
// resets a budget.
func (k keyspace) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx)
	cmd.SetErr(errors.New("ratelimit: reset is not supported"))
	return cmd
}

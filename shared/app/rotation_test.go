package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

const (
	redisSecret  = "hourglass/redis-auth"
	payoutSecret = "hourglass/payout-signing-secret"
)

// lines is an io.Writer safe for concurrent use (the metric lines).
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }

// sum adds up the values of metric name over every EMF line.
func (l *lines) sum(t *testing.T, name string) float64 {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var total float64
	for sc := bufio.NewScanner(strings.NewReader(l.b.String())); sc.Scan(); {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue // a log line
		}
		if v, ok := m[name].(float64); ok {
			total += v
		}
	}
	return total
}

type rotatingStack struct {
	*stack
	srv     *redistest.Server
	store   *fakes.SecretStore
	metrics *lines
}

// newRotatingStack is the AWS-shaped pipeline of newStack with its Redis AUTH
// token and payout signing key in (a stand-in for) Secrets Manager, as
// ForLambda wires them: Redis requires token-A, the provider pay-A.
func newRotatingStack(t *testing.T) *rotatingStack {
	t.Helper()
	s := redistest.Start(t)
	if err := s.Client(t).ConfigSet(context.Background(), "requirepass", "token-A").Err(); err != nil {
		t.Fatal(err)
	}
	store := fakes.NewSecretStore(map[string]string{redisSecret: `{"password":"token-A"}`, payoutSecret: "pay-A"})
	prov := fakes.NewProvider(t, "pay-A")
	fin := fakes.NewFinance(t, "fin-secret")
	for k, v := range map[string]string{
		"REDIS_URL": s.URL(), "HOURGLASS_AUTH": "jwt", "PAYOUT_URL": prov.URL,
		"REDIS_AUTH_SECRET_ID": redisSecret, "PAYOUT_SIGNING_SECRET_ID": payoutSecret,
		"FINANCE_WEBHOOK_URL": fin.URL, "FINANCE_SIGNING_SECRET": "fin-secret",
		"HOURGLASS_RETRY_BASE": "20ms", "HOURGLASS_RETRY_CAP": "40ms", "HOURGLASS_MAX_ATTEMPTS": "5",
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Lambda)
	if err != nil {
		t.Fatal(err)
	}
	log := app.NewLogger(io.Discard, cfg.SlogLevel())
	sec, err := app.OpenSecrets(context.Background(), cfg, log, store)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.ConnectWith(cfg, sec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	a, err := app.New(cfg, log, rdb)
	if err != nil {
		t.Fatal(err)
	}
	a.Secrets = sec
	m := &lines{}
	a.EmitMetricsTo(m)
	st := wireStack(t, a, prov, fin)
	return &rotatingStack{stack: st, srv: s, store: store, metrics: m}
}

// rotateRedis makes Redis take only token-B and drops every connection on
// token-A, as ElastiCache's SET strategy does.
func (r *rotatingStack) rotateRedis(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: r.srv.Addr(), Password: "token-A", Protocol: 2})
	defer func() { _ = c.Close() }()
	if err := c.ConfigSet(ctx, "requirepass", "token-B").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ClientKillByFilter(ctx, "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
}

// With the functions running, the Redis AUTH token and the payout signing key
// are both rotated (the secrets updated, Redis and the provider taking only
// the new ones at once). The next withdrawal is created and paid in its first
// attempt: nothing failed, nothing counted as rejected.
func TestRotatedSecretsFailNothing(t *testing.T) {
	r := newRotatingStack(t)
	before := r.create(t, "alice")
	if w := r.drain(t, "alice", before); w.Status != withdrawal.Paid {
		t.Fatalf("before the rotation: %+v", w)
	}

	r.store.Set(redisSecret, `{"password":"token-B"}`)
	r.store.Set(payoutSecret, "pay-B")
	r.rotateRedis(t)
	r.provider.Rekey("pay-B")

	after := r.create(t, "bob")
	w := r.drain(t, "bob", after)
	if w.Status != withdrawal.Paid || w.Attempts != 1 || w.LastError != "" {
		t.Fatalf("after the rotation: %+v; want paid in its first attempt", w)
	}
	if calls, paid := r.provider.Calls(after); !paid || calls != 1 {
		t.Fatalf("provider: %d calls signed with the new key, paid %v", calls, paid)
	}
	if n := r.provider.BadSignatures(); n != 1 {
		t.Errorf("%d requests signed with the old key; want the one that made us re-read", n)
	}
	if msgs := r.finance.Of(after); len(msgs) != 1 || msgs[0].Status != withdrawal.Paid {
		t.Fatalf("finance got %+v", msgs)
	}
	for _, name := range []string{metrics.PayoutsRejected, metrics.PayoutsFailed, metrics.PayoutRetries} {
		if v := r.metrics.sum(t, name); v != 0 {
			t.Errorf("%s = %v across the rotation; want 0", name, v)
		}
	}
	if v := r.metrics.sum(t, metrics.PayoutsPaid); v != 2 {
		t.Errorf("PayoutsPaid = %v, want 2", v)
	}
	for id, want := range map[string]int{redisSecret: 2, payoutSecret: 2} {
		if n := r.store.Reads(id); n != want {
			t.Errorf("%s read %d times, want %d (cold start, one forced re-read)", id, n, want)
		}
	}
}

// A provider that refuses the old key and the new one alike: the payout is
// refused (PayoutsRejected) and retried, never failed.
func TestProviderRefusingBothKeysStillRejects(t *testing.T) {
	r := newRotatingStack(t)
	r.store.Set(payoutSecret, "pay-B")
	r.provider.Rekey("pay-C")
	id := r.create(t, "alice")
	r.poll()
	jobs := r.sent.take()
	if len(jobs) != 1 {
		t.Fatalf("poller sent %v", jobs)
	}
	r.deliver(t, jobs...)
	w, err := r.a.Service.Get(context.Background(), "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if w.Status != withdrawal.Retrying || w.Attempts != 1 {
		t.Fatalf("after both keys were refused: %+v; want retrying", w)
	}
	if n := r.provider.BadSignatures(); n != 2 {
		t.Errorf("%d refused requests; want 2 (the old key, then the new one once)", n)
	}
	if v := r.metrics.sum(t, metrics.PayoutsRejected); v != 1 {
		t.Errorf("PayoutsRejected = %v, want 1", v)
	}
	if v := r.metrics.sum(t, metrics.PayoutsFailed); v != 0 {
		t.Errorf("PayoutsFailed = %v, want 0", v)
	}
}

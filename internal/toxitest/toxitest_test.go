package toxitest_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/toxitest"
)

// client is a Redis client through p with one connection that never
// retries: each case sees what one command met.
func client(t *testing.T, p *toxitest.Proxy) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisThroughToxics(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	tp := toxitest.Start(t)
	p := tp.Proxy("redis", srv.Addr())
	c := client(t, p)
	ctx := context.Background()

	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping through a clean proxy: %v", err)
	}

	// Latency past the read timeout on replies: the command is applied, the
	// client gives up on its answer.
	remove := p.Add(toxitest.Latency(toxitest.Downstream, time.Second, 0))
	if err := c.Incr(ctx, "slow").Err(); err == nil {
		t.Fatal("INCR answered within the read timeout through 1s of latency")
	}
	remove()
	if n := direct.Get(ctx, "slow").Val(); n != "1" {
		t.Fatalf("slow = %q after a late INCR, want it applied (1)", n)
	}

	// A reply cut in the middle: applied, answer lost. The connection is
	// made first: the limit counts from when the toxic is added, and a new
	// connection's handshake would use it up.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	remove = p.Add(toxitest.LimitData(toxitest.Downstream, 3))
	if _, err := c.Set(ctx, "cut", strings.Repeat("x", 10), 0).Result(); err == nil {
		t.Fatal("SET answered whole through a 3-byte limit")
	}
	remove()
	if v := direct.Get(ctx, "cut").Val(); len(v) != 10 {
		t.Fatalf("cut = %q, want the SET applied", v)
	}

	// A blackhole in front of Redis: nothing reaches it.
	remove = p.Add(toxitest.Blackhole(toxitest.Upstream))
	if err := c.Incr(ctx, "void").Err(); err == nil {
		t.Fatal("INCR answered through a blackhole")
	}
	remove()
	if n, err := direct.Exists(ctx, "void").Result(); err != nil || n != 0 {
		t.Fatalf("void exists %d (%v), want the blackholed INCR never applied", n, err)
	}

	// A reset on the first reply byte.
	remove = p.Add(toxitest.ResetPeer(toxitest.Downstream, 0))
	if err := c.Incr(ctx, "reset").Err(); err == nil {
		t.Fatal("INCR answered through reset_peer")
	}
	remove()

	// Healed: the pool's broken connections are replaced.
	for i := range 3 {
		if err := c.Ping(ctx).Err(); err != nil && i == 2 {
			t.Fatalf("ping after every toxic was removed: %v", err)
		}
	}

	// Down: refused, then the same address again.
	p.Disable(ctx, 200*time.Millisecond)
	if err := c.Ping(ctx).Err(); err != nil {
		if err := c.Ping(ctx).Err(); err != nil { // a connection from before may be dead
			t.Fatalf("ping after the proxy came back: %v", err)
		}
	}

	got := tp.Applied()
	if len(got) != 5 {
		t.Fatalf("applied = %v, want 5 entries", got)
	}
	for _, a := range got {
		if a.To < a.From || a.To == 0 || a.Proxy != "redis" {
			t.Errorf("applied entry %s: bad times or proxy", a)
		}
	}
	if s := got[0].String(); !strings.Contains(s, "latency downstream latency=1000ms") {
		t.Errorf("first entry reads %q", s)
	}
}

func TestDisableRefuses(t *testing.T) {
	srv := redistest.Start(t)
	tp := toxitest.Start(t)
	p := tp.Proxy("redis", srv.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Disable(ctx, time.Minute); close(done) }()
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var conn net.Conn
		if conn, err = net.DialTimeout("tcp", p.Addr, time.Second); err != nil {
			break
		}
		_ = conn.Close()
	}
	if err == nil {
		t.Fatal("a disabled proxy still accepted connections")
	}
	cancel() // ends the minute early
	<-done
	if err := client(t, p).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping once enabled again: %v", err)
	}
}

// TestProviderStallsAfterReading: the request reaches the server, which
// acts on it, and its answer never comes back.
func TestProviderStallsAfterReading(t *testing.T) {
	var served atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		_, _ = w.Write([]byte("paid"))
	}))
	t.Cleanup(upstream.Close)
	tp := toxitest.Start(t)
	p := tp.Proxy("provider", strings.TrimPrefix(upstream.URL, "http://"))
	hc := &http.Client{Timeout: 300 * time.Millisecond}

	remove := p.Add(toxitest.Blackhole(toxitest.Downstream))
	resp, err := hc.Post(p.URL("http"), "application/json", strings.NewReader("{}"))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("an answer came through a blackholed downstream")
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a client timeout", err)
	}
	if served.Load() != 1 {
		t.Fatalf("served %d, want the request to have reached the server", served.Load())
	}
	remove()

	resp, err = hc.Post(p.URL("http"), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("after the stall: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || served.Load() != 2 {
		t.Fatalf("after the stall: %d, served %d", resp.StatusCode, served.Load())
	}
}

// accepted is how many connections srv has accepted.
func accepted(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_connections_received in INFO stats")
	return 0
}

// TestRedraw: a toxic on half the connections, redrawn, goes on resetting
// some of a busy client's connections, where left on it would spare the
// replacements it never picked.
func TestRedraw(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	tp := toxitest.Start(t)
	p := tp.Proxy("redis", srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 1, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ctx, stop := context.WithCancel(context.Background())
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		for ctx.Err() == nil {
			_ = c.Incr(context.Background(), "n").Err()
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	before := accepted(t, direct)
	p.Redraw(context.Background(), time.Second, 50*time.Millisecond, toxitest.ResetPeer(toxitest.Downstream, 0).On(0.5))
	stop()
	<-busy
	n := accepted(t, direct) - before
	t.Logf("%d connections replaced over 20 redraws", n)
	if n < 3 {
		t.Errorf("%d connections replaced over 20 redraws of a reset on half of them, want several", n)
	}
	got := tp.Applied()
	if len(got) != 1 || got[0].Every != 50*time.Millisecond || !strings.Contains(got[0].String(), "redrawn every 50ms") {
		t.Errorf("applied = %v, want one redrawn entry", got)
	}
}

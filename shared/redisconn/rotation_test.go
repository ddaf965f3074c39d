package redisconn_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/redisconn"
	"github.com/hourglass/hourglass/shared/secrets"
)

const authSecret = "hourglass/redis-auth"

// admin runs fn on a one-off client authenticated with password.
func admin(t *testing.T, s *redistest.Server, password string, fn func(c *redis.Client) error) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: password, Protocol: 2})
	defer func() { _ = c.Close() }()
	if err := fn(c); err != nil {
		t.Fatalf("admin: %v", err)
	}
}

// killClients closes every normal connection but the caller's, as
// ElastiCache's SET does to the connections on the old token.
func killClients(c *redis.Client) error {
	return c.ClientKillByFilter(context.Background(), "TYPE", "normal").Err()
}

type rotation struct {
	srv   *redistest.Server
	store *fakes.SecretStore
	clk   *clock.Fake
	rdb   redis.UniversalClient
}

func newRotation(t *testing.T) *rotation {
	t.Helper()
	s := redistest.Start(t)
	admin(t, s, "", func(c *redis.Client) error {
		return c.ConfigSet(context.Background(), "requirepass", "token-A").Err()
	})
	r := &rotation{srv: s, store: fakes.NewSecretStore(map[string]string{authSecret: `{"password":"token-A"}`}),
		clk: clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))}
	src := secrets.NewCached(r.store, authSecret, secrets.CachedOptions{Clock: r.clk, TTL: 5 * time.Minute})
	rdb, err := redisconn.New(s.URL(), redisconn.Options{Secret: src})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	r.rdb = rdb
	r.work(t, "before")
	return r
}

// work runs single commands, a script and pipelines from many goroutines at
// once; every one must succeed.
func (r *rotation) work(t *testing.T, phase string) {
	t.Helper()
	ctx := context.Background()
	script := redis.NewScript(`return redis.call("INCR", KEYS[1])`)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Go(func() {
			<-start
			key := fmt.Sprintf("%s:%d", phase, i)
			if err := r.rdb.Set(ctx, key, "v", 0).Err(); err != nil {
				errs <- fmt.Errorf("set: %w", err)
			}
			if err := script.Run(ctx, r.rdb, []string{key + ":n"}).Err(); err != nil {
				errs <- fmt.Errorf("script: %w", err)
			}
			var get *redis.StringCmd
			if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				get = p.Get(ctx, key)
				p.Incr(ctx, key+":m")
				return nil
			}); err != nil || get.Val() != "v" {
				errs <- fmt.Errorf("pipeline: get %q, %v", get.Val(), err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%s: %v", phase, err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// The AUTH token is replaced at once (ElastiCache's SET strategy, the
// operator not having waited for the TTL): Redis takes only the new token and
// drops the connections on the old one. The next commands all succeed: the
// first WRONGPASS makes the client read the secret again (once, however many
// commands were refused at the same time) and send them again.
func TestRotatedAuthTokenFailsNoCommand(t *testing.T) {
	r := newRotation(t)
	r.store.Set(authSecret, `{"password":"token-B"}`)
	admin(t, r.srv, "token-A", func(c *redis.Client) error {
		if err := c.ConfigSet(context.Background(), "requirepass", "token-B").Err(); err != nil {
			return err
		}
		return killClients(c)
	})
	r.work(t, "after")
	if n := r.store.Reads(authSecret); n != 2 {
		t.Fatalf("%d reads of the secret; want 2 (cold start, one forced re-read)", n)
	}
}

// ElastiCache's ROTATE strategy: for a while both tokens are valid. The
// secret is updated, its TTL passes, new connections take the new token;
// then the old one is removed (SET) and its connections dropped. Nothing
// fails and nothing is refused: no forced re-read was needed.
func TestRotateThenSetAuthTokenNeedsNoForcedRead(t *testing.T) {
	r := newRotation(t)
	ctx := context.Background()
	admin(t, r.srv, "token-A", func(c *redis.Client) error {
		return c.Do(ctx, "ACL", "SETUSER", "default", "on", ">token-A", ">token-B").Err()
	})
	r.store.Set(authSecret, `{"password":"token-B"}`)
	r.work(t, "rotate")
	r.clk.Advance(5*time.Minute + time.Second) // the TTL
	admin(t, r.srv, "token-B", killClients)    // new connections, now on B
	r.work(t, "after-ttl")
	admin(t, r.srv, "token-B", func(c *redis.Client) error {
		if err := c.Do(ctx, "ACL", "SETUSER", "default", "<token-A").Err(); err != nil {
			return err
		}
		return killClients(c)
	})
	r.work(t, "set")
	if n := r.store.Reads(authSecret); n != 2 {
		t.Fatalf("%d reads of the secret; want 2 (cold start, after the TTL)", n)
	}
}

// A secret that holds a wrong token fails the commands with the AUTH error
// (not an empty reply), and re-reads it at most once per MinRefresh however
// often Redis refuses it.
func TestWrongAuthTokenIsReadAgainAtMostOncePerMinRefresh(t *testing.T) {
	r := newRotation(t)
	r.store.Set(authSecret, "token-wrong")
	admin(t, r.srv, "token-A", func(c *redis.Client) error {
		if err := c.ConfigSet(context.Background(), "requirepass", "token-B").Err(); err != nil {
			return err
		}
		return killClients(c)
	})
	ctx := context.Background()
	for range 10 {
		get := r.rdb.Get(ctx, "k")
		if !redis.IsAuthError(get.Err()) {
			t.Fatalf("get: %v; want the AUTH error", get.Err())
		}
		var pget *redis.StringCmd
		_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { pget = p.Get(ctx, "k"); return nil })
		if !redis.IsAuthError(err) || !redis.IsAuthError(pget.Err()) {
			t.Fatalf("pipeline: %v, its command %v; want the AUTH error on both", err, pget.Err())
		}
	}
	if n := r.store.Reads(authSecret); n != 2 {
		t.Fatalf("%d reads of the secret; want 2 (cold start, one forced re-read)", n)
	}
	r.clk.Advance(secrets.DefaultMinRefresh)
	_ = r.rdb.Get(ctx, "k").Err()
	if n := r.store.Reads(authSecret); n != 3 {
		t.Fatalf("%d reads after MinRefresh; want 3", n)
	}
}

// A client whose password is in its URL (the local stack's) has nothing to
// read again, but a pipeline refused for its AUTH must still say so on each
// command: callers that read each command's reply would otherwise take the
// missing reply for an empty one (delayq's claim said "unexpected type=<nil>").
func TestWrongPasswordInTheURLFailsEveryPipelinedCommand(t *testing.T) {
	s := redistest.Start(t)
	admin(t, s, "", func(c *redis.Client) error {
		return c.ConfigSet(context.Background(), "requirepass", "right").Err()
	})
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("", "wrong")
	rdb, err := redisconn.New(u.String(), redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	var get *redis.StringCmd
	var eval *redis.Cmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, "k")
		eval = p.Eval(ctx, "return {1, 2}", nil)
		return nil
	})
	if !redis.IsAuthError(err) || !redis.IsAuthError(get.Err()) || !redis.IsAuthError(eval.Err()) {
		t.Fatalf("pipeline %v, get %v, eval %v; want the AUTH error on all three", err, get.Err(), eval.Err())
	}
}

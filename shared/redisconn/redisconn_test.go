package redisconn_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/redisconn"
)

// settings is what a client was built with, whichever kind it is.
type settings struct {
	Cluster                 bool
	Addrs                   []string
	DB                      int
	Username, Password      string
	TLS                     bool
	ServerName              string
	MinTLS                  uint16
	Dial, Read, Write, Pool time.Duration
	PoolSize                int
	MaxRetries              int
}

func settingsOf(t *testing.T, c redis.UniversalClient) settings {
	t.Helper()
	var s settings
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		s = settings{Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password,
			Dial: o.DialTimeout, Read: o.ReadTimeout, Write: o.WriteTimeout, Pool: o.PoolTimeout,
			PoolSize: o.PoolSize, MaxRetries: o.MaxRetries}
		if o.TLSConfig != nil {
			s.TLS, s.ServerName, s.MinTLS = true, o.TLSConfig.ServerName, o.TLSConfig.MinVersion
		}
	case *redis.ClusterClient:
		o := c.Options()
		s = settings{Cluster: true, Addrs: o.Addrs, Username: o.Username, Password: o.Password,
			Dial: o.DialTimeout, Read: o.ReadTimeout, Write: o.WriteTimeout, Pool: o.PoolTimeout,
			PoolSize: o.PoolSize, MaxRetries: o.MaxRetries}
		if o.TLSConfig != nil {
			s.TLS, s.ServerName, s.MinTLS = true, o.TLSConfig.ServerName, o.TLSConfig.MinVersion
		}
	default:
		t.Fatalf("client of type %T", c)
	}
	return s
}

func TestNewParsesURLs(t *testing.T) {
	const ecNode = "master.hg.abc123.use1.cache.amazonaws.com"
	const ecCluster = "clustercfg.hg.abc123.use1.cache.amazonaws.com"
	// fill gives the defaults to what a case leaves out.
	fill := func(s settings) settings {
		s.Dial, s.Read, s.Write, s.Pool = 2*time.Second, time.Second, time.Second, time.Second
		s.MaxRetries = 1
		s.PoolSize = 0
		return s
	}
	for _, tc := range []struct {
		name string
		url  string
		opts redisconn.Options
		want settings
	}{
		{"single", "redis://localhost:6379", redisconn.Options{},
			fill(settings{Addrs: []string{"localhost:6379"}})},
		{"default port", "redis://10.0.0.5", redisconn.Options{},
			fill(settings{Addrs: []string{"10.0.0.5:6379"}})},
		{"db number", "redis://localhost:6380/3", redisconn.Options{},
			fill(settings{Addrs: []string{"localhost:6380"}, DB: 3})},
		{"user and password", "redis://hg:p%40ss:w@localhost:6379/1", redisconn.Options{},
			fill(settings{Addrs: []string{"localhost:6379"}, DB: 1, Username: "hg", Password: "p@ss:w"})},
		{"token only", "redis://:tok@localhost:6379", redisconn.Options{},
			fill(settings{Addrs: []string{"localhost:6379"}, Password: "tok"})},
		{"tls", "rediss://:tok@" + ecNode + ":6379", redisconn.Options{},
			fill(settings{Addrs: []string{ecNode + ":6379"}, Password: "tok",
				TLS: true, ServerName: ecNode, MinTLS: tls.VersionTLS12})},
		{"cluster by query", "redis://10.0.0.1:7000?cluster=true&addr=10.0.0.2:7001&addr=10.0.0.3:7002", redisconn.Options{},
			fill(settings{Cluster: true, Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}})},
		{"cluster with db 0", "redis://10.0.0.1:7000/0?cluster=1", redisconn.Options{},
			fill(settings{Cluster: true, Addrs: []string{"10.0.0.1:7000"}})},
		{"cluster by clustercfg host", "rediss://hg:tok@" + ecCluster + ":6379", redisconn.Options{},
			fill(settings{Cluster: true, Addrs: []string{ecCluster + ":6379"}, Username: "hg", Password: "tok",
				TLS: true, ServerName: ecCluster, MinTLS: tls.VersionTLS12})},
		{"clustercfg host, cluster off", "redis://" + ecCluster + ":6379?cluster=false", redisconn.Options{},
			fill(settings{Addrs: []string{ecCluster + ":6379"}})},
		{"options win", "redis://localhost:6379?dial_timeout=3s",
			redisconn.Options{DialTimeout: 5 * time.Second, ReadTimeout: 2 * time.Second, PoolSize: 7, MaxRetries: -1},
			settings{Addrs: []string{"localhost:6379"}, Dial: 5 * time.Second, Read: 2 * time.Second,
				Write: time.Second, Pool: time.Second, PoolSize: 7, MaxRetries: 0}},
		{"url options beat defaults", "redis://localhost:6379?dial_timeout=3s&max_retries=2", redisconn.Options{},
			settings{Addrs: []string{"localhost:6379"}, Dial: 3 * time.Second, Read: time.Second,
				Write: time.Second, Pool: time.Second, MaxRetries: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisconn.New(tc.url, tc.opts)
			if err != nil {
				t.Fatalf("New(%q): %v", tc.url, err)
			}
			t.Cleanup(func() { _ = c.Close() })
			got := settingsOf(t, c)
			want := tc.want
			if want.PoolSize == 0 {
				got.PoolSize = 0 // go-redis's default depends on the machine
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejectsBadURLsWithoutThePassword(t *testing.T) {
	for _, tc := range []struct {
		name, url, want string
	}{
		{"empty", "", "empty"},
		{"other scheme", "http://:Hunter2Secret@localhost:6379", `scheme "http"`},
		{"unix socket", "unix:///tmp/redis.sock", `scheme "unix"`},
		{"no scheme", "Hunter2Secret@localhost:6379", "want redis://"},
		{"no slashes", "redis:Hunter2:Secret@localhost:6379", "want redis://"},
		{"empty host", "redis://:Hunter2Secret@:6379", "no host"},
		{"nothing at all", "redis://", "no host"},
		{"port not a number", "redis://hg:Hunter2Secret@localhost:abc", "invalid port"},
		{"port too big", "redis://hg:Hunter2Secret@localhost:70000", `bad port "70000"`},
		{"port zero", "redis://hg:Hunter2Secret@localhost:0", `bad port "0"`},
		{"db not a number", "redis://:Hunter2Secret@localhost:6379/x", "invalid database number"},
		{"path too deep", "redis://:Hunter2Secret@localhost:6379/1/2", "invalid URL path"},
		{"db in cluster mode", "redis://:Hunter2Secret@localhost:7000/2?cluster=true", "cluster mode has only database 0"},
		{"db query in cluster mode", "redis://:Hunter2Secret@" + "clustercfg.x:7000?db=1", "cluster mode has only database 0"},
		{"cluster not boolean", "redis://:Hunter2Secret@localhost:7000?cluster=maybe", `cluster="maybe"`},
		{"addr without cluster", "redis://:Hunter2Secret@localhost:7000?addr=h2:7001", "cluster mode only"},
		{"addr without port", "redis://:Hunter2Secret@localhost:7000?cluster=true&addr=h2", `addr="h2"`},
		{"addr bad port", "redis://:Hunter2Secret@localhost:7000?cluster=true&addr=h2:99999", `bad port "99999"`},
		{"unknown option", "redis://:Hunter2Secret@localhost:6379?bogus=1", "unexpected option: bogus"},
		{"unescaped slash in password", "redis://:Hunter2/Secret@localhost:6379", "percent-encode"},
		{"unescaped hash in password", "redis://hg:Hunter2#Secret@localhost:6379", "percent-encode"},
		{"bad escape in password", "redis://hg:Hunter2%zzSecret@localhost:6379", "percent-encode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisconn.New(tc.url, redisconn.Options{})
			if err == nil {
				_ = c.Close()
				t.Fatalf("New(%q) succeeded", tc.url)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not say %q", msg, tc.want)
			}
			if !strings.HasPrefix(msg, "redisconn: ") {
				t.Errorf("error %q lacks the package prefix", msg)
			}
			for _, secret := range []string{"Hunter2", "Secret"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q shows the password", msg)
				}
			}
		})
	}
}

func TestRedacted(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://localhost:6379", "redis://localhost:6379"},
		{"redis://hg@localhost:6379", "redis://hg@localhost:6379"},
		{"redis://hg:pw@localhost:6379/2", "redis://hg:xxxxx@localhost:6379/2"},
		{"rediss://:tok@clustercfg.x:6379?cluster=true", "rediss://:xxxxx@clustercfg.x:6379?cluster=true"},
		{"redis://hg:p@ss/w#rd@localhost", "redis://hg:xxxxx@localhost"},
		{"hg:pw@localhost", "xxxxx@localhost"},
		{"redis:pw@localhost", "xxxxx@localhost"},
		{"", ""},
	} {
		if got := redisconn.Redacted(tc.in); got != tc.want {
			t.Errorf("Redacted(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLiveRedis(t *testing.T) {
	s := redistest.Start(t)
	c, err := redisconn.New(s.URL(), redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	if err := redisconn.Ping(ctx, c); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := c.Set(ctx, "hg:test", "v1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "hg:test").Result(); err != nil || got != "v1" {
		t.Fatalf("GET = %q, %v", got, err)
	}

	s.Kill()
	// Expected well under a second and a half; the bounds leave room for
	// noisy machines.
	start := time.Now()
	if err := redisconn.Ping(ctx, c); err == nil {
		t.Fatal("Ping succeeded after the server died")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Ping took %v to fail", d)
	}
	start = time.Now()
	if err := c.Get(ctx, "hg:test").Err(); err == nil {
		t.Fatal("GET succeeded after the server died")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("GET without a deadline took %v to fail", d)
	}
}

func TestLiveRedisWithPassword(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	// Set after start: redistest's readiness probe does not authenticate.
	if err := s.Client(t).ConfigSet(ctx, "requirepass", "Hunter2Secret").Err(); err != nil {
		t.Fatal(err)
	}

	c, err := redisconn.New("redis://:Hunter2Secret@"+s.Addr()+"/2", redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET with password: %v", err)
	}

	wrong, err := redisconn.New("redis://:Wrong2Secret@"+s.Addr(), redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wrong.Close() })
	err = redisconn.Ping(ctx, wrong)
	if err == nil {
		t.Fatal("Ping with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), "Wrong2") {
		t.Errorf("error %q shows the password", err)
	}
}

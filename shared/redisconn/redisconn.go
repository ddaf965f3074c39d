// Package redisconn builds the Redis client of every function from REDIS_URL:
// one node, or a cluster (ElastiCache cluster mode), plain or TLS.
//
// URL forms:
//
//	redis://[user:pass@]host:port[/db]       one node
//	rediss://…                                the same over TLS (1.2 or later)
//	redis[s]://host:port?cluster=true[&addr=host:port…]   a cluster; db must be 0
//	redis[s]://clustercfg.…:port              an ElastiCache cluster configuration
//	                                          endpoint is a cluster by its name
//
// go-redis's own URL options (dial_timeout=…, pool_size=…) are accepted too.
//
// The defaults are short because every caller runs under a Lambda deadline or
// an HTTP request: a dead Redis must fail a call within about a second or two,
// not hang it. Errors never carry the password.
package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hourglass/hourglass/shared/redisguard"
	"github.com/hourglass/hourglass/shared/secrets"
)

// Defaults, used where neither Options nor the URL say otherwise.
const (
	DefaultDialTimeout  = 2 * time.Second
	DefaultReadTimeout  = time.Second
	DefaultWriteTimeout = time.Second
	DefaultPoolTimeout  = time.Second
	DefaultMaxRetries   = 1
	// PingTimeout bounds Ping, so a health check answers before its caller
	// gives up on it.
	PingTimeout = 500 * time.Millisecond
)

// protocol is RESP2 unless the URL asks otherwise (protocol=3): Hourglass
// uses no push messages or client-side caching, and RESP3's push handling
// costs the client work on every command.
const protocol = 2

// clusterHostPrefix starts the name of an ElastiCache cluster configuration
// endpoint.
const clusterHostPrefix = "clustercfg."

// Options tunes the client. A zero field takes the URL's value if it has one
// (dial_timeout=…), else the default.
type Options struct {
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PoolTimeout  time.Duration
	// PoolSize is per node; zero keeps go-redis's default (a multiple of
	// GOMAXPROCS).
	PoolSize int
	// MaxRetries is retries after a network error; -1 means none.
	MaxRetries int
	// Password, if set, replaces the URL's (an ElastiCache user's password read
	// from Secrets Manager, so it never sits in the environment).
	Password string
	// Secret, if set, replaces both: every new connection authenticates
	// with its current key, and a command Redis refuses for its AUTH
	// (WRONGPASS, NOAUTH: the token was rotated) is sent once more after
	// Secret.Refresh, so a rotation fails no command.
	Secret secrets.Source
	// Guard, if set, refuses before sending what the Redis of its profile
	// does not serve (package redisguard); on a cluster it guards the
	// node clients too, so CLUSTER SLOTS and COMMAND pass it as well.
	Guard *redisguard.Guard
}

// New returns a client for rawURL: a *redis.ClusterClient in cluster mode,
// else a *redis.Client. It does not connect; see Ping.
func New(rawURL string, opts Options) (redis.UniversalClient, error) {
	cfg, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	if cfg.cluster {
		co, err := redis.ParseClusterURL(cfg.redacted)
		if err != nil {
			return nil, fmt.Errorf("redisconn: REDIS_URL %s: %w", cfg.shown, err)
		}
		co.Username, co.Password = cfg.user, pick(opts.Password, cfg.password)
		if co.TLSConfig != nil {
			co.TLSConfig.MinVersion = tls.VersionTLS12
		}
		co.DialTimeout = pick(opts.DialTimeout, co.DialTimeout, DefaultDialTimeout)
		co.ReadTimeout = pick(opts.ReadTimeout, co.ReadTimeout, DefaultReadTimeout)
		co.WriteTimeout = pick(opts.WriteTimeout, co.WriteTimeout, DefaultWriteTimeout)
		co.PoolTimeout = pick(opts.PoolTimeout, co.PoolTimeout, DefaultPoolTimeout)
		co.PoolSize = pick(opts.PoolSize, co.PoolSize, 0)
		co.MaxRetries = pick(opts.MaxRetries, co.MaxRetries, DefaultMaxRetries)
		// One dial per attempt: MaxRetries already retries, and go-redis's
		// default of 5 dials multiplies every timeout.
		co.DialerRetries = pick(co.DialerRetries, 1)
		co.DisableIdentity = true // see o.DisableIdentity below
		co.ContextTimeoutEnabled = true
		co.Protocol = pick(co.Protocol, protocol)
		if opts.Secret != nil {
			co.CredentialsProviderContext = credentials(cfg.user, opts.Secret)
		}
		if opts.Guard != nil {
			co.MaintNotificationsConfig = noMaintNotifications()
		}
		c := redis.NewClusterClient(co)
		opts.Guard.Install(c)
		c.AddHook(reauth{opts.Secret})
		return c, nil
	}
	o, err := redis.ParseURL(cfg.redacted)
	if err != nil {
		return nil, fmt.Errorf("redisconn: REDIS_URL %s: %w", cfg.shown, err)
	}
	o.Username, o.Password = cfg.user, pick(opts.Password, cfg.password)
	o.DialTimeout = pick(opts.DialTimeout, o.DialTimeout, DefaultDialTimeout)
	o.ReadTimeout = pick(opts.ReadTimeout, o.ReadTimeout, DefaultReadTimeout)
	o.WriteTimeout = pick(opts.WriteTimeout, o.WriteTimeout, DefaultWriteTimeout)
	o.PoolTimeout = pick(opts.PoolTimeout, o.PoolTimeout, DefaultPoolTimeout)
	o.PoolSize = pick(opts.PoolSize, o.PoolSize, 0)
	o.MaxRetries = pick(opts.MaxRetries, o.MaxRetries, DefaultMaxRetries)
	o.DialerRetries = 1
	// No CLIENT SETINFO on connect: each function's Redis user may send
	// only the commands its work needs (package redisacl), and a refused
	// SETINFO, which go-redis ignores, would still fill the ACL log.
	o.DisableIdentity = true
	// Context deadlines (the Lambda's, Ping's) then bound socket I/O too.
	o.ContextTimeoutEnabled = true
	o.Protocol = pick(o.Protocol, protocol)
	if opts.Secret != nil {
		o.CredentialsProviderContext = credentials(cfg.user, opts.Secret)
	}
	if opts.Guard != nil {
		o.MaintNotificationsConfig = noMaintNotifications()
	}
	c := redis.NewClient(o)
	opts.Guard.Install(c)
	c.AddHook(reauth{opts.Secret})
	return c, nil
}

// noMaintNotifications turns off go-redis's CLIENT MAINT_NOTIFICATIONS on
// connect (a Redis Enterprise feature, tried with protocol=3): ElastiCache
// Serverless does not serve it, and the guard would count every try.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// Ping checks that Redis answers, within PingTimeout.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisconn: ping: %w", err)
	}
	return nil
}

// Redacted returns rawURL with its password, if any, replaced by "xxxxx", for
// logs and errors. It works on text that does not parse too, and errs on the
// side of hiding more: everything between the first ':' of the user info and
// the last '@' goes, and without a "://" everything before the last '@'.
func Redacted(rawURL string) string {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		if at := strings.LastIndex(rawURL, "@"); at >= 0 {
			return "xxxxx" + rawURL[at:]
		}
		return rawURL
	}
	start := i + len("://")
	at := strings.LastIndex(rawURL[start:], "@")
	if at < 0 {
		return rawURL
	}
	colon := strings.Index(rawURL[start:start+at], ":")
	if colon < 0 {
		return rawURL // a user name alone
	}
	return rawURL[:start+colon+1] + "xxxxx" + rawURL[start+at:]
}

// config is a checked REDIS_URL.
type config struct {
	cluster bool
	// redacted is the URL go-redis parses: the password is set afterwards, so
	// no go-redis error can quote it. Our own query parameters are gone.
	redacted string
	// shown is the URL as errors show it.
	shown          string
	user, password string
}

func parse(rawURL string) (config, error) {
	shown := Redacted(rawURL)
	cfg := config{shown: shown}
	fail := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("redisconn: REDIS_URL %s: "+format, append([]any{shown}, args...)...)
	}
	if rawURL == "" {
		return config{}, errors.New("redisconn: REDIS_URL is empty")
	}
	if !strings.Contains(rawURL, "://") {
		return fail("want redis://host:port or rediss://host:port")
	}
	// Every check runs on the redacted URL, so no message can quote the
	// password; the real one must parse to the same URL bar the password.
	u, err := url.Parse(shown)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fail("%v", err)
	}
	raw, err := url.Parse(rawURL)
	if err != nil || raw.Scheme != u.Scheme || raw.Host != u.Host || raw.Path != u.Path ||
		raw.RawQuery != u.RawQuery || raw.Fragment != u.Fragment {
		return fail("cannot tell the password from the rest: percent-encode any '@', '/', '?', '#', '%%' in it")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fail("scheme %q: want redis:// or rediss://", u.Scheme)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return fail("no host")
	}
	if p := u.Port(); p != "" {
		if err := checkPort(p); err != nil {
			return fail("%v", err)
		}
	}
	if raw.User != nil {
		cfg.user = raw.User.Username()
		cfg.password, _ = raw.User.Password()
	}

	q := u.Query()
	if v, ok := q["cluster"]; ok {
		if len(v) != 1 {
			return fail("cluster given %d times", len(v))
		}
		if cfg.cluster, err = strconv.ParseBool(v[0]); err != nil {
			return fail("cluster=%q is not a boolean", v[0])
		}
		q.Del("cluster")
	} else {
		cfg.cluster = strings.HasPrefix(strings.ToLower(u.Hostname()), clusterHostPrefix)
	}

	if cfg.cluster {
		for _, a := range q["addr"] {
			host, port, err := net.SplitHostPort(a)
			if err != nil || host == "" {
				return fail("addr=%q: want host:port", a)
			}
			if err := checkPort(port); err != nil {
				return fail("addr=%q: %v", a, err)
			}
		}
		// go-redis ignores the path of a cluster URL; a db there would be
		// silently dropped, so refuse it.
		db := strings.Trim(u.Path, "/")
		if v := q.Get("db"); v != "" {
			db = v
		}
		q.Del("db")
		if db != "" && db != "0" {
			if _, err := strconv.Atoi(db); err != nil {
				return fail("invalid database number %q", db)
			}
			return fail("database %s: cluster mode has only database 0", db)
		}
		u.Path = ""
	} else if q.Has("addr") {
		return fail("addr is for cluster mode only (add cluster=true)")
	}

	u.RawQuery = q.Encode()
	cfg.redacted = u.String()
	return cfg, nil
}

func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("bad port %q", p)
	}
	return nil
}

// pick returns the first non-zero value.
func pick[T comparable](vs ...T) T {
	var zero T
	for _, v := range vs {
		if v != zero {
			return v
		}
	}
	return zero
}

// errNoSource: a client whose password no secret source gives cannot read it
// again.
var errNoSource = errors.New("redisconn: no secret source to read the AUTH token again")

// credentials asks src for the password of each new connection.
func credentials(user string, src secrets.Source) func(ctx context.Context) (string, string, error) {
	return func(ctx context.Context) (string, string, error) {
		k, err := src.Keys(ctx)
		if err != nil {
			return "", "", fmt.Errorf("redisconn: AUTH token: %w", err)
		}
		return user, k.Current, nil
	}
}

// reauth sends a command (or pipeline) once more when Redis refused it for
// its authentication, after the secret was read again. That is safe: a
// command refused with WRONGPASS (the connection's AUTH failed) or NOAUTH
// was not run. A rotation closes connections on the old token (ElastiCache's
// SET strategy; CLIENT KILL in the tests); the new connections then ask for
// the password, and the refused one is what makes it re-read. Without a
// source (a password from the URL) nothing is re-sent, but a pipeline refused
// for its AUTH still carries that error on each of its commands.
type reauth struct{ src secrets.Source }

func (reauth) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reauth) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !redis.IsAuthError(err) || h.refresh(ctx) != nil {
			return err
		}
		cmd.SetErr(nil)
		return next(ctx, cmd)
	}
}

func (h reauth) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if redis.IsAuthError(err) && h.refresh(ctx) == nil {
			for _, c := range cmds {
				c.SetErr(nil)
			}
			err = next(ctx, cmds)
		}
		if redis.IsAuthError(err) {
			// A connection that failed its AUTH leaves the commands without
			// an error of their own; callers that read each command's
			// result would take that for an empty reply.
			for _, c := range cmds {
				if c.Err() == nil {
					c.SetErr(err)
				}
			}
		}
		return err
	}
}

func (h reauth) refresh(ctx context.Context) error {
	if h.src == nil {
		return errNoSource
	}
	_, err := h.src.Refresh(ctx)
	return err
}

package secrets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/hourglass/hourglass/shared/clock"
)

// Keys is what a secret holds: the key in use and, while a rotation is under
// way, the key before it, which a verifier still accepts.
type Keys struct {
	Current  string
	Previous string
}

// All returns the keys a verifier accepts, the current one first.
func (k Keys) All() [][]byte {
	out := [][]byte{[]byte(k.Current)}
	if k.Previous != "" && k.Previous != k.Current {
		out = append(out, []byte(k.Previous))
	}
	return out
}

// Source gives a secret's keys. Keys may answer from a cache; Refresh is
// called after the keys were refused (a WRONGPASS, a 401, a signature that
// does not match) and reads the secret again unless it was just read.
type Source interface {
	Keys(ctx context.Context) (Keys, error)
	Refresh(ctx context.Context) (Keys, error)
}

// Static is a Source of fixed keys: the local stack's secrets from the
// environment.
type Static Keys

// Keys returns k.
func (k Static) Keys(context.Context) (Keys, error) { return Keys(k), nil }

// Refresh returns k: there is nothing to read again.
func (k Static) Refresh(context.Context) (Keys, error) { return Keys(k), nil }

// Defaults of a Cached source.
const (
	// DefaultTTL is how long keys read are used before they are read again.
	DefaultTTL = 5 * time.Minute
	// DefaultMinRefresh spaces forced re-reads, so that a key refused for
	// good (a wrong one in the secret) does not hammer Secrets Manager.
	DefaultMinRefresh = 5 * time.Second
	// readTimeout bounds one read, whoever waits for it.
	readTimeout = 5 * time.Second
)

// CachedOptions configure NewCached.
type CachedOptions struct {
	// TTL is how long a read is used (DefaultTTL if 0).
	TTL time.Duration
	// MinRefresh is the least time between forced re-reads
	// (DefaultMinRefresh if 0).
	MinRefresh time.Duration
	Clock      clock.Clock
	Logger     *slog.Logger
}

// Cached is a Source of one Secrets Manager secret: read at most once per
// TTL, again on Refresh. Concurrent callers share one read; a read that fails
// keeps the keys held (logged, without any value) so that a Secrets Manager
// outage does not take the keys away. It is safe for concurrent use.
type Cached struct {
	api Getter
	id  string
	o   CachedOptions

	group singleflight.Group

	mu     sync.Mutex
	keys   Keys
	have   bool
	readAt time.Time // of the keys held, or of the last failed read
	forced time.Time // of the last forced re-read
	reads  int
}

// NewCached returns the Source of the secret id (a name or a complete ARN).
// It reads nothing until asked.
func NewCached(api Getter, id string, o CachedOptions) *Cached {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MinRefresh <= 0 {
		o.MinRefresh = DefaultMinRefresh
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Cached{api: api, id: id, o: o}
}

// ID is the secret's name or ARN.
func (c *Cached) ID() string { return c.id }

// Reads counts the reads of Secrets Manager made so far.
func (c *Cached) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// Keys returns the keys held, reading the secret first if it has not been
// read yet or its TTL ran out.
func (c *Cached) Keys(ctx context.Context) (Keys, error) {
	c.mu.Lock()
	k, fresh := c.keys, c.have && c.o.Clock.Now().Sub(c.readAt) < c.o.TTL
	c.mu.Unlock()
	if fresh {
		return k, nil
	}
	return c.read(ctx, false)
}

// Refresh reads the secret again, unless it was force-read less than
// MinRefresh ago: then it returns the keys held (which that read fetched).
func (c *Cached) Refresh(ctx context.Context) (Keys, error) {
	c.mu.Lock()
	k, recent := c.keys, c.have && c.o.Clock.Now().Sub(c.forced) < c.o.MinRefresh
	c.mu.Unlock()
	if recent {
		return k, nil
	}
	return c.read(ctx, true)
}

func (c *Cached) read(ctx context.Context, forced bool) (Keys, error) {
	ch := c.group.DoChan("read", func() (any, error) {
		// The read is shared: no one caller's cancellation may end it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		now := c.o.Clock.Now()
		// A caller that looked before the previous read ended joins no
		// read but starts its own: it takes what that read fetched.
		c.mu.Lock()
		if c.have && (forced && now.Sub(c.forced) < c.o.MinRefresh || !forced && now.Sub(c.readAt) < c.o.TTL) {
			k := c.keys
			c.mu.Unlock()
			return k, nil
		}
		c.mu.Unlock()
		k, err := Read(rctx, c.api, c.id)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.reads++
		if forced {
			c.forced = now
		}
		if err != nil {
			if !c.have {
				return Keys{}, err
			}
			// Keep what we have; try again after MinRefresh, not at once.
			c.readAt = now.Add(min(c.o.MinRefresh, c.o.TTL) - c.o.TTL)
			c.o.Logger.Warn("secret re-read failed; keeping the keys held", "secret", c.id, "error", err.Error())
			return c.keys, nil
		}
		if c.have && k != c.keys {
			c.o.Logger.Info("secret changed", "secret", c.id, "forced", forced)
		}
		c.keys, c.have, c.readAt = k, true, now
		return k, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Keys{}, r.Err
		}
		return r.Val.(Keys), nil
	case <-ctx.Done():
		return Keys{}, fmt.Errorf("secrets: read %s: %w", c.id, ctx.Err())
	}
}

// Read returns the keys of the secret id (a name or a complete ARN); see
// Parse for what its value may be.
func Read(ctx context.Context, api Getter, id string) (Keys, error) {
	out, err := api.GetSecretValue(ctx, getInput(id))
	if err != nil {
		return Keys{}, fmt.Errorf("secrets: read %s: %w", id, err)
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return Keys{}, fmt.Errorf("secrets: %s has no string value", id)
	}
	return Parse(id, *out.SecretString)
}

var errNoCurrent = errors.New("has no current key")

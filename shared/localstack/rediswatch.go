package localstack

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
)

// While Redis does not answer, every part of the local stack that touches it
// fails the same way, every round: a terminal full of one cause. The watcher
// says it once, clearly, with where it tried; tries again backing off; and
// says when Redis is back. Meanwhile quietHandler lowers the parts' own
// connection errors to debug (HOURGLASS_LOG_LEVEL=debug shows them).

// Watch intervals: how often a healthy Redis is checked, and the backoff of
// the checks while it is down.
const (
	watchEvery   = 2 * time.Second
	backoffFirst = time.Second
	backoffCap   = 10 * time.Second
)

// redisWatch follows whether Redis answers.
type redisWatch struct {
	ping  func(context.Context) error
	where string // the redacted REDIS_URL
	log   *slog.Logger
	clock clock.Clock
	// wait blocks for d or until ctx is done (false then); tests replace it.
	wait func(ctx context.Context, d time.Duration) bool
	// down is shared with the quietHandler of the stack's logger, which
	// pokes the watcher when a part logs a failed connection while Redis
	// is thought up: it checks at once rather than at its next round.
	down *atomic.Bool
	poke chan struct{}
}

func newRedisWatch(ping func(context.Context) error, where string, log *slog.Logger, clk clock.Clock, state *watchState) *redisWatch {
	w := &redisWatch{ping: ping, where: where, log: log, clock: clk, down: &state.down, poke: state.poke}
	w.wait = w.sleep
	return w
}

// watchState is what the watcher and the quiet handler share.
type watchState struct {
	down atomic.Bool
	poke chan struct{}
}

func newWatchState() *watchState { return &watchState{poke: make(chan struct{}, 1)} }

// sleep waits d, or less when poked; false once ctx is done.
func (w *redisWatch) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-w.poke:
	}
	return true
}

// check pings once and logs a change of state; it returns the next wait.
// since is when Redis was first found down (zero while up); backoff the
// current wait while down.
func (w *redisWatch) check(ctx context.Context, since *time.Time, backoff *time.Duration) time.Duration {
	err := w.ping(ctx)
	if ctx.Err() != nil {
		return 0
	}
	switch {
	case err == nil && since.IsZero():
		return watchEvery
	case err == nil:
		w.down.Store(false)
		w.log.Info("redis is back: hourglass is working again", "redis", w.where,
			"down_for", w.clock.Now().Sub(*since).Round(time.Second).String())
		*since, *backoff = time.Time{}, 0
		return watchEvery
	case since.IsZero():
		*since, *backoff = w.clock.Now(), backoffFirst
		defer w.down.Store(true) // after saying so: the quiet handler would lower this too
		w.log.Error("redis is unreachable: nothing is accepted or paid until it answers; "+
			"hourglass tries again, backing off up to "+backoffCap.String()+", and says when it is back "+
			"(check that redis-server runs and REDIS_URL points at it)",
			"redis", w.where, "error", err.Error())
		return *backoff
	default:
		w.log.Debug("redis is still unreachable", "redis", w.where, "error", err.Error(),
			"down_for", w.clock.Now().Sub(*since).Round(time.Second).String())
		*backoff = min(2**backoff, backoffCap)
		return *backoff
	}
}

// run goes on from a first check's state (since, backoff) and the wait it
// returned, checking until ctx is done.
func (w *redisWatch) run(ctx context.Context, since time.Time, backoff, next time.Duration) {
	for ctx.Err() == nil && w.wait(ctx, next) {
		next = w.check(ctx, &since, &backoff)
	}
}

// quietHandler lowers to debug, while Redis is down, the warnings and
// errors that say only that Redis is not answering.
type quietHandler struct {
	inner slog.Handler
	state *watchState
}

func (h quietHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || !connectionNoise(r) {
		return h.inner.Handle(ctx, r)
	}
	if !h.state.down.Load() {
		select { // the watcher checks now, and says it once if Redis is down
		case h.state.poke <- struct{}{}:
		default:
		}
		return h.inner.Handle(ctx, r)
	}
	if !h.inner.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	r.Level = slog.LevelDebug
	return h.inner.Handle(ctx, r)
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{inner: h.inner.WithAttrs(as), state: h.state}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{inner: h.inner.WithGroup(name), state: h.state}
}

// unreachable are the texts of a Redis that does not answer.
var unreachable = []string{
	"connection refused", "i/o timeout", "connection reset", "broken pipe", "no route to host",
	"network is unreachable", "EOF", "dial tcp", "connection pool", "LOADING", "client is closed",
	"context deadline exceeded",
}

// connectionNoise reports whether r says only that Redis is not answering:
// go-redis's own complaints, and errors whose text is a failed connection.
func connectionNoise(r slog.Record) bool {
	if strings.HasPrefix(r.Message, "redis client:") {
		return true
	}
	noise := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "error" {
			return true
		}
		s := a.Value.String()
		for _, u := range unreachable {
			if strings.Contains(s, u) {
				noise = true
				return false
			}
		}
		return true
	})
	return noise
}

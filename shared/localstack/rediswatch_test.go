package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/clock"
)

// syncBuffer is a log sink the watcher's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// records returns the logged lines' level and message.
func (s *syncBuffer) records(t *testing.T) [][2]string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][2]string
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var r struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, [2]string{r.Level, r.Msg[:min(len(r.Msg), 28)]})
	}
	return out
}

// TestWatchSaysOnceAndBacksOff: a Redis down for six checks is reported
// once, checked again after 1, 2, 4, 8, 10 and 10 s (the cap), and its
// return is reported with how long it was gone; a healthy one is checked
// every 2 s and says nothing. Time is the fake clock's, advanced by the
// waits the watcher asks for.
func TestWatchSaysOnceAndBacksOff(t *testing.T) {
	clk := clock.NewFake(t0)
	var logs syncBuffer
	state := newWatchState()
	log := slog.New(quietHandler{inner: slog.NewJSONHandler(&logs, nil), state: state})
	refused := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	answers := []error{nil, nil, refused, refused, refused, refused, refused, refused, refused, nil, nil}
	i := 0
	w := newRedisWatch(func(context.Context) error { i++; return answers[i-1] }, "redis://127.0.0.1:6379", log, clk, state)
	var waits []time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.wait = func(_ context.Context, d time.Duration) bool {
		waits = append(waits, d)
		clk.Advance(d)
		if i == len(answers) {
			return false
		}
		// While down, the parts' own connection errors are lowered to
		// debug (not shown at info); other warnings still show.
		if state.down.Load() {
			log.Error("poll round failed", "error", "poller: list queues: "+refused.Error())
			log.Warn("redis client: connection pool: failed to dial")
			log.Warn("PAYOUT_URL is not set")
		}
		return true
	}
	var since time.Time
	var backoff time.Duration
	w.run(ctx, since, backoff, w.check(ctx, &since, &backoff))

	s := time.Second
	if diff := cmp.Diff([]time.Duration{2 * s, 2 * s, 1 * s, 2 * s, 4 * s, 8 * s, 10 * s, 10 * s, 10 * s, 2 * s, 2 * s}, waits); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	var got [][2]string
	warned := 0
	for _, r := range logs.records(t) {
		if r[1] == "PAYOUT_URL is not set" {
			warned++
			continue
		}
		got = append(got, r)
	}
	if warned != 7 {
		t.Errorf("other warnings shown %d times, want 7 (one per wait while down)", warned)
	}
	want := [][2]string{{"ERROR", "redis is unreachable: nothin"}, {"INFO", "redis is back: hourglass is "}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log (-want +got):\n%s\nfull log:\n%s", diff, logs.b.String())
	}
	if !strings.Contains(logs.b.String(), `"down_for":"45s"`) {
		t.Errorf("the return does not say it was down 45s (1+2+4+8+10+10+10):\n%s", logs.b.String())
	}
}

// TestQuietHandlerPokesTheWatcher: a connection error logged while Redis
// is thought up is shown and wakes the watcher at once; after it has found
// Redis down, the same error is lowered to debug, shown only at debug.
func TestQuietHandlerPokesTheWatcher(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var logs syncBuffer
		state := newWatchState()
		log := slog.New(quietHandler{inner: slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}), state: state}).With("part", "poller")
		log.Error("poll round failed", "error", "dial tcp 127.0.0.1:1: connect: connection refused")
		select {
		case <-state.poke:
		default:
			t.Fatal("a connection error while up did not poke the watcher")
		}
		log.Error("withdrawal: validation is broken", "error", "something else")
		select {
		case <-state.poke:
			t.Fatal("an error that is not about the connection poked the watcher")
		default:
		}
		state.down.Store(true)
		log.Error("poll round failed", "error", "i/o timeout")
		log.Error("payout failed", "error", "provider answered 500")
		got := logs.records(t)
		want := [][2]string{{"ERROR", "poll round failed"}, {"ERROR", "withdrawal: validation is br"}}
		if level == slog.LevelDebug {
			want = append(want, [2]string{"DEBUG", "poll round failed"})
		}
		want = append(want, [2]string{"ERROR", "payout failed"})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("at %s (-want +got):\n%s", level, diff)
		}
	}
}

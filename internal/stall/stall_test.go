package stall_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/stall"
	"github.com/hourglass/hourglass/shared/clock"
)

// hooked is a client of b's server with the stall hook.
func hooked(t *testing.T, b redistest.Backend) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(stall.RedisHook{})
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb
}

// increment reads n and writes it back plus one: two calls, a race if two
// actors interleave them.
func increment(rdb *redis.Client) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		n, err := rdb.Get(ctx, "n").Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		return rdb.Set(ctx, "n", n+1, 0).Err()
	}
}

func TestInterleavingIsTheCheckersChoice(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		tests := []struct {
			name  string
			order string // which actor steps next, one letter a step
			want  int
		}{
			{"serial", "aabb", 2},
			{"serial the other way", "bbaa", 2},
			{"both read before either writes", "abab", 1},
			{"reads crossed", "abba", 1},
			{"b reads first, writes last", "baab", 1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				rdb := hooked(t, b)
				ctx := context.Background()
				s := stall.New(t)
				actors := map[byte]*stall.Actor{
					'a': s.Go(ctx, "a", increment(rdb)),
					'b': s.Go(ctx, "b", increment(rdb)),
				}
				for _, a := range actors {
					if a.At() != "redis GET n" {
						t.Fatalf("%s parked at %q, want %q", a.Name(), a.At(), "redis GET n")
					}
				}
				// The checker's own calls carry no actor: they never park.
				if err := rdb.Get(ctx, "n").Err(); !errors.Is(err, redis.Nil) {
					t.Fatalf("nothing may be written before a step: %v", err)
				}
				for i := range len(tt.order) {
					a := actors[tt.order[i]]
					s.Step(a)
					want := "redis SET n" // after its read; "" after its write
					if strings.Count(tt.order[:i+1], tt.order[i:i+1]) == 2 {
						want = ""
					}
					if a.At() != want {
						t.Fatalf("after step %d %s is at %q, want %q", i+1, a.Name(), a.At(), want)
					}
				}
				for _, a := range actors {
					if !a.Done() || a.Err() != nil {
						t.Fatalf("%s: done %v, err %v", a.Name(), a.Done(), a.Err())
					}
				}
				if got, _ := rdb.Get(ctx, "n").Int(); got != tt.want {
					t.Fatalf("n = %d after %s, want %d", got, tt.order, tt.want)
				}
			})
		}
	})
}

func TestParkedActorCarriesOnWithWhatItRead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		rdb := hooked(t, b)
		ctx := context.Background()
		t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		clk := clock.NewFake(t0)
		if err := rdb.Set(ctx, "owner", "nobody", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s := stall.New(t)
		// A lease holder: it reads the owner, then (after a stall, in
		// the model's time) writes what it read and when it wrote.
		slow := s.Go(ctx, "slow", func(ctx context.Context) error {
			before, err := rdb.Get(ctx, "owner").Result()
			if err != nil {
				return err
			}
			// Its arguments are built before it parks: the stall falls
			// between building a call and sending it.
			if err := rdb.Set(ctx, "owner", "slow after "+before, 0).Err(); err != nil {
				return err
			}
			return rdb.Set(ctx, "wrote_at", clk.Now().Format(time.TimeOnly), 0).Err()
		})
		s.Step(slow)
		if slow.At() != "redis SET owner" {
			t.Fatalf("slow is at %q", slow.At())
		}
		clk.Advance(10 * time.Minute)
		fast := s.Go(ctx, "fast", func(ctx context.Context) error {
			return rdb.Set(ctx, "owner", "fast", 0).Err()
		})
		if err := s.Finish(fast); err != nil {
			t.Fatal(err)
		}
		if got := rdb.Get(ctx, "owner").Val(); got != "fast" || slow.At() != "redis SET owner" {
			t.Fatalf("while slow stalls: owner %q, slow at %q", got, slow.At())
		}
		if parked := s.Parked(); len(parked) != 1 || parked[0] != slow {
			t.Fatalf("parked %v, want slow only", parked)
		}
		if err := s.Finish(slow); err != nil {
			t.Fatal(err)
		}
		if got, want := rdb.Get(ctx, "owner").Val(), "slow after nobody"; got != want {
			t.Fatalf("owner %q, want %q: the stalled actor goes on with its stale read", got, want)
		}
		if got, want := rdb.Get(ctx, "wrote_at").Val(), "10:10:00"; got != want {
			t.Fatalf("wrote_at %q, want %q: the stalled actor sees the model's new time", got, want)
		}
	})
}

func TestLabels(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(stall.RedisHook{})
	ctx := context.Background()
	named := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	stall.RegisterScript(named.Hash(), "bump")
	unnamed := redis.NewScript(`return redis.call('GET', KEYS[1])`)

	s := stall.New(t)
	a := s.Go(ctx, "labels", func(ctx context.Context) error {
		if err := named.Run(ctx, rdb, []string{"{q}:n"}, 1).Err(); err != nil {
			return err
		}
		if err := unnamed.Run(ctx, rdb, []string{"{q}:n"}).Err(); err != nil {
			return err
		}
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, "{q}:due", redis.Z{Score: 1, Member: "j"})
			p.HSet(ctx, "{q}:jobs", "j", "x")
			p.Get(ctx, "{q}:n")
			return nil
		}); err != nil {
			return err
		}
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "{q}:n")
			return nil
		}); err != nil {
			return err
		}
		return rdb.Ping(ctx).Err()
	})
	var got []string
	for !a.Done() {
		got = append(got, a.At())
		s.Step(a)
	}
	if a.Err() != nil {
		t.Fatal(a.Err())
	}
	want := []string{
		"redis EVALSHA bump {q}:n", "redis EVAL bump {q}:n", // NOSCRIPT, then the source
		"redis EVALSHA " + unnamed.Hash()[:8] + " {q}:n", "redis EVAL " + unnamed.Hash()[:8] + " {q}:n",
		"redis pipeline ZADD {q}:due +2",
		"redis multi INCR {q}:n",
		"redis PING",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("labels:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSkipLetsCallsThrough(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(stall.RedisHook{})
	s := stall.New(t, stall.Skip(func(label string) bool { return strings.HasPrefix(label, "redis GET") }))
	a := s.Go(context.Background(), "a", increment(rdb))
	if a.At() != "redis SET n" {
		t.Fatalf("at %q: the GET should have passed through", a.At())
	}
	s.Step(a)
	if !a.Done() {
		t.Fatalf("still at %q", a.At())
	}
}

func TestReplyLossAppliesTheWrite(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		incr := func(rdb *redis.Client, got *int64) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				var err error
				*got, err = rdb.Incr(ctx, "n").Result()
				return err
			}
		}
		t.Run("lose the reply", func(t *testing.T) {
			rdb := hooked(t, b)
			s := stall.New(t)
			var got int64
			a := s.Go(ctx, "a", incr(rdb, &got))
			late := s.LoseReply(a)
			if !errors.Is(a.Err(), context.DeadlineExceeded) || got != 0 {
				t.Fatalf("caller: %d, %v; want a timeout", got, a.Err())
			}
			if n, _ := rdb.Get(ctx, "n").Int(); n != 1 {
				t.Fatalf("n = %d, want 1: the write is applied", n)
			}
			if cmd, ok := late.Reply.(redis.Cmder); !ok || !late.Delivered || fmt.Sprint(cmd.Args()) != "[incr n]" || late.Label != "redis INCR n" || late.Actor != "a" {
				t.Fatalf("the lost reply: %+v", late)
			}
			if v, err := late.Reply.(*redis.Cmd).Int64(); v != 1 || err != nil {
				t.Fatalf("the lost reply: %d, %v", v, err)
			}
		})
		t.Run("resend", func(t *testing.T) {
			rdb := hooked(t, b)
			s := stall.New(t)
			var got int64
			a := s.Go(ctx, "a", incr(rdb, &got))
			s.Resend(a)
			if a.Err() != nil || got != 2 {
				t.Fatalf("caller: %d, %v; want the second answer, 2", got, a.Err())
			}
		})
		t.Run("transaction", func(t *testing.T) {
			rdb := hooked(t, b)
			s := stall.New(t)
			a := s.Go(ctx, "a", func(ctx context.Context) error {
				_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, "{x}a")
					p.Incr(ctx, "{x}b")
					return nil
				})
				return err
			})
			s.LoseReply(a)
			if !errors.Is(a.Err(), context.DeadlineExceeded) {
				t.Fatalf("caller: %v", a.Err())
			}
			if got := rdb.MGet(ctx, "{x}a", "{x}b").Val(); fmt.Sprint(got) != "[1 1]" {
				t.Fatalf("after a lost EXEC reply: %v, want both applied", got)
			}
		})
		t.Run("give up, deliver late", func(t *testing.T) {
			rdb := hooked(t, b)
			s := stall.New(t)
			var got int64
			a := s.Go(ctx, "a", incr(rdb, &got))
			late := s.GiveUp(a)
			if !errors.Is(a.Err(), context.DeadlineExceeded) {
				t.Fatalf("caller: %v", a.Err())
			}
			if err := rdb.Set(ctx, "n", 41, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if l := s.Lates(); len(l) != 1 || l[0] != late || late.Delivered {
				t.Fatalf("held: %v", l)
			}
			s.DeliverLate(late.ID)
			if n, _ := rdb.Get(ctx, "n").Int(); n != 42 || !late.Delivered || late.Err != nil {
				t.Fatalf("n = %d (late %+v), want 42: the late INCR lands after the SET", n, late)
			}
			if len(s.Lates()) != 0 {
				t.Fatal("delivered twice?")
			}
		})
		t.Run("fail", func(t *testing.T) {
			rdb := hooked(t, b)
			s := stall.New(t)
			var got int64
			a := s.Go(ctx, "a", incr(rdb, &got))
			s.Fail(a)
			if !errors.Is(a.Err(), stall.ErrFailed) {
				t.Fatalf("caller: %v", a.Err())
			}
			if err := rdb.Get(ctx, "n").Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("a failed call wrote: %v", err)
			}
		})
	})
}

// goroutines waits until at most n goroutines run, and returns how many do.
func goroutines(n int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAbortEndsEveryActor(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(stall.RedisHook{})
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	s := stall.New(t)
	var actors []*stall.Actor
	for i := range 5 {
		// Each writes twice, ignoring errors, as code that does not stop
		// at its first failure would.
		actors = append(actors, s.Go(ctx, fmt.Sprintf("w%d", i), func(ctx context.Context) error {
			err1 := rdb.Set(ctx, fmt.Sprintf("k%d", i), 1, 0).Err()
			err2 := rdb.Set(ctx, fmt.Sprintf("k%d", i), 2, 0).Err()
			return errors.Join(err1, err2)
		}))
	}
	s.Step(actors[0]) // w0 wrote once, is parked at its second write
	held := s.GiveUp(actors[1])
	s.Abort()
	s.Abort() // idempotent
	for _, a := range actors {
		if !a.Done() || !errors.Is(a.Err(), stall.ErrAborted) {
			t.Fatalf("%s after Abort: done %v, err %v", a.Name(), a.Done(), a.Err())
		}
	}
	if got := m.Keys(); fmt.Sprint(got) != "[k0]" {
		t.Fatalf("keys after Abort: %v; want only w0's first write", got)
	}
	m.CheckGet(t, "k0", "1")
	if len(s.Lates()) != 0 || held.Delivered {
		t.Fatal("a held call survived the process")
	}
	if got := goroutines(before); got > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Abort, %d before:\n%s", got, before, buf[:runtime.Stack(buf, true)])
	}
}

// recorder is a TB whose Fatalf panics with the message, so that a test
// can see the scheduler fail.
type recorder struct{}

type fatal string

func (recorder) Helper() {}

func (recorder) Fatalf(format string, args ...any) { panic(fatal(fmt.Sprintf(format, args...))) }

// failure runs fn and returns the message it failed with ("" if none).
func failure(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			msg = string(f)
		}
	}()
	fn()
	return ""
}

func TestMisuseFailsTheChecker(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(stall.RedisHook{})
	ctx := context.Background()

	t.Run("two goroutines of one actor", func(t *testing.T) {
		s := stall.New(recorder{})
		defer s.Abort()
		release, branch := make(chan struct{}), make(chan error, 1)
		a := s.Go(ctx, "fan-out", func(ctx context.Context) error {
			go func() {
				<-release
				branch <- rdb.Get(ctx, "b").Err()
			}()
			return rdb.Get(ctx, "a").Err()
		})
		close(release)
		if err := <-branch; !errors.Is(err, stall.ErrMisuse) {
			t.Fatalf("the second branch: %v", err)
		}
		if msg := failure(func() { s.Step(a) }); !strings.Contains(msg, `fan-out reached "redis GET b" while it is parked at redis GET a`) {
			t.Fatalf("failure %q", msg)
		}
	})
	t.Run("deadlock", func(t *testing.T) {
		s := stall.New(recorder{}, stall.Deadlock(50*time.Millisecond))
		never := make(chan struct{})
		defer close(never)
		msg := failure(func() {
			s.Go(ctx, "stuck", func(ctx context.Context) error { <-never; return nil })
		})
		if !strings.Contains(msg, "stuck neither reached a point nor ended within 50ms") {
			t.Fatalf("failure %q", msg)
		}
	})
	t.Run("a plain point cannot lose a reply", func(t *testing.T) {
		s := stall.New(recorder{})
		defer s.Abort()
		a := s.Go(ctx, "plain", func(ctx context.Context) error { return stall.Point(ctx, "think") })
		if msg := failure(func() { s.LoseReply(a) }); !strings.Contains(msg, `cannot lose the reply of plain at "think"`) {
			t.Fatalf("failure %q", msg)
		}
		s.Fail(a)
		if !errors.Is(a.Err(), stall.ErrFailed) {
			t.Fatalf("err %v", a.Err())
		}
		if msg := failure(func() { s.Step(a) }); !strings.Contains(msg, "it is not parked") {
			t.Fatalf("failure %q", msg)
		}
	})
	t.Run("Go after Abort", func(t *testing.T) {
		s := stall.New(recorder{})
		s.Abort()
		if msg := failure(func() { s.Go(ctx, "late", increment(rdb)) }); !strings.Contains(msg, "after Abort") {
			t.Fatalf("failure %q", msg)
		}
	})
}

func TestActorsWithoutPointsAndPanics(t *testing.T) {
	ctx := context.Background()
	if err := stall.Point(ctx, "nothing"); err != nil {
		t.Fatalf("a point without an actor: %v", err)
	}
	if v, err := stall.Do(ctx, "nothing", func(context.Context) (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("Do without an actor: %d, %v", v, err)
	}
	s := stall.New(t)
	quick := s.Go(ctx, "quick", func(context.Context) error { return errors.New("no I/O at all") })
	if !quick.Done() || quick.Err().Error() != "no I/O at all" || quick.String() != "quick (ended)" {
		t.Fatalf("quick: %v %v", quick, quick.Err())
	}
	boom := s.Go(ctx, "boom", func(ctx context.Context) error {
		if err := stall.Point(ctx, "before"); err != nil {
			return err
		}
		panic("kaboom")
	})
	if boom.String() != "boom at before" {
		t.Fatalf("boom: %v", boom)
	}
	var pe *stall.PanicError
	if err := s.Finish(boom); !errors.As(err, &pe) || pe.Value != "kaboom" {
		t.Fatalf("boom: %v", err)
	}
	calls := 0
	do := s.Go(ctx, "do", func(ctx context.Context) error {
		_, err := stall.Do(ctx, "sqs SendMessage", func(context.Context) (int, error) { calls++; return calls, nil })
		return err
	})
	late := s.Resend(do)
	if do.Err() != nil || calls != 2 || late.Reply != 1 {
		t.Fatalf("Do resent: %v, %d calls, late %+v", do.Err(), calls, late)
	}
	if got := len(s.Actors()); got != 3 {
		t.Fatalf("%d actors", got)
	}
}

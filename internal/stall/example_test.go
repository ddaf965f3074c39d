package stall_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/stall"
)

// Two actors increment a counter with a read and a write each. The checker
// steps both reads before either write: an update is lost, as it would be
// in production if the first actor stalled between its two calls.
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = rdb.Close() }()
	rdb.AddHook(stall.RedisHook{}) // once per client; free for calls without an actor

	increment := func(ctx context.Context) error {
		n, err := rdb.Get(ctx, "hits").Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		return rdb.Set(ctx, "hits", n+1, 0).Err()
	}
	ctx := context.Background()
	s := stall.New(nil) // a test passes its t, so that a deadlock fails it
	defer s.Abort()

	a := s.Go(ctx, "a", increment)
	b := s.Go(ctx, "b", increment)
	for _, p := range s.Parked() {
		fmt.Println(p)
	}
	s.Step(a) // a reads 0
	s.Step(b) // b reads 0
	fmt.Println(a, "|", b)
	s.FinishAll()
	fmt.Println("hits:", rdb.Get(ctx, "hits").Val())
	// Output:
	// a at redis GET hits
	// b at redis GET hits
	// a at redis SET hits | b at redis SET hits
	// hits: 1
}

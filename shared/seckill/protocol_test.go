package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
)

// Tests of the cross-shard protocol's failure paths, driven step by step.

var (
	p0    = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	quiet = slog.New(slog.DiscardHandler)
)

type protoEnv struct {
	store *Store
	svc   *Service
	clock *clock.Fake
	comp  *Compensation
}

func newProtoEnv(t *testing.T, b redistest.Backend, stock, shards int) protoEnv {
	t.Helper()
	e := protoEnv{store: NewStore(b.Client, "hg:"), clock: clock.NewFake(p0)}
	var err error
	e.svc, err = NewService(Config{Store: e.store, Clock: e.clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"stock":` + strconv.Itoa(stock) + `,"shards":` + strconv.Itoa(shards) + `,"starts_at":"2026-11-29T10:00:00Z","ends_at":"2026-11-29T11:00:00Z"}`)
	if _, err := e.svc.Preheat(context.Background(), "phone", body); err != nil {
		t.Fatal(err)
	}
	e.comp = &Compensation{Store: e.store, Clock: e.clock, Log: quiet}
	return e
}

func homedAt(shard, shards int) string {
	for i := 0; ; i++ {
		u := "user-" + strconv.Itoa(i%100) + strconv.Itoa(i/100)
		if delayq.ShardOf(u, shards) == shard {
			return u
		}
	}
}

func (e protoEnv) attempt(user string, shards int) attempt {
	now := e.clock.Now()
	set, err := e.store.settings(context.Background(), "phone")
	if err != nil || set.shards != shards {
		panic(fmt.Sprintf("settings %+v %v", set, err))
	}
	return attempt{item: "phone", user: user, pid: NewPurchaseID(now), qty: 1, shards: shards,
		home: delayq.ShardOf(user, shards), now: now, holdUntil: now.Add(DefaultHold), backlog: 1000,
		version: set.version, starts: set.starts, ends: set.ends, limit: set.limit}
}

// drain empties shard n's stock by buyers homed there.
func (e protoEnv) drain(t *testing.T, n, shards, units int) {
	t.Helper()
	for i := 0; i < units; i++ {
		for j := 0; ; j++ {
			u := "drain-" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
			if delayq.ShardOf(u, shards) != n {
				continue
			}
			a := e.attempt(u, shards)
			if res, err := e.store.admit(context.Background(), a); err != nil || res.code != codeAdmitted {
				t.Fatalf("drain: %+v %v", res, err)
			}
			break
		}
	}
}

func TestHoldOfADeadBuyerIsGivenBack(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 2, 2)
		e.drain(t, 0, 2, 1)
		a := e.attempt(homedAt(0, 2), 2)
		res, err := e.store.admit(ctx, a)
		if err != nil || res.code != codeHold {
			t.Fatalf("admit on an empty home: %+v %v", res, err)
		}
		// The buyer dies here, before taking stock elsewhere. Within the
		// deadline and its grace the compensation pass leaves the hold alone.
		e.clock.Advance(DefaultHold + DefaultHoldGrace - time.Millisecond)
		if rep, err := e.comp.Run(ctx, e.clock.Now()); err != nil || rep.HoldsReturned != 0 {
			t.Fatalf("pass within grace: %+v %v", rep, err)
		}
		// A late take is refused: the hold's deadline passed.
		a.now = e.clock.Now()
		a.version = e.version(t, ctx)
		if res, err := e.store.take(ctx, a, 1); err != nil || res.code != codeHoldExpired {
			t.Fatalf("take after the deadline: %+v %v", res, err)
		}
		e.clock.Advance(time.Millisecond)
		rep, err := e.comp.Run(ctx, e.clock.Now())
		if err != nil || rep.HoldsReturned != 1 {
			t.Fatalf("pass after grace: %+v %v", rep, err)
		}
		// The quantity is back: the user buys (from shard 1) within the limit.
		e.clock.Set(p0.Add(time.Minute))
		p, err := e.svc.Purchase(ctx, "phone", a.user, nil)
		if err != nil || p.Shard != 1 {
			t.Fatalf("after the hold was given back: %+v %v", p, err)
		}
	})
}

func TestTakenButUnsettledHoldIsSettled(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 2, 2)
		e.drain(t, 0, 2, 1)
		a := e.attempt(homedAt(0, 2), 2)
		if res, _ := e.store.admit(ctx, a); res.code != codeHold {
			t.Fatalf("admit: %+v", res)
		}
		a.version = e.version(t, ctx)
		if res, err := e.store.take(ctx, a, 1); err != nil || res.code != codeAdmitted {
			t.Fatalf("take: %+v %v", res, err)
		}
		// A retried take (its reply was lost) takes nothing more.
		if res, err := e.store.take(ctx, a, 1); err != nil || res.code != codeAdmitted {
			t.Fatalf("retried take: %+v %v", res, err)
		}
		// The buyer dies before settling; the pass settles for it.
		e.clock.Advance(DefaultHold + DefaultHoldGrace + time.Second)
		rep, err := e.comp.Run(ctx, e.clock.Now())
		if err != nil || rep.HoldsSettled != 1 || rep.HoldsReturned != 0 {
			t.Fatalf("pass: %+v %v", rep, err)
		}
		p, err := e.svc.Mine(ctx, "phone", a.user)
		if err != nil || p.ID != a.pid || p.Shard != 1 {
			t.Fatalf("settled purchase: %+v %v", p, err)
		}
		if _, err := e.svc.Purchase(ctx, "phone", a.user, nil); !errors.Is(err, ErrAlreadyPurchased) {
			t.Fatalf("limit after settling: %v", err)
		}
		if st, _ := e.store.Stats(ctx); st["phone"].StockLeft != 0 || st["phone"].Admitted != 2 {
			t.Fatalf("stats %+v", st["phone"])
		}
	})
}

func (e protoEnv) version(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	m, ok, err := e.store.metas(ctx, "phone", 1)
	if err != nil || !ok {
		t.Fatal(err)
	}
	return m[0].version
}

func TestRetriedAdmissionCountsOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 5, 1)
		a := e.attempt("alice", 1)
		for range 2 { // the reply of the first was lost; the client library retried
			if res, err := e.store.admit(ctx, a); err != nil || res.code != codeAdmitted {
				t.Fatalf("admit: %+v %v", res, err)
			}
		}
		if st, _ := e.store.Stats(ctx); st["phone"].StockLeft != 4 || st["phone"].Admitted != 1 {
			t.Fatalf("stats %+v", st["phone"])
		}
	})
}

func TestLostOrderJobIsEnqueuedAgainThenReleased(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 3, 1)
		p, err := e.svc.Purchase(ctx, "phone", "alice", nil)
		if err != nil {
			t.Fatal(err)
		}
		k := e.store.keys("phone", 0)
		lose := func() {
			t.Helper()
			if err := b.Client.ZRem(ctx, k.Due, p.ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
		lose() // the order job vanished (a failover lost it, say)
		e.clock.Advance(DefaultReservedTimeout - time.Second)
		if rep, _ := e.comp.Run(ctx, e.clock.Now()); rep.Requeued != 0 {
			t.Fatalf("young purchase touched: %+v", rep)
		}
		for i := 1; i <= DefaultMaxRequeues; i++ {
			e.clock.Advance(2 * time.Second)
			rep, err := e.comp.Run(ctx, e.clock.Now())
			if err != nil || rep.Requeued != 1 {
				t.Fatalf("pass %d: %+v %v", i, rep, err)
			}
			if sc, err := b.Client.ZScore(ctx, k.Due, p.ID).Result(); err != nil || sc == 0 {
				t.Fatalf("job not enqueued again: %v", err)
			}
			// A job that is scheduled is on its way: the pass leaves it.
			if rep, _ := e.comp.Run(ctx, e.clock.Now()); rep.Requeued != 0 {
				t.Fatalf("scheduled job enqueued twice: %+v", rep)
			}
			lose()
		}
		rep, err := e.comp.Run(ctx, e.clock.Now())
		if err != nil || rep.Released != 1 {
			t.Fatalf("final pass: %+v %v", rep, err)
		}
		got, err := e.svc.Mine(ctx, "phone", "alice")
		if err != nil || got.Status != Released {
			t.Fatalf("released purchase: %+v %v", got, err)
		}
		if st, _ := e.store.Stats(ctx); st["phone"].StockLeft != 3 {
			t.Fatalf("stock not given back: %+v", st["phone"])
		}
		if _, err := e.svc.Purchase(ctx, "phone", "alice", nil); err != nil {
			t.Fatalf("alice's limit not given back: %v", err)
		}
	})
}

func TestDeadOrderJobIsRepaired(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 3, 1)
		p, err := e.svc.Purchase(ctx, "phone", "alice", nil)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := e.store.Queue("phone", 1)
		c, err := q.Claim(ctx, 0, e.clock.Now(), time.Minute, 10)
		if err != nil || len(c.Jobs) != 1 {
			t.Fatalf("claim %v %v", c, err)
		}
		if err := q.Kill(ctx, 0, p.ID, c.Lease, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(DefaultReservedTimeout + time.Second)
		rep, err := e.comp.Run(ctx, e.clock.Now())
		if err != nil || rep.Requeued != 1 {
			t.Fatalf("pass: %+v %v", rep, err)
		}
		st, err := q.Stats(ctx, e.clock.Now())
		if err != nil || st.Dead != 0 || st.Due != 1 {
			t.Fatalf("queue after repair: %+v %v", st, err)
		}
	})
}

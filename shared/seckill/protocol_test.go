package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
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
	sale := Sale{ItemID: "phone", Stock: int64(stock), Shards: shards, StartsAt: p0, EndsAt: p0.Add(time.Hour)}
	if _, err := e.svc.Preheat(context.Background(), sale); err != nil {
		t.Fatal(err)
	}
	e.comp = &Compensation{Store: e.store, Orders: &memOrders{}, Clock: e.clock, Log: quiet}
	return e
}

// memOrders is an order ledger in memory, with the contract's ids claimed
// once: by an order or by a void. (The real ledgers, in package ledger, are
// tested on Redis and on dynalite.)
type memOrders struct {
	mu  sync.Mutex
	ids map[string]bool // order id -> voided
}

func (l *memOrders) claim(id string, void bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids == nil {
		l.ids = map[string]bool{}
	}
	if v, ok := l.ids[id]; ok {
		return v
	}
	l.ids[id] = void
	return void
}

func (l *memOrders) CreateOrder(_ context.Context, o Order) error {
	if l.claim(o.ID, false) {
		return ErrOrderVoided
	}
	return nil
}

func (l *memOrders) VoidOrder(_ context.Context, o Order) (bool, error) {
	return !l.claim(o.ID, true), nil
}

// FindOrder knows only whether the order was made: these tests sell
// without payment windows.
func (l *memOrders) FindOrder(_ context.Context, o Order) (Order, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if voided, ok := l.ids[o.ID]; !ok || voided {
		return Order{}, ErrNoOrder
	}
	return o, nil
}

func (l *memOrders) SettlePayment(context.Context, Payment) (Order, PaymentResult, error) {
	return Order{}, PaymentResult{}, ErrNoOrder
}

func (l *memOrders) ExpireOrder(context.Context, Order, time.Time) (OrderEnd, error) {
	return "", ErrNotDue
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
		p, err := e.svc.Purchase(ctx, "phone", a.user, 1)
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
		if _, err := e.svc.Purchase(ctx, "phone", a.user, 1); !errors.Is(err, ErrAlreadyPurchased) {
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
	// A job lost from Redis: re-enqueued, each time a timeout after the
	// last, then given up on (the order id voided) and released.
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 3, 1)
		p, err := e.svc.Purchase(ctx, "phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		k := e.store.keys("phone", 0)
		lose := func() {
			t.Helper()
			if err := b.Client.ZRem(ctx, k.Due, OrderJobID(p)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		lose() // the order job vanished (a failover lost it, say)
		e.clock.Advance(DefaultReservedTimeout - time.Second)
		if rep, _ := e.comp.Run(ctx, e.clock.Now()); rep.Requeued != 0 {
			t.Fatalf("young purchase touched: %+v", rep)
		}
		for i := 1; i <= DefaultMaxRequeues; i++ {
			// Each re-enqueue is given the timeout again.
			if i > 1 {
				e.clock.Advance(DefaultReservedTimeout - time.Second)
				if rep, _ := e.comp.Run(ctx, e.clock.Now()); rep.Requeued != 0 {
					t.Fatalf("pass %d within the timeout of the last re-enqueue: %+v", i, rep)
				}
			}
			e.clock.Advance(2 * time.Second)
			rep, err := e.comp.Run(ctx, e.clock.Now())
			if err != nil || rep.Requeued != 1 {
				t.Fatalf("pass %d: %+v %v", i, rep, err)
			}
			if sc, err := b.Client.ZScore(ctx, k.Due, OrderJobID(p)).Result(); err != nil || sc == 0 {
				t.Fatalf("job not enqueued again: %v", err)
			}
			// A job that is scheduled is on its way: the pass leaves it.
			if rep, _ := e.comp.Run(ctx, e.clock.Now()); rep.Requeued != 0 {
				t.Fatalf("scheduled job enqueued twice: %+v", rep)
			}
			lose()
		}
		e.clock.Advance(DefaultReservedTimeout + time.Second)
		rep, err := e.comp.Run(ctx, e.clock.Now())
		if err != nil || rep.Released != 1 {
			t.Fatalf("final pass: %+v %v", rep, err)
		}
		// Released only once its order id was void: a delivery still on
		// its way (in SQS, say) can no longer make the order.
		if err := e.comp.Orders.CreateOrder(ctx, Order{ID: OrderID(p.ID)}); !errors.Is(err, ErrOrderVoided) {
			t.Fatalf("a late order of the released purchase: %v, want ErrOrderVoided", err)
		}
		got, err := e.svc.Mine(ctx, "phone", "alice")
		if err != nil || got.Status != Released {
			t.Fatalf("released purchase: %+v %v", got, err)
		}
		if st, _ := e.store.Stats(ctx); st["phone"].StockLeft != 3 {
			t.Fatalf("stock not given back: %+v", st["phone"])
		}
		if _, err := e.svc.Purchase(ctx, "phone", "alice", 1); err != nil {
			t.Fatalf("alice's limit not given back: %v", err)
		}
	})
}

// TestRetriedPreheatKeepsWhatFollowed: a preheat's reset script whose
// reply was lost is run again by go-redis (or by another container rolling
// the preheat forward), maybe after buyers were admitted under the new
// version. The retry must neither drop them nor fail the preheat that
// happened.
func TestRetriedPreheatKeepsWhatFollowed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 3, 1)
		it := Item{ID: "phone", Stock: 5, StartsAt: p0, EndsAt: p0.Add(time.Hour), PerUserLimit: 1, Shards: 1,
			Version: e.version(t, ctx) + 1}
		if code, err := e.store.freeze(ctx, "phone", 0, it.Version); err != nil || code != freezeDone {
			t.Fatalf("freeze: %d %v", code, err)
		}
		if ok, err := e.store.reset(ctx, it, 0); err != nil || !ok {
			t.Fatalf("reset: %t %v", ok, err)
		}
		p, err := e.svc.Purchase(ctx, "phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := e.store.reset(ctx, it, 0); err != nil || !ok {
			t.Fatalf("the retried reset: %t %v, want it done", ok, err)
		}
		if code, err := e.store.freeze(ctx, "phone", 0, it.Version); err != nil || code != freezePast {
			t.Fatalf("a freeze of the version again: %d %v, want it refused", code, err)
		}
		if st, _ := e.store.Stats(ctx); st["phone"].StockLeft != 4 || st["phone"].Admitted != 1 {
			t.Fatalf("stats after the retry %+v", st["phone"])
		}
		if got, err := e.svc.Mine(ctx, "phone", "alice"); err != nil || got.ID != p.ID {
			t.Fatalf("alice's purchase after the retry: %+v %v", got, err)
		}
	})
}

func TestDeadOrderJobIsRepaired(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 3, 1)
		p, err := e.svc.Purchase(ctx, "phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := e.store.Queue("phone", 1)
		c, err := q.Claim(ctx, 0, e.clock.Now(), time.Minute, 10)
		if err != nil || len(c.Jobs) != 1 {
			t.Fatalf("claim %v %v", c, err)
		}
		if err := q.Kill(ctx, 0, OrderJobID(p), c.Lease, e.clock.Now()); err != nil {
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

// TestAdmissionUnderAnotherVersion: an attempt made with the settings of an
// item version that is gone (the item was preheated since) or that never was
// (no such item) tries the four-command path, finds no stock under its
// version's field, undoes its step and is refused with nothing left behind.
func TestAdmissionUnderAnotherVersion(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newProtoEnv(t, b, 5, 1)
		old := e.attempt("alice", 1)
		e.clock.Advance(time.Second) // the new version is the preheat's time
		if _, err := e.svc.Preheat(ctx, Sale{ItemID: "phone", Stock: 7, EndsAt: p0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		newVersion := e.version(t, ctx)
		if newVersion == old.version {
			t.Fatal("preheat kept the version")
		}
		res, err := e.store.admit(ctx, old)
		if err != nil || res.code != codeStale || res.version != newVersion {
			t.Fatalf("admit under the old version: %+v %v; want code %d with version %d", res, err, codeStale, newVersion)
		}
		meta, err := b.Client.HGetAll(ctx, e.store.keys("phone", 0).Meta).Result()
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := meta[leftField(old.version)]; ok {
			t.Errorf("the old version's stock field was left behind: %q", v)
		}
		if meta[leftField(newVersion)] != "7" {
			t.Errorf("stock under the new version = %q, want 7", meta[leftField(newVersion)])
		}
		if n, err := b.Client.HLen(ctx, e.store.keys("phone", 0).Users).Result(); err != nil || n != 0 {
			t.Errorf("buyers after a refused attempt: %d %v", n, err)
		}

		// The service retries with fresh settings: admitted under the new version.
		p, err := e.svc.Purchase(ctx, "phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := e.store.Stats(ctx); st["phone"].StockLeft != 6 || st["phone"].Admitted != 1 {
			t.Fatalf("stats %+v", st["phone"])
		}

		// An item nobody preheated: refused, and no key is made.
		ghost := old
		ghost.item = "ghost"
		if res, err := e.store.admit(ctx, ghost); err != nil || res.code != codeUnknown {
			t.Fatalf("admit of an unknown item: %+v %v", res, err)
		}
		if n, err := b.Client.Exists(ctx, e.store.keys("ghost", 0).Meta, e.store.keys("ghost", 0).Users).Result(); err != nil || n != 0 {
			t.Fatalf("an unknown item's attempt left %d keys (%v)", n, err)
		}

		// A purchase made on its buyer's home shard has no record while it
		// is reserved; what the buyer's entry and its job say is exact.
		if n, err := b.Client.HLen(ctx, e.store.keys("phone", 0).Purchases).Result(); err != nil || n != 0 {
			t.Fatalf("records of reserved purchases: %d %v", n, err)
		}
		got, err := e.store.Purchase(ctx, "phone", 0, OrderJobID(p))
		if err != nil || got != p {
			t.Fatalf("reserved purchase read back:\n got %+v %v\nwant %+v", got, err, p)
		}
		mine, err := e.svc.Mine(ctx, "phone", "alice")
		if err != nil || mine != p {
			t.Fatalf("Mine:\n got %+v %v\nwant %+v", mine, err, p)
		}
		// A job that does not match the buyer's entry finds no purchase.
		for _, j := range []orderJob{
			{pid: p.ID, qty: 2, home: 0, user: "alice"},
			{pid: p.ID, qty: 1, home: 0, user: "bob"},
			{pid: NewPurchaseID(e.clock.Now()), qty: 1, home: 0, user: "alice"},
		} {
			if _, err := e.store.Purchase(ctx, "phone", 0, j.String()); !errors.Is(err, ErrNoPurchase) {
				t.Errorf("job %s: %v, want ErrNoPurchase", j, err)
			}
		}
		for _, bad := range []string{p.ID, "", "x|1|0|alice", p.ID + "|0|0|alice", p.ID + "|1|-1|alice", p.ID + "|1|0|"} {
			if _, err := e.store.Purchase(ctx, "phone", 0, bad); !errors.Is(err, ErrBadOrderJob) {
				t.Errorf("job %q: %v, want ErrBadOrderJob", bad, err)
			}
		}
	})
}

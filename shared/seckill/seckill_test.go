package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/validation"
)

var (
	t0    = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	quiet = slog.New(slog.DiscardHandler)
)

type env struct {
	rdb    redis.UniversalClient
	store  *seckill.Store
	svc    *seckill.Service
	clock  *clock.Fake
	ledger seckill.OrderLedger
	proc   *seckill.OrderProcessor
}

func newEnv(t testing.TB, rdb redis.UniversalClient, cfg seckill.Config) *env {
	t.Helper()
	e := &env{rdb: rdb, store: seckill.NewStore(rdb, "hg:"), clock: clock.NewFake(t0)}
	cfg.Store, cfg.Clock, cfg.Logger = e.store, e.clock, quiet
	svc, err := seckill.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	e.ledger = ledger.NewRedisOrders(rdb, "hg:")
	e.proc = seckill.NewOrderProcessor(e.store, e.ledger, e.clock, quiet)
	return e
}

// preheat starts a sale of item at t0 for an hour.
func (e *env) preheat(t testing.TB, item string, stock, shards, limit int) seckill.State {
	t.Helper()
	st, err := e.svc.Preheat(context.Background(), seckill.Sale{ItemID: item, Stock: int64(stock), Shards: shards,
		PerUserLimit: limit, StartsAt: t0, EndsAt: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) buy(item, user string, qty int) (seckill.Purchase, error) {
	return e.svc.Purchase(context.Background(), item, user, qty)
}

func (e *env) stats(t testing.TB, item string) seckill.ItemStats {
	t.Helper()
	all, err := e.store.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return all[item]
}

// drainOrders runs the order pipeline (poller rounds over the item's order
// queue, each job handed to the order processor) until every admitted
// purchase of item is confirmed or released.
func (e *env) drainOrders(t testing.TB, item string, shards int) {
	t.Helper()
	q, err := e.store.Queue(item, shards)
	if err != nil {
		t.Fatal(err)
	}
	p, err := poller.New(poller.Config{
		Queues: poller.Static(q), Clock: clock.System{}, Ack: true,
		Dispatcher: dispatcherFunc(func(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
			var refused []delayq.Job
			for _, j := range jobs {
				if err := e.proc.Process(ctx, item, j.Shard, j.ID); err != nil {
					refused = append(refused, j)
				}
			}
			return refused, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := p.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := e.stats(t, item)
		if pending := e.pending(t, item, shards); pending == 0 && st.Admitted > 0 {
			return
		}
	}
	t.Fatalf("orders of %s not all made: %+v", item, e.stats(t, item))
}

func (e *env) pending(t testing.TB, item string, shards int) int64 {
	t.Helper()
	var total int64
	for n := range shards {
		// Units waiting for their order: out of the stock, not confirmed.
		m, err := e.rdb.HGetAll(context.Background(), delayq.KeysOf("hg:", seckill.QueueName(item), n).Key("meta")).Result()
		if err != nil {
			t.Fatal(err)
		}
		num := func(f string) int64 {
			v, err := strconv.ParseInt(m[f], 10, 64)
			if err != nil {
				t.Fatalf("meta %s=%q: %v", f, m[f], err)
			}
			return v
		}
		total += num("stock") - num("left:"+m["version"]) - num("confirmed")
	}
	return total
}

type dispatcherFunc func(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error)

func (f dispatcherFunc) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	return f(ctx, jobs)
}

func TestAdmissionRules(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b.Client, seckill.Config{})
		st := e.preheat(t, "phone", 3, 1, 1)
		if st.Status != seckill.Live || st.StockLeft != 3 {
			t.Fatalf("after preheat: %+v", st)
		}
		p, err := e.buy("phone", "alice", 1)
		if err != nil || p.Status != seckill.Reserved || p.Quantity != 1 || p.ID == "" {
			t.Fatalf("alice: %+v %v", p, err)
		}
		if _, err := e.buy("phone", "alice", 1); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatalf("alice again: %v", err)
		}
		for _, u := range []string{"bob", "carol"} {
			if _, err := e.buy("phone", u, 1); err != nil {
				t.Fatalf("%s: %v", u, err)
			}
		}
		if _, err := e.buy("phone", "dave", 1); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("dave: %v", err)
		}
		if st, _ := e.svc.State(ctx, "phone"); st.Status != seckill.SoldOut || st.StockLeft != 0 {
			t.Fatalf("sold out state: %+v", st)
		}
		mine, err := e.svc.Mine(ctx, "phone", "alice")
		if err != nil || mine.ID != p.ID || mine.Status != seckill.Reserved {
			t.Fatalf("alice's purchase: %+v %v", mine, err)
		}
		if _, err := e.svc.Mine(ctx, "phone", "dave"); !errors.Is(err, seckill.ErrNoPurchase) {
			t.Fatalf("dave's purchase: %v", err)
		}
		if _, err := e.buy("tablet", "alice", 1); !errors.Is(err, seckill.ErrNotFound) {
			t.Fatalf("unknown item: %v", err)
		}
		if _, err := e.svc.State(ctx, "tablet"); !errors.Is(err, seckill.ErrNotFound) {
			t.Fatalf("unknown item state: %v", err)
		}

		e.preheat(t, "watch", 5, 1, 1)
		e.clock.Set(t0.Add(-time.Minute))
		if _, err := e.buy("watch", "alice", 1); !errors.Is(err, seckill.ErrNotStarted) {
			t.Fatalf("before the start: %v", err)
		}
		if st, _ := e.svc.State(ctx, "watch"); st.Status != seckill.Upcoming {
			t.Fatalf("upcoming state: %+v", st)
		}
		e.clock.Set(t0.Add(time.Hour))
		if _, err := e.buy("watch", "alice", 1); !errors.Is(err, seckill.ErrEnded) {
			t.Fatalf("at the end: %v", err)
		}
		if st, _ := e.svc.State(ctx, "watch"); st.Status != seckill.Ended || st.StockLeft != 5 {
			t.Fatalf("ended state: %+v", st)
		}
	})
}

// TestPreheatRules: a sale breaking a rule is refused with every field it
// gets wrong, named and worded as the API answers them, whoever preheats
// (the CLI, a test, the API after parsing), and nothing is written.
func TestPreheatRules(t *testing.T) {
	e := newEnv(t, redistest.Backends(t)[0].Client, seckill.Config{})
	e.clock.Set(t0.Add(250 * time.Millisecond))
	ok := seckill.Sale{ItemID: "rules", Stock: 2, EndsAt: t0.Add(time.Hour)}
	const badID = "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"
	for _, tc := range []struct {
		name string
		edit func(s *seckill.Sale)
		want []validation.Field
	}{
		{"item id with a space", func(s *seckill.Sale) { s.ItemID = "a b" }, []validation.Field{{Field: "item_id", Message: badID}}},
		{"item id of 65", func(s *seckill.Sale) { s.ItemID = strings.Repeat("i", 65) }, []validation.Field{{Field: "item_id", Message: badID}}},
		{"no stock", func(s *seckill.Sale) { s.Stock = 0 }, []validation.Field{{Field: "stock", Message: "must be a whole number within 1..10000000"}}},
		{"stock over the limit", func(s *seckill.Sale) { s.Stock = seckill.MaxStock + 1 },
			[]validation.Field{{Field: "stock", Message: "must be a whole number within 1..10000000"}}},
		{"negative limit", func(s *seckill.Sale) { s.PerUserLimit = -1 },
			[]validation.Field{{Field: "per_user_limit", Message: "must be a whole number within 1..100"}}},
		{"limit over 100", func(s *seckill.Sale) { s.PerUserLimit = 101 },
			[]validation.Field{{Field: "per_user_limit", Message: "must be a whole number within 1..100"}}},
		{"65 shards", func(s *seckill.Sale) { s.Stock, s.Shards = 100, 65 },
			[]validation.Field{{Field: "shards", Message: "must be a whole number within 1..64"}}},
		{"shards over the stock", func(s *seckill.Sale) { s.Shards = 3 }, []validation.Field{{Field: "shards", Message: "must not exceed the stock"}}},
		{"no end", func(s *seckill.Sale) { s.EndsAt = time.Time{} }, []validation.Field{{Field: "ends_at", Message: "is required"}}},
		{"ends at its start", func(s *seckill.Sale) { s.StartsAt = t0.Add(time.Hour) },
			[]validation.Field{{Field: "ends_at", Message: "must be after starts_at"}}},
		{"ends before now, starting now", func(s *seckill.Sale) { s.EndsAt = t0 },
			[]validation.Field{{Field: "ends_at", Message: "must be after starts_at"}}},
		{"ended", func(s *seckill.Sale) { s.StartsAt, s.EndsAt = t0.Add(-time.Hour), t0 },
			[]validation.Field{{Field: "ends_at", Message: "must be in the future"}}},
		{"ends within the millisecond", func(s *seckill.Sale) { s.StartsAt, s.EndsAt = t0, t0.Add(250*time.Millisecond+time.Microsecond) },
			[]validation.Field{{Field: "ends_at", Message: "must be in the future"}}},
		{"everything wrong", func(s *seckill.Sale) {
			*s = seckill.Sale{ItemID: "", Stock: -1, PerUserLimit: 200, Shards: -2, Price: decimal.NewFromInt(2_000_000), Currency: "GBP",
				PaymentWindow: time.Minute}
		}, []validation.Field{
			{Field: "item_id", Message: badID},
			{Field: "stock", Message: "must be a whole number within 1..10000000"},
			{Field: "per_user_limit", Message: "must be a whole number within 1..100"},
			{Field: "shards", Message: "must be a whole number within 1..64"},
			{Field: "ends_at", Message: "is required"},
			{Field: "currency", Message: "must be one of CNY, USD, EUR, JPY"},
			{Field: "price", Message: "must be at most 1000000"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sale := ok
			tc.edit(&sale)
			before, err := e.store.Items(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.svc.Preheat(context.Background(), sale)
			var verr *validation.Error
			if !errors.As(err, &verr) {
				t.Fatalf("%+v: %v, want a validation error", sale, err)
			}
			if diff := cmp.Diff(tc.want, verr.Errors); diff != "" {
				t.Errorf("%+v (-want +got):\n%s", sale, diff)
			}
			if after, err := e.store.Items(context.Background()); err != nil || len(after) != len(before) {
				t.Errorf("a refused preheat registered an item: %v, %v", after, err)
			}
			if n, _ := e.store.Shards(context.Background(), sale.ItemID); n != 0 {
				t.Errorf("a refused preheat stored the item")
			}
		})
	}
	st, err := e.svc.Preheat(context.Background(), ok)
	if err != nil || st.StartsAt != "2026-11-29T10:00:00.250Z" || st.EndsAt != "2026-11-29T11:00:00.000Z" || st.StockLeft != 2 {
		t.Fatalf("a sale starting now by default: %+v %v", st, err)
	}
}

// TestPurchaseRules: a purchase with a malformed item id or a quantity out
// of 1..100 is refused as the API refuses it, before Redis is asked.
func TestPurchaseRules(t *testing.T) {
	e := newEnv(t, redistest.Backends(t)[0].Client, seckill.Config{})
	e.preheat(t, "phone", 1000, 1, seckill.MaxPerUserLimit)
	qty := validation.Field{Field: "quantity", Message: "must be a whole number within 1..100"}
	badID := validation.Field{Field: "item_id", Message: "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"}
	for _, tc := range []struct {
		item string
		qty  int
		want []validation.Field
	}{
		{"phone", 0, []validation.Field{qty}},
		{"phone", -1, []validation.Field{qty}},
		{"phone", 101, []validation.Field{qty}},
		{"a b", 1, []validation.Field{badID}},
		{"", 0, []validation.Field{badID, qty}},
	} {
		_, err := e.buy(tc.item, "alice", tc.qty)
		var verr *validation.Error
		if !errors.As(err, &verr) {
			t.Fatalf("%q x %d: %v, want a validation error", tc.item, tc.qty, err)
		}
		if diff := cmp.Diff(tc.want, verr.Errors); diff != "" {
			t.Errorf("%q x %d (-want +got):\n%s", tc.item, tc.qty, diff)
		}
	}
	if st := e.stats(t, "phone"); st.Admitted != 0 || st.StockLeft != 1000 {
		t.Fatalf("refused purchases changed the sale: %+v", st)
	}
	if p, err := e.buy("phone", "alice", seckill.MaxPerUserLimit); err != nil || p.Quantity != seckill.MaxPerUserLimit {
		t.Fatalf("the largest quantity: %+v %v", p, err)
	}
}

func TestQuantitiesAddUpAgainstTheLimit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b.Client, seckill.Config{})
		e.preheat(t, "phone", 100, 1, 3)
		if _, err := e.buy("phone", "alice", 2); err != nil {
			t.Fatal(err)
		}
		if _, err := e.buy("phone", "alice", 2); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatalf("2 + 2 > 3: %v", err)
		}
		if _, err := e.buy("phone", "alice", 1); err != nil {
			t.Fatalf("2 + 1 = 3: %v", err)
		}
		var verr *validation.Error
		if _, err := e.buy("phone", "bob", 4); !errors.As(err, &verr) || verr.Errors[0].Field != "quantity" {
			t.Fatalf("quantity above the limit: %v", err)
		}
		if st := e.stats(t, "phone"); st.StockLeft != 97 || st.Admitted != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestBacklogLimit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b.Client, seckill.Config{Backlog: 2})
		e.preheat(t, "phone", 10, 1, 1)
		first, err := e.buy("phone", "u1", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.buy("phone", "u2", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := e.buy("phone", "u3", 1); !errors.Is(err, seckill.ErrBacklogFull) {
			t.Fatalf("third pending order: %v", err)
		}
		if st := e.stats(t, "phone"); st.StockLeft != 8 {
			t.Fatalf("a refused purchase took stock: %+v", st)
		}
		// The backlog is the order jobs waiting for the poller: once it has
		// handed one over, there is room again.
		q, err := e.store.Queue("phone", 1)
		if err != nil {
			t.Fatal(err)
		}
		c, err := q.Claim(ctx, first.Shard, e.clock.Now(), time.Minute, 1)
		if err != nil || len(c.Jobs) != 1 || c.Jobs[0].ID != seckill.OrderJobID(first) {
			t.Fatalf("claim: %+v %v", c, err)
		}
		if _, err := e.buy("phone", "u3", 1); err != nil {
			t.Fatalf("after an order job was handed over: %v", err)
		}
	})
}

// The admit script proves room by the order queue's size alone while it is
// below the backlog limit; at or above it, only the jobs due now may refuse
// a buyer: jobs due later (payment expiries) never do.
func TestBacklogCountsOnlyJobsDueNow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b.Client, seckill.Config{Backlog: 2})
		e.preheat(t, "phone", 10, 1, 1)
		q, err := e.store.Queue("phone", 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := q.Add(ctx, 0, fmt.Sprintf("ex|later-%d", i), e.clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.buy("phone", "u1", 1); err != nil {
			t.Fatalf("three jobs due later, none due now: %v", err)
		}
		if err := q.Add(ctx, 0, "ex|now", e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := e.buy("phone", "u2", 1); !errors.Is(err, seckill.ErrBacklogFull) {
			t.Fatalf("two jobs due now, limit 2: %v", err)
		}
		if st := e.stats(t, "phone"); st.StockLeft != 9 || st.Admitted != 1 {
			t.Fatalf("a refused purchase took stock: %+v", st)
		}
		if _, err := e.buy("phone", "u1", 1); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatalf("u1 again, backlog full: %v", err)
		}
	})
}

func TestPreheatResetsOnlyWhenNoOrderIsPending(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b.Client, seckill.Config{})
		e.preheat(t, "phone", 2, 1, 1)
		p, err := e.buy("phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Preheat(ctx, seckill.Sale{ItemID: "phone", Stock: 5, EndsAt: t0.Add(2 * time.Hour)})
		if !errors.Is(err, seckill.ErrOrdersPending) {
			t.Fatalf("preheat with a pending order: %v", err)
		}
		if st := e.stats(t, "phone"); st.StockLeft != 1 || st.Admitted != 1 {
			t.Fatalf("refused preheat changed the sale: %+v", st)
		}
		if err := e.proc.Process(ctx, "phone", p.Shard, seckill.OrderJobID(p)); err != nil {
			t.Fatal(err)
		}
		st, err := e.svc.Preheat(ctx, seckill.Sale{ItemID: "phone", Stock: 5, Shards: 2, EndsAt: t0.Add(2 * time.Hour)})
		if err != nil || st.StockLeft != 5 || st.Status != seckill.Live {
			t.Fatalf("preheat again: %+v %v", st, err)
		}
		if _, err := e.svc.Mine(ctx, "phone", "alice"); !errors.Is(err, seckill.ErrNoPurchase) {
			t.Fatalf("buyers were not reset: %v", err)
		}
		if _, err := e.buy("phone", "alice", 1); err != nil {
			t.Fatalf("alice in the new sale: %v", err)
		}
		// From 2 shards back to 1: the dropped shard holds no sale any more,
		// and stays polled (its queue may hold jobs of the earlier sale).
		e.drainOrders(t, "phone", 2)
		if _, err := e.svc.Preheat(ctx, seckill.Sale{ItemID: "phone", Stock: 3, EndsAt: t0.Add(2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if m, _ := b.Client.HGetAll(ctx, delayq.KeysOf("hg:", "sk:phone", 1).Key("meta")).Result(); m["version"] != "" || m["dropped"] == "" {
			t.Fatalf("the dropped shard's meta: %v, want no sale, dropped", m)
		}
		if reg, err := e.store.Items(ctx); err != nil || reg["phone"].Shards != 1 || reg["phone"].Polled != 2 {
			t.Fatalf("registered %+v %v, want a sale of 1 shard, 2 polled", reg["phone"], err)
		}
		if st := e.stats(t, "phone"); st.StockLeft != 3 {
			t.Fatalf("after shrinking: %+v", st)
		}
	})
}

func TestSoldOutMemory(t *testing.T) {
	s := redistest.Start(t, redistest.WithAOF())
	ctx := context.Background()
	e := newEnv(t, s.Client(t), seckill.Config{Memory: time.Minute})
	e.preheat(t, "phone", 1, 1, 1)
	if _, err := e.buy("phone", "alice", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.buy("phone", "bob", 1); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("bob: %v", err)
	}
	// Redis gone: the container still refuses from memory, and tells the
	// buyer it admitted that they bought.
	s.Kill()
	if _, err := e.buy("phone", "carol", 1); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("carol with Redis down: %v", err)
	}
	if _, err := e.buy("phone", "alice", 1); !errors.Is(err, seckill.ErrAlreadyPurchased) {
		t.Fatalf("alice's retry with Redis down: %v", err)
	}
	s.Restart()

	// A preheat elsewhere (another container) is seen once memory expires.
	other := newEnv(t, s.Client(t), seckill.Config{})
	other.clock.Set(e.clock.Now())
	if err := e.proc.Process(ctx, "phone", 0, seckill.OrderJobID(mustMine(t, e, "phone", "alice"))); err != nil {
		t.Fatal(err)
	}
	other.preheat(t, "phone", 5, 1, 1)
	if _, err := e.buy("phone", "carol", 1); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("within memory: %v", err)
	}
	e.clock.Advance(time.Minute)
	if _, err := e.buy("phone", "carol", 1); err != nil {
		t.Fatalf("after memory expired: %v", err)
	}
	// A preheat in this container forgets at once.
	e.drainOrders(t, "phone", 1)
	for i := range 4 {
		_, _ = e.buy("phone", fmt.Sprintf("filler-%d", i), 1)
	}
	if _, err := e.buy("phone", "dave", 1); !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("sold out again: %v", err)
	}
	e.drainOrders(t, "phone", 1)
	e.preheat(t, "phone", 5, 1, 1)
	if _, err := e.buy("phone", "dave", 1); err != nil {
		t.Fatalf("after this container's preheat: %v", err)
	}
}

func mustMine(t *testing.T, e *env, item, user string) seckill.Purchase {
	t.Helper()
	p, err := e.svc.Mine(context.Background(), item, user)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// usersHomedAt returns n user ids whose home shard is shard of shards.
func usersHomedAt(prefix string, shard, shards, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		u := fmt.Sprintf("%s-%d", prefix, i)
		if delayq.ShardOf(u, shards) == shard {
			out = append(out, u)
		}
	}
	return out
}

func TestBorrowFromAnotherShardKeepsTheLimit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b.Client, seckill.Config{})
		e.preheat(t, "phone", 4, 2, 1) // 2 units per shard
		home0 := usersHomedAt("u", 0, 2, 6)
		for _, u := range home0[:2] {
			p, err := e.buy("phone", u, 1)
			if err != nil || p.Shard != 0 {
				t.Fatalf("%s: %+v %v", u, p, err)
			}
		}
		// Shard 0 is empty: the next buyer homed there takes from shard 1.
		p, err := e.buy("phone", home0[2], 1)
		if err != nil || p.Shard != 1 || p.Home != 0 {
			t.Fatalf("borrowing buyer: %+v %v", p, err)
		}
		if got := mustMine(t, e, "phone", home0[2]); got.ID != p.ID || got.Shard != 1 {
			t.Fatalf("the borrowed purchase is not found from home: %+v", got)
		}
		if _, err := e.buy("phone", home0[2], 1); !errors.Is(err, seckill.ErrAlreadyPurchased) {
			t.Fatalf("the limit across shards: %v", err)
		}
		if _, err := e.buy("phone", home0[3], 1); err != nil {
			t.Fatalf("last unit: %v", err)
		}
		if _, err := e.buy("phone", home0[4], 1); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("nothing left anywhere: %v", err)
		}
		// The refused buyer's hold was given back: no limit used, no hold left.
		k0 := delayq.KeysOf("hg:", "sk:phone", 0)
		if has, _ := b.Client.HExists(ctx, k0.Key("users"), home0[4]).Result(); has {
			t.Fatal("a refused buyer still counts against the limit")
		}
		if n, _ := b.Client.ZCard(ctx, k0.Key("holds")).Result(); n != 0 {
			t.Fatalf("%d holds left", n)
		}
		if st := e.stats(t, "phone"); st.StockLeft != 0 || st.Admitted != 4 {
			t.Fatalf("stats %+v", st)
		}
		e.drainOrders(t, "phone", 2)
		if st := e.stats(t, "phone"); st.Confirmed != 4 {
			t.Fatalf("after orders: %+v", st)
		}
	})
}

// failingLedger refuses every order permanently (and voids them in the
// Redis order ledger).
type failingLedger struct{ *ledger.RedisOrders }

func (failingLedger) CreateOrder(context.Context, seckill.Order) error {
	return fmt.Errorf("%w: the warehouse does not know this item", seckill.ErrPermanent)
}

func TestOrdersConfirmOrRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b.Client, seckill.Config{})
		e.preheat(t, "phone", 2, 1, 1)
		p, err := e.buy("phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // duplicate deliveries make one order
			if err := e.proc.Process(ctx, "phone", p.Shard, seckill.OrderJobID(p)); err != nil {
				t.Fatal(err)
			}
		}
		mine := mustMine(t, e, "phone", "alice")
		if mine.Status != seckill.Confirmed || mine.OrderID != seckill.OrderID(p.ID) {
			t.Fatalf("after the order: %+v", mine)
		}
		if _, ok, err := e.ledger.(*ledger.RedisOrders).Order(ctx, "phone", p.Shard, mine.OrderID); err != nil || !ok {
			t.Fatalf("the ledger has no order %s: %v", mine.OrderID, err)
		}
		if st := e.stats(t, "phone"); st.Confirmed != 1 || st.Admitted != 1 {
			t.Fatalf("stats %+v", st)
		}

		// The order of bob's purchase can never be made: released, stock back.
		bad := seckill.NewOrderProcessor(e.store, failingLedger{e.ledger.(*ledger.RedisOrders)}, e.clock, quiet)
		q, err := e.buy("phone", "bob", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.buy("phone", "carol", 1); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("carol before the release: %v", err)
		}
		for range 2 {
			if err := bad.Process(ctx, "phone", q.Shard, seckill.OrderJobID(q)); err != nil {
				t.Fatal(err)
			}
		}
		if got := mustMine(t, e, "phone", "bob"); got.Status != seckill.Released || got.OrderID != "" {
			t.Fatalf("bob's purchase: %+v", got)
		}
		if st, _ := e.svc.State(ctx, "phone"); st.StockLeft != 1 || st.Status != seckill.Live {
			t.Fatalf("after the release: %+v", st)
		}
		// The stock sells again, and bob, whose purchase failed, may buy again.
		if _, err := e.buy("phone", "carol", 1); err != nil {
			t.Fatalf("carol after the release: %v", err)
		}
		if _, err := e.buy("phone", "bob", 1); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("bob after the release (limit given back, stock gone): %v", err)
		}
	})
}

func TestTenThousandBuyersThousandUnits(t *testing.T) {
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEnv(t, rdb, seckill.Config{Backlog: 1_000_000})
	e.preheat(t, "phone", 1000, 1, 1)

	const buyers = 10_000
	var (
		admitted, soldOut atomic.Int64
		mu                sync.Mutex
		byUser            = map[string]int{}
		wg                sync.WaitGroup
		sem               = make(chan struct{}, 128)
		start             = make(chan struct{})
	)
	for i := range buyers {
		user := fmt.Sprintf("buyer-%d", i)
		wg.Go(func() {
			<-start
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := e.buy("phone", user, 1)
			switch {
			case err == nil:
				admitted.Add(1)
				mu.Lock()
				byUser[user]++
				mu.Unlock()
			case errors.Is(err, seckill.ErrSoldOut):
				soldOut.Add(1)
			default:
				t.Errorf("%s: %v", user, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if admitted.Load() != 1000 || soldOut.Load() != buyers-1000 || len(byUser) != 1000 {
		t.Fatalf("admitted %d, sold out %d, distinct buyers %d", admitted.Load(), soldOut.Load(), len(byUser))
	}
	if st, _ := e.svc.State(context.Background(), "phone"); st.StockLeft != 0 {
		t.Fatalf("stock left %d", st.StockLeft)
	}
	e.drainOrders(t, "phone", 1)
	st := e.stats(t, "phone")
	if st.Confirmed != 1000 || st.Admitted != 1000 || st.StockLeft != 0 {
		t.Fatalf("after orders: %+v", st)
	}
	for user := range byUser {
		if p := mustMine(t, e, "phone", user); p.Status != seckill.Confirmed || p.OrderID == "" {
			t.Fatalf("%s: %+v", user, p)
		}
	}
}

func TestOneUserFiftyConcurrentPurchases(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b.Client, seckill.Config{})
		e.preheat(t, "phone", 100, 1, 1)
		var ok, already atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 50 {
			wg.Go(func() {
				<-start
				_, err := e.buy("phone", "bot", 1)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, seckill.ErrAlreadyPurchased):
					already.Add(1)
				default:
					t.Errorf("unexpected %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if ok.Load() != 1 || already.Load() != 49 {
			t.Fatalf("admitted %d, already purchased %d", ok.Load(), already.Load())
		}
		if st := e.stats(t, "phone"); st.StockLeft != 99 {
			t.Fatalf("stock left %d", st.StockLeft)
		}
	})
}

// TestOrderJobOfAnEarlierSale: a job delivered after its item was preheated
// again (its purchase is gone) makes no order; an unreadable job is an error
// (the message goes to the dead-letter queue, where an operator sees it).
func TestOrderJobOfAnEarlierSale(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b.Client, seckill.Config{})
		e.preheat(t, "phone", 2, 1, 1)
		p, err := e.buy("phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		job := seckill.OrderJobID(p)
		if err := e.proc.Process(ctx, "phone", p.Shard, job); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
		e.preheat(t, "phone", 2, 1, 1)
		// The same job again (SQS delivers at least once), now that the sale
		// it belongs to is gone: nothing is made, nothing is confirmed.
		if err := e.proc.Process(ctx, "phone", p.Shard, job); err != nil {
			t.Fatal(err)
		}
		if st := e.stats(t, "phone"); st.Confirmed != 0 || st.Admitted != 0 || st.StockLeft != 2 {
			t.Fatalf("stats after a stale job: %+v", st)
		}
		q, err := e.buy("phone", "bob", 1)
		if err != nil {
			t.Fatal(err)
		}
		// bob's job names bob: a job naming alice with bob's purchase id
		// finds nothing, and makes nothing.
		forged := q.ID + "|1|0|alice"
		if err := e.proc.Process(ctx, "phone", q.Shard, forged); err != nil {
			t.Fatal(err)
		}
		if got := mustMine(t, e, "phone", "bob"); got.Status != seckill.Reserved {
			t.Fatalf("bob's purchase after a job naming alice: %+v", got)
		}
		if err := e.proc.Process(ctx, "phone", q.Shard, q.ID); !errors.Is(err, seckill.ErrBadOrderJob) {
			t.Fatalf("a job id that is only a purchase id: %v", err)
		}
	})
}

// TestTooLargeAQuantityIsNotSoldOut: a purchase asking for more than any
// shard has left is refused as sold out for that quantity, but the
// container does not remember the item as sold out: smaller purchases are
// still admitted until the stock is gone everywhere.
func TestTooLargeAQuantityIsNotSoldOut(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		t.Run("one shard", func(t *testing.T) {
			e := newEnv(t, b.Client, seckill.Config{Memory: time.Minute})
			e.preheat(t, "one", 3, 1, 2)
			if _, err := e.buy("one", "ann", 2); err != nil {
				t.Fatal(err)
			}
			if _, err := e.buy("one", "bob", 2); !errors.Is(err, seckill.ErrNotEnoughLeft) || !errors.Is(err, seckill.ErrSoldOut) {
				t.Fatalf("2 of 1 left: %v, want ErrNotEnoughLeft (an ErrSoldOut)", err)
			}
			if _, err := e.buy("one", "cat", 1); err != nil {
				t.Fatalf("1 of 1 left after a larger refusal: %v", err)
			}
			if _, err := e.buy("one", "dan", 1); !errors.Is(err, seckill.ErrSoldOut) || errors.Is(err, seckill.ErrNotEnoughLeft) {
				t.Fatalf("nothing left: %v, want ErrSoldOut", err)
			}
		})
		t.Run("two shards", func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b.Client, seckill.Config{Memory: time.Minute})
			e.preheat(t, "two", 4, 2, 2) // 2 units per shard
			home0, home1 := usersHomedAt("h0", 0, 2, 4), usersHomedAt("h1", 1, 2, 1)
			if p, err := e.buy("two", home0[0], 2); err != nil || p.Shard != 0 {
				t.Fatalf("shard 0 emptied: %+v %v", p, err)
			}
			if p, err := e.buy("two", home1[0], 1); err != nil || p.Shard != 1 {
				t.Fatalf("1 left on shard 1: %+v %v", p, err)
			}
			// Home shard empty, shard 1 has 1: the hold for 2 is given back.
			if _, err := e.buy("two", home0[1], 2); !errors.Is(err, seckill.ErrNotEnoughLeft) {
				t.Fatalf("2 with 1 left elsewhere: %v, want ErrNotEnoughLeft", err)
			}
			k0 := delayq.KeysOf("hg:", seckill.QueueName("two"), 0)
			if has, _ := b.Client.HExists(ctx, k0.Key("users"), home0[1]).Result(); has {
				t.Fatal("the refused buyer's hold still counts against the limit")
			}
			if p, err := e.buy("two", home0[2], 1); err != nil || p.Shard != 1 {
				t.Fatalf("the last unit, borrowed: %+v %v", p, err)
			}
			if _, err := e.buy("two", home0[3], 1); !errors.Is(err, seckill.ErrSoldOut) || errors.Is(err, seckill.ErrNotEnoughLeft) {
				t.Fatalf("nothing left anywhere: %v, want ErrSoldOut", err)
			}
			if st := e.stats(t, "two"); st.StockLeft != 0 || st.Admitted != 4 {
				t.Fatalf("stats %+v", st)
			}
		})
	})
}

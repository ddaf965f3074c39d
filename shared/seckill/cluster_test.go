package seckill_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/seckill"
)

const (
	clusterPrefix = "hg:"
	clusterShards = 8
	// purchasesInFlight bounds the purchase attempts under way at once. The attempts
	// run on this many workers rather than one goroutine each: the race
	// detector allows at most 8128 live goroutines.
	purchasesInFlight = 200
)

var clusterLog = slog.New(slog.NewJSONHandler(io.Discard, nil))

// saleCluster is a 3-master cluster with the flash sale built on it.
type saleCluster struct {
	c      *redistest.Cluster
	rdb    *redis.ClusterClient
	store  *seckill.Store
	svc    *seckill.Service
	orders *ledger.RedisOrders
}

func newSaleCluster(t *testing.T) *saleCluster {
	t.Helper()
	c := redistest.StartCluster(t, 3)
	rdb := c.Client(t, func(o *redis.ClusterOptions) { o.PoolSize = 2 * purchasesInFlight })
	store := seckill.NewStore(rdb, clusterPrefix)
	svc, err := seckill.NewService(seckill.Config{Store: store, Clock: clock.System{}, Logger: clusterLog, Backlog: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	return &saleCluster{c: c, rdb: rdb, store: store, svc: svc, orders: ledger.NewRedisOrders(rdb, clusterPrefix)}
}

func itemShardKeys(item string, n int) delayq.Keys {
	return delayq.KeysOf(clusterPrefix, seckill.QueueName(item), n)
}

// spreadItem returns an item id, starting with base, whose shards live on
// every master of the cluster.
func (s *saleCluster) spreadItem(t *testing.T, base string, shards int) string {
	t.Helper()
	masters := s.c.Masters()
	if len(masters) != 3 {
		t.Fatalf("cluster masters %v, want 3", masters)
	}
	for i := range 200 {
		item := base + "-" + strconv.Itoa(i)
		on := map[string][]int{}
		for n := range shards {
			m := s.c.MasterOf(itemShardKeys(item, n).Tag)
			on[m] = append(on[m], n)
		}
		if len(on) == len(masters) {
			for _, m := range masters {
				if len(on[m]) == 0 {
					t.Fatalf("item %s: master %s serves none of its shards: %v", item, m, on)
				}
			}
			t.Logf("item %s: shards per master %v", item, on)
			return item
		}
	}
	t.Fatalf("no item id %s-N spreads its %d shards over all 3 masters", base, shards)
	return ""
}

func (s *saleCluster) preheat(t *testing.T, item string, stock, shards, limit int) {
	t.Helper()
	sale := seckill.Sale{ItemID: item, Stock: int64(stock), Shards: shards, PerUserLimit: limit, EndsAt: time.Now().Add(time.Hour)}
	st, err := s.svc.Preheat(context.Background(), sale)
	if err != nil {
		t.Fatalf("preheat %s: %v", item, err)
	}
	if st.StockLeft != int64(stock) || st.Status != seckill.Live {
		t.Fatalf("preheat %s: %+v", item, st)
	}
}

// purchaseTry is one purchase attempt and its answer.
type purchaseTry struct {
	user string
	qty  int
	p    seckill.Purchase
	err  error
}

// buyConcurrently runs the attempts concurrently, purchasesInFlight at a time, all released
// together, and fills in their answers.
func buyConcurrently(svc *seckill.Service, item string, attempts []purchaseTry) {
	start := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(purchasesInFlight, len(attempts)) {
		wg.Go(func() {
			<-start
			for {
				i := int(next.Add(1)) - 1
				if i >= len(attempts) {
					return
				}
				a := &attempts[i]
				a.p, a.err = svc.Purchase(context.Background(), item, a.user, a.qty)
			}
		})
	}
	close(start)
	wg.Wait()
}

// usersHomedOnAny returns n user ids, starting with base, whose home shard (of
// shards) is in homes.
func usersHomedOnAny(base string, n, shards int, homes ...int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		u := base + "-" + strconv.Itoa(i)
		if slices.Contains(homes, delayq.ShardOf(u, shards)) {
			out = append(out, u)
		}
	}
	return out
}

// shardCounters is one item shard's counters, read from its meta hash.
type shardCounters struct {
	stock, left, pending, admitted, confirmed, released int64
}

func (s *saleCluster) metas(t *testing.T, item string, shards int) []shardCounters {
	t.Helper()
	out := make([]shardCounters, shards)
	for n := range shards {
		m, err := s.rdb.HGetAll(context.Background(), itemShardKeys(item, n).Key("meta")).Result()
		if err != nil {
			t.Fatal(err)
		}
		num := func(f string) int64 {
			v, err := strconv.ParseInt(m[f], 10, 64)
			if err != nil {
				t.Fatalf("%s shard %d meta %s=%q", item, n, f, m[f])
			}
			return v
		}
		// Units admitted are not kept: every unit that left the stock, less
		// those released back to it.
		// The stock left is kept under the item's version.
		out[n] = shardCounters{stock: num("stock"), left: num("left:" + m["version"]),
			confirmed: num("confirmed"), released: num("released")}
		out[n].admitted = out[n].stock - out[n].left + out[n].released
		out[n].pending = out[n].stock - out[n].left - out[n].confirmed
	}
	return out
}

// recorded returns every purchase of the item, read from Redis.
func (s *saleCluster) recorded(t *testing.T, item string, shards int) []seckill.Purchase {
	t.Helper()
	out, err := s.store.Purchases(context.Background(), item, shards)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkConsistent checks the item's counters shard by shard and in total:
// what left each shard was admitted there and nothing went negative.
func (s *saleCluster) checkConsistent(t *testing.T, item string, shards int, stock, admitted int64) {
	t.Helper()
	var sumStock, sumLeft, sumAdmitted int64
	for n, m := range s.metas(t, item, shards) {
		if m.left < 0 || m.left > m.stock || m.pending < 0 || m.released > m.admitted {
			t.Errorf("%s shard %d inconsistent: %+v", item, n, m)
		}
		sumStock += m.stock
		sumLeft += m.left
		sumAdmitted += m.admitted
	}
	if sumStock != stock || sumAdmitted != admitted || sumLeft != stock-admitted {
		t.Errorf("%s over its shards: stock %d, left %d, admitted %d; want %d, %d, %d",
			item, sumStock, sumLeft, sumAdmitted, stock, stock-admitted, admitted)
	}
	stats, err := s.store.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := stats[item]; got.StockLeft != stock-admitted || got.Admitted != admitted {
		t.Errorf("Stats[%s] = %+v, want stock_left %d, admitted %d", item, got, stock-admitted, admitted)
	}
	st, err := s.svc.State(context.Background(), item)
	if err != nil || st.StockLeft != stock-admitted {
		t.Errorf("State(%s) = %+v, %v; want stock_left %d", item, st, err, stock-admitted)
	}
}

// finishedSale is what one flash sale admitted, kept for the order phase.
type finishedSale struct {
	item      string
	admitted  []seckill.Purchase
	admittedN int64
}

// TestFlashSaleOnCluster runs flash sales on a 3-master Redis Cluster with
// each item's 8 shards spread over all masters: no oversell under a burst,
// the per-user limit across shards, and every admitted purchase confirmed
// through the real poller and order processor, without a single cross-slot
// command.
func TestFlashSaleOnCluster(t *testing.T) {
	s := newSaleCluster(t)
	var sales []finishedSale

	t.Run("guard sees cross-slot commands", func(t *testing.T) {
		// The guard's silence below means something only if it hears a
		// cross-slot command when there is one.
		guard := &redistest.SlotGuard{}
		raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.c.Addrs()})
		defer func() { _ = raw.Close() }()
		raw.AddHook(guard)
		ctx := context.Background()
		_ = raw.MGet(ctx, "{a}x", "{b}x").Err()
		_, _ = raw.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "{a}x", 1, 0)
			p.Set(ctx, "{b}x", 1, 0)
			return nil
		})
		_ = raw.Eval(ctx, "return 1", []string{"{a}x", "{b}x"}).Err()
		// A script touching a key it did not declare, in another slot.
		_ = raw.Eval(ctx, "return redis.call('GET', '{b}x')", []string{"{a}x"}).Err()
		got := guard.Errors()
		for _, want := range []string{"mget ", "set {b}x", "eval return 1 ", "eval return redis.call"} {
			if !slices.ContainsFunc(got, func(e string) bool { return strings.HasPrefix(e, want) }) {
				t.Errorf("guard did not record the refusal of %q; it recorded %q", want, got)
			}
		}
	})

	t.Run("no oversell", func(t *testing.T) {
		const stock, buyers = 1000, 10_000
		item := s.spreadItem(t, "flash", clusterShards)
		s.preheat(t, item, stock, clusterShards, 1)
		attempts := make([]purchaseTry, buyers)
		for i := range attempts {
			attempts[i] = purchaseTry{user: fmt.Sprintf("buyer-%05d", i), qty: 1}
		}
		began := time.Now()
		buyConcurrently(s.svc, item, attempts)
		t.Logf("%d purchase attempts in %s", buyers, time.Since(began).Round(time.Millisecond))

		var admitted []seckill.Purchase
		soldOut, borrowed := 0, 0
		var others []string
		for _, a := range attempts {
			switch {
			case a.err == nil:
				admitted = append(admitted, a.p)
				if a.p.Shard != a.p.Home {
					borrowed++
				}
			case errors.Is(a.err, seckill.ErrSoldOut):
				soldOut++
			default:
				others = append(others, a.user+": "+a.err.Error())
			}
		}
		if len(others) > 0 {
			t.Errorf("%d answers neither admitted nor sold out, e.g. %q", len(others), others[:min(5, len(others))])
		}
		if len(admitted) != stock || soldOut != buyers-stock {
			t.Fatalf("admitted %d, sold out %d; want %d and %d", len(admitted), soldOut, stock, buyers-stock)
		}
		t.Logf("%d of %d admitted purchases took stock from another shard than the buyer's home", borrowed, stock)

		// What Redis recorded, not just what callers heard.
		perUser := map[string]int{}
		recorded := map[string]bool{}
		for _, p := range s.recorded(t, item, clusterShards) {
			perUser[p.UserID]++
			recorded[p.ID] = true
		}
		for u, n := range perUser {
			if n > 1 {
				t.Errorf("user %s has %d purchases, limit 1", u, n)
			}
		}
		if len(recorded) != stock {
			t.Errorf("Redis records %d purchases, want %d", len(recorded), stock)
		}
		for _, p := range admitted {
			if !recorded[p.ID] {
				t.Errorf("admitted purchase %s of %s is not recorded", p.ID, p.UserID)
			}
		}
		st, err := s.svc.State(context.Background(), item)
		if err != nil || st.Status != seckill.SoldOut {
			t.Errorf("State = %+v, %v; want sold_out", st, err)
		}
		s.checkConsistent(t, item, clusterShards, stock, stock)
		sales = append(sales, finishedSale{item: item, admitted: admitted, admittedN: stock})
	})

	t.Run("per-user limit across shards", func(t *testing.T) {
		const (
			stock, limit    = 2000, 2
			users, attempts = 500, 5
		)
		perShard := stock / clusterShards
		drained := []int{0, 3, 6}
		item := s.spreadItem(t, "limit", clusterShards)
		s.preheat(t, item, stock, clusterShards, limit)

		// Drain three shards with buyers homed there, limit-sized each.
		var drain []purchaseTry
		for _, n := range drained {
			for _, u := range usersHomedOnAny("drainer-"+strconv.Itoa(n), perShard/limit, clusterShards, n) {
				drain = append(drain, purchaseTry{user: u, qty: 2})
			}
		}
		buyConcurrently(s.svc, item, drain)
		var admitted []seckill.Purchase
		for _, a := range drain {
			if a.err != nil || a.p.Shard != a.p.Home {
				t.Fatalf("drainer %s: %+v, %v; want admitted at home", a.user, a.p, a.err)
			}
			admitted = append(admitted, a.p)
		}
		metas := s.metas(t, item, clusterShards)
		for _, n := range drained {
			if metas[n].left != 0 {
				t.Fatalf("shard %d not drained: %+v", n, metas[n])
			}
		}

		// 400 of the buyers live on drained shards and must borrow; each
		// fires 5 purchases of 1 at once. Stock (1250 left) exceeds what
		// the limit lets them buy (1000), so each gets exactly 2.
		buyers := append(usersHomedOnAny("lim", 400, clusterShards, drained...),
			usersHomedOnAny("lim-other", 100, clusterShards, 1, 2, 4, 5, 7)...)
		var tries []purchaseTry
		for _, u := range buyers {
			for range attempts {
				tries = append(tries, purchaseTry{user: u, qty: 1})
			}
		}
		buyInGroups(s.svc, item, tries, attempts)

		got := map[string]int{}
		for _, a := range tries {
			switch {
			case a.err == nil:
				got[a.user]++
				admitted = append(admitted, a.p)
				// Buyers homed on a drained shard must borrow. (Others may
				// too: borrowers can empty their home shard first.)
				if slices.Contains(drained, a.p.Home) && a.p.Shard == a.p.Home {
					t.Errorf("%s homed on drained shard %d got its stock there", a.user, a.p.Home)
				}
			case errors.Is(a.err, seckill.ErrAlreadyPurchased):
			default:
				t.Errorf("%s: %v; want admitted or already_purchased", a.user, a.err)
			}
		}
		for _, u := range buyers {
			if got[u] != limit {
				t.Errorf("%s admitted %d times, want exactly %d", u, got[u], limit)
			}
		}

		// Redis agrees: nobody holds more than the limit, nothing is held.
		perUser := map[string]int{}
		for _, p := range s.recorded(t, item, clusterShards) {
			perUser[p.UserID] += p.Quantity
		}
		for u, q := range perUser {
			if q > limit {
				t.Errorf("Redis records quantity %d for %s, limit %d", q, u, limit)
			}
		}
		for n := range clusterShards {
			if held, err := s.rdb.ZCard(context.Background(), itemShardKeys(item, n).Key("holds")).Result(); err != nil || held != 0 {
				t.Errorf("shard %d: %d holds left (%v), want 0", n, held, err)
			}
		}
		sold := int64(len(drained)*perShard + users*limit)
		s.checkConsistent(t, item, clusterShards, stock, sold)
		sales = append(sales, finishedSale{item: item, admitted: admitted, admittedN: sold})
	})

	t.Run("every admitted purchase is confirmed", func(t *testing.T) {
		if len(sales) != 2 {
			t.Skip("the sales above failed")
		}
		s.confirmAll(t, sales)
	})

	t.Run("a take after its hold was given back is refused", func(t *testing.T) {
		s.staleTake(t)
	})

	s.c.AssertNoCrossSlot(t)
}

// buyInGroups is buyConcurrently for groups of n attempts of one user each, every group
// fired at once; purchasesInFlight attempts run at a time.
func buyInGroups(svc *seckill.Service, item string, tries []purchaseTry, n int) {
	start := make(chan struct{})
	sem := make(chan struct{}, purchasesInFlight/n)
	var wg sync.WaitGroup
	for g := 0; g < len(tries); g += n {
		wg.Go(func() {
			<-start
			sem <- struct{}{}
			defer func() { <-sem }()
			var group sync.WaitGroup
			for i := g; i < g+n; i++ {
				group.Go(func() {
					a := &tries[i]
					a.p, a.err = svc.Purchase(context.Background(), item, a.user, a.qty)
				})
			}
			group.Wait()
		})
	}
	close(start)
	wg.Wait()
}

// inlineOrders stands in for SQS and the consumer: it makes each order at
// once and acks its job.
type inlineOrders struct {
	proc   *seckill.OrderProcessor
	queues map[string]*delayq.Queue
	done   atomic.Int64
}

func (d *inlineOrders) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	var refused []delayq.Job
	var errs []error
	for _, j := range jobs {
		item, ok := strings.CutPrefix(j.Queue, seckill.QueuePrefix)
		if !ok || j.Kind != seckill.JobKind {
			refused = append(refused, j)
			errs = append(errs, fmt.Errorf("job %s of queue %s, kind %s", j.ID, j.Queue, j.Kind))
			continue
		}
		if err := d.proc.Process(ctx, item, j.Shard, j.ID); err != nil {
			refused = append(refused, j)
			errs = append(errs, err)
			continue
		}
		d.done.Add(1)
		// A lost ack only means a duplicate delivery later, which finds the
		// purchase confirmed.
		if _, err := d.queues[j.Queue].Ack(ctx, j.Shard, j.Lease, j.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return refused, errors.Join(errs...)
}

// confirmAll drives the sales' order (and event) jobs through poller rounds until every
// admitted purchase is confirmed, then checks purchases, orders and queues.
func (s *saleCluster) confirmAll(t *testing.T, sales []finishedSale) {
	t.Helper()
	ctx := context.Background()
	d := &inlineOrders{proc: seckill.NewOrderProcessor(s.store, s.orders, clock.System{}, clusterLog),
		queues: map[string]*delayq.Queue{}}
	var qs []*delayq.Queue
	for _, sl := range sales {
		q, err := s.store.Queue(sl.item, clusterShards)
		if err != nil {
			t.Fatal(err)
		}
		d.queues[q.Name()] = q
		qs = append(qs, q)
	}
	p, err := poller.New(poller.Config{Queues: poller.Static(qs...), Dispatcher: d, Clock: clock.System{}, Logger: clusterLog,
		RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	rounds := 0
	for deadline := time.Now().Add(45 * time.Second); ; {
		if _, err := p.Round(ctx); err != nil {
			t.Logf("round %d: %v", rounds, err) // refused jobs come back
		}
		rounds++
		stats, err := s.store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := true
		for _, sl := range sales {
			st := stats[sl.item]
			if st.Confirmed > sl.admittedN {
				t.Fatalf("%s: confirmed %d > admitted %d", sl.item, st.Confirmed, sl.admittedN)
			}
			done = done && st.Confirmed == sl.admittedN && st.Admitted == sl.admittedN
			// and the order.created events, queued as the orders were made,
			// went out
			qs, err := d.queues[seckill.QueueName(sl.item)].Stats(ctx, time.Now())
			done = done && err == nil && qs == (delayq.Stats{})
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d rounds: stats %+v, want every admitted purchase confirmed", rounds, stats)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d orders made in %d poller rounds, %s", d.done.Load(), rounds, time.Since(began).Round(time.Millisecond))

	for _, sl := range sales {
		for n, m := range s.metas(t, sl.item, clusterShards) {
			if m.pending != 0 || m.confirmed != m.admitted || m.released != 0 {
				t.Errorf("%s shard %d after the orders: %+v", sl.item, n, m)
			}
		}
		if st, err := d.queues[seckill.QueueName(sl.item)].Stats(ctx, time.Now()); err != nil || st != (delayq.Stats{}) {
			t.Errorf("order queue of %s: %+v, %v; want empty", sl.item, st, err)
		}
		var g errgroup.Group
		g.SetLimit(32)
		bought := map[string][]string{} // user -> purchase ids
		for _, p := range sl.admitted {
			bought[p.UserID] = append(bought[p.UserID], p.ID)
			g.Go(func() error {
				got, err := s.store.Purchase(ctx, sl.item, p.Shard, seckill.OrderJobID(p))
				if err != nil || got.Status != seckill.Confirmed || got.OrderID != seckill.OrderID(p.ID) {
					return fmt.Errorf("purchase %s of %s: %+v, %v; want confirmed with order %s", p.ID, p.UserID, got, err, seckill.OrderID(p.ID))
				}
				rec, ok, err := s.orders.Order(ctx, sl.item, p.Shard, got.OrderID)
				if err != nil || !ok || !strings.HasPrefix(rec, p.ID+"|") || !strings.HasSuffix(rec, "|"+p.UserID) {
					return fmt.Errorf("order %s of %s: %q, %v, %v", got.OrderID, p.UserID, rec, ok, err)
				}
				return nil
			})
		}
		for user, pids := range bought {
			g.Go(func() error {
				// Mine shows the user's latest purchase: one of theirs.
				mine, err := s.svc.Mine(ctx, sl.item, user)
				if err != nil || !slices.Contains(pids, mine.ID) || mine.Status != seckill.Confirmed || mine.OrderID != seckill.OrderID(mine.ID) {
					return fmt.Errorf("Mine(%s) = %+v, %v; want one of %v confirmed with its order", user, mine, err, pids)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Error(err)
		}
	}
}

// holdStaller is a hook that, while armed, stops the caller of the first
// admit script that answers "held" (code 8: no stock on the home shard, the
// quantity held against the limit) until released: a caller stalled between
// its hold and its take from another shard (a long GC pause, a frozen
// container).
type holdStaller struct {
	sha, src string
	armed    atomic.Bool
	reached  chan struct{}
	release  chan struct{}
}

func (b *holdStaller) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *holdStaller) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err != nil || len(args) < 2 || (args[1] != b.sha && args[1] != b.src) {
			return err
		}
		if c, ok := cmd.(*redis.Cmd); ok {
			if res, _ := c.Slice(); len(res) > 0 && res[0] == int64(8) && b.armed.CompareAndSwap(true, false) {
				close(b.reached)
				<-b.release
			}
		}
		return err
	}
}

func (b *holdStaller) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// staleTake stalls a borrowing purchase between its hold and its take until
// the compensation pass has given the hold back (the hold's deadline plus
// grace having passed). The take must then be refused: the protocol on
// Service.Purchase promises "takes are refused past the deadline", so that a
// quantity is never both given back and sold.
func (s *saleCluster) staleTake(t *testing.T) {
	ctx := context.Background()
	const shards = 2
	item := "stale-take"
	s.preheat(t, item, 4, shards, 1) // 2 per shard
	buyer := usersHomedOnAny("stale", 1, shards, 0)[0]
	drain := []purchaseTry{}
	for _, u := range usersHomedOnAny("stale-drainer", 2, shards, 0) {
		drain = append(drain, purchaseTry{user: u, qty: 1})
	}
	buyConcurrently(s.svc, item, drain)
	for _, a := range drain {
		if a.err != nil {
			t.Fatalf("drainer %s: %v", a.user, a.err)
		}
	}

	src, err := os.ReadFile("lua/admit.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	block := &holdStaller{sha: hex.EncodeToString(sum[:]), src: string(src), reached: make(chan struct{}), release: make(chan struct{})}
	block.armed.Store(true)
	release := sync.OnceFunc(func() { close(block.release) })
	t.Cleanup(release) // a failed test must not leave the caller stuck
	stalled := s.c.Client(t)
	stalled.AddHook(block)
	// The stalled container's clock moves only when told to, so the stall
	// is as long as the test says, on both sides.
	stalledClock := clock.NewFake(time.Now())
	stalledSvc, err := seckill.NewService(seckill.Config{Store: seckill.NewStore(stalled, clusterPrefix), Clock: stalledClock, Logger: clusterLog})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		p   seckill.Purchase
		err error
	}
	first := make(chan answer, 1)
	go func() {
		p, err := stalledSvc.Purchase(ctx, item, buyer, 1)
		first <- answer{p, err}
	}()
	select {
	case <-block.reached:
	case a := <-first:
		t.Fatalf("purchase ended without a hold: %+v, %v", a.p, a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the purchase never got its hold")
	}

	// The stall outlasts the hold's deadline and grace, and the compensation
	// pass runs.
	stalledClock.Advance(seckill.DefaultHold + time.Minute)
	comp := &seckill.Compensation{Store: s.store, Orders: s.orders, Clock: stalledClock, Log: clusterLog, HoldGrace: time.Second}
	rep, err := comp.Run(ctx, stalledClock.Now())
	if err != nil || rep.HoldsReturned != 1 {
		t.Fatalf("compensation: %+v, %v; want the hold given back", rep, err)
	}
	release()
	a := <-first
	if a.err == nil {
		t.Errorf("the stalled purchase was admitted on shard %d after its hold was given back", a.p.Shard)
	}

	// The limit is 1, whatever happened to the stalled attempt.
	_, _ = s.svc.Purchase(ctx, item, buyer, 1)
	n := 0
	for _, p := range s.recorded(t, item, shards) {
		if p.UserID == buyer {
			n += p.Quantity
		}
	}
	if n > 1 {
		t.Errorf("%s holds %d purchases of %s, per_user_limit 1", buyer, n, item)
	}
}

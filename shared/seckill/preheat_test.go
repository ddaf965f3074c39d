package seckill_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/seckill"
)

// Tests of issue 21 item 6: a preheat is all or nothing across the item's
// shards, and two preheats of one item never interleave.

// scriptTap is a go-redis hook that runs a function once, right after the
// first script call whose arguments name a given key has run: the moment
// between two steps of a multi-step call, where another container acts.
type scriptTap struct {
	mu   sync.Mutex
	key  string
	then func()
}

func (s *scriptTap) arm(key string, then func()) {
	s.mu.Lock()
	s.key, s.then = key, then
	s.mu.Unlock()
}

func (s *scriptTap) take(cmd redis.Cmder) func() {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.then == nil || !slices.ContainsFunc(cmd.Args(), func(a any) bool { return a == s.key }) {
		return nil
	}
	then := s.then
	s.then = nil
	return then
}

func (s *scriptTap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptTap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if then := s.take(cmd); then != nil && err == nil {
			then()
		}
		return err
	}
}

func (s *scriptTap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// tappedClient is a second client of rdb's server with a scriptTap: one
// container's connection, whose steps the test interleaves with others'.
func tappedClient(t *testing.T, rdb *redis.Client) (*redis.Client, *scriptTap) {
	t.Helper()
	c := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = c.Close() })
	tap := &scriptTap{}
	c.AddHook(tap)
	return c, tap
}

func newService(t *testing.T, store *seckill.Store, clk clock.Clock) *seckill.Service {
	t.Helper()
	svc, err := seckill.NewService(seckill.Config{Store: store, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func shardKeys(item string, n int) delayq.Keys {
	return delayq.KeysOf("hg:", seckill.QueueName(item), n)
}

// shardSnapshot is everything a sale keeps in one shard: its meta, buyers,
// purchases and holds, and its order queue.
type shardSnapshot struct {
	Meta, Users, Purchases map[string]string
	Holds, Due, Inflight   []redis.Z
	Dead                   []redis.Z
}

func snapshot(t *testing.T, rdb redis.Cmdable, item string, shards int) []shardSnapshot {
	t.Helper()
	ctx := context.Background()
	out := make([]shardSnapshot, shards)
	for n := range shards {
		k := shardKeys(item, n)
		s := &out[n]
		var err error
		hash := func(key string) map[string]string {
			m, e := rdb.HGetAll(ctx, key).Result()
			err = errors.Join(err, e)
			return m
		}
		set := func(key string) []redis.Z {
			z, e := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
			err = errors.Join(err, e)
			return z
		}
		s.Meta, s.Users, s.Purchases = hash(k.Key("meta")), hash(k.Key("users")), hash(k.Key("purchases"))
		s.Holds, s.Due, s.Inflight, s.Dead = set(k.Key("holds")), set(k.Due), set(k.Inflight), set(k.Dead)
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// phoneSale is a sale of phones: stock over shards, limit 1, from t0 for
// hours.
func phoneSale(stock, shards int, hours int) seckill.Sale {
	return seckill.Sale{ItemID: "phone", Stock: int64(stock), Shards: shards, PerUserLimit: 1,
		StartsAt: t0, EndsAt: t0.Add(time.Duration(hours) * time.Hour)}
}

// TestRefusedPreheatChangesNoShard is issue 21 item 6 as filed: a sale of 2
// units over 2 shards; alice (home shard 0) bought, her order is made. A
// re-preheat finds nothing pending; between its work on shard 0 and on shard
// 1, bob is admitted on shard 1 by another container whose settings are
// cached. The preheat is refused (orders pending) and must have changed no
// shard: alice, at her limit, cannot buy again, and the sale never has more
// orders than units.
func TestRefusedPreheatChangesNoShard(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		admin, tap := tappedClient(t, b.rdb)
		svcA := newService(t, seckill.NewStore(admin, "hg:"), clk) // the admin's container
		storeB := seckill.NewStore(b.rdb, "hg:")
		svcB := newService(t, storeB, clk) // a buyers' container
		proc := seckill.NewOrderProcessor(storeB, b.ledger(), clk, quiet)
		if _, err := svcA.Preheat(ctx, phoneSale(2, 2, 1)); err != nil {
			t.Fatal(err)
		}
		alice, bob := usersHomedAt("alice", 0, 2, 1)[0], usersHomedAt("bob", 1, 2, 1)[0]
		p, err := svcB.Purchase(ctx, "phone", alice, 1) // and B now holds the settings
		if err != nil || p.Shard != 0 {
			t.Fatalf("alice: %+v %v", p, err)
		}
		if err := proc.Process(ctx, "phone", p.Shard, seckill.OrderJobID(p)); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, b.rdb, "phone", 2)

		var (
			bobErr error
			during []shardSnapshot
		)
		tap.arm(shardKeys("phone", 0).Key("meta"), func() {
			_, bobErr = svcB.Purchase(ctx, "phone", bob, 1)
			during = snapshot(t, b.rdb, "phone", 2)
		})
		_, err = svcA.Preheat(ctx, phoneSale(2, 2, 2))
		if during == nil || bobErr != nil {
			t.Fatalf("bob was not admitted on shard 1 while the preheat ran: %v (tapped: %t)", bobErr, during != nil)
		}
		if !errors.Is(err, seckill.ErrOrdersPending) {
			t.Fatalf("preheat with bob's order pending: %v, want ErrOrdersPending", err)
		}
		after := snapshot(t, b.rdb, "phone", 2)
		if diff := cmp.Diff(before[0], after[0]); diff != "" {
			t.Errorf("the refused preheat changed shard 0 (-before +after):\n%s", diff)
		}
		if diff := cmp.Diff(during[1], after[1]); diff != "" {
			t.Errorf("the refused preheat changed shard 1 (-before +after):\n%s", diff)
		}

		// Alice is at her limit; whatever she tries, the sale ends with at
		// most its 2 units ordered.
		if again, err := svcB.Purchase(ctx, "phone", alice, 1); err == nil {
			t.Errorf("alice, at her limit of 1, bought again: %+v", again)
		}
		clk.Advance(time.Second) // past the settings' cache
		if again, err := svcA.Purchase(ctx, "phone", alice, 1); err == nil {
			t.Errorf("alice, at her limit of 1, bought again: %+v", again)
		}
		q, _ := storeB.Queue("phone", 2)
		for range 3 {
			for _, j := range handOver(t, q, clk.Now()) {
				if err := proc.Process(ctx, "phone", j.Shard, j.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		entries, err := b.entries(ctx, "phone", 2)
		if err != nil {
			t.Fatal(err)
		}
		units := 0
		for _, e := range entries {
			if !e.voided {
				units += e.qty
			}
		}
		if units > 2 {
			t.Errorf("%d units ordered of a sale of 2: %+v", units, entries)
		}
	})
}

// saleShape is what every shard of an item says of its sale; a preheat
// applied to some shards and not others shows as two shapes.
type saleShape struct {
	Version, Shards, Starts, Ends, Limit string
	Stock                                int64
}

// consistentSale fails unless every shard of item (as registered) holds the
// same sale, none is left frozen, and that sale has stock units over the
// registered shard count; it returns the sale.
func consistentSale(t *testing.T, rdb redis.Cmdable, store *seckill.Store, item string) saleShape {
	t.Helper()
	ctx := context.Background()
	shards, err := store.Shards(ctx, item)
	if err != nil || shards < 1 {
		t.Fatalf("registered shards of %s: %d %v", item, shards, err)
	}
	var sale saleShape
	for n := range shards {
		m, err := rdb.HGetAll(ctx, shardKeys(item, n).Key("meta")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if m["frozen"] != "" {
			t.Errorf("shard %d is left frozen: %v", n, m)
		}
		stock, _ := strconv.ParseInt(m["stock"], 10, 64)
		got := saleShape{Version: m["version"], Shards: m["shards"], Starts: m["starts"], Ends: m["ends"], Limit: m["limit"]}
		if n == 0 {
			sale = got
		} else if got.Stock = sale.Stock; got != sale {
			t.Errorf("shard %d holds another sale than shard 0: %+v, shard 0 %+v", n, got, sale)
		}
		sale.Stock += stock
	}
	if sale.Shards != strconv.Itoa(shards) {
		t.Errorf("the sale has %s shards, the registry %d", sale.Shards, shards)
	}
	return sale
}

// TestPreheatsOfOneItemNeverInterleave: a preheat (A: 10 units over 2
// shards) is between its first shard and the next when another container
// preheats the item (B: 30 units over 3 shards). Whatever each is answered,
// the item ends with one of the two sales on every shard, never a mix.
func TestPreheatsOfOneItemNeverInterleave(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		admin, tap := tappedClient(t, b.Client)
		storeA, storeB := seckill.NewStore(admin, "hg:"), seckill.NewStore(b.Client, "hg:")
		svcA, svcB := newService(t, storeA, clk), newService(t, storeB, clk)
		if _, err := svcB.Preheat(ctx, phoneSale(4, 2, 1)); err != nil {
			t.Fatal(err)
		}
		var errB error
		tap.arm(shardKeys("phone", 0).Key("meta"), func() {
			_, errB = svcB.Preheat(ctx, phoneSale(30, 3, 3))
		})
		_, errA := svcA.Preheat(ctx, phoneSale(10, 2, 2))
		for who, err := range map[string]error{"A": errA, "B": errB} {
			if err != nil && !errors.Is(err, seckill.ErrPreheatInProgress) {
				t.Errorf("preheat %s: %v, want done or ErrPreheatInProgress", who, err)
			}
		}
		if errA != nil && errB != nil {
			t.Fatalf("both preheats refused: %v; %v", errA, errB)
		}
		sale := consistentSale(t, b.Client, storeB, "phone")
		want := map[bool]int64{true: 30, false: 10}[errB == nil && errA != nil]
		if errA == nil && errB == nil {
			want = sale.Stock // one after the other: the later one stands
		}
		if sale.Stock != want || (sale.Stock != 10 && sale.Stock != 30) {
			t.Errorf("the item holds %d units, want %d", sale.Stock, want)
		}
	})
}

// TestConcurrentPreheatsNeverInterleave: preheats of one item with
// different stock and shard counts, released at once from goroutines of
// their own: each is done or refused as in progress, and the item ends with
// exactly one of them on every shard.
func TestConcurrentPreheatsNeverInterleave(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		store := seckill.NewStore(b.Client, "hg:")
		if _, err := newService(t, store, clk).Preheat(ctx, phoneSale(3, 3, 1)); err != nil {
			t.Fatal(err)
		}
		for round := range 5 {
			const n = 8
			start := make(chan struct{})
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				svc := newService(t, seckill.NewStore(b.Client, "hg:"), clk) // a container each
				wg.Go(func() {
					<-start
					_, errs[i] = svc.Preheat(ctx, phoneSale(10*(i+1), 1+i%3, 1+round))
				})
			}
			close(start)
			wg.Wait()
			done := 0
			for i, err := range errs {
				switch {
				case err == nil:
					done++
				case !errors.Is(err, seckill.ErrPreheatInProgress):
					t.Fatalf("round %d, preheat %d: %v", round, i, err)
				}
			}
			if done == 0 {
				t.Fatalf("round %d: every preheat refused: %v", round, errs)
			}
			sale := consistentSale(t, b.Client, store, "phone")
			if sale.Stock%10 != 0 || sale.Stock < 10 || sale.Stock > 10*n ||
				sale.Shards != strconv.Itoa(1+int(sale.Stock/10-1)%3) {
				t.Fatalf("round %d: the item holds %+v, none of the preheats", round, sale)
			}
			clk.Advance(time.Millisecond)
		}
	})
}

// scriptStop is a go-redis hook that stops one container at a named script
// (a file of lua/): killed (that call and every later one fails, as a
// container that died) or stalled (the call waits, unsent, until the test
// lets it go, as a container frozen for minutes).
type scriptStop struct {
	names map[string]string // sha1 -> script file

	mu      sync.Mutex
	script  string
	skip    int // calls of script let through before the stop
	stall   bool
	dead    bool
	stopped chan struct{} // closed when the container stops
	resume  chan struct{} // closed to let a stalled call go
}

var errKilled = errors.New("test: the container died")

func stoppableClient(t *testing.T, rdb *redis.Client) (*redis.Client, *scriptStop) {
	t.Helper()
	c := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = c.Close() })
	s := &scriptStop{names: newScriptFaults(t).names}
	c.AddHook(s)
	return c, s
}

// at arms the stop at the call of script after skip others.
func (s *scriptStop) at(script string, skip int, stall bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script, s.skip, s.stall, s.dead = script, skip, stall, false
	s.stopped, s.resume = make(chan struct{}), make(chan struct{})
}

func (s *scriptStop) name(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return ""
	}
	sha, _ := args[1].(string)
	return s.names[sha]
}

func (s *scriptStop) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptStop) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			return errKilled
		}
		hit := s.script != "" && s.name(cmd) == s.script
		if hit && s.skip > 0 {
			s.skip--
			hit = false
		}
		stall, stopped, resume := s.stall, s.stopped, s.resume
		if hit {
			s.script = ""
			s.dead = !stall
			close(stopped)
		}
		s.mu.Unlock()
		switch {
		case hit && stall:
			<-resume
		case hit:
			return errKilled
		}
		return next(ctx, cmd)
	}
}

func (s *scriptStop) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.mu.Lock()
		dead := s.dead
		s.mu.Unlock()
		if dead {
			return errKilled
		}
		return next(ctx, cmds)
	}
}

// withoutFences is a snapshot without the fence marks a recoverer's roll
// back leaves (see unfreeze.lua), which change nothing a sale does.
func withoutFences(snap []shardSnapshot) []shardSnapshot {
	out := slices.Clone(snap)
	for i := range out {
		m := map[string]string{}
		for k, v := range out[i].Meta {
			if k != "fence" {
				m[k] = v
			}
		}
		out[i].Meta = m
	}
	return out
}

// preheatStopped is a sale of 4 units over 2 shards in which alice (home
// shard 0) bought and has her order; then container A preheats 6 units over
// 3 shards and stops at script. It returns the sale's state before A began.
type stoppedPreheat struct {
	clk        *clock.Fake
	store      *seckill.Store
	svc        *seckill.Service // a container that never stops
	comp       *seckill.Compensation
	stop       *scriptStop
	before     []shardSnapshot
	errA       chan error
	bob, carol string
}

func preheatStopped(t *testing.T, b redistest.Backend, script string, skip int, stall bool) *stoppedPreheat {
	t.Helper()
	ctx := context.Background()
	s := &stoppedPreheat{clk: clock.NewFake(t0), store: seckill.NewStore(b.Client, "hg:"), errA: make(chan error, 1)}
	s.svc = newService(t, s.store, s.clk)
	s.comp = &seckill.Compensation{Store: s.store, Orders: ledger.NewRedisOrders(b.Client, "hg:"), Clock: s.clk, Log: quiet}
	if _, err := s.svc.Preheat(ctx, phoneSale(4, 2, 1)); err != nil {
		t.Fatal(err)
	}
	alice := usersHomedAt("alice", 0, 2, 1)[0]
	s.bob, s.carol = usersHomedAt("bob", 1, 2, 1)[0], usersHomedAt("carol", 0, 2, 1)[0]
	p, err := s.svc.Purchase(ctx, "phone", alice, 1)
	if err != nil {
		t.Fatal(err)
	}
	proc := seckill.NewOrderProcessor(s.store, s.comp.Orders, s.clk, quiet)
	if err := proc.Process(ctx, "phone", p.Shard, seckill.OrderJobID(p)); err != nil {
		t.Fatal(err)
	}
	s.before = snapshot(t, b.Client, "phone", 3)
	client, stop := stoppableClient(t, b.Client)
	s.stop = stop
	svcA := newService(t, seckill.NewStore(client, "hg:"), s.clk)
	stop.at(script, skip, stall)
	go func() {
		_, err := svcA.Preheat(ctx, phoneSale(6, 3, 2))
		s.errA <- err
	}()
	<-stop.stopped
	if !stall {
		if err := <-s.errA; !errors.Is(err, errKilled) {
			t.Fatalf("the killed preheat answered %v", err)
		}
	}
	return s
}

// TestKilledPreheatIsFinished: a preheat whose container died after
// freezing every shard is rolled back, one that died after committing is
// rolled forward: by the compensation pass, or by the next preheat of the
// item, once its deadline passed. Meanwhile purchases are refused, not
// lost, and another preheat is refused as in progress.
func TestKilledPreheatIsFinished(t *testing.T) {
	for _, tc := range []struct {
		name, at string
		forward  bool
	}{
		{"after freezing", "preheat_move.lua", false},
		{"after committing", "reset.lua", true},
	} {
		for _, by := range []string{"compensation", "next preheat"} {
			t.Run(tc.name+", by "+by, func(t *testing.T) {
				redistest.Each(t, func(t *testing.T, b redistest.Backend) {
					ctx := context.Background()
					s := preheatStopped(t, b, tc.at, 0, false)
					if _, err := s.svc.Purchase(ctx, "phone", s.bob, 1); !errors.Is(err, seckill.ErrPreheating) {
						t.Fatalf("bob while the shards are frozen: %v, want ErrPreheating", err)
					}
					// Read, the item is being preheated: neither gone (its
					// new shard has no sale yet) nor a mix of two sales.
					if st, err := s.svc.State(ctx, "phone"); !errors.Is(err, seckill.ErrPreheating) {
						t.Fatalf("the item while a preheat is half applied: %+v %v, want ErrPreheating", st, err)
					}
					if _, err := s.svc.Preheat(ctx, phoneSale(8, 2, 3)); !errors.Is(err, seckill.ErrPreheatInProgress) {
						t.Fatalf("a preheat before the deadline: %v, want ErrPreheatInProgress", err)
					}
					if rep, err := s.comp.Run(ctx, s.clk.Now()); err != nil || rep.PreheatsRolledBack+rep.PreheatsRolledForward != 0 {
						t.Fatalf("compensation before the deadline: %+v %v, want nothing finished", rep, err)
					}
					s.clk.Advance(seckill.DefaultPreheatTimeout)
					if by == "next preheat" {
						if _, err := s.svc.Preheat(ctx, phoneSale(8, 2, 3)); err != nil {
							t.Fatalf("the next preheat: %v", err)
						}
						if sale := consistentSale(t, b.Client, s.store, "phone"); sale.Stock != 8 {
							t.Fatalf("after the next preheat: %+v, want its 8 units", sale)
						}
						return
					}
					rep, err := s.comp.Run(ctx, s.clk.Now())
					if err != nil || rep.PreheatsRolledForward != map[bool]int{true: 1}[tc.forward] ||
						rep.PreheatsRolledBack != map[bool]int{false: 1}[tc.forward] {
						t.Fatalf("compensation past the deadline: %+v %v", rep, err)
					}
					sale := consistentSale(t, b.Client, s.store, "phone")
					if tc.forward {
						if sale.Stock != 6 || sale.Shards != "3" {
							t.Fatalf("rolled forward: %+v, want the preheat's 6 units over 3 shards", sale)
						}
					} else if diff := cmp.Diff(withoutFences(s.before), withoutFences(snapshot(t, b.Client, "phone", 3))); diff != "" {
						t.Fatalf("rolled back, the sale is not as it was (-before +after):\n%s", diff)
					}
					if _, err := s.svc.Purchase(ctx, "phone", s.bob, 1); err != nil {
						t.Fatalf("bob once the preheat is finished: %v", err)
					}
				})
			})
		}
	}
}

// TestStalledPreheatAppliesNothing: a preheat stalls (a frozen container)
// before one of its steps, past its deadline; the compensation pass
// finishes it; it wakes up and carries on with what it knew. It applies
// nothing more and answers ErrPreheatAbandoned; the item stays as recovery
// (and any later preheat) left it, every shard of one sale.
func TestStalledPreheatAppliesNothing(t *testing.T) {
	for _, tc := range []struct {
		name, at string
		skip     int
		forward  bool
	}{
		{"before freezing shard 1", "freeze.lua", 1, false}, // shard 0 is frozen
		{"before committing", "preheat_move.lua", 0, false},
		{"before resetting", "reset.lua", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				ctx := context.Background()
				s := preheatStopped(t, b, tc.at, tc.skip, true)
				s.clk.Advance(seckill.DefaultPreheatTimeout)
				rep, err := s.comp.Run(ctx, s.clk.Now())
				if err != nil || rep.PreheatsRolledForward+rep.PreheatsRolledBack != 1 {
					t.Fatalf("compensation past the deadline: %+v %v", rep, err)
				}
				want := 4
				if tc.forward {
					// Rolled forward; then a later preheat of its own.
					if _, err := s.svc.Preheat(ctx, phoneSale(8, 2, 3)); err != nil {
						t.Fatal(err)
					}
					want = 8
				}
				settled := snapshot(t, b.Client, "phone", 3)
				close(s.stop.resume)
				if err := <-s.errA; !errors.Is(err, seckill.ErrPreheatAbandoned) {
					t.Fatalf("the stalled preheat woke and answered %v, want ErrPreheatAbandoned", err)
				}
				if diff := cmp.Diff(settled, snapshot(t, b.Client, "phone", 3)); diff != "" {
					t.Fatalf("the stalled preheat changed the item once awake (-before +after):\n%s", diff)
				}
				if sale := consistentSale(t, b.Client, s.store, "phone"); sale.Stock != int64(want) {
					t.Fatalf("the item holds %+v, want %d units", sale, want)
				}
				if _, err := s.svc.Purchase(ctx, "phone", s.bob, 1); err != nil {
					t.Fatalf("bob: %v", err)
				}
			})
		})
	}
}

// TestStrayFreezeIsUndone: a shard frozen by a preheat that is no longer
// open (its freeze reached Redis after the preheat was rolled back: a call
// resent late) refuses buyers only until the next compensation pass, which
// puts it back as it was.
func TestStrayFreezeIsUndone(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		store := seckill.NewStore(b.Client, "hg:")
		svc := newService(t, store, clk)
		if _, err := svc.Preheat(ctx, phoneSale(4, 2, 1)); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, b.Client, "phone", 2)
		// What freeze.lua leaves on shard 1 for a later version.
		meta := shardKeys("phone", 1).Key("meta")
		m := before[1].Meta
		stray, _ := strconv.ParseInt(m["version"], 10, 64)
		stray += 5
		if err := b.Client.HDel(ctx, meta, "left:"+m["version"]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.HSet(ctx, meta, "left_aside", m["left:"+m["version"]], "frozen", stray).Err(); err != nil {
			t.Fatal(err)
		}
		bob := usersHomedAt("bob", 1, 2, 1)[0]
		if _, err := svc.Purchase(ctx, "phone", bob, 1); !errors.Is(err, seckill.ErrPreheating) {
			t.Fatalf("bob on the frozen shard: %v, want ErrPreheating", err)
		}
		comp := &seckill.Compensation{Store: store, Orders: ledger.NewRedisOrders(b.Client, "hg:"), Clock: clk, Log: quiet}
		if rep, err := comp.Run(ctx, clk.Now()); err != nil || rep.StrayFreezes != 1 {
			t.Fatalf("compensation: %+v %v, want the stray freeze undone", rep, err)
		}
		if diff := cmp.Diff(before, snapshot(t, b.Client, "phone", 2)); diff != "" {
			t.Fatalf("the shard is not as it was (-before +after):\n%s", diff)
		}
		if _, err := svc.Purchase(ctx, "phone", bob, 1); err != nil {
			t.Fatalf("bob once unfrozen: %v", err)
		}
	})
}

// TestPurchaseAcrossAPreheatIsToldToRetry: a buyer's purchase held its
// limit at home (too little stock there) and was about to take stock on
// another shard when its container stalled; meanwhile the item was
// preheated again. The take finds another sale: the answer is "being
// preheated" (retry), which the new sale may well serve, never "sold
// out" (410, final) while it has stock. Found by the flash-sale model
// ("sold out never shown").
func TestPurchaseAcrossAPreheatIsToldToRetry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		store := seckill.NewStore(b.Client, "hg:")
		admin := newService(t, store, clk)
		sale := seckill.Sale{ItemID: "phone", Stock: 3, Shards: 2, PerUserLimit: 2, StartsAt: t0, EndsAt: t0.Add(time.Hour)}
		if _, err := admin.Preheat(ctx, sale); err != nil {
			t.Fatal(err)
		}
		client, stop := stoppableClient(t, b.Client)
		buyer := newService(t, seckill.NewStore(client, "hg:"), clk)
		dave := usersHomedAt("dave", 1, 2, 1)[0] // 1 unit at home, 2 on shard 0
		stop.at("take.lua", 0, true)
		answer := make(chan error, 1)
		go func() {
			_, err := buyer.Purchase(ctx, "phone", dave, 2)
			answer <- err
		}()
		<-stop.stopped
		clk.Advance(time.Millisecond)
		again := seckill.Sale{ItemID: "phone", Stock: 5, Shards: 1, PerUserLimit: 2, StartsAt: t0, EndsAt: t0.Add(time.Hour)}
		if _, err := admin.Preheat(ctx, again); err != nil {
			t.Fatalf("the preheat while dave's take stalls: %v", err)
		}
		close(stop.resume)
		if err := <-answer; !errors.Is(err, seckill.ErrPreheating) {
			t.Fatalf("dave's purchase across the preheat: %v, want ErrPreheating (retry)", err)
		}
		if st, err := admin.State(ctx, "phone"); err != nil || st.StockLeft != 5 {
			t.Fatalf("the new sale: %+v %v, want its 5 units", st, err)
		}
		if _, err := buyer.Purchase(ctx, "phone", dave, 2); err != nil {
			t.Fatalf("dave's retry under the new sale: %v", err)
		}
	})
}

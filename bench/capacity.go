package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
)

// capMasters is the cluster of the capacity section: four masters let 16
// stock shards sit four to a master on average (so the busiest master's
// share shows what the hash placement of one item's shards costs), while
// four single-threaded servers and the load generator still fit a 2-core
// machine; what scales is CPU time per admission, not wall throughput.
const capMasters = 4

// capShards are the stock shard counts of one hot item measured.
var capShards = []int{1, 2, 4, 8, 16}

// capCallers is the purchases in flight at once, the same for every shard
// count: per-call CPU depends on how many commands each event-loop turn of a
// server finds, so the load is held constant while shards grow.
const capCallers = 48

// capCurve are the purchases in flight of the load curve: one master's CPU
// per admission as it gets busier.
var capCurve = []int{1, 4, 16, capCallers, 160}

// benchCapacity measures what docs/performance.md's capacity model rests on,
// on one real Redis Cluster of capMasters masters on loopback: Redis CPU per
// admission (every master's INFO cpu, less what the idle cluster burns) as one
// hot item's stock is split over more shards, the share of purchases that
// take the cross-shard path when a sale sells out and what such a purchase
// costs, the per-user limit's repeat purchase, a refusal after sell-out, many
// items of one shard each, and a plain SET as the unit of ElastiCache
// Serverless's ECPU estimate.
func benchCapacity(ctx context.Context, rdb redis.UniversalClient, _ *server, rep *report, quick bool) error {
	return run(func(h *harness) error {
		ch := &capHarness{harness: h}
		c := redistest.StartCluster(ch, capMasters)
		cc := c.Client(ch, func(o *redis.ClusterOptions) { o.PoolSize = 2 * capCurve[len(capCurve)-1] })
		cl, err := newCapCluster(ctx, c, cc)
		if err != nil {
			return err
		}
		defer cl.close()
		return capacityRun(ctx, cl, cc, rdb, rep, quick)
	})
}

// capHarness gives the cluster its node directories, which bench's harness
// does not have.
type capHarness struct{ *harness }

func (h *capHarness) TempDir() string {
	dir, err := os.MkdirTemp("", "hourglass-bench-cluster")
	if err != nil {
		panic(harnessFailure("capacity: " + err.Error()))
	}
	h.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// capSizes are a run's counts: purchases per steady phase, the stock of a
// sale sold out, refusals after it, and cross-shard purchases forced.
type capSizes struct{ steady, sellout, refused, cross int }

func capacityRun(ctx context.Context, cl *capCluster, cc *redis.ClusterClient, rdb redis.UniversalClient, rep *report, quick bool) error {
	sz := capSizes{steady: 20_000, sellout: 20_000, refused: 1_000, cross: 5_000}
	if quick {
		sz = capSizes{steady: 3_000, sellout: 3_000, refused: 200, cross: 600}
	}
	store := seckill.NewStore(cc, "hg:")
	// No order backlog to speak of (no poller drains the jobs here) and no
	// memory of sold out: every attempt reaches Redis.
	svc, err := seckill.NewService(seckill.Config{Store: store, Clock: clock.System{}, Backlog: 1 << 40})
	if err != nil {
		return err
	}
	set, err := cl.measure(ctx, func() (int, error) { return capSets(ctx, cc, sz.steady) })
	if err != nil {
		return err
	}
	rep.add(row{Key: "cap_set_cpu_us", Figure: "capacity: Redis CPU per SET of 100 bytes, " + strconv.Itoa(capMasters) + "-master cluster (µs)",
		Value: set.cpuUS, Note: fmt.Sprintf("the reference of the ECPU estimate (a simple command on a small value is about one ECPU); "+
			"commandstats %.2f µs a SET; %s; load average %s", set.setUS, set.note(), loadavg())})

	if err := capLoadCurve(ctx, cl, svc, rep, sz); err != nil {
		return err
	}
	if err := capStandalone(ctx, rdb, rep, sz, cl); err != nil {
		return err
	}
	var base, baseCluster float64
	for _, n := range capShards {
		if err := capShardCount(ctx, cl, svc, rep, sz, n, set.cpuUS, &base, &baseCluster); err != nil {
			return fmt.Errorf("%d shards: %w", n, err)
		}
	}
	return capManyItems(ctx, cl, svc, rep, sz, base)
}

// capLoadCurve measures one master's CPU per admission at several loads:
// a busier server finds more commands each event-loop turn and spends less
// on waking up, so a figure per admission holds only at its load.
func capLoadCurve(ctx context.Context, cl *capCluster, svc *seckill.Service, rep *report, sz capSizes) error {
	item := "curve"
	if err := capPreheat(ctx, svc, item, seckill.MaxStock, 1, 1); err != nil {
		return err
	}
	var base float64
	results := make([]capResult, len(capCurve))
	for i, callers := range capCurve {
		n := sz.steady
		if callers < 4 {
			n /= 4 // one at a time, each waits for its round trip
		}
		users := capUsers(item+"-"+strconv.Itoa(callers), n)
		res, err := cl.measure(ctx, func() (int, error) {
			t := capPurchasesOf(ctx, svc, callers, func(int) string { return item }, users)
			return t.admitted, t.err()
		})
		if err != nil {
			return err
		}
		results[i] = res
		if callers == capCallers {
			base = res.cpuUS
		}
	}
	for i, callers := range capCurve {
		res := results[i]
		rep.add(row{Key: "cap_load_c" + strconv.Itoa(callers) + "_cpu_us",
			Figure: fmt.Sprintf("capacity, one item, 1 shard, %d in flight: Redis CPU per admission (µs)", callers),
			Value:  res.cpuUS, Baseline: strconv.Itoa(capCallers) + " in flight", Base: base,
			Note: fmt.Sprintf("its master busy %.0f%% of a core at %.0f admissions/s; %s", 100*slices.Max(res.nodeCPU)/res.elapsed,
				float64(res.ops)/res.elapsed, res.note())})
	}
	return nil
}

// capStandalone runs the steady admissions of one item against the
// benchmark's own redis-server, not in cluster mode, and compares the CPU
// per admission with one master of the cluster's at the same load.
func capStandalone(ctx context.Context, rdb redis.UniversalClient, rep *report, sz capSizes, cl *capCluster) error {
	svc, err := seckill.NewService(seckill.Config{Store: seckill.NewStore(rdb, "hg:"), Clock: clock.System{}, Backlog: 1 << 40})
	if err != nil {
		return err
	}
	if err := capPreheat(ctx, svc, "solo", seckill.MaxStock, 1, 1); err != nil {
		return err
	}
	users := capUsers("solo", sz.steady)
	cpu0, err := serverCPU(ctx, rdb)
	if err != nil {
		return err
	}
	t0 := time.Now()
	t := capPurchases(ctx, svc, "solo", users)
	elapsed := time.Since(t0).Seconds()
	cpu1, err := serverCPU(ctx, rdb)
	if err := errors.Join(t.err(), err); err != nil {
		return err
	}
	solo := 1e6 * (cpu1 - cpu0) / float64(t.admitted)
	// The same on the cluster, right after, for the ratio.
	csvc, err := seckill.NewService(seckill.Config{Store: seckill.NewStore(cl.client, "hg:"), Clock: clock.System{}, Backlog: 1 << 40})
	if err != nil {
		return err
	}
	if err := capPreheat(ctx, csvc, "solo", seckill.MaxStock, 1, 1); err != nil {
		return err
	}
	res, err := cl.measure(ctx, func() (int, error) {
		t := capPurchases(ctx, csvc, "solo", capUsers("solo-c", sz.steady))
		return t.admitted, t.err()
	})
	if err != nil {
		return err
	}
	rep.add(row{Key: "cap_standalone_cpu_us", Figure: "capacity, one item, 1 shard, redis-server without cluster mode: Redis CPU per admission (µs)",
		Value: solo, Baseline: "the same on a cluster master, right after", Base: res.cpuUS,
		Note: fmt.Sprintf("%d new buyers, %d in flight; the server busy %.0f%% of a core at %.0f admissions/s; load average %s",
			t.admitted, capCallers, 100*(cpu1-cpu0)/elapsed, float64(t.admitted)/elapsed, loadavg())})
	return nil
}

// capShardCount measures one hot item split over n stock shards.
func capShardCount(ctx context.Context, cl *capCluster, svc *seckill.Service, rep *report, sz capSizes, n int, setUS float64, base, baseCluster *float64) error {
	k := "cap_n" + strconv.Itoa(n)
	title := fmt.Sprintf("capacity, one item, %d stock shard%s: ", n, map[bool]string{true: "s"}[n > 1])
	placement := cl.placement(ctx, "hot-"+strconv.Itoa(n), n)

	// Steady admissions: stock far above the buyers, every buyer new.
	item := "hot-" + strconv.Itoa(n)
	if err := capPreheat(ctx, svc, item, seckill.MaxStock, n, 1); err != nil {
		return err
	}
	users := capUsers(item, sz.steady)
	var pr purchaseTally
	steady, err := cl.measure(ctx, func() (int, error) {
		pr = capPurchases(ctx, svc, item, users)
		return pr.admitted, pr.err()
	})
	if err != nil {
		return err
	}
	if n == 1 {
		*base = steady.cpuUS
	}
	rep.add(row{Key: k + "_cpu_us", Figure: title + "Redis CPU per admission, all masters (µs)", Value: steady.cpuUS,
		Baseline: "1 stock shard", Base: *base,
		Note: fmt.Sprintf("%d new buyers, %d in flight; %s; %s; cross-shard %d", sz.steady, capCallers, steady.note(), placement, pr.cross)})
	perCore := 1e6 / steady.cpuUS
	rep.add(row{Key: k + "_admissions_per_core_s", Figure: title + "admissions per master-core-second (1e6 / CPU µs)", Value: perCore,
		Baseline: "1 stock shard", Base: 1e6 / *base, Note: "scaling efficiency: the ratio"})
	// The cluster's ceiling for this item: the busiest master at one full
	// core, the others below it.
	ceiling := perCore / steady.busiestShare()
	if n == 1 {
		*baseCluster = ceiling
	}
	rep.add(row{Key: k + "_cluster_admissions_per_s", Figure: title + "admissions/s of the " + strconv.Itoa(capMasters) + " masters when the busiest is at one core",
		Value: ceiling, Baseline: "1 stock shard", Base: *baseCluster,
		Note: fmt.Sprintf("per master-core-second %.0f over the busiest master's share of the CPU, %.2f", perCore, steady.busiestShare())})

	// A per-user limit of 4: each buyer's second purchase. The first and
	// the second are measured apart: the first is the steady path again.
	limitItem := "lim-" + strconv.Itoa(n)
	if err := capPreheat(ctx, svc, limitItem, seckill.MaxStock, n, 4); err != nil {
		return err
	}
	lusers := capUsers(limitItem, sz.steady/2)
	first, err := cl.measure(ctx, func() (int, error) { t := capPurchases(ctx, svc, limitItem, lusers); return t.admitted, t.err() })
	if err != nil {
		return err
	}
	again, err := cl.measure(ctx, func() (int, error) { t := capPurchases(ctx, svc, limitItem, lusers); return t.admitted, t.err() })
	if err != nil {
		return err
	}
	rep.add(row{Key: k + "_limit4_repeat_cpu_us", Figure: title + "Redis CPU per repeat purchase, per-user limit 4 (µs)", Value: again.cpuUS,
		Baseline: "the buyers' first purchases, same sale", Base: first.cpuUS,
		Note: fmt.Sprintf("%d buyers buying twice; the limit is counted on the buyer's home shard only, so a repeat never crosses shards: "+
			"it leaves the four-command path for the general one (HMGET of the settings, HGET of the buyer's entry); repeat: %s", len(lusers), again.note())})

	return capSellout(ctx, cl, svc, rep, sz, n, k, title, steady.cpuUS, setUS)
}

// capSellout sells a sale of sz.sellout units out to as many new buyers,
// then sends sz.refused more, and for n > 1 forces sz.cross purchases over
// the cross-shard path.
func capSellout(ctx context.Context, cl *capCluster, svc *seckill.Service, rep *report, sz capSizes, n int, k, title string, steadyUS, setUS float64) error {
	item := "out-" + strconv.Itoa(n)
	if err := capPreheat(ctx, svc, item, int64(sz.sellout), n, 1); err != nil {
		return err
	}
	var sale purchaseTally
	sold, err := cl.measure(ctx, func() (int, error) {
		sale = capPurchases(ctx, svc, item, capUsers(item, sz.sellout))
		return sale.admitted, sale.err()
	})
	if err != nil {
		return err
	}
	if sale.admitted != sz.sellout {
		return fmt.Errorf("sell-out of %d units to as many buyers admitted %d", sz.sellout, sale.admitted)
	}
	share := float64(sale.cross) / float64(sale.admitted)
	if n > 1 {
		rep.add(row{Key: k + "_cross_share", Figure: title + "share of a sold-out sale's purchases that took the cross-shard path",
			Value: share,
			Note: fmt.Sprintf("%d units to %d new buyers, homes by FNV-1a of the user id: %d crossed; the whole sale cost %.2f µs of Redis CPU "+
				"an admission (%.2f× the steady path); the share is the stock left on other shards when a buyer's home runs dry: "+
				"it falls as the stock per shard grows", sz.sellout, sz.sellout, sale.cross, sold.cpuUS, sold.cpuUS/steadyUS)})
	}
	refusedUsers := capUsers(item+"-late", sz.refused)
	var late purchaseTally
	refused, err := cl.measure(ctx, func() (int, error) {
		late = capPurchases(ctx, svc, item, refusedUsers)
		if late.admitted != 0 || late.soldOut != sz.refused {
			return 0, fmt.Errorf("after sell-out: %d admitted, %d sold out of %d", late.admitted, late.soldOut, sz.refused)
		}
		return late.soldOut, nil
	})
	if err != nil {
		return err
	}
	rep.add(row{Key: k + "_soldout_refusal_cpu_us", Figure: title + "Redis CPU per attempt refused after sell-out, no sold-out memory (µs)",
		Value: refused.cpuUS, Baseline: "a steady admission", Base: steadyUS,
		Note: fmt.Sprintf("%d attempts; with more than one shard each holds the buyer's limit on the home shard, asks every other shard and "+
			"gives the hold back (N + 1 scripts; one with one shard); a container remembers sold out for HOURGLASS_SOLDOUT_MEMORY (1 s), "+
			"so only its first attempt a second comes here; %s", sz.refused, refused.note())})
	if n == 1 {
		return nil
	}
	return capCross(ctx, cl, svc, rep, sz, n, k, title, steadyUS, setUS)
}

// capCross forces the cross-shard path: shard 0 of a sale is emptied by
// buyers homed there, then as many more buyers homed there each hold their
// limit at home, take a unit from shard 1 and settle the hold.
func capCross(ctx context.Context, cl *capCluster, svc *seckill.Service, rep *report, sz capSizes, n int, k, title string, steadyUS, setUS float64) error {
	item := "cross-" + strconv.Itoa(n)
	// n*m units: m on each shard, shard 0's bought by its own buyers first.
	m := sz.cross
	if err := capPreheat(ctx, svc, item, int64(n*m), n, 1); err != nil {
		return err
	}
	homed := capHomed(item, n, 2*m)
	if t := capPurchases(ctx, svc, item, homed[:m]); t.admitted != m || t.cross != 0 {
		return fmt.Errorf("emptying shard 0: %d admitted, %d crossed of %d", t.admitted, t.cross, m)
	}
	var t purchaseTally
	cross, err := cl.measure(ctx, func() (int, error) {
		t = capPurchases(ctx, svc, item, homed[m:])
		if t.cross != m {
			return 0, fmt.Errorf("%d of %d purchases crossed shards", t.cross, m)
		}
		return t.admitted, t.err()
	})
	if err != nil {
		return err
	}
	rep.add(row{Key: k + "_cross_cpu_us", Figure: title + "Redis CPU per cross-shard purchase (µs)", Value: cross.cpuUS,
		Baseline: "a steady admission (home shard)", Base: steadyUS,
		Note: fmt.Sprintf("%d buyers homed on an empty shard: hold (admit.lua's general path), take.lua on the next shard, settle.lua "+
			"at home: three scripts on two masters or one; %s; ECPU estimate %.1f (CPU over a SET's)", m, cross.note(), cross.cpuUS/setUS)})
	return nil
}

// capManyItems measures 64 items of one shard each, bought at random.
func capManyItems(ctx context.Context, cl *capCluster, svc *seckill.Service, rep *report, sz capSizes, base float64) error {
	const items = 64
	names := make([]string, items)
	for i := range names {
		names[i] = "many-" + strconv.Itoa(i)
		if err := capPreheat(ctx, svc, names[i], seckill.MaxStock, 1, 1); err != nil {
			return err
		}
	}
	users := capUsers("many", sz.steady)
	var t purchaseTally
	res, err := cl.measure(ctx, func() (int, error) {
		t = capPurchasesOf(ctx, svc, capCallers, func(i int) string { return names[i%items] }, users)
		return t.admitted, t.err()
	})
	if err != nil {
		return err
	}
	rep.add(row{Key: "cap_items64_cpu_us", Figure: "capacity, 64 items of 1 shard each: Redis CPU per admission, all masters (µs)", Value: res.cpuUS,
		Baseline: "one item, 1 stock shard", Base: base, Note: fmt.Sprintf("%d new buyers over the items in turn; %s", sz.steady, res.note())})
	perCore := 1e6 / res.cpuUS
	rep.add(row{Key: "cap_items64_cluster_admissions_per_s", Figure: "capacity, 64 items: admissions/s of the " + strconv.Itoa(capMasters) + " masters when the busiest is at one core",
		Value: perCore / res.busiestShare(), Baseline: "one item, 1 stock shard, the same", Base: 1e6 / base,
		Note: fmt.Sprintf("busiest master's share %.2f (64 items' slots over %d masters)", res.busiestShare(), capMasters)})
	return nil
}

func capPreheat(ctx context.Context, svc *seckill.Service, item string, stock int64, shards, limit int) error {
	_, err := svc.Preheat(ctx, seckill.Sale{ItemID: item, Stock: stock, Shards: shards, PerUserLimit: limit,
		EndsAt: time.Now().Add(time.Hour)})
	return err
}

func capUsers(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + "-u" + strconv.Itoa(i)
	}
	return out
}

// capHomed returns count user ids whose home shard of item is 0.
func capHomed(item string, shards, count int) []string {
	out := make([]string, 0, count)
	for i := 0; len(out) < count; i++ {
		u := item + "-h" + strconv.Itoa(i)
		if delayq.ShardOf(u, shards) == 0 {
			out = append(out, u)
		}
	}
	return out
}

// purchaseTally counts a batch of purchase attempts by outcome.
type purchaseTally struct {
	admitted, cross, soldOut int
	errs                     []error
}

func (t purchaseTally) err() error { return errors.Join(t.errs[:min(len(t.errs), 3)]...) }

func capPurchases(ctx context.Context, svc *seckill.Service, item string, users []string) purchaseTally {
	return capPurchasesOf(ctx, svc, capCallers, func(int) string { return item }, users)
}

// capPurchasesOf has each user buy one unit of itemOf(its index), callers
// at a time.
func capPurchasesOf(ctx context.Context, svc *seckill.Service, callers int, itemOf func(int) string, users []string) purchaseTally {
	var (
		next                     atomic.Int64
		admitted, cross, soldOut atomic.Int64
		mu                       sync.Mutex
		t                        purchaseTally
		wg                       sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(users) {
					return
				}
				p, err := svc.Purchase(ctx, itemOf(i), users[i], 1)
				switch {
				case err == nil:
					admitted.Add(1)
					if p.Shard != p.Home {
						cross.Add(1)
					}
				case errors.Is(err, seckill.ErrSoldOut):
					soldOut.Add(1)
				default:
					mu.Lock()
					t.errs = append(t.errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	t.admitted, t.cross, t.soldOut = int(admitted.Load()), int(cross.Load()), int(soldOut.Load())
	return t
}

// capSets writes n SETs of 100 bytes to distinct keys, capCallers at a
// time.
func capSets(ctx context.Context, cc *redis.ClusterClient, n int) (int, error) {
	val := strings.Repeat("v", 100)
	var (
		next atomic.Int64
		bad  atomic.Value
		wg   sync.WaitGroup
	)
	for range capCallers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := cc.Set(ctx, "cap:set:"+strconv.Itoa(i), val, 0).Err(); err != nil {
					bad.Store(err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := bad.Load().(error); err != nil {
		return 0, err
	}
	return n, nil
}

// capCluster reads every master of the cluster directly: CPU, command
// statistics, bytes moved.
type capCluster struct {
	c      *redistest.Cluster
	client *redis.ClusterClient
	nodes  []*redis.Client
	addrs  []string
	// idle is each node's CPU seconds a second with nothing to do (the
	// cluster bus, serverCron), taken off every measurement.
	idle []float64
}

func newCapCluster(ctx context.Context, c *redistest.Cluster, cc *redis.ClusterClient) (*capCluster, error) {
	cl := &capCluster{c: c, client: cc, addrs: c.Masters()}
	for _, a := range cl.addrs {
		cl.nodes = append(cl.nodes, redis.NewClient(&redis.Options{Addr: a}))
	}
	s0, err := cl.sample(ctx)
	if err != nil {
		cl.close()
		return nil, err
	}
	time.Sleep(2 * time.Second)
	s1, err := cl.sample(ctx)
	if err != nil {
		cl.close()
		return nil, err
	}
	secs := s1.at.Sub(s0.at).Seconds()
	for i := range cl.nodes {
		cl.idle = append(cl.idle, (s1.cpu[i]-s0.cpu[i])/secs)
	}
	return cl, nil
}

func (cl *capCluster) close() {
	for _, n := range cl.nodes {
		_ = n.Close()
	}
}

// capSample is the cluster's counters at one moment.
type capSample struct {
	at        time.Time
	cpu       []float64 // per master, CPU seconds (user + system)
	netBytes  float64   // every master's bytes in and out
	clientCPU float64   // this process's CPU seconds
}

func (cl *capCluster) sample(ctx context.Context) (capSample, error) {
	s := capSample{at: time.Now(), clientCPU: capProcessCPU()}
	for _, n := range cl.nodes {
		cpu, err := serverCPU(ctx, n)
		if err != nil {
			return s, err
		}
		s.cpu = append(s.cpu, cpu)
		info, err := n.Info(ctx, "stats").Result()
		if err != nil {
			return s, err
		}
		for _, f := range []string{"total_net_input_bytes", "total_net_output_bytes"} {
			v, _ := strconv.ParseFloat(infoValue(info, f), 64)
			s.netBytes += v
		}
	}
	return s, nil
}

// capResult is one measured phase, per operation.
type capResult struct {
	ops      int
	cpuUS    float64   // Redis CPU µs per op, every master, idle taken off
	nodeCPU  []float64 // each master's CPU seconds in the phase, idle taken off
	elapsed  float64
	scriptUS float64 // commandstats µs per EVALSHA
	setUS    float64 // commandstats µs per SET
	scripts  float64 // EVALSHA calls per op
	netBytes float64 // bytes in + out per op
	clientUS float64 // this process's CPU µs per op
}

// measure runs work, which reports the operations it made, and charges the
// masters' CPU in that time to them.
func (cl *capCluster) measure(ctx context.Context, work func() (int, error)) (capResult, error) {
	for _, n := range cl.nodes {
		if err := n.ConfigResetStat(ctx).Err(); err != nil {
			return capResult{}, err
		}
	}
	s0, err := cl.sample(ctx)
	if err != nil {
		return capResult{}, err
	}
	ops, werr := work()
	s1, err := cl.sample(ctx)
	if err := errors.Join(werr, err); err != nil {
		return capResult{}, err
	}
	if ops == 0 {
		return capResult{}, errors.New("no operation made")
	}
	r := capResult{ops: ops, elapsed: s1.at.Sub(s0.at).Seconds()}
	total := 0.0
	for i := range cl.nodes {
		d := max(s1.cpu[i]-s0.cpu[i]-cl.idle[i]*r.elapsed, 0)
		r.nodeCPU = append(r.nodeCPU, d)
		total += d
	}
	r.cpuUS = 1e6 * total / float64(ops)
	r.netBytes = (s1.netBytes - s0.netBytes) / float64(ops)
	r.clientUS = 1e6 * (s1.clientCPU - s0.clientCPU) / float64(ops)
	var ev, set cmdStat
	for _, n := range cl.nodes {
		st, err := commandStats(ctx, n)
		if err != nil {
			return capResult{}, err
		}
		ev.calls += st["evalsha"].calls
		ev.usec += st["evalsha"].usec
		set.calls += st["set"].calls
		set.usec += st["set"].usec
	}
	r.setUS = set.perCall()
	r.scripts = float64(ev.calls) / float64(ops)
	r.scriptUS = ev.perCall()
	return r, nil
}

// busiestShare is the busiest master's share of the phase's Redis CPU.
func (r capResult) busiestShare() float64 {
	total := 0.0
	for _, c := range r.nodeCPU {
		total += c
	}
	if total == 0 {
		return 1
	}
	return slices.Max(r.nodeCPU) / total
}

func (r capResult) note() string {
	total := 0.0
	for _, c := range r.nodeCPU {
		total += c
	}
	busy := make([]string, len(r.nodeCPU))
	for i, c := range r.nodeCPU {
		busy[i] = fmt.Sprintf("%.0f%%", 100*c/r.elapsed)
	}
	return fmt.Sprintf("%.2f s; masters busy %s of a core; %.2f EVALSHA an op at %.2f µs each (commandstats); %.0f bytes in+out an op; "+
		"busiest master %.0f%% of the CPU; this process %.0f µs CPU an op (go-redis cluster client and service)",
		r.elapsed, strings.Join(busy, "/"), r.scripts, r.scriptUS, r.netBytes, 100*r.busiestShare(), r.clientUS)
}

// placement says how the item's shards sit on the masters: how many on
// each.
func (cl *capCluster) placement(_ context.Context, item string, shards int) string {
	on := map[string]int{}
	for n := range shards {
		on[cl.c.MasterOf(delayq.KeysOf("hg:", seckill.QueueName(item), n).Tag)]++
	}
	counts := make([]string, 0, len(cl.addrs))
	for _, a := range cl.addrs {
		counts = append(counts, strconv.Itoa(on[a]))
	}
	return "shards per master " + strings.Join(counts, "/")
}

func infoValue(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// capProcessCPU is this process's CPU seconds, user and system.
func capProcessCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

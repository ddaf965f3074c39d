package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/history"
	"github.com/hourglass/hourglass/internal/toxitest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
)

// saleItem is one flash-sale item of a run.
type saleItem struct {
	id            string
	stock         int64
	limit, shards int
}

// saleLoad sends purchase requests for the item on sale now, each worker
// cycling through its buyers, and records the answers. A purchase needs no
// idempotency key: a request of unknown effect is simply made again later,
// as the app would, and the per-user limit must still hold.
type saleLoad struct {
	api     *httpAPI
	items   []saleItem
	current atomic.Int64 // index into items of the item on sale
	buyers  int
	workers int
	pause   time.Duration

	seq atomic.Int64
	mu  sync.Mutex
	// answers counts the statuses answered per item (0: no answer).
	answers map[string]map[int]int
	// admitted holds every purchase answered 202: purchase id -> item/user.
	admitted map[string]string
}

func (s *saleLoad) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				s.one(int(s.seq.Add(1)))
				select {
				case <-ctx.Done():
				case <-time.After(s.pause):
				}
			}
		})
	}
	wg.Wait()
}

func (s *saleLoad) one(i int) {
	it := s.items[s.current.Load()]
	user := fmt.Sprintf("b-%d", i%s.buyers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, raw := s.api.do(ctx, http.MethodPost, "/v1/seckill/items/"+it.id+"/purchases", user, nil, "")
	var p struct {
		ID string `json:"purchase_id"`
	}
	if status == http.StatusAccepted && (json.Unmarshal(raw, &p) != nil || p.ID == "") {
		status = 0 // a 202 we cannot read is no acknowledgment
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answers[it.id] == nil {
		s.answers[it.id] = map[int]int{}
	}
	s.answers[it.id][status]++
	if status == http.StatusAccepted {
		s.admitted[p.ID] = it.id + "/" + user
	}
}

// answerCounts shows how often each status was answered per item ("0" is
// none), and totals them.
func (s *saleLoad) answerCounts() (perItem []string, requests, acked, unknown int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		var parts []string
		for _, code := range slices.Sorted(maps.Keys(s.answers[it.id])) {
			n := s.answers[it.id][code]
			parts = append(parts, fmt.Sprintf("%d×%d", code, n))
			requests += n
			switch history.AnswerOf(code) {
			case history.Acked:
				acked += n
			case history.Unknown:
				unknown += n
			}
		}
		perItem = append(perItem, it.id+": "+strings.Join(parts, " "))
	}
	return perItem, requests, acked, unknown
}

// saleVerdict is what a settled sale shows in Redis, the system of record
// of the local stack's orders.
type saleVerdict struct {
	ordered, stock int64
	// Violations: more units ordered than stock (overStock units), buyers
	// ordered more than the limit, orders of released purchases (sold
	// twice), stock not conserved, admitted purchases missing or not
	// settled.
	overStock, overLimit, orderedReleased, unconserved, lost, unsettled int
	confirmedNoOrder                                                    int
	released                                                            int
	problems                                                            []string
}

func (v *saleVerdict) problem(format string, args ...any) {
	if len(v.problems) < 20 {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// oversold counts the ways more was sold than may be.
func (v saleVerdict) oversold() int { return v.overStock + v.overLimit + v.orderedReleased }

// judgeSale reads every item's purchases, orders and stock straight from
// Redis; a caller polls it until nothing is left unsettled.
func judgeSale(ctx context.Context, rdb *redis.Client, items []saleItem, admitted map[string]string) (saleVerdict, error) {
	store := seckill.NewStore(rdb, "hg:")
	stats, err := store.Stats(ctx)
	if err != nil {
		return saleVerdict{}, err
	}
	var v saleVerdict
	seen := map[string]seckill.Purchase{}
	for _, it := range items {
		v.stock += it.stock
		purchases, err := store.Purchases(ctx, it.id, it.shards)
		if err != nil {
			return v, err
		}
		var confirmed, reserved int64
		for _, p := range purchases {
			seen[p.ID] = p
			switch p.Status {
			case seckill.Confirmed:
				confirmed += int64(p.Quantity)
			case seckill.Released:
				v.released++
			default:
				reserved += int64(p.Quantity)
				v.unsettled++
			}
		}
		orders := map[string]bool{} // purchase ids with an order
		perUser := map[string]int{}
		var units int64
		for n := range it.shards {
			key := delayq.KeysOf("hg:", seckill.QueueName(it.id), n).Key("orders")
			recs, err := rdb.HGetAll(ctx, key).Result()
			if err != nil {
				return v, err
			}
			for order, rec := range recs {
				// "<purchase id>|<quantity>|<created ms>|<user>"
				f := strings.SplitN(rec, "|", 4)
				if len(f) != 4 {
					return v, fmt.Errorf("order %s: record %q", order, rec)
				}
				qty, _ := strconv.Atoi(f[1])
				units += int64(qty)
				perUser[f[3]] += qty
				orders[f[0]] = true
				if p, ok := seen[f[0]]; ok && p.Status == seckill.Released {
					v.orderedReleased++
					v.problem("%s: order %s of purchase %s, which was released: sold twice", it.id, order, f[0])
				}
			}
		}
		v.ordered += units
		if units > it.stock {
			v.overStock += int(units - it.stock)
			v.problem("%s: %d units ordered of a stock of %d", it.id, units, it.stock)
		}
		for user, n := range perUser {
			if n > it.limit {
				v.overLimit++
				v.problem("%s: %s ordered %d, the limit is %d", it.id, user, n, it.limit)
			}
		}
		for _, p := range purchases {
			if p.Status == seckill.Confirmed && !orders[p.ID] {
				v.confirmedNoOrder++
				v.problem("%s: purchase %s confirmed without an order", it.id, p.ID)
			}
		}
		// Stock is conserved: what is left, waiting for its order and
		// confirmed adds up to the stock.
		if left := stats[it.id].StockLeft; left+reserved+confirmed != it.stock {
			v.unconserved++
			v.problem("%s: %d left + %d reserved + %d confirmed != stock %d", it.id, left, reserved, confirmed, it.stock)
		}
	}
	for pid, what := range admitted {
		if _, ok := seen[pid]; !ok {
			v.lost++
			v.problem("purchase %s (%s) was admitted (202) but Redis has no such purchase", pid, what)
		}
	}
	return v, nil
}

// saleLead is how long an item is on sale before its phase's toxics go on.
const saleLead = 500 * time.Millisecond

// TestFaultToxiFlashSale runs flash sales on `hourglass serve` while the
// network between it and Redis misbehaves as in TestFaultToxiRedis: one
// item per phase (stock 60, 2 per buyer, 2 shards, 50 buyers, so each sells
// out under its fault), with the compensation pass running every second on
// purchases older than 3 s, so that it meets purchases whose orders the
// faults hold up. Nothing may be sold beyond stock or limit, sold twice,
// lost, or left unsettled.
func TestFaultToxiFlashSale(t *testing.T) {
	faultRun(t)
	r := newToxiRun(t, "toxiproxy flash sale", map[string]string{
		"HOURGLASS_COMPENSATION_INTERVAL": "1s", "HOURGLASS_RESERVED_TIMEOUT": "3s",
	})
	r.start()
	phases := []phase{
		{name: "clean", on: 2 * time.Second, heal: time.Second},
		{name: "replies past the read timeout", proxy: r.redisPx, on: 4 * time.Second, heal: 2 * time.Second,
			toxics: []toxitest.Toxic{toxitest.Latency(toxitest.Downstream, 1500*time.Millisecond, 300*time.Millisecond)}},
		{name: "connections cut mid-reply", proxy: r.redisPx, on: 4 * time.Second, heal: 2 * time.Second,
			toxics: []toxitest.Toxic{toxitest.LimitData(toxitest.Downstream, 512)}},
		{name: "connections reset on a reply", proxy: r.redisPx, on: 3 * time.Second, heal: 2 * time.Second, every: 250 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.ResetPeer(toxitest.Downstream, 0).On(0.3)}},
		{name: "redis blackholed", proxy: r.redisPx, on: 10 * time.Second, heal: 4 * time.Second,
			toxics: []toxitest.Toxic{toxitest.Blackhole(toxitest.Upstream), toxitest.Blackhole(toxitest.Downstream)}},
	}
	api := newHTTPAPI(r.addr)
	s := &saleLoad{api: api, buyers: 50, workers: 4, pause: 60 * time.Millisecond,
		answers: map[string]map[int]int{}, admitted: map[string]string{}}
	ends := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for i := range phases {
		it := saleItem{id: fmt.Sprintf("sale-%d", i+1), stock: 60, limit: 2, shards: 2}
		s.items = append(s.items, it)
		body := fmt.Sprintf(`{"stock":%d,"per_user_limit":%d,"shards":%d,"ends_at":%q}`, it.stock, it.limit, it.shards, ends)
		status, raw := api.do(context.Background(), http.MethodPut, "/v1/seckill/items/"+it.id, "", map[string]string{"X-Admin-Token": "dev-admin"}, body)
		if status != http.StatusOK {
			t.Fatalf("preheat %s: %d %s", it.id, status, raw)
		}
	}
	// Each phase sells its own item: the load turns to it shortly before
	// the toxics go on, so that the fault meets a sale under way (stock
	// left, orders being made).
	for i := range phases {
		phases[i].begin = func() {
			s.current.Store(int64(i))
			time.Sleep(saleLead)
		}
	}

	began := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { s.run(ctx); close(loaded) }()
	runPhases(t, began, redisConnections(t, r.redis), phases)
	stop()
	<-loaded

	rdb := r.redis.Client(t)
	s.mu.Lock()
	admitted := s.admitted
	s.mu.Unlock()
	var v saleVerdict
	var err error
	settleStart := time.Now()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		v, err = judgeSale(context.Background(), rdb, s.items, admitted)
		if err == nil && v.unsettled == 0 {
			t.Logf("%s: settled %s after the load", r.name, time.Since(settleStart).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not settled after 90s: %d purchases still reserved (%v)", r.name, v.unsettled, err)
			break
		}
	}
	answers, requests, acked, unknown := s.answerCounts()
	for _, a := range answers {
		t.Logf("%s: API answers %s", r.name, a)
	}
	t.Logf("%s: %d units ordered of %d in stock over %d items; %d purchases released; %d admitted purchases absent; %d unsettled; "+
		"%d confirmed without an order; %d items whose stock is not conserved", r.name, v.ordered, v.stock, len(s.items),
		v.released, v.lost, v.unsettled, v.confirmedNoOrder, v.unconserved)
	sort.Strings(v.problems)
	if v.lost+v.unsettled+v.confirmedNoOrder+v.unconserved > 0 {
		t.Errorf("%s: purchases lost %d, unsettled %d, confirmed without an order %d, items unconserved %d:\n  %s", r.name,
			v.lost, v.unsettled, v.confirmedNoOrder, v.unconserved, strings.Join(v.problems, "\n  "))
	} else if v.oversold() > 0 {
		t.Logf("%s: oversold:\n  %s", r.name, strings.Join(v.problems, "\n  "))
	}
	report(t, r.name, r.tp, counts{requests: requests, acked: acked, unknown: unknown, lost: v.lost, oversold: v.oversold()})
	if v.ordered == 0 || acked == 0 {
		t.Errorf("%s: %d ordered, %d admitted: the run proved nothing", r.name, v.ordered, acked)
	}
	t.Logf("%s: run took %s", r.name, time.Since(began).Round(100*time.Millisecond))
}

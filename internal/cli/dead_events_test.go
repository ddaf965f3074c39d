package cli

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/seckill"
)

type deadList struct {
	Jobs []struct {
		Queue string `json:"queue"`
		Shard int    `json:"shard"`
		ID    string `json:"id"`
	} `json:"jobs"`
}

func (d deadList) has(queue string, shard int, id string) bool {
	return slices.ContainsFunc(d.Jobs, func(j struct {
		Queue string `json:"queue"`
		Shard int    `json:"shard"`
		ID    string `json:"id"`
	}) bool {
		return j.Queue == queue && j.Shard == shard && j.ID == id
	})
}

// deadOrderEvent sells one unit of item to a buyer homed on shard home,
// makes the order, and lets its order.created event die on that shard, as
// the local consumer does once every delivery failed. It returns the job.
func deadOrderEvent(t *testing.T, rdb *redis.Client, clk clock.Clock, item string, shards, home int) string {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	store := seckill.NewStore(rdb, "hg:")
	svc, err := seckill.NewService(seckill.Config{Store: store, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	if _, err := svc.Preheat(ctx, seckill.Sale{ItemID: item, Stock: int64(2 * shards), Shards: shards, EndsAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	user := ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprintf("buyer-%d", i); delayq.ShardOf(u, shards) == home {
			user = u
		}
	}
	p, err := svc.Purchase(ctx, item, user, 1)
	if err != nil {
		t.Fatal(err)
	}
	proc := seckill.NewOrderProcessor(store, ledger.NewRedisOrders(rdb, "hg:"), clk, quiet)
	if err := proc.Process(ctx, item, p.Shard, seckill.OrderJobID(p)); err != nil {
		t.Fatal(err)
	}
	q, err := store.Queue(item, shards)
	if err != nil {
		t.Fatal(err)
	}
	now = clk.Now()
	c, err := q.Claim(ctx, home, now, time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range c.Jobs {
		if strings.HasPrefix(j.ID, "ev|") {
			if err := q.Kill(ctx, home, j.ID, c.Lease, now); err != nil {
				t.Fatal(err)
			}
			return j.ID
		}
	}
	t.Fatalf("no order event of %s on shard %d: %+v", item, home, c.Jobs)
	return ""
}

// TestDeadOrderEventsOfEarlierSales: `hourglass dead` still lists and
// requeues the dead order events of an item preheated again (with fewer
// shards: the dead event is on a shard the new sale does not use), of an
// item long over (it is not forgotten while its dead set holds a job; once
// requeued, delivered and its queue empty, it is), and of the events queue.
func TestDeadOrderEventsOfEarlierSales(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	env := map[string]string{"REDIS_URL": rs.URL(), "HOURGLASS_LOG_LEVEL": "error"}
	ctx := context.Background()

	t.Log("preheated again with fewer shards: the dead event of shard 1 is still listed, and requeued")
	phone := deadOrderEvent(t, rdb, clock.System{}, "phone", 2, 1)
	ok(t, env, "preheat", "phone", "--stock", "3", "--ends", "2h", "--json")
	var dead deadList
	okJSON(t, env, &dead, "dead", "list", "--json")
	if !dead.has("sk:phone", 1, phone) {
		t.Fatalf("dead list after the re-preheat: %+v, want %s on sk:phone shard 1", dead, phone)
	}
	var moved struct {
		Requeued []string `json:"requeued"`
		NotDead  []string `json:"not_dead"`
	}
	okJSON(t, env, &moved, "dead", "requeue", "--queue", "sk:phone", phone, "--json")
	if !slices.Equal(moved.Requeued, []string{phone}) || len(moved.NotDead) != 0 {
		t.Fatalf("requeue: %+v", moved)
	}

	t.Log("a sale over for 10 days: not forgotten while its event is dead")
	long := clock.NewFake(time.Now().UTC().Add(-10 * 24 * time.Hour))
	old := deadOrderEvent(t, rdb, long, "old", 1, 0)
	ok(t, env, "reconcile")
	dead = deadList{}
	okJSON(t, env, &dead, "dead", "list", "--queue", "sk:old", "--json")
	if !dead.has("sk:old", 0, old) {
		t.Fatalf("dead list of the sale long over: %+v, want %s", dead, old)
	}
	okJSON(t, env, &moved, "dead", "requeue", "--queue", "sk:old", "--all", "--json")
	if !slices.Equal(moved.Requeued, []string{old}) {
		t.Fatalf("requeue --all: %+v", moved)
	}
	// Delivered (as the poller and consumer would: the event, and the
	// order job, done with already): its queue is empty.
	q, _ := seckill.NewStore(rdb, "hg:").Queue("old", 1)
	c, err := q.Claim(ctx, 0, time.Now(), time.Minute, 10)
	if err != nil || !slices.ContainsFunc(c.Jobs, func(j delayq.Job) bool { return j.ID == old }) {
		t.Fatalf("claim of the requeued event: %+v %v", c, err)
	}
	if _, err := q.AckLease(ctx, 0, c.Lease); err != nil {
		t.Fatal(err)
	}
	out := ok(t, env, "reconcile")
	if !strings.Contains(out, `"unregistered": 1`) {
		t.Fatalf("reconcile once the queue is empty:\n%s\nwant the item forgotten", out)
	}
	if r := hg(t, env, "dead", "list", "--queue", "sk:old"); r.code == 0 {
		t.Fatalf("sk:old still listed once forgotten: %s", r.stdout)
	}

	t.Log("the events queue")
	ev := "old|ev|payment.refund_required|1795946400000|9.99|CNY|evt_1|pu_01KB0000000000000000000000|1|0|buyer"
	if err := rdb.ZAdd(ctx, "hg:{dq:"+seckill.EventsQueue+":0}:dead", redis.Z{Score: 1, Member: ev}).Err(); err != nil {
		t.Fatal(err)
	}
	dead = deadList{}
	okJSON(t, env, &dead, "dead", "list", "--json")
	if !dead.has(seckill.EventsQueue, 0, ev) {
		t.Fatalf("dead list: %+v, want the events queue's job", dead)
	}
	okJSON(t, env, &moved, "dead", "requeue", "--queue", seckill.EventsQueue, "--all", "--json")
	if !slices.Equal(moved.Requeued, []string{ev}) {
		t.Fatalf("requeue of the events queue: %+v", moved)
	}
}

package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ops"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// sqsStandIn is the work queue in the test: each batch the poller hands over
// is delivered at once, 10 messages an SQS event, to the consumer's handler;
// the messages it reports failed go back to the poller as refused, which
// re-schedules them, as SQS would deliver them again.
type sqsStandIn struct {
	handler *consumer.Handler

	mu     sync.Mutex
	shards map[string]map[int]bool // queue -> shards jobs came from
	failed int
}

func (d *sqsStandIn) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	var refused []delayq.Job
	for start := 0; start < len(jobs); start += 10 {
		batch := jobs[start:min(start+10, len(jobs))]
		ev := events.SQSEvent{}
		byMsg := map[string]delayq.Job{}
		for i, j := range batch {
			body, err := json.Marshal(j)
			if err != nil {
				return jobs[start:], err
			}
			id := fmt.Sprintf("msg-%s-%d", j.ID, i)
			byMsg[id] = j
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: id, Body: string(body), EventSource: "aws:sqs"})
		}
		resp, err := d.handler.Handle(ctx, ev)
		if err != nil {
			return jobs[start:], err
		}
		for _, f := range resp.BatchItemFailures {
			refused = append(refused, byMsg[f.ItemIdentifier])
		}
		d.mu.Lock()
		d.failed += len(resp.BatchItemFailures)
		for _, j := range batch {
			if d.shards[j.Queue] == nil {
				d.shards[j.Queue] = map[int]bool{}
			}
			d.shards[j.Queue][j.Shard] = true
		}
		d.mu.Unlock()
	}
	return refused, nil
}

// TestWithdrawalsOnCluster runs the AWS-shaped withdrawal pipeline (API
// service, poller acking what the work queue accepts, consumer Lambda handler,
// payout provider, finance webhook) on a 3-master Redis Cluster reached
// through REDIS_URL with cluster=true, the withdrawal queue split in 6 shards
// over the masters; then the operator stats and a flash-sale order on the
// same wiring. No command may span hash slots.
func TestWithdrawalsOnCluster(t *testing.T) {
	const (
		shards    = 6
		users     = 50
		perUser   = 4
		prefix    = "hg:"
		statsItem = "stats-item"
	)
	ctx := context.Background()
	c := redistest.StartCluster(t, 3)
	masters := map[string][]int{}
	for n := range shards {
		m := c.MasterOf(delayq.KeysOf(prefix, withdrawal.QueueName, n).Tag)
		masters[m] = append(masters[m], n)
	}
	if len(masters) < 2 {
		t.Fatalf("withdrawal shards per master %v: want them on at least 2 masters", masters)
	}
	t.Logf("withdrawal shards per master: %v", masters)

	prov := fakes.NewProvider(t, "pay-secret")
	fin := fakes.NewFinance(t, "fin-secret")
	for k, v := range map[string]string{
		"REDIS_URL": c.URL(), "HOURGLASS_REDIS_PREFIX": prefix, "HOURGLASS_QUEUE_SHARDS": strconv.Itoa(shards),
		"HOURGLASS_AUTH": "jwt", "PAYOUT_URL": prov.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": fin.URL, "FINANCE_SIGNING_SECRET": "fin-secret", "FINANCE_TOPIC_ARN": "",
		"HOURGLASS_RETRY_BASE": "20ms", "HOURGLASS_RETRY_CAP": "40ms", "HOURGLASS_MAX_ATTEMPTS": "5",
		"HOURGLASS_ORDER_BACKLOG": "50000",
		// The functions' client passes the ElastiCache Serverless guard.
		"HOURGLASS_REDIS_COMMANDS": redistest.ServerlessCommands,
		// The operator role whose session events/admin-stats.json names.
		"HOURGLASS_ADMIN_ROLE_ARNS": "arn:aws:iam::123456789012:role/hourglass-operator",
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Local)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("app.Connect(%s) gave a %T, want a cluster client", c.URL(), rdb)
	}
	c.Watch(rdb)
	redistest.AssertNoRefusals(t)
	a, err := app.New(cfg, app.NewLogger(io.Discard, cfg.SlogLevel()), rdb)
	if err != nil {
		t.Fatal(err)
	}
	provider, err := a.Provider(false)
	if err != nil {
		t.Fatal(err)
	}
	notifier, err := a.Notifier(ctx, os.Stdout, false)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := a.Processor(provider, notifier)
	if err != nil {
		t.Fatal(err)
	}
	sqs := &sqsStandIn{handler: a.Consumer(proc, false), shards: map[string]map[int]bool{}}
	p, err := a.Poller(sqs, true)
	if err != nil {
		t.Fatal(err)
	}

	// 200 withdrawals of 50 users, due at once, created concurrently.
	type made struct{ user, id string }
	created := make([]made, users*perUser)
	var g errgroup.Group
	g.SetLimit(20)
	for i := range created {
		g.Go(func() error {
			user := "user-" + strconv.Itoa(i%users)
			body := fmt.Sprintf(`{"amount":"%d.%02d","currency":"CNY","destination":"bank_6222","delay_seconds":0}`, 10+i, i%100)
			if i%4 == 0 { // due in an hour, then rescheduled to now: the script runs on the shard's slot
				body = strings.Replace(body, `"delay_seconds":0`, `"delay_seconds":3600`, 1)
			}
			cr, err := httpapi.CreateWithdrawal(ctx, a.Service, user, "key-"+strconv.Itoa(i), []byte(body))
			if err != nil {
				return fmt.Errorf("create %d for %s: %w", i, user, err)
			}
			if i%4 == 0 {
				if _, err := httpapi.RescheduleWithdrawal(ctx, a.Service, user, cr.ID, []byte(`{"delay_seconds":0}`), cr.ETag()); err != nil {
					return fmt.Errorf("reschedule %d for %s: %w", i, user, err)
				}
			}
			created[i] = made{user: user, id: cr.ID}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	// Poller rounds until every withdrawal is paid and reported.
	began := time.Now()
	rounds := 0
	drain := func(done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !done(); rounds++ {
			if time.Now().After(deadline) {
				t.Fatalf("not done after %d poller rounds: provider paid %d, finance heard of %d", rounds, prov.Paid(), len(fin.IDs()))
			}
			if _, err := p.Round(ctx); err != nil {
				t.Logf("round %d: %v", rounds, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	drain(func() bool {
		if prov.Paid() < len(created) || len(fin.IDs()) < len(created) {
			return false
		}
		for _, m := range created {
			w, err := a.Service.Get(ctx, m.user, m.id)
			if err != nil || !w.Status.Final() || w.Untold() {
				return false
			}
		}
		return true
	})
	t.Logf("%d withdrawals paid in %d poller rounds, %s; %d deliveries failed and came again",
		len(created), rounds, time.Since(began).Round(time.Millisecond), sqs.failed)

	heard := fin.IDs()
	for _, m := range created {
		w, err := a.Service.Get(ctx, m.user, m.id)
		if err != nil || w.Status != withdrawal.Paid || w.Attempts != 1 || w.PayoutID != "po_"+m.id ||
			w.Shard != delayq.ShardOf(m.user, shards) {
			t.Errorf("withdrawal %s of %s: %+v, %v; want paid once on shard %d", m.id, m.user, w, err, delayq.ShardOf(m.user, shards))
		}
		if calls, paid := prov.Calls(m.id); calls != 1 || !paid {
			t.Errorf("provider: %s called %d times (paid %v), want once", m.id, calls, paid)
		}
		msgs := fin.Of(m.id)
		if len(msgs) == 0 || heard[m.id] != len(msgs) {
			t.Errorf("finance got %d messages about %s", len(msgs), m.id)
			continue
		}
		for _, msg := range msgs {
			if msg.Status != withdrawal.Paid || msg.PayoutID != "po_"+m.id {
				t.Errorf("finance message about %s: %+v", m.id, msg)
			}
		}
	}
	if prov.Paid() != len(created) || prov.TotalCalls() != len(created) || len(heard) != len(created) {
		t.Errorf("provider paid %d in %d calls, finance heard of %d; want %d each", prov.Paid(), prov.TotalCalls(), len(heard), len(created))
	}
	wantShards := map[int]bool{}
	for _, m := range created {
		wantShards[delayq.ShardOf(m.user, shards)] = true
	}
	if got := sqs.shards[withdrawal.QueueName]; len(got) != len(wantShards) {
		t.Errorf("payout jobs came from shards %v, want %v", got, wantShards)
	}
	if n, err := a.Ledger.(*ledger.Redis).PurgeExpiredKeys(ctx, time.Now().Add(48*time.Hour)); err != nil || n != len(created) {
		t.Errorf("purge of expired idempotency keys: %d, %v; want %d", n, err, len(created))
	}

	// Operator stats over the cluster, with a flash-sale item on sale: 3 of
	// its 10 units admitted, their order jobs due.
	sale := seckill.Sale{ItemID: statsItem, Stock: 10, Shards: 4, PerUserLimit: 1, EndsAt: time.Now().Add(time.Hour)}
	if _, err := a.Seckill.Preheat(ctx, sale); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"buyer-a", "buyer-b", "buyer-c"} {
		if _, err := a.Seckill.Purchase(ctx, statsItem, u, 1); err != nil {
			t.Fatalf("purchase of %s: %v", u, err)
		}
	}
	// The app lists items' queues anew at most once a second.
	snap := adminStats(t, a)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, ok := snap.Queues[seckill.QueueName(statsItem)]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
		snap = adminStats(t, a)
	}
	if got := snap.Queues[withdrawal.QueueName]; got != (delayq.Stats{}) {
		t.Errorf("stats of the withdrawal queue %+v, want it empty", got)
	}
	if got, want := snap.Items[statsItem], (seckill.ItemStats{StockLeft: 7, Admitted: 3}); got != want {
		t.Errorf("stats of %s %+v, want %+v", statsItem, got, want)
	}
	if got := snap.Queues[seckill.QueueName(statsItem)]; got.Due != 3 || got.Inflight != 0 || got.Dead != 0 {
		t.Errorf("stats of the order queue %+v, want 3 due", got)
	}

	// The same poller and consumer make the orders, and publish their
	// order.created events (queued on the same shards as the orders are made).
	oq, err := a.Items.Queue(statsItem, 4)
	if err != nil {
		t.Fatal(err)
	}
	drain(func() bool {
		st, err := a.Items.Stats(ctx)
		qs, qerr := oq.Stats(ctx, time.Now())
		return err == nil && qerr == nil && st[statsItem].Confirmed == 3 && qs == (delayq.Stats{})
	})
	snap = adminStats(t, a)
	if got, want := snap.Items[statsItem], (seckill.ItemStats{StockLeft: 7, Admitted: 3, Confirmed: 3}); got != want {
		t.Errorf("stats of %s after the orders %+v, want %+v", statsItem, got, want)
	}
	if got := snap.Queues[seckill.QueueName(statsItem)]; got != (delayq.Stats{}) {
		t.Errorf("stats of the order queue after the orders %+v, want it empty", got)
	}
	c.AssertNoCrossSlot(t)
}

// adminStats asks GET /v1/admin/stats through the Lambda handler of the
// router, with the IAM-authorized fixture event.
func adminStats(t *testing.T, a *app.App) ops.Snapshot {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", "admin-stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := lambda.NewHandler(a.Router().Serve).Invoke(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/admin/stats: %d %s", resp.StatusCode, resp.Body)
	}
	var snap ops.Snapshot
	if err := json.Unmarshal([]byte(resp.Body), &snap); err != nil {
		t.Fatalf("stats body %s: %v", resp.Body, err)
	}
	return snap
}

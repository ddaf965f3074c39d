package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/dispatch"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/seckill"
)

// fixtureItem is the item id the seckill fixtures carry; tests put their own
// in its place.
const fixtureItem = "phone-2026"

// fixturePurchase is the purchase id of events/consumer-sqs-order.json; no
// test ever makes it. fixtureOrderJob is the fixture's job id: the purchase,
// its quantity, its buyer's home shard and its buyer.
const (
	fixturePurchase = "pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z"
	fixtureOrderJob = fixturePurchase + "|1|0|" + fixtureUser
)

// The sale window of events/seckill-preheat.json.
var (
	fixtureStarts = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	fixtureEnds   = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ---- the app under test, with the flash sale on a fake clock ----

// saleStack is a stack whose router serves the flash sale of its own
// seckill.Service, on a fake clock, over the app's item store.
type saleStack struct {
	*stack
	clk *clock.Fake
}

// newSaleStack configures the app from the environment (as newStack does)
// and builds a router of the flash-sale routes whose service runs on a fake
// clock; tweak may change the service's config.
func newSaleStack(t *testing.T, redisURL string, vars map[string]string, clk *clock.Fake, tweak func(*seckill.Config)) *saleStack {
	t.Helper()
	s := newStack(t, redisURL, vars)
	cfg := seckill.Config{
		Store: s.app.Items, Clock: clk, Logger: s.app.Log,
		Backlog: s.cfg.OrderBacklog, Memory: s.cfg.SoldOutMemory,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	svc, err := seckill.NewService(cfg)
	if err != nil {
		t.Fatalf("seckill service: %v", err)
	}
	roles, err := httpapi.ParseAdminRoles(s.cfg.AdminRoleARNs)
	if err != nil {
		t.Fatal(err)
	}
	rt := httpapi.NewRouter(httpapi.Auth{Mode: httpapi.AuthMode(s.cfg.Auth), AdminToken: string(s.cfg.AdminToken), AdminRoles: roles},
		s.app.Log, 5*time.Second)
	httpapi.Seckill{Service: svc}.Register(rt)
	fs := *s
	fs.rt, fs.h = rt, lambda.NewHandler(rt.Serve)
	return &saleStack{stack: &fs, clk: clk}
}

// ---- events ----

// rawItemFixture is a seckill fixture naming item in rawPath,
// requestContext.http.path and pathParameters.
func rawItemFixture(t *testing.T, name, item string) []byte {
	t.Helper()
	raw := rawFixture(t, name)
	if n := bytes.Count(raw, []byte(fixtureItem)); n != 3 {
		t.Fatalf("%s names %s %d times, want 3 (rawPath, http.path, pathParameters)", name, fixtureItem, n)
	}
	enc, err := json.Marshal(item)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(raw, []byte(fixtureItem), enc[1:len(enc)-1])
}

// itemEvent decodes a seckill fixture for item and applies mods.
func itemEvent(t *testing.T, name, item string, mods ...mod) events.APIGatewayV2HTTPRequest {
	t.Helper()
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(rawItemFixture(t, name, item), &ev); err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	for _, m := range mods {
		m(&ev)
	}
	return ev
}

// itemPayload is itemEvent, encoded.
func itemPayload(t *testing.T, name, item string, mods ...mod) []byte {
	t.Helper()
	b, err := json.Marshal(itemEvent(t, name, item, mods...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// saleJSON is a preheat body.
func saleJSON(stock int, starts, ends time.Time, limit, shards int) string {
	return fmt.Sprintf(`{"stock":%d,"starts_at":%q,"ends_at":%q,"per_user_limit":%d,"shards":%d}`,
		stock, starts.UTC().Format(time.RFC3339Nano), ends.UTC().Format(time.RFC3339Nano), limit, shards)
}

// ---- responses ----

var stateFields = []string{"currency", "ends_at", "item_id", "payment_window_seconds", "per_user_limit", "price", "starts_at", "status",
	"stock_left"}

var purchaseFields = []string{"amount", "created_at", "currency", "item_id", "order_id", "pay_by", "purchase_id", "quantity", "status"}

// wantState checks a 200 item state against want.
func wantState(t *testing.T, resp events.APIGatewayV2HTTPResponse, want seckill.State) {
	t.Helper()
	wantJSON(t, resp, 200)
	var got seckill.State
	if diff := cmp.Diff(stateFields, decodeStrict(t, resp.Body, &got)); diff != "" {
		t.Errorf("item state fields (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("item state (-want +got):\n%s", diff)
	}
}

// wantPurchase checks a purchase body: every field, its id and time format.
func wantPurchase(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int) httpapi.PurchaseView {
	t.Helper()
	wantJSON(t, resp, status)
	var v httpapi.PurchaseView
	if diff := cmp.Diff(purchaseFields, decodeStrict(t, resp.Body, &v)); diff != "" {
		t.Errorf("purchase fields (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(v.PurchaseID, "pu_") || len(v.PurchaseID) != len(fixturePurchase) {
		t.Errorf("purchase_id %q", v.PurchaseID)
	}
	if !apiTime.MatchString(v.CreatedAt) {
		t.Errorf("created_at %q, want RFC 3339 UTC with milliseconds", v.CreatedAt)
	}
	return v
}

func strPtr(s string) *string { return &s }

func int64Ptr(n int64) *int64 { return &n }

// ---- driving the sale ----

// open preheats item through the router: live since a minute ago, for an hour.
func (s *saleStack) open(t *testing.T, item string, stock, limit, shards int) seckill.State {
	t.Helper()
	now := s.clk.Now()
	starts, ends := now.Add(-time.Minute).Truncate(time.Millisecond), now.Add(time.Hour).Truncate(time.Millisecond)
	resp := s.invoke(t, itemPayload(t, "seckill-preheat", item, body(saleJSON(stock, starts, ends, limit, shards))))
	want := seckill.State{ItemID: item, Status: seckill.Live, StockLeft: int64(stock),
		StartsAt: clock.Format(starts), EndsAt: clock.Format(ends), PerUserLimit: limit}
	wantState(t, resp, want)
	return want
}

// buy purchases item as user (the JWT sub) with mods and wants 202 reserved.
func (s *stack) buy(t *testing.T, item, user string, mods ...mod) httpapi.PurchaseView {
	t.Helper()
	v := wantPurchase(t, s.invoke(t, itemPayload(t, "seckill-purchase", item, append([]mod{sub(user)}, mods...)...)), 202)
	if v.Status != seckill.Reserved || v.ItemID != item || v.OrderID != nil {
		t.Errorf("admitted purchase %+v, want reserved, of %s, without order", v, item)
	}
	return v
}

// mine reads user's purchase of item and wants 200.
func (s *stack) mine(t *testing.T, item, user string) httpapi.PurchaseView {
	t.Helper()
	return wantPurchase(t, s.invoke(t, itemPayload(t, "seckill-purchase-me", item, sub(user))), 200)
}

// state reads item's public state and wants 200.
func (s *stack) state(t *testing.T, item string) seckill.State {
	t.Helper()
	resp := s.invoke(t, itemPayload(t, "seckill-item", item))
	wantJSON(t, resp, 200)
	var st seckill.State
	if diff := cmp.Diff(stateFields, decodeStrict(t, resp.Body, &st)); diff != "" {
		t.Errorf("item state fields (-want +got):\n%s", diff)
	}
	return st
}

// orderFixture is events/consumer-sqs-order.json.
func orderFixture(t *testing.T) ([]byte, events.SQSEvent) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", "consumer-sqs-order.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("consumer-sqs-order.json: %v", err)
	}
	if len(ev.Records) != 1 {
		t.Fatalf("consumer-sqs-order.json has %d records, want 1", len(ev.Records))
	}
	return raw, ev
}

// consume runs an SQS event through the app's consumer, as the Lambda
// runtime would, and returns the batch item failures.
func (s *stack) consume(t *testing.T, payload []byte, ack bool) []events.SQSBatchItemFailure {
	t.Helper()
	h := s.app.Consumer(nil, ack) // no payout job in these batches
	out, err := lambda.NewHandler(h.Handle).Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("consumer response %s: %v", out, err)
	}
	return resp.BatchItemFailures
}

// makeOrders claims every due order job of item (one shard) at now and feeds
// them to the consumer as one SQS batch shaped like the order fixture, with
// acks. It returns the jobs.
func (s *stack) makeOrders(t *testing.T, item string, now time.Time) []delayq.Job {
	t.Helper()
	ctx := context.Background()
	q, err := s.app.Items.Queue(item, 1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, 0, now, time.Minute, 10)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(c.Jobs) == 0 {
		t.Fatalf("no order job of %s is due", item)
	}
	_, tmpl := orderFixture(t)
	if failed := s.consume(t, sqsBatch(t, c.Jobs, tmpl.Records[0], "order"), true); len(failed) != 0 {
		t.Fatalf("order jobs failed: %v\n%s", failed, s.log.String())
	}
	s.drainJobs(t, q, tmpl.Records[0])
	st, err := q.Stats(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Only the expiry jobs of orders awaiting payment wait, due later.
	if st.DueNow != 0 || st.Inflight != 0 || st.Dead != 0 {
		t.Errorf("order queue after the consumer: %+v, want nothing due or in flight (every job acked)", st)
	}
	return c.Jobs
}

// sqsBatch is the SQS event of jobs, one message each shaped like rec, with
// message ids "<prefix>-<nn>".
func sqsBatch(t *testing.T, jobs []delayq.Job, rec events.SQSMessage, prefix string) []byte {
	t.Helper()
	ev := events.SQSEvent{}
	for i, j := range jobs {
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		r := rec
		r.MessageId, r.Body = fmt.Sprintf("%s-%02d", prefix, i), string(b)
		ev.Records = append(ev.Records, r)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return payload
}

// drainJobs feeds every job of q due by the system clock (the order events
// the consumer queued as it made the orders, their expiry jobs once due) to
// the consumer, one SQS message each shaped like rec, until none is left.
func (s *stack) drainJobs(t *testing.T, q *delayq.Queue, rec events.SQSMessage) {
	t.Helper()
	for range 10 {
		c, err := q.Claim(context.Background(), 0, time.Now(), time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Jobs) == 0 {
			return
		}
		if failed := s.consume(t, sqsBatch(t, c.Jobs, rec, "job"), true); len(failed) != 0 {
			t.Fatalf("jobs failed: %v\n%s", failed, s.log.String())
		}
	}
	t.Fatal("jobs keep coming")
}

// ---- tests ----

// TestSeckillFixtures drives every flash-sale fixture through the whole API
// (the app's router, the system clock), and the order step through the
// consumer's Lambda handler.
func TestSeckillFixtures(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)

		t.Log("PUT /v1/seckill/items/{item_id}")
		now := time.Now().UTC()
		starts, ends := now.Add(-time.Minute).Truncate(time.Second), now.Add(time.Hour).Truncate(time.Second)
		ev := itemEvent(t, "seckill-preheat", fixtureItem)
		want := `{"stock":1000,"starts_at":"2026-11-29T10:00:00Z","ends_at":"2099-01-01T00:00:00Z","per_user_limit":1,"shards":1}`
		if ev.Body != want {
			t.Fatalf("preheat fixture body %s, want %s", ev.Body, want)
		}
		live := body(strings.NewReplacer("2026-11-29T10:00:00Z", starts.Format(time.RFC3339),
			"2099-01-01T00:00:00Z", ends.Format(time.RFC3339)).Replace(ev.Body))
		resp := s.invoke(t, itemPayload(t, "seckill-preheat", fixtureItem, live))
		sale := seckill.State{ItemID: fixtureItem, Status: seckill.Live, StockLeft: 1000,
			StartsAt: clock.Format(starts), EndsAt: clock.Format(ends), PerUserLimit: 1}
		wantState(t, resp, sale)
		if id := resp.Headers["X-Request-Id"]; id != "req-1" {
			t.Errorf("X-Request-Id %q, want the event's req-1", id)
		}

		t.Log("GET /v1/seckill/items/{item_id}")
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)

		t.Log("POST /v1/seckill/items/{item_id}/purchases")
		before := time.Now().Truncate(time.Millisecond)
		resp = s.invoke(t, rawFixture(t, "seckill-purchase"))
		after := time.Now()
		bought := wantPurchase(t, resp, 202)
		if at := parseTime(t, bought.CreatedAt); at.Before(before) || at.After(after) {
			t.Errorf("created_at %s outside the request [%s, %s]", bought.CreatedAt, before, after)
		}
		wantBought := httpapi.PurchaseView{PurchaseID: bought.PurchaseID, ItemID: fixtureItem, Status: seckill.Reserved,
			Quantity: 1, CreatedAt: bought.CreatedAt}
		if diff := cmp.Diff(wantBought, bought); diff != "" {
			t.Errorf("purchase (-want +got):\n%s", diff)
		}
		sale.StockLeft = 999
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)

		t.Log("GET /v1/seckill/items/{item_id}/purchases/me, reserved")
		resp = s.invoke(t, rawFixture(t, "seckill-purchase-me"))
		if diff := cmp.Diff(bought, wantPurchase(t, resp, 200)); diff != "" {
			t.Errorf("own purchase before its order (-admitted +got):\n%s", diff)
		}
		wantItemStats(t, s, seckill.ItemStats{StockLeft: 999, Admitted: 1, Confirmed: 0})

		t.Log("the order job through the consumer")
		jobs := s.makeOrders(t, fixtureItem, time.Now())
		wantJob := delayq.Job{Kind: seckill.JobKind, Queue: seckill.QueueName(fixtureItem), Shard: 0,
			ID: fmt.Sprintf("%s|%d|0|%s", bought.PurchaseID, bought.Quantity, fixtureUser), Due: parseTime(t, bought.CreatedAt).UnixMilli()}
		if len(jobs) == 1 && jobs[0].Lease != 0 {
			wantJob.Lease = jobs[0].Lease
		}
		if diff := cmp.Diff([]delayq.Job{wantJob}, jobs); diff != "" {
			t.Errorf("order jobs (-want +claimed):\n%s", diff)
		}

		t.Log("GET /v1/seckill/items/{item_id}/purchases/me, confirmed")
		confirmed := s.mine(t, fixtureItem, fixtureUser)
		wantBought.Status, wantBought.OrderID = seckill.Confirmed, strPtr(seckill.OrderID(bought.PurchaseID))
		if diff := cmp.Diff(wantBought, confirmed); diff != "" {
			t.Errorf("own purchase after its order (-want +got):\n%s", diff)
		}
		if !strings.HasPrefix(*confirmed.OrderID, "or_") {
			t.Errorf("order_id %q", *confirmed.OrderID)
		}
		orders, ok := s.app.Orders.(*ledger.RedisOrders)
		if !ok {
			t.Fatalf("order ledger %T, want the Redis one", s.app.Orders)
		}
		rec, found, err := orders.Order(context.Background(), fixtureItem, 0, *confirmed.OrderID)
		if err != nil || !found || !strings.HasPrefix(rec, bought.PurchaseID+"|1|") || !strings.HasSuffix(rec, "|"+fixtureUser) {
			t.Errorf("order %s in the ledger: %q %v %v", *confirmed.OrderID, rec, found, err)
		}
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)
		wantItemStats(t, s, seckill.ItemStats{StockLeft: 999, Admitted: 1, Confirmed: 1})

		t.Log("events/consumer-sqs-order.json: a purchase that does not exist")
		raw, _ := orderFixture(t)
		snap := snapshot(t, s.rdb)
		if failed := s.consume(t, raw, true); len(failed) != 0 {
			t.Errorf("the fixture's job failed: %v", failed)
		}
		wantUnchanged(t, snap, snapshot(t, s.rdb))
		if diff := cmp.Diff(wantBought, s.mine(t, fixtureItem, fixtureUser)); diff != "" {
			t.Errorf("the real purchase after the fixture's job (-want +got):\n%s", diff)
		}
	})
}

// wantItemStats checks the fixture item's counters in GET /v1/admin/stats.
func wantItemStats(t *testing.T, s *stack, want seckill.ItemStats) {
	t.Helper()
	resp := s.invoke(t, rawFixture(t, "admin-stats"))
	wantJSON(t, resp, 200)
	var got struct {
		Queues map[string]delayq.Stats      `json:"queues"`
		Items  map[string]seckill.ItemStats `json:"items"`
	}
	decodeStrict(t, resp.Body, &got)
	if diff := cmp.Diff(map[string]seckill.ItemStats{fixtureItem: want}, got.Items); diff != "" {
		t.Errorf("stats items (-want +got):\n%s", diff)
	}
	if _, ok := got.Queues[seckill.QueueName(fixtureItem)]; !ok {
		t.Errorf("stats queues %v lack the item's order queue", got.Queues)
	}
}

// TestSeckillOrderFixture runs events/consumer-sqs-order.json through the
// consumer: its purchase does not exist, so the message is done with and
// nothing changes, whether the item exists or not.
func TestSeckillOrderFixture(t *testing.T) {
	raw, ev := orderFixture(t)
	job, err := dispatch.DecodeJob(ev.Records[0].Body)
	if err != nil {
		t.Fatalf("fixture body: %v", err)
	}
	want := delayq.Job{Kind: seckill.JobKind, Queue: "sk:" + fixtureItem, Shard: 0, ID: fixtureOrderJob, Due: 1795946400000}
	if diff := cmp.Diff(want, job); diff != "" {
		t.Fatalf("fixture job (-want +got):\n%s", diff)
	}
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newSaleStack(t, redisURL, nil, clock.NewFake(fixtureStarts), nil)
		for _, tc := range []struct {
			name string
			prep func(t *testing.T)
		}{
			{"unknown item", func(*testing.T) {}},
			{"item with a reserved purchase", func(t *testing.T) {
				s.open(t, fixtureItem, 10, 1, 1)
				s.buy(t, fixtureItem, "user-9")
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.prep(t)
				before := snapshot(t, s.rdb)
				for _, ack := range []bool{false, true} {
					if failed := s.consume(t, raw, ack); len(failed) != 0 {
						t.Errorf("ack=%v: the fixture's message failed: %v", ack, failed)
					}
				}
				wantUnchanged(t, before, snapshot(t, s.rdb))
			})
		}
		if v := s.mine(t, fixtureItem, "user-9"); v.Status != seckill.Reserved {
			t.Errorf("user-9's purchase is %s, want still reserved", v.Status)
		}
	})
}

// TestSeckillItemStatus walks a sale through its statuses on a fake clock,
// with the preheat fixture as it is.
func TestSeckillItemStatus(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newSaleStack(t, redisURL, nil, clock.NewFake(fixtureStarts.Add(-time.Hour)), nil)
		sale := seckill.State{ItemID: fixtureItem, Status: seckill.Upcoming, StockLeft: 1000,
			StartsAt: "2026-11-29T10:00:00.000Z", EndsAt: "2099-01-01T00:00:00.000Z", PerUserLimit: 1}
		last := seckill.State{ItemID: "last-one", Status: seckill.Upcoming, StockLeft: 1,
			StartsAt: "2026-11-29T10:00:00.000Z", EndsAt: "2099-01-01T00:00:00.000Z", PerUserLimit: 1}

		t.Log("an hour before: upcoming")
		wantState(t, s.invoke(t, rawFixture(t, "seckill-preheat")), sale)
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)
		wantState(t, s.invoke(t, itemPayload(t, "seckill-preheat", "last-one",
			body(saleJSON(1, fixtureStarts, fixtureEnds, 1, 1)))), last)
		before := snapshot(t, s.rdb)
		p := checkProblem(t, s.invoke(t, rawFixture(t, "seckill-purchase")), want{status: 409, code: "not_started"})
		if !strings.Contains(p.Detail, "2026-11-29T10:00:00.000Z") {
			t.Errorf("not_started detail %q does not say when the sale starts", p.Detail)
		}
		wantUnchanged(t, before, snapshot(t, s.rdb))

		t.Log("a millisecond before the start: upcoming")
		s.clk.Set(fixtureStarts.Add(-time.Millisecond))
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)
		checkProblem(t, s.invoke(t, rawFixture(t, "seckill-purchase")), want{status: 409, code: "not_started"})

		t.Log("at the start: live")
		s.clk.Set(fixtureStarts)
		sale.Status, last.Status = seckill.Live, seckill.Live
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)
		wantState(t, s.invoke(t, itemPayload(t, "seckill-item", "last-one")), last)
		bought := s.buy(t, fixtureItem, fixtureUser)
		if bought.CreatedAt != "2026-11-29T10:00:00.000Z" {
			t.Errorf("created_at %s, want the fake clock's 2026-11-29T10:00:00.000Z", bought.CreatedAt)
		}
		sale.StockLeft = 999
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)

		t.Log("the last unit sold: sold_out")
		s.buy(t, "last-one", "user-1")
		last.Status, last.StockLeft = seckill.SoldOut, 0
		wantState(t, s.invoke(t, itemPayload(t, "seckill-item", "last-one")), last)
		checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", "last-one", sub("user-2"))), want{status: 410, code: "sold_out"})

		t.Log("a millisecond before the end: still live")
		s.clk.Set(fixtureEnds.Add(-time.Millisecond))
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)
		s.buy(t, fixtureItem, "user-late")
		sale.StockLeft = 998

		t.Log("at the end: ended, sold out or not")
		s.clk.Set(fixtureEnds)
		sale.Status, last.Status = seckill.Ended, seckill.Ended
		wantState(t, s.invoke(t, rawFixture(t, "seckill-item")), sale)
		wantState(t, s.invoke(t, itemPayload(t, "seckill-item", "last-one")), last)
		before = snapshot(t, s.rdb)
		checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-3"))), want{status: 410, code: "ended"})
		wantUnchanged(t, before, snapshot(t, s.rdb))

		t.Log("a buyer still sees the purchase after the end")
		if diff := cmp.Diff(bought, s.mine(t, fixtureItem, fixtureUser)); diff != "" {
			t.Errorf("own purchase after the end (-admitted +got):\n%s", diff)
		}
	})
}

// TestSeckillPurchaseQuantities: quantities add up against the per-user
// limit; an empty body buys one; other spellings of a body are accepted.
func TestSeckillPurchaseQuantities(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newSaleStack(t, redisURL, nil, clock.NewFake(fixtureStarts), nil)
		s.open(t, fixtureItem, 100, 3, 1)

		one := s.buy(t, fixtureItem, fixtureUser, body(""), withoutHeader("content-type"))
		if one.Quantity != 1 {
			t.Errorf("an empty body bought %d, want 1", one.Quantity)
		}
		two := s.buy(t, fixtureItem, fixtureUser, body(`{"quantity":2}`))
		if two.Quantity != 2 || two.PurchaseID == one.PurchaseID {
			t.Errorf("second purchase %+v", two)
		}
		before := snapshot(t, s.rdb)
		for _, q := range []string{`{"quantity":1}`, `{}`} {
			checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, body(q))),
				want{status: 409, code: "already_purchased"})
		}
		wantUnchanged(t, before, snapshot(t, s.rdb))
		if diff := cmp.Diff(two, s.mine(t, fixtureItem, fixtureUser)); diff != "" {
			t.Errorf("purchases/me shows the latest purchase (-want +got):\n%s", diff)
		}

		for _, tc := range []struct {
			name string
			mods []mod
			qty  int
		}{
			{"whole limit at once", []mod{body(`{"quantity":3}`)}, 3},
			{"base64 body", []mod{base64Body([]byte(`{"quantity":2}`))}, 2},
			{"content type with charset", []mod{header("content-type", "application/json; charset=utf-8")}, 1},
			{"content type header not lowercased", []mod{withoutHeader("content-type"), header("Content-Type", "application/json")}, 1},
			{"spaces around the object", []mod{body(" \n{ \"quantity\" : 1 }\n ")}, 1},
			{"empty object", []mod{body(`{}`)}, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				v := s.buy(t, fixtureItem, "user-"+strings.ReplaceAll(tc.name, " ", "-"), tc.mods...)
				if v.Quantity != tc.qty {
					t.Errorf("quantity %d, want %d", v.Quantity, tc.qty)
				}
			})
		}
		if st := s.state(t, fixtureItem); st.StockLeft != 100-3-3-2-1-1-1-1 {
			t.Errorf("stock_left %d after 12 units sold of 100", st.StockLeft)
		}
	})
}

// TestSeckillPublicStateNeedsNoIdentity: GET item answers whoever asks, in
// both auth modes, with or without credentials.
func TestSeckillPublicStateNeedsNoIdentity(t *testing.T) {
	u, _ := backends[0].start(t)
	for _, tc := range []struct {
		name string
		vars map[string]string
		mods []mod
	}{
		{"jwt: no authorizer", nil, nil},
		{"jwt: a user's JWT", nil, []mod{withClaims(map[string]string{"sub": fixtureUser})}},
		{"dev: nothing", devMode, nil},
		{"dev: a wrong admin token", devMode, []mod{header("x-admin-token", "wrong")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSaleStack(t, u, tc.vars, clock.NewFake(fixtureStarts), nil)
			admin := []mod(nil)
			if tc.vars != nil {
				admin = append(admin, header("x-admin-token", "test-admin-token"))
			}
			resp := s.invoke(t, itemPayload(t, "seckill-preheat", "public", admin...))
			wantJSON(t, resp, 200)
			before := snapshot(t, s.rdb)
			resp = s.invoke(t, itemPayload(t, "seckill-item", "public", tc.mods...))
			wantState(t, resp, seckill.State{ItemID: "public", Status: seckill.Live, StockLeft: 1000,
				StartsAt: "2026-11-29T10:00:00.000Z", EndsAt: "2099-01-01T00:00:00.000Z", PerUserLimit: 1})
			wantUnchanged(t, before, snapshot(t, s.rdb))
		})
	}
}

// TestSeckillDevIdentity: in dev mode the buyer is X-User-Id and the admin
// needs X-Admin-Token.
func TestSeckillDevIdentity(t *testing.T) {
	u, _ := backends[0].start(t)
	s := newSaleStack(t, u, devMode, clock.NewFake(fixtureStarts), nil)
	resp := s.invoke(t, itemPayload(t, "seckill-preheat", fixtureItem, noAuthorizer, header("X-Admin-Token", "test-admin-token")))
	wantJSON(t, resp, 200)
	v := wantPurchase(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, devUser("dev-buyer"))), 202)
	got := wantPurchase(t, s.invoke(t, itemPayload(t, "seckill-purchase-me", fixtureItem, devUser("dev-buyer"))), 200)
	if diff := cmp.Diff(v, got); diff != "" {
		t.Errorf("dev buyer's purchase (-admitted +got):\n%s", diff)
	}
	checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase-me", fixtureItem, devUser("someone-else"))),
		want{status: 404, code: "not_found"})
	// In dev mode a JWT, even of the buyer, is no identity.
	checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase-me", fixtureItem, sub("dev-buyer"))),
		want{status: 401, code: "unauthenticated"})
}

// skCase is a flash-sale request that must be refused. prep may set up state
// (through the API) for the case's own item; the keyspace after that must not
// change.
type skCase struct {
	name string
	// on picks the stack: jwt (default), dev, or backlog (jwt, a service
	// whose order backlog is 1).
	on   string
	prep func(t *testing.T, s *saleStack, item string)
	req  func(t *testing.T, s *saleStack, item string) []byte
	want want
}

// skReq is a request of fixture name for the case's item.
func skReq(name string, mods ...mod) func(t *testing.T, s *saleStack, item string) []byte {
	return func(t *testing.T, _ *saleStack, item string) []byte { return itemPayload(t, name, item, mods...) }
}

// skReqFor is a request of fixture name for a fixed item (path).
func skReqFor(name, item string, mods ...mod) func(t *testing.T, s *saleStack, item string) []byte {
	return func(t *testing.T, _ *saleStack, _ string) []byte { return itemPayload(t, name, item, mods...) }
}

// preheatWith is a preheat of the case's item whose body is made at the
// fake clock's now.
func preheatWith(b func(now time.Time) string, mods ...mod) func(t *testing.T, s *saleStack, item string) []byte {
	return func(t *testing.T, s *saleStack, item string) []byte {
		return itemPayload(t, "seckill-preheat", item, append([]mod{body(b(s.clk.Now()))}, mods...)...)
	}
}

// preheatBody is a preheat of the case's item with a fixed body.
func preheatBody(b string, mods ...mod) func(t *testing.T, s *saleStack, item string) []byte {
	return skReq("seckill-preheat", append([]mod{body(b)}, mods...)...)
}

// purchaseBody is a purchase of the case's item by the fixture's user.
func purchaseBody(b string, mods ...mod) func(t *testing.T, s *saleStack, item string) []byte {
	return skReq("seckill-purchase", append([]mod{body(b)}, mods...)...)
}

func liveItem(stock, limit int) func(t *testing.T, s *saleStack, item string) {
	return func(t *testing.T, s *saleStack, item string) { s.open(t, item, stock, limit, 1) }
}

// busyItem is live with a reserved purchase by another user.
func busyItem(t *testing.T, s *saleStack, item string) {
	s.open(t, item, 10, 1, 1)
	s.buy(t, item, "user-other")
}

// preheatingItem is a live item that another container is preheating again
// right now: its preheat intent open, its one shard frozen (as
// preheat_begin.lua and freeze.lua leave them; see package seckill).
func preheatingItem(t *testing.T, s *saleStack, item string) {
	t.Helper()
	s.open(t, item, 10, 1, 1)
	ctx := context.Background()
	meta := "hg:{dq:sk:" + item + ":0}:meta"
	v, err := s.rdb.HGet(ctx, meta, "version").Result()
	if err != nil {
		t.Fatal(err)
	}
	next, _ := strconv.ParseInt(v, 10, 64)
	next++
	left, err := s.rdb.HGet(ctx, meta, "left:"+v).Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := s.clk.Now().Add(time.Minute).UnixMilli()
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, "hg:{sk:"+item+"}:preheat", "phase", "freezing", "owner", "another", "version", next,
			"deadline", deadline, "touched", 1, "shards", 1, "stock", 5, "starts", s.clk.Now().UnixMilli(),
			"ends", s.clk.Now().Add(time.Hour).UnixMilli(), "limit", 1, "price", "", "currency", "", "window", 0, "last", next)
		return nil
	})
	if err == nil {
		_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, meta, "left:"+v)
			p.HSet(ctx, meta, "left_aside", left, "frozen", next)
			return nil
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func seckillProblemCases() []skCase {
	unauthenticated := want{status: 401, code: "unauthenticated"}
	forbidden := want{status: 403, code: "forbidden"}
	notFound := want{status: 404, code: "not_found"}
	tooLarge := want{status: 413, code: "payload_too_large"}
	unsupported := want{status: 415, code: "unsupported_media_type"}
	invalid := func(fields ...string) want { return want{status: 400, code: "validation_failed", fields: fields} }
	window := func(stock string, extra string) func(now time.Time) string {
		return func(now time.Time) string {
			return fmt.Sprintf(`{%s"starts_at":%q,"ends_at":%q%s}`, stock,
				now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), extra)
		}
	}
	const okPreheat = `{"stock":10,"starts_at":"2026-11-29T10:00:00Z","ends_at":"2099-01-01T00:00:00Z","per_user_limit":1,"shards":1}`
	long := strings.Repeat("i", 65)
	padded := func(b string) string { return b + strings.Repeat(" ", httpapi.MaxBody+1-len(b)) }

	cases := []skCase{
		// Admin routes.
		{name: "dev: preheat without X-Admin-Token", on: "dev", req: skReq("seckill-preheat"), want: unauthenticated},
		{name: "dev: preheat with a wrong token", on: "dev", req: skReq("seckill-preheat", header("x-admin-token", "wrong")), want: forbidden},
		{name: "dev: preheat with a token prefix", on: "dev", req: skReq("seckill-preheat", header("x-admin-token", "test-admin")), want: forbidden},
		{name: "dev: preheat with a user id only", on: "dev", req: skReq("seckill-preheat", devUser(fixtureUser)), want: unauthenticated},
		{name: "dev: preheat of a live item with a wrong token", on: "dev", prep: busyItem,
			req: skReq("seckill-preheat", header("x-admin-token", "wrong")), want: forbidden},
		{name: "jwt: preheat without IAM", req: skReq("seckill-preheat", noAuthorizer), want: forbidden},
		{name: "jwt: preheat with a user's JWT", req: skReq("seckill-preheat", withClaims(map[string]string{"sub": fixtureUser})), want: forbidden},
		{name: "jwt: preheat with X-Admin-Token", req: skReq("seckill-preheat", noAuthorizer, header("x-admin-token", "dev-admin")), want: forbidden},

		// User routes without identity.
		{name: "jwt: purchase without authorizer", prep: liveItem(10, 1), req: skReq("seckill-purchase", noAuthorizer), want: unauthenticated},
		{name: "jwt: purchase with claims but no sub", prep: liveItem(10, 1),
			req: skReq("seckill-purchase", withClaims(map[string]string{"iss": "https://auth.example.com/"})), want: unauthenticated},
		{name: "jwt: purchase with X-User-Id only", prep: liveItem(10, 1), req: skReq("seckill-purchase", devUser(fixtureUser)), want: unauthenticated},
		{name: "jwt: purchase with an IAM caller", prep: liveItem(10, 1),
			req: func(t *testing.T, _ *saleStack, item string) []byte {
				iam := itemEvent(t, "seckill-preheat", item).RequestContext.Authorizer
				return itemPayload(t, "seckill-purchase", item, func(ev *events.APIGatewayV2HTTPRequest) { ev.RequestContext.Authorizer = iam })
			}, want: unauthenticated},
		{name: "jwt: purchases/me without authorizer", prep: busyItem, req: skReq("seckill-purchase-me", noAuthorizer), want: unauthenticated},
		{name: "dev: purchase without X-User-Id", on: "dev", prep: liveItem(10, 1), req: skReq("seckill-purchase"), want: unauthenticated},
		{name: "dev: purchase with an empty X-User-Id", on: "dev", prep: liveItem(10, 1), req: skReq("seckill-purchase", devUser("")), want: unauthenticated},
		{name: "dev: purchases/me without X-User-Id", on: "dev", prep: busyItem, req: skReq("seckill-purchase-me"), want: unauthenticated},

		// Sale outcomes.
		{name: "second purchase by the same user",
			prep: func(t *testing.T, s *saleStack, item string) { s.open(t, item, 10, 1, 1); s.buy(t, item, fixtureUser) },
			req:  skReq("seckill-purchase"), want: want{status: 409, code: "already_purchased"}},
		{name: "quantities add up past the limit",
			prep: func(t *testing.T, s *saleStack, item string) {
				s.open(t, item, 10, 3, 1)
				s.buy(t, item, fixtureUser, body(`{"quantity":2}`))
			},
			req: purchaseBody(`{"quantity":2}`), want: want{status: 409, code: "already_purchased"}},
		{name: "sold out",
			prep: func(t *testing.T, s *saleStack, item string) { s.open(t, item, 1, 1, 1); s.buy(t, item, "user-first") },
			req:  skReq("seckill-purchase"), want: want{status: 410, code: "sold_out"}},
		{name: "sold out, asking for more than is left",
			prep: func(t *testing.T, s *saleStack, item string) {
				s.open(t, item, 3, 2, 1)
				s.buy(t, item, "user-first", body(`{"quantity":2}`))
			},
			req: purchaseBody(`{"quantity":2}`), want: want{status: 410, code: "sold_out"}},
		{name: "sold out, the buyer retries",
			prep: func(t *testing.T, s *saleStack, item string) { s.open(t, item, 1, 1, 1); s.buy(t, item, fixtureUser) },
			req:  skReq("seckill-purchase"), want: want{status: 409, code: "already_purchased"}},
		{name: "not started",
			prep: func(t *testing.T, s *saleStack, item string) {
				now := s.clk.Now()
				wantJSON(t, s.invoke(t, itemPayload(t, "seckill-preheat", item, body(saleJSON(10, now.Add(time.Hour), now.Add(2*time.Hour), 1, 1)))), 200)
			},
			req: skReq("seckill-purchase"), want: want{status: 409, code: "not_started"}},
		{name: "ended",
			prep: func(t *testing.T, s *saleStack, item string) {
				s.open(t, item, 10, 1, 1)
				s.buy(t, item, "user-first")
				s.clk.Advance(2 * time.Hour)
			},
			req: skReq("seckill-purchase"), want: want{status: 410, code: "ended"}},
		{name: "ended, the buyer retries",
			prep: func(t *testing.T, s *saleStack, item string) {
				s.open(t, item, 10, 1, 1)
				s.buy(t, item, fixtureUser)
				s.clk.Advance(2 * time.Hour)
			},
			req: skReq("seckill-purchase"), want: want{status: 410, code: "ended"}},
		{name: "backlog full", on: "backlog", prep: busyItem, req: skReq("seckill-purchase"),
			want: want{status: 429, code: "backlog_full", retryAfter: true}},
		{name: "preheat while purchases wait for their orders", prep: busyItem, req: preheatBody(okPreheat),
			want: want{status: 409, code: "orders_pending"}},
		{name: "preheat while another preheat is under way", prep: preheatingItem, req: preheatBody(okPreheat),
			want: want{status: 409, code: "preheat_in_progress"}},
		{name: "purchase while the item is being preheated", prep: preheatingItem, req: skReq("seckill-purchase"),
			want: want{status: 503, code: "unavailable", retryAfter: true}},

		// Unknown items and purchases.
		{name: "unknown item: state", req: skReq("seckill-item"), want: notFound},
		{name: "unknown item: purchase", req: skReq("seckill-purchase"), want: notFound},
		{name: "unknown item: purchase with an empty body", req: purchaseBody(""), want: notFound},
		{name: "unknown item: purchases/me", req: skReq("seckill-purchase-me"), want: notFound},
		{name: "dev: unknown item: purchase", on: "dev", req: skReq("seckill-purchase", devUser(fixtureUser)), want: notFound},
		{name: "purchases/me without a purchase", prep: liveItem(10, 1), req: skReq("seckill-purchase-me"), want: notFound},
		{name: "purchases/me of someone else's purchase", prep: busyItem, req: skReq("seckill-purchase-me"), want: notFound},

		// Routes.
		{name: "PATCH an item", req: skReq("seckill-item", route("PATCH", "/v1/seckill/items/x")),
			want: want{status: 405, code: "method_not_allowed", allow: []string{"GET", "PUT"}}},
		{name: "GET purchases", req: skReq("seckill-item", route("GET", "/v1/seckill/items/x/purchases")),
			want: want{status: 405, code: "method_not_allowed", allow: []string{"POST"}}},
		{name: "DELETE purchases/me", req: skReq("seckill-item", route("DELETE", "/v1/seckill/items/x/purchases/me")),
			want: want{status: 405, code: "method_not_allowed", allow: []string{"GET"}}},
		{name: "GET the item list", req: skReq("seckill-item", route("GET", "/v1/seckill/items")), want: notFound},
		{name: "purchases of nobody", req: skReq("seckill-item", route("GET", "/v1/seckill/items/x/purchases/you")), want: notFound},

		// Bad purchase bodies.
		{name: "quantity 0", prep: busyItem, req: purchaseBody(`{"quantity":0}`), want: invalid("quantity")},
		{name: "quantity -1", prep: busyItem, req: purchaseBody(`{"quantity":-1}`), want: invalid("quantity")},
		{name: "quantity 1.5", prep: busyItem, req: purchaseBody(`{"quantity":1.5}`), want: invalid("quantity")},
		{name: "quantity a string", prep: busyItem, req: purchaseBody(`{"quantity":"1"}`), want: invalid("quantity")},
		{name: "quantity null", prep: busyItem, req: purchaseBody(`{"quantity":null}`), want: invalid("quantity")},
		{name: "quantity above the per-user limit", prep: busyItem, req: purchaseBody(`{"quantity":2}`), want: invalid("quantity")},
		{name: "quantity above 100", prep: busyItem, req: purchaseBody(`{"quantity":101}`), want: invalid("quantity")},
		{name: "quantity huge", prep: busyItem, req: purchaseBody(`{"quantity":99999999999999999999}`), want: invalid("quantity")},
		{name: "purchase: unknown field", prep: busyItem, req: purchaseBody(`{"quantity":1,"coupon":"x"}`), want: invalid("coupon")},
		{name: "purchase: not JSON", prep: busyItem, req: purchaseBody(`{"quantity":`), want: invalid("body")},
		{name: "purchase: JSON array", prep: busyItem, req: purchaseBody(`[{"quantity":1}]`), want: invalid("body")},
		{name: "purchase: JSON null", prep: busyItem, req: purchaseBody(`null`), want: invalid("body")},
		{name: "purchase: a bare number", prep: busyItem, req: purchaseBody(`1`), want: invalid("body")},
		{name: "purchase: two objects", prep: busyItem, req: purchaseBody(`{"quantity":1}{"quantity":1}`), want: invalid("body")},
		{name: "purchase: bad base64", prep: busyItem,
			req: skReq("seckill-purchase", func(ev *events.APIGatewayV2HTTPRequest) { ev.Body, ev.IsBase64Encoded = "%%%", true }), want: invalid("body")},
		{name: "purchase: text/plain", prep: busyItem, req: purchaseBody(`{"quantity":1}`, header("content-type", "text/plain")), want: unsupported},
		{name: "purchase: no content type", prep: busyItem, req: purchaseBody(`{"quantity":1}`, withoutHeader("content-type")), want: unsupported},
		{name: "purchase: application/jsonp", prep: busyItem, req: purchaseBody(`{"quantity":1}`, header("content-type", "application/jsonp")), want: unsupported},
		{name: "purchase: body of 16 KiB + 1", prep: busyItem, req: purchaseBody(padded(`{"quantity":1}`)), want: tooLarge},
		{name: "purchase: base64 body of 16 KiB + 1", prep: busyItem,
			req: skReq("seckill-purchase", base64Body([]byte(padded(`{"quantity":1}`)))), want: tooLarge},
		{name: "purchase: body of 1 MiB", prep: busyItem, req: purchaseBody(strings.Repeat("x", 1<<20)), want: tooLarge},

		// Bad preheat bodies.
		{name: "stock 0", prep: busyItem, req: preheatWith(window(`"stock":0,`, "")), want: invalid("stock")},
		{name: "stock -1", prep: busyItem, req: preheatWith(window(`"stock":-1,`, "")), want: invalid("stock")},
		{name: "stock 10000001", prep: busyItem, req: preheatWith(window(`"stock":10000001,`, "")), want: invalid("stock")},
		{name: "stock 1.5", prep: busyItem, req: preheatWith(window(`"stock":1.5,`, "")), want: invalid("stock")},
		{name: "stock a string", prep: busyItem, req: preheatWith(window(`"stock":"10",`, "")), want: invalid("stock")},
		{name: "missing stock", prep: busyItem, req: preheatWith(window(``, "")), want: invalid("stock")},
		{name: "missing stock, unknown item", req: preheatWith(window(``, "")), want: invalid("stock")},
		{name: "shards 0", prep: busyItem, req: preheatWith(window(`"stock":10,`, `,"shards":0`)), want: invalid("shards")},
		{name: "shards 65", prep: busyItem, req: preheatWith(window(`"stock":100,`, `,"shards":65`)), want: invalid("shards")},
		{name: "shards over the stock", prep: busyItem, req: preheatWith(window(`"stock":2,`, `,"shards":3`)), want: invalid("shards")},
		{name: "per_user_limit 0", prep: busyItem, req: preheatWith(window(`"stock":10,`, `,"per_user_limit":0`)), want: invalid("per_user_limit")},
		{name: "per_user_limit 101", prep: busyItem, req: preheatWith(window(`"stock":10,`, `,"per_user_limit":101`)), want: invalid("per_user_limit")},
		{name: "ends_at in the past", prep: busyItem, req: preheatWith(func(now time.Time) string {
			return saleJSON(10, now.Add(-2*time.Hour), now.Add(-time.Hour), 1, 1)
		}), want: invalid("ends_at")},
		{name: "ends_at now", prep: busyItem, req: preheatWith(func(now time.Time) string {
			return saleJSON(10, now.Add(-time.Hour), now, 1, 1)
		}), want: invalid("ends_at")},
		{name: "ends_at in the past, starts_at left out", req: preheatWith(func(now time.Time) string {
			return fmt.Sprintf(`{"stock":10,"ends_at":%q}`, now.Add(-time.Second).Format(time.RFC3339))
		}), want: invalid("ends_at")},
		{name: "ends_at before starts_at", prep: busyItem, req: preheatWith(func(now time.Time) string {
			return saleJSON(10, now.Add(2*time.Hour), now.Add(time.Hour), 1, 1)
		}), want: invalid("ends_at")},
		{name: "ends_at equal to starts_at", prep: busyItem, req: preheatWith(func(now time.Time) string {
			return saleJSON(10, now.Add(time.Hour), now.Add(time.Hour), 1, 1)
		}), want: invalid("ends_at")},
		{name: "missing ends_at", prep: busyItem, req: preheatBody(`{"stock":10}`), want: invalid("ends_at")},
		{name: "starts_at not a time", prep: busyItem, req: preheatBody(`{"stock":10,"starts_at":"tomorrow","ends_at":"2099-01-01T00:00:00Z"}`), want: invalid("starts_at")},
		{name: "starts_at a number", prep: busyItem, req: preheatBody(`{"stock":10,"starts_at":1795946400,"ends_at":"2099-01-01T00:00:00Z"}`), want: invalid("starts_at")},
		{name: "ends_at without a zone", prep: busyItem, req: preheatBody(`{"stock":10,"ends_at":"2099-01-01T00:00:00"}`), want: invalid("ends_at")},
		{name: "ends_at with a space", prep: busyItem, req: preheatBody(`{"stock":10,"ends_at":"2099-01-01 00:00:00Z"}`), want: invalid("ends_at")},
		{name: "ends_at null", prep: busyItem, req: preheatBody(`{"stock":10,"ends_at":null}`), want: invalid("ends_at")},
		{name: "preheat: unknown field", prep: busyItem, req: preheatWith(window(`"stock":10,`, `,"colour":"red"`)), want: invalid("colour")},
		{name: "preheat: unknown fields, sorted", prep: busyItem, req: preheatWith(window(`"stock":10,`, `,"zeta":1,"alpha":2`)), want: invalid("alpha", "zeta")},
		{name: "preheat: every field wrong", prep: busyItem,
			req:  preheatBody(`{"stock":0,"shards":0,"per_user_limit":0,"starts_at":"x","ends_at":"y","extra":1}`),
			want: invalid("extra", "stock", "per_user_limit", "shards", "starts_at", "ends_at")},
		{name: "preheat: empty object", prep: busyItem, req: preheatBody(`{}`), want: invalid("stock", "ends_at")},
		{name: "preheat: empty body", prep: busyItem, req: preheatBody(``), want: invalid("body")},
		{name: "preheat: not JSON", prep: busyItem, req: preheatBody(`{"stock":`), want: invalid("body")},
		{name: "preheat: JSON array", prep: busyItem, req: preheatBody(`[]`), want: invalid("body")},
		{name: "preheat: text/plain", prep: busyItem, req: preheatBody(okPreheat, header("content-type", "text/plain")), want: unsupported},
		{name: "preheat: no content type", prep: busyItem, req: preheatBody(okPreheat, withoutHeader("content-type")), want: unsupported},
		{name: "preheat: body of 16 KiB + 1", prep: busyItem, req: preheatBody(padded(okPreheat)), want: tooLarge},

		// Bad item ids, on every route.
		{name: "preheat: item id with a space", req: skReqFor("seckill-preheat", "a b", body(okPreheat)), want: invalid("item_id")},
		{name: "preheat: item id with %20", req: skReqFor("seckill-preheat", "a%20b", body(okPreheat)), want: invalid("item_id")},
		{name: "preheat: item id of 65", req: skReqFor("seckill-preheat", long, body(okPreheat)), want: invalid("item_id")},
		{name: "preheat: item id of 65 and a bad body", req: skReqFor("seckill-preheat", long, body(`{"stock":0,"ends_at":"2099-01-01T00:00:00Z"}`)),
			want: invalid("item_id", "stock")},
		{name: "preheat: item id with a slash", req: skReqFor("seckill-preheat", "x/y"), want: notFound},
		{name: "preheat: empty item id", req: skReqFor("seckill-preheat", ""), want: notFound},
		{name: "state: item id with a space", req: skReqFor("seckill-item", "a b"), want: notFound},
		{name: "state: item id of 65", req: skReqFor("seckill-item", long), want: notFound},
		{name: "state: item id with a slash", req: skReqFor("seckill-item", "x/y"), want: notFound},
		{name: "state: item id with a dot", req: skReqFor("seckill-item", "phone.2026"), want: notFound},
		{name: "purchase: item id with a space", req: skReqFor("seckill-purchase", "a b"), want: invalid("item_id")},
		{name: "purchase: item id of 65", req: skReqFor("seckill-purchase", long), want: invalid("item_id")},
		{name: "purchase: item id of 65 and a bad quantity", req: skReqFor("seckill-purchase", long, body(`{"quantity":0}`)),
			want: invalid("item_id", "quantity")},
		{name: "purchase: item id with a slash", req: skReqFor("seckill-purchase", "x/y"), want: notFound},
		{name: "purchases/me: item id with a space", req: skReqFor("seckill-purchase-me", "a b"), want: notFound},
		{name: "purchases/me: item id of 65", req: skReqFor("seckill-purchase-me", long), want: notFound},
		{name: "purchases/me: item id with a slash", req: skReqFor("seckill-purchase-me", "x/y"), want: notFound},
	}
	return cases
}

// TestSeckillProblems checks every refusal of the flash sale: status,
// problem body, headers, and that nothing was written.
func TestSeckillProblems(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		clk := clock.NewFake(fixtureStarts)
		stacks := map[string]*saleStack{
			"jwt":     newSaleStack(t, redisURL, nil, clk, nil),
			"dev":     newSaleStack(t, redisURL, devMode, clk, nil),
			"backlog": newSaleStack(t, redisURL, nil, clk, func(c *seckill.Config) { c.Backlog = 1 }),
		}
		for i, tc := range seckillProblemCases() {
			t.Run(tc.name, func(t *testing.T) {
				on := tc.on
				if on == "" {
					on = "jwt"
				}
				s := stacks[on]
				item := fmt.Sprintf("case-%03d", i)
				// Each case starts from an empty keyspace (keeping the
				// snapshots small) and has its own item, so that nothing the
				// services remember of earlier cases applies.
				if err := s.rdb.FlushDB(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				if tc.prep != nil {
					// As an admin and buyers of jwt mode; the stacks share
					// the clock and Redis (where the backlog is counted).
					tc.prep(t, stacks["jwt"], item)
				}
				p := tc.req(t, s, item)
				before := snapshot(t, s.rdb)
				checkProblem(t, s.invoke(t, p), tc.want)
				wantUnchanged(t, before, snapshot(t, s.rdb))
			})
		}
	})
}

// TestSeckillOrdersPendingThenPreheat: a preheat is refused while admitted
// purchases wait for their orders; once the orders are made, it resets the
// sale: buyers may buy again.
func TestSeckillOrdersPendingThenPreheat(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newSaleStack(t, redisURL, nil, clock.NewFake(fixtureStarts), nil)
		s.open(t, fixtureItem, 10, 1, 1)
		first := s.buy(t, fixtureItem, fixtureUser)
		s.buy(t, fixtureItem, "user-2")

		before := snapshot(t, s.rdb)
		checkProblem(t, s.invoke(t, rawFixture(t, "seckill-preheat")), want{status: 409, code: "orders_pending"})
		wantUnchanged(t, before, snapshot(t, s.rdb))

		proc := seckill.NewOrderProcessor(s.app.Items, s.app.Orders, s.clk, s.app.Log)
		job := fmt.Sprintf("%s|%d|0|%s", first.PurchaseID, first.Quantity, fixtureUser)
		if err := proc.Process(context.Background(), fixtureItem, 0, job); err != nil {
			t.Fatalf("order of %s: %v", first.PurchaseID, err)
		}
		if v := s.mine(t, fixtureItem, fixtureUser); v.Status != seckill.Confirmed || v.OrderID == nil || *v.OrderID != seckill.OrderID(first.PurchaseID) {
			t.Errorf("after its order: %+v", v)
		}
		t.Log("one purchase still waits")
		before = snapshot(t, s.rdb)
		checkProblem(t, s.invoke(t, rawFixture(t, "seckill-preheat")), want{status: 409, code: "orders_pending"})
		wantUnchanged(t, before, snapshot(t, s.rdb))

		s.makeOrders(t, fixtureItem, s.clk.Now())
		t.Log("every order made: the preheat resets the sale")
		wantState(t, s.invoke(t, rawFixture(t, "seckill-preheat")), seckill.State{ItemID: fixtureItem, Status: seckill.Live,
			StockLeft: 1000, StartsAt: "2026-11-29T10:00:00.000Z", EndsAt: "2099-01-01T00:00:00.000Z", PerUserLimit: 1})
		checkProblem(t, s.invoke(t, rawFixture(t, "seckill-purchase-me")), want{status: 404, code: "not_found"})
		again := s.buy(t, fixtureItem, fixtureUser)
		if again.PurchaseID == first.PurchaseID {
			t.Errorf("the new sale's purchase has the old id %s", again.PurchaseID)
		}
		if st := s.state(t, fixtureItem); st.StockLeft != 999 {
			t.Errorf("stock_left %d, want 999", st.StockLeft)
		}
	})
}

// TestSeckillBacklogFull: past the order backlog purchases are refused with
// 429 and Retry-After, and admitted again once the orders are made.
func TestSeckillBacklogFull(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newSaleStack(t, redisURL, nil, clock.NewFake(fixtureStarts), func(c *seckill.Config) { c.Backlog = 1 })
		s.open(t, fixtureItem, 10, 1, 1)
		s.buy(t, fixtureItem, "user-1")
		before := snapshot(t, s.rdb)
		for _, user := range []string{fixtureUser, "user-3"} {
			checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub(user))),
				want{status: 429, code: "backlog_full", retryAfter: true})
		}
		checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-1"))),
			want{status: 409, code: "already_purchased"})
		wantUnchanged(t, before, snapshot(t, s.rdb))
		if st := s.state(t, fixtureItem); st.Status != seckill.Live || st.StockLeft != 9 {
			t.Errorf("state while the backlog is full: %+v, want live with 9 left", st)
		}

		s.makeOrders(t, fixtureItem, s.clk.Now())
		s.buy(t, fixtureItem, fixtureUser)
	})
}

// TestSeckillBacklogFromConfig: HOURGLASS_ORDER_BACKLOG reaches the app's
// flash sale.
func TestSeckillBacklogFromConfig(t *testing.T) {
	u, _ := backends[1].start(t)
	s := newStack(t, u, map[string]string{"HOURGLASS_ORDER_BACKLOG": "2"})
	now := time.Now()
	wantJSON(t, s.invoke(t, itemPayload(t, "seckill-preheat", fixtureItem,
		body(saleJSON(10, now.Add(-time.Minute), now.Add(time.Hour), 1, 1)))), 200)
	s.buy(t, fixtureItem, "user-1")
	s.buy(t, fixtureItem, "user-2")
	checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-3"))),
		want{status: 429, code: "backlog_full", retryAfter: true})
}

// TestSeckillNotEnoughLeft: asking for more than is left answers sold_out
// with a detail saying a smaller quantity may still be admitted, and the
// container does not remember the item as sold out: the last unit still
// sells.
func TestSeckillNotEnoughLeft(t *testing.T) {
	srv := redistest.Start(t)
	s := newSaleStack(t, srv.URL(), map[string]string{"HOURGLASS_SOLDOUT_MEMORY": "1m"}, clock.NewFake(fixtureStarts), nil)
	s.open(t, fixtureItem, 3, 2, 1)
	s.buy(t, fixtureItem, "user-first", body(`{"quantity":2}`))
	p := checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-2"), body(`{"quantity":2}`))),
		want{status: 410, code: "sold_out"})
	if !strings.Contains(p.Detail, "smaller") {
		t.Errorf("detail %q does not say a smaller quantity may do", p.Detail)
	}
	s.buy(t, fixtureItem, "user-3")
	p = checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-4"))), want{status: 410, code: "sold_out"})
	if p.Detail != "the item is sold out" {
		t.Errorf("detail %q once nothing is left", p.Detail)
	}
}

// TestSeckillSoldOutMemory: a container that saw an item sold out refuses
// further purchases from memory, without Redis, while the state (which must
// come from Redis) is unavailable; a preheat forgets what it remembered.
func TestSeckillSoldOutMemory(t *testing.T) {
	srv := redistest.Start(t)
	s := newSaleStack(t, srv.URL(), map[string]string{"HOURGLASS_SOLDOUT_MEMORY": "1m"}, clock.NewFake(fixtureStarts), nil)
	s.open(t, fixtureItem, 1, 1, 1)
	s.buy(t, fixtureItem, fixtureUser)
	checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-2"))), want{status: 410, code: "sold_out"})

	srv.Kill()
	// Within the memory, and within the second the container trusts the
	// item's shard count (see TestSeckillStateWhileRedisDownLater).
	s.clk.Advance(500 * time.Millisecond)
	for _, tc := range []struct {
		name string
		user string
		want want
	}{
		{"another buyer", "user-3", want{status: 410, code: "sold_out"}},
		{"the buyer refused before", "user-2", want{status: 410, code: "sold_out"}},
		{"the buyer admitted here", fixtureUser, want{status: 409, code: "already_purchased"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Redis is down: only memory can tell.
			checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub(tc.user))), tc.want)
		})
	}
	unavailable := want{status: 503, code: "unavailable", retryAfter: true}
	t.Run("state", func(t *testing.T) {
		checkProblem(t, s.invoke(t, rawFixture(t, "seckill-item")), unavailable)
	})
	t.Run("purchases/me", func(t *testing.T) {
		checkProblem(t, s.invoke(t, rawFixture(t, "seckill-purchase-me")), unavailable)
	})
	t.Run("preheat", func(t *testing.T) {
		checkProblem(t, s.invoke(t, rawFixture(t, "seckill-preheat")), unavailable)
	})
	t.Run("a purchase of an item not remembered", func(t *testing.T) {
		checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", "other-item")), unavailable)
	})
	if strings.Contains(s.log.String(), `"msg":"internal error"`) {
		t.Errorf("an outage was logged as an internal error:\n%s", s.log.String())
	}

	srv.Restart() // without AOF: the sale is gone
	t.Log("preheat again through the same router")
	s.open(t, fixtureItem, 2, 1, 1)
	for _, user := range []string{"user-3", fixtureUser} {
		s.buy(t, fixtureItem, user)
	}
	checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-4"))), want{status: 410, code: "sold_out"})
}

// TestSeckillStateWhileRedisDownLater: once the container's cached shard
// count of the item is stale, GET item during an outage must still answer
// 503, not claim the item does not exist.
func TestSeckillStateWhileRedisDownLater(t *testing.T) {
	srv := redistest.Start(t)
	s := newSaleStack(t, srv.URL(), nil, clock.NewFake(fixtureStarts), nil)
	s.open(t, fixtureItem, 10, 1, 1)
	s.buy(t, fixtureItem, fixtureUser)
	srv.Kill()
	s.clk.Advance(5 * time.Second)
	unavailable := want{status: 503, code: "unavailable", retryAfter: true}
	checkProblem(t, s.invoke(t, rawFixture(t, "seckill-item")), unavailable)
	checkProblem(t, s.invoke(t, rawFixture(t, "seckill-purchase")), unavailable)
	checkProblem(t, s.invoke(t, rawFixture(t, "seckill-purchase-me")), unavailable)
}

// TestFunctionRouters: the seckill function serves the flash sale and
// health, not withdrawals; the enqueue function the other way round.
func TestFunctionRouters(t *testing.T) {
	u, _ := backends[0].start(t)
	s := newStack(t, u, nil)
	now := time.Now()
	preheat := itemPayload(t, "seckill-preheat", fixtureItem, body(saleJSON(10, now.Add(-time.Minute), now.Add(time.Hour), 1, 1)))
	seckillRoutes := []string{
		"PUT /v1/seckill/items/{item_id}", "GET /v1/seckill/items/{item_id}",
		"POST /v1/seckill/items/{item_id}/purchases", "GET /v1/seckill/items/{item_id}/purchases/me",
	}
	withdrawalRoutes := []string{
		"POST /v1/withdrawals", "GET /v1/withdrawals", "GET /v1/withdrawals/{id}", "DELETE /v1/withdrawals/{id}",
	}

	sk := s.app.SeckillAPI()
	wd := s.app.WithdrawalAPI()
	for _, tc := range []struct {
		name     string
		rt       *httpapi.Router
		has, not []string
	}{
		{"seckill", sk, append(slices.Clone(seckillRoutes), "GET /healthz"), withdrawalRoutes},
		{"withdrawal", wd, append(slices.Clone(withdrawalRoutes), "GET /healthz", "GET /v1/admin/stats"), seckillRoutes},
		{"all", s.app.Router(), append(append(slices.Clone(seckillRoutes), withdrawalRoutes...), "GET /healthz", "GET /v1/admin/stats"), nil},
	} {
		t.Run(tc.name+": routes", func(t *testing.T) {
			got := tc.rt.Routes()
			for _, r := range tc.has {
				if !slices.Contains(got, r) {
					t.Errorf("%s is not served; routes %v", r, got)
				}
			}
			for _, r := range tc.not {
				if slices.Contains(got, r) {
					t.Errorf("%s is served; routes %v", r, got)
				}
			}
		})
	}

	on := func(rt *httpapi.Router) *stack {
		c := *s
		c.rt, c.h = rt, lambda.NewHandler(rt.Serve)
		return &c
	}
	t.Run("the seckill function", func(t *testing.T) {
		f := on(sk)
		wantJSON(t, f.invoke(t, preheat), 200)
		wantJSON(t, f.invoke(t, rawFixture(t, "seckill-item")), 200)
		v := wantPurchase(t, f.invoke(t, rawFixture(t, "seckill-purchase")), 202)
		if got := wantPurchase(t, f.invoke(t, rawFixture(t, "seckill-purchase-me")), 200); got.PurchaseID != v.PurchaseID {
			t.Errorf("purchases/me %s, want %s", got.PurchaseID, v.PurchaseID)
		}
		wantJSON(t, f.invoke(t, rawFixture(t, "healthz")), 200)
		before := snapshot(t, s.rdb)
		for _, name := range []string{"withdrawal-create", "withdrawal-list"} {
			checkProblem(t, f.invoke(t, rawFixture(t, name)), want{status: 404, code: "not_found"})
		}
		for _, name := range []string{"withdrawal-get", "withdrawal-cancel"} {
			checkProblem(t, f.invoke(t, rawFixtureFor(t, name, fixtureID)), want{status: 404, code: "not_found"})
		}
		wantUnchanged(t, before, snapshot(t, s.rdb))
	})
	t.Run("the enqueue function", func(t *testing.T) {
		f := on(wd)
		created, _ := f.create(t)
		wantJSON(t, f.invoke(t, rawFixtureFor(t, "withdrawal-get", created.ID)), 200)
		f.list(t)
		wantJSON(t, f.invoke(t, rawFixtureFor(t, "withdrawal-cancel", created.ID)), 200)
		wantJSON(t, f.invoke(t, rawFixture(t, "healthz")), 200)
		wantJSON(t, f.invoke(t, rawFixture(t, "admin-stats")), 200)
		before := snapshot(t, s.rdb)
		for _, name := range []string{"seckill-preheat", "seckill-item", "seckill-purchase", "seckill-purchase-me"} {
			checkProblem(t, f.invoke(t, rawFixture(t, name)), want{status: 404, code: "not_found"})
		}
		wantUnchanged(t, before, snapshot(t, s.rdb))
	})
}

// TestSeckillFixturesDecodeStrictly: every field of the flash-sale fixtures
// is one the Lambda library knows, so a typo cannot hide.
func TestSeckillFixturesDecodeStrictly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v      any
		method string
	}{
		{"seckill-preheat", &events.APIGatewayV2HTTPRequest{}, "PUT"},
		{"seckill-item", &events.APIGatewayV2HTTPRequest{}, "GET"},
		{"seckill-purchase", &events.APIGatewayV2HTTPRequest{}, "POST"},
		{"seckill-purchase-me", &events.APIGatewayV2HTTPRequest{}, "GET"},
		{"consumer-sqs-order", &events.SQSEvent{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := json.NewDecoder(bytes.NewReader(rawFixture(t, tc.name)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(tc.v); err != nil {
				t.Fatalf("decode: %v", err)
			}
			ev, ok := tc.v.(*events.APIGatewayV2HTTPRequest)
			if !ok {
				return
			}
			if ev.RequestContext.HTTP.Method != tc.method || ev.RawPath != ev.RequestContext.HTTP.Path ||
				ev.PathParameters["item_id"] != fixtureItem || !strings.HasPrefix(ev.RouteKey, tc.method+" ") {
				t.Errorf("inconsistent event: %s %s %s %v", ev.RouteKey, ev.RequestContext.HTTP.Method, ev.RawPath, ev.PathParameters)
			}
			a := ev.RequestContext.Authorizer
			switch tc.name {
			case "seckill-preheat":
				if a == nil || a.IAM == nil || a.JWT != nil {
					t.Errorf("preheat authorizer %+v, want IAM only", a)
				}
			case "seckill-item":
				if a != nil {
					t.Errorf("public route with authorizer %+v", a)
				}
			default:
				if a == nil || a.JWT == nil || a.JWT.Claims["sub"] != fixtureUser || a.IAM != nil {
					t.Errorf("user route authorizer %+v, want a JWT of %s", a, fixtureUser)
				}
			}
		})
	}
}

// TestSeckillPreheatAccepts covers preheat bodies that must be accepted, and
// what the item state says of them.
func TestSeckillPreheatAccepts(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		now := fixtureStarts.Add(30*time.Minute + 250*time.Millisecond)
		s := newSaleStack(t, redisURL, nil, clock.NewFake(now), nil)
		for i, tc := range []struct {
			name string
			body string
			want seckill.State
		}{
			{"the largest sale", `{"stock":10000000,"starts_at":"2026-11-29T10:00:00Z","ends_at":"2026-11-29T12:00:00Z","per_user_limit":100,"shards":64}`,
				seckill.State{Status: seckill.Live, StockLeft: 10_000_000, StartsAt: "2026-11-29T10:00:00.000Z", EndsAt: "2026-11-29T12:00:00.000Z", PerUserLimit: 100}},
			{"one unit", `{"stock":1,"ends_at":"2026-11-29T10:30:00.251Z"}`,
				seckill.State{Status: seckill.Live, StockLeft: 1, StartsAt: "2026-11-29T10:30:00.250Z", EndsAt: "2026-11-29T10:30:00.251Z", PerUserLimit: 1}},
			{"defaults: starts now, 1 per user, 1 shard", `{"stock":5,"ends_at":"2026-11-29T12:00:00Z"}`,
				seckill.State{Status: seckill.Live, StockLeft: 5, StartsAt: "2026-11-29T10:30:00.250Z", EndsAt: "2026-11-29T12:00:00.000Z", PerUserLimit: 1}},
			{"times with offsets and nanoseconds", `{"stock":5,"starts_at":"2026-11-29T19:00:00.123456789+08:00","ends_at":"2026-11-29T20:00:00-02:00"}`,
				seckill.State{Status: seckill.Upcoming, StockLeft: 5, StartsAt: "2026-11-29T11:00:00.123Z", EndsAt: "2026-11-29T22:00:00.000Z", PerUserLimit: 1}},
			{"starts in the past", `{"stock":5,"starts_at":"2020-01-01T00:00:00Z","ends_at":"2026-11-29T12:00:00Z"}`,
				seckill.State{Status: seckill.Live, StockLeft: 5, StartsAt: "2020-01-01T00:00:00.000Z", EndsAt: "2026-11-29T12:00:00.000Z", PerUserLimit: 1}},
			{"shards equal to the stock", `{"stock":3,"shards":3,"ends_at":"2026-11-29T12:00:00Z"}`,
				seckill.State{Status: seckill.Live, StockLeft: 3, StartsAt: "2026-11-29T10:30:00.250Z", EndsAt: "2026-11-29T12:00:00.000Z", PerUserLimit: 1}},
			{"a price: written with the currency's minor digits", `{"stock":2,"ends_at":"2026-11-29T12:00:00Z","price":"9.9","currency":"CNY"}`,
				seckill.State{Status: seckill.Live, StockLeft: 2, StartsAt: "2026-11-29T10:30:00.250Z", EndsAt: "2026-11-29T12:00:00.000Z",
					PerUserLimit: 1, Price: strPtr("9.90"), Currency: strPtr("CNY")}},
			{"a price and a payment window", `{"stock":2,"ends_at":"2026-11-29T12:00:00Z","per_user_limit":2,"price":"1200","currency":"JPY","payment_window_seconds":900}`,
				seckill.State{Status: seckill.Live, StockLeft: 2, StartsAt: "2026-11-29T10:30:00.250Z", EndsAt: "2026-11-29T12:00:00.000Z",
					PerUserLimit: 2, Price: strPtr("1200"), Currency: strPtr("JPY"), PaymentWindowSeconds: int64Ptr(900)}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				item := fmt.Sprint("accept-", i)
				tc.want.ItemID = item
				wantState(t, s.invoke(t, itemPayload(t, "seckill-preheat", item, body(tc.body))), tc.want)
				wantState(t, s.invoke(t, itemPayload(t, "seckill-item", item)), tc.want)
			})
		}
	})
}

// TestSeckillShardedSale sells a sharded item through the router: buyers
// whose home shard is empty get stock from the others, the item sells out
// exactly, each buyer finds their purchase, and a preheat to fewer shards
// leaves a consistent sale.
func TestSeckillShardedSale(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newSaleStack(t, redisURL, nil, clock.NewFake(fixtureStarts), nil)
		s.open(t, fixtureItem, 4, 1, 4)
		bought := map[string]httpapi.PurchaseView{}
		for i := range 4 {
			user := fmt.Sprintf("user-%d", i)
			bought[user] = s.buy(t, fixtureItem, user)
		}
		before := snapshot(t, s.rdb)
		checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-late"))), want{status: 410, code: "sold_out"})
		checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-0"))), want{status: 409, code: "already_purchased"})
		wantUnchanged(t, before, snapshot(t, s.rdb))
		if st := s.state(t, fixtureItem); st.Status != seckill.SoldOut || st.StockLeft != 0 {
			t.Errorf("state %+v, want sold_out with 0 left", st)
		}
		for user, v := range bought {
			if diff := cmp.Diff(v, s.mine(t, fixtureItem, user)); diff != "" {
				t.Errorf("%s's purchase (-admitted +got):\n%s", user, diff)
			}
		}

		ctx := context.Background()
		proc := seckill.NewOrderProcessor(s.app.Items, s.app.Orders, s.clk, s.app.Log)
		q, err := s.app.Items.Queue(fixtureItem, 4)
		if err != nil {
			t.Fatal(err)
		}
		for n := range 4 {
			c, err := q.Claim(ctx, n, s.clk.Now(), time.Minute, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range c.Jobs {
				if err := proc.Process(ctx, fixtureItem, j.Shard, j.ID); err != nil {
					t.Fatalf("order %s: %v", j.ID, err)
				}
			}
		}
		for user := range bought {
			if v := s.mine(t, fixtureItem, user); v.Status != seckill.Confirmed {
				t.Errorf("%s's purchase is %s after the orders, want confirmed", user, v.Status)
			}
		}

		t.Log("preheat to one shard")
		s.open(t, fixtureItem, 2, 1, 1)
		s.buy(t, fixtureItem, "user-0")
		s.buy(t, fixtureItem, "user-1")
		checkProblem(t, s.invoke(t, itemPayload(t, "seckill-purchase", fixtureItem, sub("user-2"))), want{status: 410, code: "sold_out"})
	})
}

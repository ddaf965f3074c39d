package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/finance"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// ledgerRecorder is a DynamoDB endpoint in front of dynalite that notes
// every call a function's client makes, as IAM sees it: the action (the
// X-Amz-Target header) on a table or one of its indexes. One per function,
// so every call is its function's: nothing in the code under test is
// wrapped or told it is watched.
type ledgerRecorder struct {
	proxy  *httputil.ReverseProxy
	tables map[string]string // a test table's name -> its schema name
	mu     sync.Mutex
	calls  map[string]map[string]bool // ledgerUse resource -> actions
	errs   []string
}

func (r *ledgerRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var in struct{ TableName, IndexName string }
	_, action, _ := strings.Cut(req.Header.Get("X-Amz-Target"), ".")
	r.mu.Lock()
	if err := json.Unmarshal(body, &in); err != nil || action == "" {
		r.errs = append(r.errs, fmt.Sprintf("a call %q that names no table: %v", action, err))
	} else if table, ok := r.tables[in.TableName]; !ok {
		r.errs = append(r.errs, fmt.Sprintf("%s on %q, no ledger table", action, in.TableName))
	} else {
		res := table
		if in.IndexName != "" {
			res = ledgerIndex(table, in.IndexName)
		}
		if r.calls[res] == nil {
			r.calls[res] = map[string]bool{}
		}
		r.calls[res][action] = true
	}
	r.mu.Unlock()
	r.proxy.ServeHTTP(w, req)
}

// ledgerCalls runs each function's operations on the DynamoDB ledger
// (dynalite) and a real redis-server, each function on an App of its own
// whose DynamoDB client goes through its own recorder, and returns what
// each called: function -> resource -> actions. The operations are those
// its handlers run, through the same App parts:
//
//   - enqueue: create (due now, and two due beyond the Redis horizon), a
//     replay and a conflicting body under one key, a create refused after
//     its key was reserved, get, list, reschedule, cancel, the payout
//     provider's callback, a payment confirmation of an order;
//   - seckill: preheat, purchases, item state, a buyer's purchase;
//   - poller: rounds to the work queue (a stand-in for SQS), the
//     reconciler promoting a far withdrawal, the compensation releasing a
//     purchase whose order was never made;
//   - consumer: payouts through a fake provider, finance told, orders made
//     and expired;
//   - operator: payouts unresolved, payouts resolve, reconcile.
func ledgerCalls(t *testing.T) map[string]map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := dynalitetest.Start(t)
	rs := redistest.Start(t)
	prov := fakes.NewProvider(t, "ledger-calls-payout-secret")
	target, err := url.Parse(db.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]string{
		"lc-withdrawals": schemaNames.Withdrawals, "lc-orders": schemaNames.Orders, "lc-idempotency": schemaNames.Idempotency,
	}
	for k, v := range map[string]string{
		"REDIS_URL": rs.URL(), "HOURGLASS_LEDGER": "dynamodb", "DYNAMODB_ENDPOINT": db.Endpoint,
		"HOURGLASS_WITHDRAWALS_TABLE": "lc-withdrawals", "HOURGLASS_ORDERS_TABLE": "lc-orders",
		"HOURGLASS_IDEMPOTENCY_TABLE": "lc-idempotency",
		"PAYOUT_URL":                  prov.URL, "PAYOUT_SIGNING_SECRET": "ledger-calls-payout-secret", "PAYOUT_TIMEOUT": "2s",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
		"HOURGLASS_REDIS_HORIZON": "1h", "HOURGLASS_RECONCILE_INTERVAL": "1m", "HOURGLASS_RECONCILE_GRACE": "1m",
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Local)
	if err != nil {
		t.Fatal(err)
	}
	recorders := map[string]*ledgerRecorder{}
	apps := map[string]*app.App{}
	for _, fn := range functionNames {
		rec := &ledgerRecorder{proxy: httputil.NewSingleHostReverseProxy(target), tables: tables, calls: map[string]map[string]bool{}}
		srv := httptest.NewServer(rec)
		t.Cleanup(srv.Close)
		c := cfg
		c.DynamoDBEndpoint = srv.URL
		rdb, err := app.Connect(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		a, err := app.New(c, app.NewLogger(io.Discard, c.SlogLevel()), rdb)
		if err != nil {
			t.Fatal(err)
		}
		recorders[fn], apps[fn] = rec, a
	}
	// Tables made outside any function's recorder: the stack makes them.
	setup := cfg
	setupRDB, err := app.Connect(setup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = setupRDB.Close() })
	setupApp, err := app.New(setup, app.NewLogger(io.Discard, setup.SlogLevel()), setupRDB)
	if err != nil {
		t.Fatal(err)
	}
	if err := setupApp.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}

	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	enqueue, sk, pollerApp, consumerApp, operator := apps[fnEnqueue], apps[fnSeckill], apps[fnPoller], apps[fnConsumer], apps[fnOperator]

	// The withdrawal API.
	create := func(user, key, body string) (withdrawal.Created, error) {
		return httpapi.CreateWithdrawal(ctx, enqueue.Service, user, key, []byte(body))
	}
	now, err := create("u1", "k-now", `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":0}`)
	must("create due now", err)
	_, err = create("u1", "k-now", `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":0}`)
	must("replay", err)
	if _, err := create("u1", "k-now", `{"amount":"11.00","currency":"USD","destination":"acct_1","delay_seconds":0}`); err == nil {
		t.Fatal("another body under a used key was accepted")
	}
	// A due time the clock refuses, found once the key is reserved: the
	// reservation is deleted.
	if _, err := create("u1", "k-late", `{"amount":"10.00","currency":"USD","destination":"acct_1","process_at":"2020-01-01T00:00:00Z"}`); err == nil {
		t.Fatal("a withdrawal due in 2020 was accepted")
	}
	far, err := create("u2", "k-far", `{"amount":"20.00","currency":"USD","destination":"acct_2","delay_seconds":10800}`)
	must("create due in 3 h", err)
	farther, err := create("u2", "k-farther", `{"amount":"21.00","currency":"USD","destination":"acct_2","delay_seconds":36000}`)
	must("create due in 10 h", err)
	cancelled, err := create("u3", "k-cancel", `{"amount":"30.00","currency":"USD","destination":"acct_3","delay_seconds":600}`)
	must("create to cancel", err)
	_, err = enqueue.Service.Get(ctx, "u2", far.ID)
	must("get", err)
	_, err = enqueue.Service.List(ctx, "u2", 10, "")
	must("list", err)
	delay := 7200 * time.Second
	_, err = enqueue.Service.Reschedule(ctx, "u3", cancelled.ID, withdrawal.When{Delay: &delay}, nil)
	must("reschedule", err)
	_, err = enqueue.Service.Cancel(ctx, "u3", cancelled.ID)
	must("cancel", err)

	// The flash sale: two orders made (one paid, one left to expire), and
	// purchases whose orders are never made, for the compensation passes.
	_, err = sk.Seckill.Preheat(ctx, seckill.Sale{ItemID: "lc-item", Stock: 10, PerUserLimit: 1,
		EndsAt: time.Now().Add(time.Hour), Price: decimal.RequireFromString("5.00"), Currency: "USD", PaymentWindow: time.Second})
	must("preheat", err)
	buy := func(user string) seckill.Purchase {
		t.Helper()
		p, err := sk.Seckill.Purchase(ctx, "lc-item", user, 1)
		must("purchase by "+user, err)
		return p
	}
	paid, expires := buy("b1"), buy("b2")
	_, err = sk.Seckill.State(ctx, "lc-item")
	must("item state", err)

	// The poller hands due jobs to the work queue; the consumer runs them.
	sent := &workQueue{}
	pl, err := pollerApp.Poller(sent, true)
	must("poller", err)
	provider, err := consumerApp.Provider(false)
	must("provider", err)
	prc, err := consumerApp.Processor(provider, finance.NewLog(io.Discard))
	must("processor", err)
	consume := lambda.NewHandler(consumerApp.Consumer(prc, false).Handle)
	drain := func() {
		t.Helper()
		for range 50 {
			_, err := pl.Round(ctx)
			must("poller round", err)
			jobs := sent.take()
			if len(jobs) == 0 {
				return
			}
			var ev events.SQSEvent
			for i, j := range jobs {
				b, _ := json.Marshal(j)
				ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint("m", i), Body: string(b), EventSource: "aws:sqs"})
			}
			payload, _ := json.Marshal(ev)
			if _, err := consume.Invoke(ctx, payload); err != nil {
				t.Fatalf("consumer: %v", err)
			}
		}
	}
	drain()
	_, err = sk.Seckill.Mine(ctx, "lc-item", "b1")
	must("a buyer's purchase", err)
	order := func(p seckill.Purchase) seckill.Order {
		t.Helper()
		mine, err := sk.Seckill.Mine(ctx, "lc-item", p.UserID)
		must("purchase of "+p.UserID, err)
		got, err := consumerApp.Orders.FindOrder(ctx, seckill.Order{ID: mine.OrderID})
		must("order of "+p.UserID, err)
		return got
	}
	o := order(paid)
	_, _, err = enqueue.Orders.SettlePayment(ctx, seckill.Payment{EventID: "pay-1", OrderID: o.ID, Succeeded: true,
		Amount: decimal.RequireFromString("5.00"), Currency: "USD", At: o.CreatedAt})
	must("payment confirmation", err)
	_ = order(expires)
	time.Sleep(1500 * time.Millisecond) // past the payment window
	drain()

	// The payout provider's callback on the paid withdrawal.
	_, err = enqueue.Service.Callback(ctx, now.ID, withdrawal.Callback{EventID: "evt-returned", Status: withdrawal.Returned,
		At: time.Now()})
	must("payout callback", err)

	// Purchases whose order jobs SQS took and lost: each of the operator's
	// reconcile and the poller's passes gives one up after the requeues
	// (voiding its order id), and each promotes a far withdrawal.
	// A poller on a clock of its own claims what falls due in the future
	// passes (the one SQS then loses).
	late := clock.NewFake(time.Now())
	pollerApp.Clock = late
	lose, err := pollerApp.Poller(sent, true)
	pollerApp.Clock = clock.System{}
	must("late poller", err)
	lost := func(user string, passes func(now time.Time) error, start time.Time) {
		t.Helper()
		buy(user)
		late.Set(time.Now().Add(time.Second))
		for i := range seckill.DefaultMaxRequeues + 1 {
			_, err := lose.Round(ctx)
			must("late poller round", err)
			sent.take()
			now := start.Add(time.Duration(i) * time.Hour)
			must(fmt.Sprint("pass ", i), passes(now))
			late.Set(now.Add(time.Minute))
		}
	}
	lost("b3", func(now time.Time) error { _, _, err := operator.Reconcile(ctx, now); return err }, time.Now().Add(2*time.Hour))
	lost("b4", func(now time.Time) error { _, _, err := pollerApp.Reconcile(ctx, now); return err }, time.Now().Add(9*time.Hour))
	_ = farther

	// The operator's payouts unresolved and resolve.
	_, err = operator.Service.Unresolved(ctx, cfg.MaxAttempts)
	must("payouts unresolved", err)
	rev := int64(0)
	if _, err := operator.Service.Resolve(ctx, far.ID, withdrawal.Resolution{Status: withdrawal.Failed, Reason: "test",
		By: "operator", IfRevision: &rev, MaxAttempts: cfg.MaxAttempts}); err == nil {
		t.Fatal("a scheduled withdrawal was resolved")
	}

	out := map[string]map[string][]string{}
	for fn, rec := range recorders {
		rec.mu.Lock()
		for _, e := range rec.errs {
			t.Errorf("%s: %s", fn, e)
		}
		for res, actions := range rec.calls {
			if out[fn] == nil {
				out[fn] = map[string][]string{}
			}
			for a := range actions {
				out[fn][res] = append(out[fn][res], a)
			}
			slices.Sort(out[fn][res])
		}
		rec.mu.Unlock()
	}
	return out
}

// workQueue stands in for SQS: it takes every job the poller sends.
type workQueue struct {
	mu   sync.Mutex
	jobs []delayq.Job
}

func (q *workQueue) Dispatch(_ context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.jobs = append(q.jobs, jobs...)
	return nil, nil
}

func (q *workQueue) take() []delayq.Job {
	q.mu.Lock()
	defer q.mu.Unlock()
	jobs := q.jobs
	q.jobs = nil
	return jobs
}

// readBack are grants no operation here calls, kept for a path of the
// code DynamoDB itself does not take: voiding an order id (compensation)
// reads the order back with GetItem when a failed put's condition returns
// no item (ledger claimOrder). DynamoDB returns it, dynalite does not; a
// void of an id an order took is the compensation's race with the
// consumer, which this drive does not stage.
var readBack = map[string]bool{
	fnPoller + " " + schemaNames.Orders + " GetItem":   true,
	fnOperator + " " + schemaNames.Orders + " GetItem": true,
}

// TestLedgerCallsAreGranted: every DynamoDB call each function makes in
// its operations (ledgerCalls) is granted to its role on that table or
// index, evaluated as IAM does on every stack; every action ledgerUse
// grants is one the function was seen to call, so the lists cannot rot;
// and the seckill function calls DynamoDB not at all.
func TestLedgerCallsAreGranted(t *testing.T) {
	calls := ledgerCalls(t)
	if len(calls[fnSeckill]) > 0 {
		t.Errorf("the flash-sale API calls DynamoDB: %v", calls[fnSeckill])
	}
	for _, fn := range functionNames {
		for res, actions := range calls[fn] {
			for _, a := range actions {
				if !slices.Contains(ledgerUse[fn][res], a) {
					t.Errorf("%s calls dynamodb:%s on %s, not in ledgerUse", fn, a, res)
				}
			}
		}
		for res, actions := range ledgerUse[fn] {
			for _, a := range actions {
				if !slices.Contains(calls[fn][res], a) && !readBack[fn+" "+res+" "+a] {
					t.Errorf("ledgerUse grants %s dynamodb:%s on %s, which none of its operations called", fn, a, res)
				}
			}
		}
	}
	for _, st := range everyStack(t) {
		t.Run(st.name, func(t *testing.T) {
			arns := map[string]string{}
			for _, tbl := range []struct {
				name string
				id   string
			}{
				{schemaNames.Withdrawals, logicalID(st.stack, st.stack.Withdrawals)},
				{schemaNames.Orders, logicalID(st.stack, st.stack.Orders)},
				{schemaNames.Idempotency, logicalID(st.stack, st.stack.Idempotency)},
			} {
				arns[tbl.name] = arnOf("AWS::DynamoDB::Table", tbl.id)
			}
			arnOfResource := func(res string) string {
				table, index, _ := strings.Cut(res, "/index/")
				if index != "" {
					return arns[table] + "/index/" + index
				}
				return arns[table]
			}
			every := []string{schemaNames.Withdrawals, schemaNames.Orders, schemaNames.Idempotency,
				ledgerIndex(schemaNames.Withdrawals, "by_user"), ledgerIndex(schemaNames.Withdrawals, "by_state")}
			for _, fn := range functionNames {
				c := caller{name: fn, role: logicalID(st.stack, st.stack.Functions[fn].Role()), context: map[string]string{}}
				for _, res := range every {
					for _, a := range ledgerActions {
						want := slices.Contains(ledgerUse[fn][res], strings.TrimPrefix(a, "dynamodb:"))
						if got := permitted(t, st.tpl, c, a, arnOfResource(res), ""); got != want {
							t.Errorf("%s %s on %s: allowed %v, want %v", fn, a, res, got, want)
						}
					}
				}
				for _, a := range []string{"dynamodb:Scan", "dynamodb:BatchWriteItem", "dynamodb:DeleteTable", "dynamodb:TransactWriteItems"} {
					if permitted(t, st.tpl, c, a, arns[schemaNames.Withdrawals], "") {
						t.Errorf("%s may %s", fn, a)
					}
				}
			}
		})
	}
}

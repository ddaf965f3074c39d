package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/sqsfake"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/dispatch"
	"github.com/hourglass/hourglass/shared/seckill"
)

// benchCost measures what one withdrawal and one flash-sale purchase use of
// each billed AWS service, through the code the functions run: the enqueue
// and seckill routers on API Gateway v2 events, poller rounds with the real
// SQS dispatcher against an SQS JSON-protocol endpoint, the consumer handler
// on SQS events as the event source mapping delivers them, the payout
// provider and SNS (finance, order events) as HTTP endpoints, on each
// ledger (DynamoDB: dynalite, every call asked for its consumed capacity).
// From the counts and bench/prices.json it prices a million of each.
func benchCost(ctx context.Context, rdb redis.UniversalClient, srv *server, rep *report, quick bool) error {
	pl, err := readPrices(pricesFile)
	if err != nil {
		return err
	}
	profiles, err := readProfiles(profilesFile)
	if err != nil {
		return err
	}
	n := 2000
	if quick {
		n = 200
	}
	return run(func(h *harness) error {
		env := &costEnv{h: h, rdb: rdb, srv: srv, n: n, saved: map[string]bool{}}
		if err := env.start(); err != nil {
			return err
		}
		measured := map[string]*measurement{}
		for _, ledger := range []string{"redis", "dynamodb"} {
			for _, path := range []string{"withdrawal", "purchase"} {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					return err
				}
				m, err := env.measure(ctx, ledger, path)
				if err != nil {
					return fmt.Errorf("%s, %s ledger: %w", path, ledger, err)
				}
				measured[path+"/"+ledger] = m
			}
		}
		idle, err := env.idlePoller(ctx)
		if err != nil {
			return err
		}
		if err := flushAndWait(ctx, rdb); err != nil {
			return err
		}
		need, err := measurePoller(ctx, h, rdb, srv, 10*n)
		if err != nil {
			return err
		}
		reportPoller(rep, need, profiles)
		reportCost(rep, pl, profiles, measured, idle, n)
		return nil
	})
}

// costEnv holds the outside parties, shared by every run.
type costEnv struct {
	h   *harness
	rdb redis.UniversalClient
	srv *server
	n   int

	sqs     *sqsfake.Server
	sns     *snsCounter
	payouts atomic.Int64
	payWire fakes.WireBytes
	payURL  string
	dynamo  *capacityProxy
	table   int
	saved   map[string]bool // environment variables to restore
}

func (e *costEnv) start() error {
	e.sqs = sqsfake.New(e.h)
	e.sns = newSNSCounter(e.h)
	pay := e.payWire.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		e.payouts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"payout_id":"po-%d"}`, e.payouts.Load())
	}))
	e.h.Cleanup(pay.Close)
	e.payURL = pay.URL
	db := dynalitetest.Start(e.h)
	e.dynamo = newCapacityProxy(e.h, db.Endpoint)
	return nil
}

// measurement is what one path used for n items.
type measurement struct {
	n          int
	u          usage // per item
	cmds       map[string]float64
	usedMemory float64 // Redis bytes per scheduled item, before the poller took it
	batches    float64 // consumer invocations
	// dynamoCalls are the DynamoDB calls per item by operation, with
	// " failed" for those answered with an error (a failed conditional
	// write is billed, but dynalite reports no capacity for it).
	dynamoCalls map[string]float64
	messages    float64 // SQS messages per item
}

// stack is the functions of one ledger, in process.
type stack struct {
	a        *app.App
	enqueue  *timed
	seckill  *timed
	consumer *timed
	poll     func(context.Context) (int, error)
}

func (e *costEnv) stack(ctx context.Context, ledger string) (*stack, error) {
	e.table++
	vars := map[string]string{
		"REDIS_URL": "redis://" + e.srv.addr, "HOURGLASS_AUTH": "jwt", "HOURGLASS_LOG_LEVEL": "error",
		"HOURGLASS_LEDGER": ledger, "DYNAMODB_ENDPOINT": e.dynamo.URL,
		"HOURGLASS_WITHDRAWALS_TABLE": fmt.Sprintf("cost-withdrawals-%d", e.table),
		"HOURGLASS_ORDERS_TABLE":      fmt.Sprintf("cost-orders-%d", e.table),
		"HOURGLASS_IDEMPOTENCY_TABLE": fmt.Sprintf("cost-idempotency-%d", e.table),
		"PAYOUT_URL":                  e.payURL, "PAYOUT_SIGNING_SECRET": "bench-pay",
		// As infra wires them: finance and the order events on SNS topics.
		"FINANCE_TOPIC_ARN":    "arn:aws:sns:us-east-1:123456789012:finance",
		"ORDERS_TOPIC_ARN":     "arn:aws:sns:us-east-1:123456789012:orders",
		"AWS_ENDPOINT_URL_SNS": e.sns.URL,
		"WORK_QUEUE_URL":       sqsfake.QueueURL,
		"AWS_REGION":           "us-east-1", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
		"AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull, "AWS_EC2_METADATA_DISABLED": "true",
	}
	for k, v := range vars {
		if old, ok := os.LookupEnv(k); !e.saved[k] {
			e.saved[k] = true
			e.h.Cleanup(func() { // the section leaves the environment as it found it
				if ok {
					_ = os.Setenv(k, old)
				} else {
					_ = os.Unsetenv(k)
				}
			})
		}
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	cfg, err := config.Load(config.Lambda)
	if err != nil {
		return nil, err
	}
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), e.rdb)
	if err != nil {
		return nil, err
	}
	if err := a.CreateTables(ctx); err != nil {
		return nil, err
	}
	provider, err := a.Provider(false)
	if err != nil {
		return nil, err
	}
	notifier, err := a.Notifier(ctx, io.Discard, false)
	if err != nil {
		return nil, err
	}
	proc, err := a.Processor(provider, notifier)
	if err != nil {
		return nil, err
	}
	d, err := dispatch.NewSQS(e.sqs.Client(), sqsfake.QueueURL)
	if err != nil {
		return nil, err
	}
	p, err := a.Poller(d, true)
	if err != nil {
		return nil, err
	}
	s := &stack{a: a,
		enqueue:  &timed{h: lambda.NewHandler(a.WithdrawalAPI().Serve)},
		seckill:  &timed{h: lambda.NewHandler(a.SeckillAPI().Serve)},
		consumer: &timed{h: lambda.NewHandler(a.Consumer(proc, false).Handle)},
	}
	s.poll = func(ctx context.Context) (int, error) {
		r, err := p.Round(ctx)
		if err == nil {
			err = r.DispatchErr
		}
		return r.Claimed, err
	}
	return s, nil
}

// timed is a function's handler that counts its invocations and their
// billed duration (each rounded up to 1 ms, as Lambda bills).
type timed struct {
	h           lambda.Handler
	invocations int64
	billedMS    int64
}

func (t *timed) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	start := time.Now()
	out, err := t.h.Invoke(ctx, payload)
	d := time.Since(start)
	t.invocations++
	t.billedMS += int64(math.Ceil(float64(d) / float64(time.Millisecond)))
	return out, err
}

// apiEvent is the fixture file with the caller's identity and source
// address made i's own (the rate limits are per user and per source).
func apiEvent(file string, i int, path string, params map[string]string, body string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	ev.RawPath, ev.RequestContext.HTTP.Path, ev.PathParameters = path, path, params
	ev.RequestContext.HTTP.SourceIP = ip
	ev.Headers["x-forwarded-for"] = ip
	ev.Headers["idempotency-key"] = "cost-" + strconv.Itoa(i)
	ev.RequestContext.RequestID = "cost-req-" + strconv.Itoa(i)
	ev.RequestContext.Authorizer.JWT.Claims["sub"] = "cost-user-" + strconv.Itoa(i)
	ev.Body = body
	return json.Marshal(ev)
}

func (e *costEnv) measure(ctx context.Context, ledger, path string) (*measurement, error) {
	s, err := e.stack(ctx, ledger)
	if err != nil {
		return nil, err
	}
	item := "cost-item"
	if path == "purchase" {
		sale := seckill.Sale{ItemID: item, Stock: int64(e.n), EndsAt: time.Now().Add(time.Hour), PerUserLimit: 1, Shards: 1}
		if _, err := s.a.Seckill.Preheat(ctx, sale); err != nil {
			return nil, fmt.Errorf("preheat: %w", err)
		}
	}
	payloads := make([][]byte, e.n)
	for i := range payloads {
		if path == "withdrawal" {
			payloads[i], err = apiEvent("events/withdrawal-create.json", i, "/v1/withdrawals", nil,
				`{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":0}`)
		} else {
			payloads[i], err = apiEvent("events/seckill-purchase.json", i, "/v1/seckill/items/"+item+"/purchases",
				map[string]string{"item_id": item}, `{"quantity":1}`)
		}
		if err != nil {
			return nil, err
		}
	}
	before, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	api := s.enqueue
	if path == "purchase" {
		api = s.seckill
	}
	// The API calls, one at a time as a Lambda instance serves them.
	for i, p := range payloads {
		out, err := api.Invoke(ctx, p)
		if err != nil {
			return nil, err
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusAccepted {
			return nil, fmt.Errorf("request %d: %d %s", i, resp.StatusCode, resp.Body)
		}
	}
	mem, err := usedMemory(ctx, e.rdb)
	if err != nil {
		return nil, err
	}
	// Poller rounds and the consumer until every item is done: paid and
	// told to finance, or ordered and its order.created event published.
	src := &sqsfake.EventSource{Queue: e.sqs, Function: s.consumer, BatchSize: int(consumerBatch), Visibility: time.Minute}
	var receives, deletes int64
	done := func() bool {
		if path == "withdrawal" {
			return e.sns.count("finance") >= before.finance+int64(e.n)
		}
		return e.sns.count("orders") >= before.orders+int64(e.n)
	}
	for step := 0; !done(); step++ {
		if step == 50 {
			return nil, fmt.Errorf("not done after %d passes: %d payouts, %d finance and %d order messages",
				step, e.payouts.Load()-before.payouts, e.sns.count("finance")-before.finance, e.sns.count("orders")-before.orders)
		}
		for {
			claimed, err := s.poll(ctx)
			if err != nil {
				return nil, err
			}
			if claimed == 0 {
				break
			}
		}
		for e.sqs.Len() > 0 {
			got, err := src.Poll(ctx)
			if err != nil {
				return nil, err
			}
			if got == 0 {
				return nil, fmt.Errorf("%d messages invisible: a job failed", e.sqs.Len())
			}
			receives++
			deletes++ // one DeleteMessageBatch of what succeeded
		}
		if !done() {
			time.Sleep(20 * time.Millisecond) // an outbox event due a moment later
		}
	}
	if f := src.ItemFailures.Load(); f > 0 {
		return nil, fmt.Errorf("%d messages failed", f)
	}
	after, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	n := float64(e.n)
	m := &measurement{n: e.n, cmds: map[string]float64{}, batches: float64(s.consumer.invocations),
		usedMemory: float64(mem-before.usedMemory) / n}
	fn := "enqueue"
	if path == "purchase" {
		fn = "seckill"
	}
	m.u = usage{
		APIRequests: 1,
		Invocations: map[string]float64{fn: float64(api.invocations) / n, "consumer": float64(s.consumer.invocations) / n},
		BilledMS:    map[string]float64{fn: float64(api.billedMS) / n, "consumer": float64(s.consumer.billedMS) / n},
		SQSRequests: float64(after.sends-before.sends+receives+deletes) / n,
		WRU:         (after.wru - before.wru) / n,
		RRU:         (after.rru - before.rru) / n,
		SNS:         float64(after.finance+after.orders-before.finance-before.orders) / n,
		RedisBytes:  float64(after.netIn+after.netOut-before.netIn-before.netOut) / n,
		AWSBytes:    float64(after.awsBytes-before.awsBytes) / n,
		OutBytes:    float64(after.outBytes-before.outBytes) / n,
		StoredBytes: float64(mem-before.usedMemory) / n,
	}
	m.messages = float64(after.messages-before.messages) / n
	m.dynamoCalls = map[string]float64{}
	for op, calls := range after.dynamoCalls {
		if d := calls - before.dynamoCalls[op]; d > 0 {
			m.dynamoCalls[op] = float64(d) / n
		}
	}
	for cmd, calls := range after.cmds {
		if d := calls - before.cmds[cmd]; d > 0 {
			m.cmds[cmd] = d / n
			m.u.RedisCmds += d / n
		}
	}
	return m, nil
}

// idlePoller is the Redis commands a second the poller issues with nothing
// due (rounds every poll interval, its housekeeping), over a few seconds of
// a real Run: on nodes that is free, on ElastiCache Serverless it is ECPUs
// whatever the load.
func (e *costEnv) idlePoller(ctx context.Context) (float64, error) {
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		return 0, err
	}
	s, err := e.stack(ctx, "redis")
	if err != nil {
		return 0, err
	}
	d, err := dispatch.NewSQS(e.sqs.Client(), sqsfake.QueueURL)
	if err != nil {
		return 0, err
	}
	p, err := s.a.Poller(d, true)
	if err != nil {
		return 0, err
	}
	before, err := e.snapshot(ctx)
	if err != nil {
		return 0, err
	}
	const span = 5 * time.Second
	p.Run(ctx, time.Now().Add(span))
	after, err := e.snapshot(ctx)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for cmd, calls := range after.cmds {
		total += calls - before.cmds[cmd]
	}
	return total / span.Seconds(), nil
}

// counts is a snapshot of every counter the section reads.
type counts struct {
	cmds            map[string]float64
	netIn, netOut   int64
	usedMemory      int64
	sends, messages int64
	wru, rru        float64
	dynamoCalls     map[string]int64
	finance, orders int64
	payouts         int64
	awsBytes        int64 // SQS and SNS calls, both ways
	outBytes        int64 // payout provider calls, both ways
}

func (e *costEnv) snapshot(ctx context.Context) (counts, error) {
	c := counts{cmds: map[string]float64{}, sends: e.sqs.Calls.Load(), finance: e.sns.count("finance"),
		orders: e.sns.count("orders"), payouts: e.payouts.Load(),
		awsBytes: e.sqs.Wire.Total() + e.sns.Wire.Total(), outBytes: e.payWire.Total()}
	c.wru, c.rru, c.dynamoCalls = e.dynamo.units()
	for _, r := range e.sqs.Requests() {
		c.messages += int64(len(r.Entries))
	}
	info, err := e.rdb.Info(ctx, "commandstats", "stats", "memory").Result()
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "cmdstat_"):
			cmd := strings.TrimPrefix(k, "cmdstat_")
			if cmd == "info" { // the snapshots' own
				continue
			}
			for _, f := range strings.Split(v, ",") {
				if x, ok := strings.CutPrefix(f, "calls="); ok {
					calls, _ := strconv.ParseFloat(x, 64)
					c.cmds[cmd] = calls
				}
			}
		case k == "total_net_input_bytes":
			c.netIn, _ = strconv.ParseInt(v, 10, 64)
		case k == "total_net_output_bytes":
			c.netOut, _ = strconv.ParseInt(v, 10, 64)
		case k == "used_memory":
			c.usedMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return c, nil
}

// snsCounter is an SNS endpoint that answers every Publish and counts them
// by topic name.
type snsCounter struct {
	URL  string
	Wire fakes.WireBytes
	mu   sync.Mutex
	by   map[string]int64
}

func newSNSCounter(h *harness) *snsCounter {
	c := &snsCounter{by: map[string]int64{}}
	srv := c.Wire.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.PostForm.Get("Action") != "Publish" {
			http.Error(w, "unexpected SNS call", http.StatusBadRequest)
			return
		}
		arn := r.PostForm.Get("TopicArn")
		c.mu.Lock()
		c.by[arn[strings.LastIndex(arn, ":")+1:]]++
		c.mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		_, _ = fmt.Fprint(w, fakes.SNSPublishOK)
	}))
	h.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

func (c *snsCounter) count(topic string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[topic]
}

// capacityProxy stands between the DynamoDB client and dynalite: it asks
// every call for its consumed capacity (ReturnConsumedCapacity TOTAL, which
// dynalite computes by DynamoDB's rules: 1 WRU a KB written, 1 RRU per 4 KB
// read strongly, half eventually) and adds up what the answers report.
type capacityProxy struct {
	URL      string
	mu       sync.Mutex
	wru, rru float64
	calls    map[string]int64
}

func newCapacityProxy(h *harness, target string) *capacityProxy {
	p := &capacityProxy{calls: map[string]int64{}}
	client := &http.Client{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		var req map[string]any
		if json.Unmarshal(body, &req) == nil && req != nil && counted(op) {
			req["ReturnConsumedCapacity"] = "TOTAL"
			body, _ = json.Marshal(req)
		}
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, bytes.NewReader(body))
		out.Header = r.Header.Clone()
		out.ContentLength = int64(len(body))
		resp, err := client.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		rb, _ := io.ReadAll(resp.Body)
		if counted(op) {
			p.add(op, resp.StatusCode, rb)
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(rb)
	}))
	h.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// counted: the operations that consume capacity (table management does not).
func counted(op string) bool {
	switch op {
	case "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem", "BatchWriteItem",
		"TransactGetItems", "TransactWriteItems":
		return true
	}
	return false
}

type consumed struct {
	CapacityUnits      float64
	ReadCapacityUnits  float64
	WriteCapacityUnits float64
}

func (p *capacityProxy) add(op string, status int, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if status != http.StatusOK {
		p.calls[op+" failed"]++
		return
	}
	p.calls[op]++
	var one struct{ ConsumedCapacity json.RawMessage }
	if json.Unmarshal(body, &one) != nil || len(one.ConsumedCapacity) == 0 {
		return
	}
	var list []consumed
	if one.ConsumedCapacity[0] == '[' {
		_ = json.Unmarshal(one.ConsumedCapacity, &list)
	} else {
		var c consumed
		_ = json.Unmarshal(one.ConsumedCapacity, &c)
		list = []consumed{c}
	}
	for _, c := range list {
		r, w := c.ReadCapacityUnits, c.WriteCapacityUnits
		if r == 0 && w == 0 { // TOTAL of a one-table call: CapacityUnits only
			switch op {
			case "GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems":
				r = c.CapacityUnits
			default:
				w = c.CapacityUnits
			}
		}
		p.rru += r
		p.wru += w
	}
}

func (p *capacityProxy) units() (wru, rru float64, calls map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wru, p.rru, maps.Clone(p.calls)
}

// reportCost adds the per-item counts and the cost per million as rows, and
// the cost table to the markdown.
func reportCost(rep *report, pl priceList, profiles []costProfile, ms map[string]*measurement, idleCmdsPerSecond float64, n int) {
	w, wd, p, pd := ms["withdrawal/redis"], ms["withdrawal/dynamodb"], ms["purchase/redis"], ms["purchase/dynamodb"]
	scale := fmt.Sprintf("measured over %d items (counts scale linearly)", n)
	per := func(key, figure string, v float64, note string) {
		rep.add(row{Key: key, Figure: figure, Value: v, Note: note})
	}
	for _, c := range []struct {
		suffix, what string
		m            *measurement
	}{
		{"withdrawal", "withdrawal, Redis ledger", w}, {"withdrawal_dynamo", "withdrawal, DynamoDB ledger", wd},
		{"purchase", "purchase, Redis ledger", p}, {"purchase_dynamo", "purchase, DynamoDB ledger", pd},
	} {
		u := c.m.u
		inv, ms := 0.0, 0.0
		for fn := range u.Invocations {
			inv += u.Invocations[fn]
			ms += u.BilledMS[fn]
		}
		per("redis_cmds_per_"+c.suffix, "Redis commands per "+c.what, u.RedisCmds, scale+"; by command: "+cmdList(c.m.cmds))
		per("redis_bytes_per_"+c.suffix, "Redis bytes in + out per "+c.what, u.RedisBytes, "INFO stats total_net_input_bytes + total_net_output_bytes")
		if c.suffix == "withdrawal" {
			per("redis_used_memory_per_withdrawal", "Redis used_memory per scheduled withdrawal over a small run, Redis ledger (bytes; coarse: bytes_per_job is the figure)", c.m.usedMemory,
				fmt.Sprintf("growth over %d before the poller ran, where hash tables grown in powers of two weigh on each; bytes_per_job measures it over 1,000,000; prices ElastiCache Serverless's data stored (an upper bound)", n))
		}
		per("lambda_invocations_per_"+c.suffix, "Lambda invocations per "+c.what, inv,
			fmt.Sprintf("the API function's 1 and the consumer's %.3f (%.0f batches)", u.Invocations["consumer"], c.m.batches))
		per("lambda_billed_ms_per_"+c.suffix, "Lambda billed ms per "+c.what, ms,
			fmt.Sprintf("each invocation's handler time rounded up to 1 ms, on this machine against local Redis and dynalite: API %.2f, consumer %.2f",
				sum(u.BilledMS)-u.BilledMS["consumer"], u.BilledMS["consumer"]))
		per("sqs_requests_per_"+c.suffix, "SQS requests per "+c.what, u.SQSRequests,
			"the poller's SendMessageBatch calls, plus one ReceiveMessage and one DeleteMessageBatch per consumer batch (the event source mapping's)")
		if strings.HasSuffix(c.suffix, "_dynamo") {
			per("dynamo_wru_per_"+c.suffix, "DynamoDB write request units per "+c.what, u.WRU,
				"ConsumedCapacity as dynalite reports it; calls per item: "+cmdList(c.m.dynamoCalls))
			per("dynamo_rru_per_"+c.suffix, "DynamoDB read request units per "+c.what, u.RRU, "ConsumedCapacity as dynalite reports it")
		}
		per("sns_publishes_per_"+c.suffix, "SNS publishes per "+c.what, u.SNS, "finance's payout.processed; the order events' order.created")
	}
	per("redis_cmds_per_second_idle_poller", "Redis commands a second of the poller with nothing due", idleCmdsPerSecond,
		"rounds every poll interval and housekeeping; fixed load, free on nodes")

	prod := profiles[0]
	fixed := fixedMonthly(pl, prod, idleCmdsPerSecond)
	cols := map[string]breakdown{
		"withdrawals_redis":  ours(pl, prod, w.u, storedHours, idleCmdsPerSecond),
		"withdrawals_dynamo": ours(pl, prod, wd.u, storedHours, idleCmdsPerSecond),
		"scheduler":          alternative(pl, wd.u, false),
		"stepfunctions":      alternative(pl, wd.u, true),
		"purchases_redis":    ours(pl, prod, p.u, storedHours, idleCmdsPerSecond),
		"purchases_dynamo":   ours(pl, prod, pd.u, storedHours, idleCmdsPerSecond),
	}
	sched, sfn := cols["scheduler"].total(), cols["stepfunctions"].total()
	amort := "prod profile: one million a month (30 days) carrying the month's fixed costs ($" + fmt.Sprintf("%.0f", fixed.total()) + ")"
	rep.add(row{Key: "cost_usd_per_million_withdrawals_redis", Figure: "Cost of 1M withdrawals, Redis ledger, prod profile (USD)",
		Value: cols["withdrawals_redis"].total(), Baseline: "EventBridge Scheduler", Base: sched, Note: amort})
	rep.add(row{Key: "cost_usd_per_million_withdrawals_dynamo", Figure: "Cost of 1M withdrawals, DynamoDB ledger, prod profile (USD)",
		Value: cols["withdrawals_dynamo"].total(), Baseline: "EventBridge Scheduler", Base: sched, Note: amort})
	rep.add(row{Key: "cost_usd_per_million_withdrawals_dynamo_vs_stepfunctions", Figure: "Cost of 1M withdrawals, DynamoDB ledger, prod profile (USD)",
		Value: cols["withdrawals_dynamo"].total(), Baseline: "Step Functions Wait", Base: sfn})
	rep.add(row{Key: "cost_usd_per_million_eventbridge_scheduler", Figure: "Cost of 1M withdrawals delayed by EventBridge Scheduler (USD)",
		Value: sched, Note: "one one-time schedule and one consumer invocation (one job) per withdrawal; API, enqueue, DynamoDB and SNS as measured"})
	rep.add(row{Key: "cost_usd_per_million_stepfunctions_wait", Figure: "Cost of 1M withdrawals delayed by a Step Functions Wait (USD)",
		Value: sfn, Note: fmt.Sprintf("%d state transitions per execution (into Wait, Wait to Task, Task to end; counting the start and the end "+
			"as AWS's pricing examples do, from memory: the two states alone would be a third less) and one consumer invocation", stepTransitions)})
	rep.add(row{Key: "cost_usd_per_million_purchases", Figure: "Cost of 1M flash-sale purchases, Redis ledger, prod profile (USD)",
		Value: cols["purchases_redis"].total(), Note: amort})
	rep.add(row{Key: "cost_usd_per_million_purchases_dynamo", Figure: "Cost of 1M flash-sale purchases, DynamoDB ledger, prod profile (USD)",
		Value: cols["purchases_dynamo"].total(), Note: amort})
	rep.add(row{Key: "aws_bytes_per_withdrawal", Figure: "Bytes to SQS and SNS per withdrawal, both ways (Redis ledger)", Value: w.u.AWSBytes,
		Note: "the poller's SendMessageBatch share and finance's publish, headers included (TLS not): endpoint or NAT data"})
	rep.add(row{Key: "provider_bytes_per_withdrawal", Figure: "Bytes to the payout provider per withdrawal, both ways", Value: w.u.OutBytes,
		Note: "the payout call through the NAT gateway, headers included (TLS not)"})

	schedPerItem := sched / 1e6
	profileRows := make([]profileCost, 0, len(profiles))
	for _, pr := range profiles {
		pc := costOf(pl, pr, ms, schedPerItem, idleCmdsPerSecond)
		profileRows = append(profileRows, pc)
		f := pc.fixed.total()
		fixedRow := row{Key: "cost_usd_fixed_per_month_" + pr.Name, Figure: "Fixed cost a month at no load, " + pr.Name + " profile (USD)",
			Value: f, Note: fixedNote(pl, pr, pc.fixed)}
		evenRow := row{Key: "break_even_million_withdrawals_vs_scheduler_" + pr.Name,
			Figure: "Withdrawals a month (millions) from which ours, Redis ledger, " + pr.Name + " profile, costs less than EventBridge Scheduler",
			Value:  pc.breakEven, Note: "the fixed cost a month over the per-item saving; 0: never"}
		if pr.Serverless { // the goals are the serverless profiles'

			fixedRow.Target, fixedRow.Met = fmt.Sprintf("≤ $%.0f", serverlessFixedGoal), met(f <= serverlessFixedGoal)
			evenRow.Target, evenRow.Met = fmt.Sprintf("≤ %.0f million", serverlessBreakEvenGoal), met(pc.breakEven > 0 && pc.breakEven <= serverlessBreakEvenGoal)
			if !*evenRow.Met {
				evenRow.Note += "; what limits it: " + breakEvenLimit(pc, schedPerItem)
			}
		}
		rep.add(fixedRow)
		rep.add(evenRow)
		rep.add(row{Key: "break_even_million_withdrawals_vs_scheduler_dynamo_" + pr.Name,
			Figure: "Withdrawals a month (millions) from which ours, DynamoDB ledger, " + pr.Name + " profile, costs less than EventBridge Scheduler",
			Value:  pc.breakEvenDynamo, Note: "the fixed cost a month over the per-item saving; 0: never"})
	}
	// The keys of earlier runs, prod's figures.
	rep.add(row{Key: "cost_usd_fixed_per_month", Figure: "Fixed cost a month at no load, prod profile (USD)", Value: fixed.total(),
		Note: fixedNote(pl, prod, fixed)})
	rep.add(row{Key: "break_even_million_withdrawals_per_month_vs_scheduler", Figure: "Withdrawals a month (millions) from which ours, Redis ledger, prod profile, costs less than EventBridge Scheduler",
		Value: profileRows[0].breakEven, Note: "the fixed cost a month over the per-item saving; 0: never"})
	rep.add(row{Key: "break_even_million_withdrawals_per_month_vs_scheduler_dynamo", Figure: "Withdrawals a month (millions) from which ours, DynamoDB ledger, prod profile, costs less than EventBridge Scheduler",
		Value: profileRows[0].breakEvenDynamo, Note: "the fixed cost a month over the per-item saving; 0: never"})
	rep.add(row{Key: "cost_usd_per_million_withdrawals_serverless_redis", Figure: "Redis work of 1M withdrawals on ElastiCache Serverless instead of nodes (USD)",
		Value: serverlessRedis(pl, w.u, 1e6, storedHours),
		Note:  "ECPUs (a floor: one a command or one a KB moved) and data stored for the default 30 min delay; the idle poller's ECPUs and the 100 MB minimum are the serverless profile's fixed cost"})
	rep.extra = append(rep.extra, profileTable(pl, profileRows, sched))

	var b strings.Builder
	b.WriteString("\n## Cost per million on AWS (us-east-1), prod profile\n\n")
	fmt.Fprintf(&b, "List prices of %s (bench/prices.json, with the source and how each was checked). "+
		"Each column is one million items in a month of 30 days; ours carry the whole month's fixed cost (ElastiCache nodes, "+
		"the poller, the event source's empty polls, NAT and endpoints: $%.0f), so they fall with volume: "+
		"the per-item part alone is $%.2f (withdrawals, Redis ledger), $%.2f (DynamoDB ledger) and $%.2f (purchases, Redis ledger) a million. "+
		"The alternatives keep the API, the enqueue function, the DynamoDB ledger and the finance messages as measured and swap the delay "+
		"hop: one schedule or one Standard execution (%d transitions) per withdrawal, each invoking the consumer for one job. "+
		"Counts were measured over %d items per column, all due at once, so the consumer got full batches of %.0f; "+
		"at a trickle, one message a batch, each message is one consumer invocation and three SQS requests: "+
		"+$%.2f a million withdrawals, +$%.2f a million purchases. Lambda durations were measured on this machine "+
		"against local Redis and dynalite (AWS round trips are longer; at these sizes the request charge dominates).\n\n",
		pl.Date, fixed.total(), variable(pl, prod, w.u, 1e6, storedHours).total(), variable(pl, prod, wd.u, 1e6, storedHours).total(),
		variable(pl, prod, p.u, 1e6, storedHours).total(),
		stepTransitions, n, consumerBatch, trickle(pl, w), trickle(pl, p))
	names := []string{"withdrawals_redis", "withdrawals_dynamo", "scheduler", "stepfunctions", "purchases_redis", "purchases_dynamo"}
	list := make([]breakdown, len(names))
	for i, name := range names {
		list[i] = cols[name]
	}
	b.WriteString(costTable(names, list))
	rep.extra = append(rep.extra, b.String())
}

// trickle is what a million items of m cost more when every consumer
// batch holds one message instead of the measured batches.
func trickle(pl priceList, m *measurement) float64 {
	extraInvocations := m.messages - m.u.Invocations["consumer"]
	extraSQS := 3*m.messages - m.u.SQSRequests
	return 1e6 * (extraInvocations*pl.unit("lambda_request") + extraSQS*pl.unit("sqs_request"))
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// cmdList is "evalsha 3.00, hget 1.00, ...", most called first.
func cmdList(cmds map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range cmds {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || (l[i].v == l[j].v && l[i].k < l[j].k) })
	parts := make([]string, len(l))
	for i, x := range l {
		parts[i] = fmt.Sprintf("%s %.2f", x.k, x.v)
	}
	return strings.Join(parts, ", ")
}

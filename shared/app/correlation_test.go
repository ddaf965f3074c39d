package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// heard is what an outbound endpoint (the payout provider, the finance
// webhook) received: each request's X-Request-Id and body.
type heard struct {
	mu     sync.Mutex
	ids    []string
	bodies [][]byte
	// fail is how many requests to answer 503 before answering.
	fail int
}

func (h *heard) serve(t *testing.T, answer string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.ids = append(h.ids, r.Header.Get("X-Request-Id"))
		fail := h.fail > 0
		if fail {
			h.fail--
		} else {
			h.bodies = append(h.bodies, body)
		}
		h.mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (h *heard) take() ([]string, [][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...), append([][]byte(nil), h.bodies...)
}

// corrStack is the whole system in one process with every part logging to
// one buffer: the API router, the poller handing jobs to a capturing SQS
// stand-in, the consumer Lambda handler, an HTTP provider and finance
// webhook that record what they were sent.
type corrStack struct {
	a        *app.App
	api      *app.App // the API's process: its own App, as in AWS
	logs     *syncBuffer
	provider *heard
	finance  *heard
	consumer lambda.Handler
	sent     *capture
	poll     func()
}

func newCorrStack(t *testing.T, env map[string]string) *corrStack {
	t.Helper()
	s := &corrStack{logs: &syncBuffer{}, provider: &heard{}, finance: &heard{}, sent: &capture{}}
	rs := redistest.Start(t)
	for k, v := range map[string]string{
		"REDIS_URL": rs.URL(), "HOURGLASS_AUTH": "jwt", "HOURGLASS_LOG_LEVEL": "debug",
		"PAYOUT_URL": s.provider.serve(t, `{"payout_id":"po_1"}`), "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": s.finance.serve(t, `{}`), "FINANCE_SIGNING_SECRET": "fin-secret",
		"PAYOUT_WEBHOOK_SECRET": "hook-secret",
		"HOURGLASS_RETRY_BASE":  "20ms", "HOURGLASS_RETRY_CAP": "40ms",
	} {
		t.Setenv(k, v)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Lambda)
	if err != nil {
		t.Fatal(err)
	}
	build := func() *app.App {
		rdb, err := app.Connect(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		a, err := app.New(cfg, app.NewLogger(s.logs, slog.LevelDebug), rdb)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.CreateTables(context.Background()); err != nil {
			t.Fatal(err)
		}
		return a
	}
	s.api, s.a = build(), build()
	provider, err := s.a.Provider(false)
	if err != nil {
		t.Fatal(err)
	}
	notifier, err := s.a.Notifier(context.Background(), os.Stdout, false)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := s.a.Processor(provider, notifier)
	if err != nil {
		t.Fatal(err)
	}
	s.consumer = lambda.NewHandler(s.a.Consumer(proc, false).Handle)
	p, err := s.a.Poller(s.sent, true)
	if err != nil {
		t.Fatal(err)
	}
	s.poll = func() {
		t.Helper()
		if _, err := p.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// call serves one API Gateway event with request id reqID through the API.
func (s *corrStack) call(t *testing.T, reqID, method, path, user, body string, headers map[string]string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	ev := events.APIGatewayV2HTTPRequest{
		RawPath: path, Body: body,
		Headers: map[string]string{"content-type": "application/json"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: reqID,
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, SourceIP: "192.0.2.1"},
		},
	}
	for k, v := range headers {
		ev.Headers[k] = v
	}
	if user != "" {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
				Claims: map[string]string{"sub": user, "scope": "hourglass/user"},
			},
		}
	}
	resp, err := s.api.Router().Serve(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// drain runs poller rounds and feeds what they hand on to the consumer
// Lambda, delivering again what it reports failed (as SQS would), until
// done says the work is done.
func (s *corrStack) drain(t *testing.T, done func() bool) {
	t.Helper()
	var again []delayq.Job
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		s.poll()
		jobs := append(again, s.sent.take()...)
		again = nil
		if len(jobs) == 0 {
			if done() {
				return
			}
			time.Sleep(10 * time.Millisecond) // a retry not yet due
			continue
		}
		ev := events.SQSEvent{}
		for i, j := range jobs {
			body, _ := json.Marshal(j)
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: strconv.Itoa(i), Body: string(body), EventSource: "aws:sqs"})
		}
		payload, _ := json.Marshal(ev)
		out, err := s.consumer.Invoke(context.Background(), payload)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.SQSEventResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		for _, f := range resp.BatchItemFailures {
			i, _ := strconv.Atoi(f.ItemIdentifier)
			again = append(again, jobs[i])
		}
	}
	t.Fatal("the work was not done in 10s")
}

// lines returns every JSON log line written so far.
func (s *corrStack) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.logs.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// about returns the log lines that mention id anywhere, failing the test
// for any of them without request_id want.
func about(t *testing.T, lines []map[string]any, id, want string) []map[string]any {
	t.Helper()
	var hits []map[string]any
	for _, m := range lines {
		raw, _ := json.Marshal(m)
		if !strings.Contains(string(raw), id) {
			continue
		}
		hits = append(hits, m)
		if got, _ := m["request_id"].(string); got != want {
			t.Errorf("log line about %s has request_id %q, want %q: %s", id, got, want, raw)
		}
	}
	return hits
}

func msgs(lines []map[string]any) []string {
	var out []string
	for _, m := range lines {
		s, _ := m["msg"].(string)
		out = append(out, s)
	}
	return out
}

func TestOneRequestIDFollowsAWithdrawal(t *testing.T) {
	backends := []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"redis", func(*testing.T) map[string]string { return nil }},
		{"dynamodb", func(t *testing.T) map[string]string {
			db := dynalitetest.Start(t)
			dynTables(t)
			return map[string]string{"HOURGLASS_LEDGER": "dynamodb", "DYNAMODB_ENDPOINT": db.Endpoint}
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := newCorrStack(t, b.env(t))
			const create, replay, hook = "req-create-1", "req-replay-1", "req-hook-1"
			body := `{"amount":"88.80","currency":"CNY","destination":"bank_6222","delay_seconds":0}`
			resp := s.call(t, create, http.MethodPost, "/v1/withdrawals", "alice", body, map[string]string{"idempotency-key": "k-1"})
			if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted {
				t.Fatalf("create: %d %s", resp.StatusCode, resp.Body)
			}
			var v httpapi.View
			if err := json.Unmarshal([]byte(resp.Body), &v); err != nil {
				t.Fatal(err)
			}
			again := s.call(t, replay, http.MethodPost, "/v1/withdrawals", "alice", body, map[string]string{"idempotency-key": "k-1"})
			if again.Headers["Idempotent-Replayed"] != "true" {
				t.Fatalf("replay: %d %v %s", again.StatusCode, again.Headers, again.Body)
			}
			w, err := s.a.Ledger.Find(context.Background(), v.ID)
			if err != nil {
				t.Fatal(err)
			}
			if w.RequestID != create {
				t.Errorf("record's request id %q after a replay, want the create's %q", w.RequestID, create)
			}

			// The provider fails once (a retry) and finance once (the job
			// is delivered again): the lines of both carry the id too.
			s.provider.fail, s.finance.fail = 1, 1
			told := func(n int) func() bool {
				return func() bool { _, b := s.finance.take(); return len(b) == n }
			}
			s.drain(t, told(1))
			ids, _ := s.provider.take()
			if len(ids) != 2 || ids[0] != create || ids[1] != create {
				t.Errorf("provider heard X-Request-Id %q, want two calls with %q", ids, create)
			}
			// The provider reports the money came back: finance hears again.
			cb := fmt.Sprintf(`{"event_id":"ev-1","withdrawal_id":%q,"payout_id":"po_1","status":"returned"}`, v.ID)
			sig := signature.Sign([]byte("hook-secret"), time.Now(), []byte(cb))
			if r := s.call(t, hook, http.MethodPost, "/v1/webhooks/payouts", "", cb, map[string]string{strings.ToLower(signature.Header): sig}); r.StatusCode != http.StatusOK {
				t.Fatalf("callback: %d %s", r.StatusCode, r.Body)
			}
			s.drain(t, told(2))

			ids, bodies := s.finance.take()
			ids = ids[1:] // the refused first one
			if len(bodies) != 2 {
				t.Fatalf("finance heard %d messages, want paid and returned", len(bodies))
			}
			for i, raw := range bodies {
				var m withdrawal.Processed
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				if m.RequestID != create || ids[i] != create {
					t.Errorf("finance message %s: request_id %q, X-Request-Id %q, want %q", m.Status, m.RequestID, ids[i], create)
				}
			}

			lines := s.lines(t)
			hits := about(t, lines, v.ID, create)
			for _, want := range []string{"withdrawal scheduled", "payout not settled, retry scheduled",
				"job failed, delivering again later", "payout processed", "payout callback applied"} {
				if !strings.Contains(strings.Join(msgs(hits), "\n"), want) {
					t.Errorf("no %q line about %s among %q", want, v.ID, msgs(hits))
				}
			}
			t.Logf("%d lines about %s: %q", len(hits), v.ID, msgs(hits))
			if n := len(hits); n < 4 {
				t.Errorf("only %d lines about %s: %q", n, v.ID, msgs(hits))
			}
		})
	}
}

func TestOneRequestIDFollowsAnOrder(t *testing.T) {
	s := newCorrStack(t, nil)
	now := time.Now().UTC()
	if _, err := s.api.Seckill.Preheat(context.Background(), seckill.Sale{ItemID: "sku-1", Stock: 5,
		StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), PerUserLimit: 1, Shards: 1}); err != nil {
		t.Fatal(err)
	}
	const buy = "req-buy-1"
	resp := s.call(t, buy, http.MethodPost, "/v1/seckill/items/sku-1/purchases", "bob", `{"quantity":1}`, nil)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("purchase: %d %s", resp.StatusCode, resp.Body)
	}
	var p struct {
		PurchaseID string `json:"purchase_id"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.PurchaseID == "" {
		t.Fatalf("purchase answer %s: %v", resp.Body, err)
	}
	s.drain(t, func() bool { return true })

	lines := s.lines(t)
	var admitted, made []map[string]any
	for _, m := range lines {
		if m["purchase_id"] != p.PurchaseID {
			continue
		}
		switch m["msg"] {
		case "purchase admitted":
			admitted = append(admitted, m)
		case "order made":
			made = append(made, m)
		}
	}
	// The purchase request's id is tied to the purchase and order ids once,
	// at the API; every later line names the purchase and its order.
	if len(admitted) != 1 || admitted[0]["request_id"] != buy || admitted[0]["order_id"] == "" {
		t.Errorf("admission lines %v, want one with request_id %q and the order id", admitted, buy)
	}
	if len(made) != 1 || made[0]["order_id"] != admitted[0]["order_id"] {
		t.Errorf("order lines %v, want one naming the order %v", made, admitted[0]["order_id"])
	}
}

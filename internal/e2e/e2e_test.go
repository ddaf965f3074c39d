// Package e2e_test drives the five built Lambda bootstraps under the AWS
// Lambda runtime interface emulator with the sample events of events/: the
// artifacts users deploy, on the runtime protocol Lambda speaks, against a
// real redis-server, an SQS JSON-protocol endpoint, and fake payout and
// finance endpoints. `make e2e` builds the bootstraps for this machine,
// installs the emulator and runs it; without them the test skips.
package e2e_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/rie"
	"github.com/hourglass/hourglass/internal/sqsfake"
	"github.com/hourglass/hourglass/shared/signature"
)

// Where make e2e puts the emulator and the host bootstraps
// (<dir>/<function>/bootstrap).
const (
	emulatorEnv   = "HOURGLASS_RIE"
	bootstrapsEnv = "HOURGLASS_BOOTSTRAPS"
)

var functions = []string{"enqueue", "seckill", "poller", "consumer", "operator"}

// pollerTimeout is the poller's function timeout under the emulator; it
// polls until pollerMargin before it, then returns.
const (
	pollerTimeout = 3 * time.Second
	pollerMargin  = "1s"
)

type stack struct {
	t        *testing.T
	fns      map[string]*rie.Function
	sizes    map[string]int64
	sqs      *sqsfake.Server
	provider *fakes.Provider
	finance  *fakes.Finance
	orders   *fakes.OrderEvents
	consumer *sqsfake.EventSource
}

func start(t *testing.T) *stack {
	t.Helper()
	emulator, dir := os.Getenv(emulatorEnv), os.Getenv(bootstrapsEnv)
	if emulator == "" || dir == "" {
		t.Skipf("%s and %s are not set: run make e2e", emulatorEnv, bootstrapsEnv)
	}
	redis := redistest.Start(t)
	s := &stack{t: t, fns: map[string]*rie.Function{}, sizes: map[string]int64{},
		sqs: sqsfake.New(t), provider: fakes.NewProvider(t, "pay-secret"), finance: fakes.NewFinance(t, "fin-secret"),
		orders: fakes.NewOrderEvents(t, "ord-secret")}
	// As deployed: every key the functions use comes from Secrets Manager
	// (a stand-in speaking its protocol), each channel's its own, and every
	// outbound URL is https (TLS fronts of the fakes, trusted through
	// SSL_CERT_FILE). A function refuses to start otherwise.
	sm := fakes.NewSecretStore(map[string]string{
		"e2e/payout-signing": "pay-secret", "e2e/finance-signing": "fin-secret", "e2e/orders-signing": "ord-secret",
		"e2e/payout-webhook": "e2e-payout-webhook-key", "e2e/payments-webhook": "e2e-payments-webhook-key",
	})
	front := newTLSFronts(t)
	common := []string{
		"REDIS_URL=" + redis.URL(), "HOURGLASS_AUTH=jwt", "HOURGLASS_LOG_LEVEL=info",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + sm.Serve(t), "SSL_CERT_FILE=" + front.roots,
		// The operator role whose session the admin fixtures' IAM context
		// names (assumed-role/hourglass-operator in 123456789012).
		"HOURGLASS_ADMIN_ROLE_ARNS=arn:aws:iam::123456789012:role/hourglass-operator",
		// Hermetic AWS settings: static credentials, no shared files, no
		// instance metadata; SQS is the fake.
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKIDE2E", "AWS_SECRET_ACCESS_KEY=e2e-secret",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
	}
	env := map[string][]string{
		"poller": {"WORK_QUEUE_URL=" + sqsfake.QueueURL, "AWS_ENDPOINT_URL_SQS=" + s.sqs.URL,
			"HOURGLASS_POLL_INTERVAL=100ms", "HOURGLASS_POLLER_MARGIN=" + pollerMargin},
		"consumer": {"PAYOUT_URL=" + front.to(s.provider.URL), "PAYOUT_SIGNING_SECRET_ID=e2e/payout-signing",
			"FINANCE_WEBHOOK_URL=" + front.to(s.finance.URL), "FINANCE_SIGNING_SECRET_ID=e2e/finance-signing",
			// A Lambda function has no log to fall back to for order events.
			"ORDERS_WEBHOOK_URL=" + front.to(s.orders.URL), "ORDERS_SIGNING_SECRET_ID=e2e/orders-signing"},
		"enqueue": {"PAYOUT_WEBHOOK_SECRET_ID=e2e/payout-webhook", "PAYMENTS_WEBHOOK_SECRET_ID=e2e/payments-webhook"},
	}
	for _, name := range functions {
		bootstrap := filepath.Join(dir, name, "bootstrap")
		st, err := os.Stat(bootstrap)
		if err != nil {
			t.Fatalf("%s: %v (make e2e builds it)", name, err)
		}
		s.sizes[name] = st.Size()
		timeout := 10 * time.Second
		if name == "poller" {
			timeout = pollerTimeout
		}
		fn, err := rie.Start(name, rie.Options{
			Emulator: emulator, Bootstrap: bootstrap, Timeout: timeout,
			Env: append(slices.Clone(common), env[name]...),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.fns[name] = fn
		t.Cleanup(func() {
			fn.Stop()
			if t.Failed() {
				t.Logf("%s log (last 4 KiB):\n%s", name, tail(fn.Log(), 4096))
			}
		})
	}
	s.consumer = &sqsfake.EventSource{Queue: s.sqs, Function: s.fns["consumer"], Visibility: time.Second}
	return s
}

// tlsFronts put https in front of the fakes' plain http servers, with the
// one test certificate of net/http/httptest, written to roots for the
// functions' SSL_CERT_FILE.
type tlsFronts struct {
	t     *testing.T
	roots string
}

func newTLSFronts(t *testing.T) *tlsFronts {
	return &tlsFronts{t: t, roots: filepath.Join(t.TempDir(), "roots.pem")}
}

// to returns the https URL of a TLS front of the http server at target.
func (f *tlsFronts) to(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		f.t.Fatal(err)
	}
	srv := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(u))
	f.t.Cleanup(srv.Close)
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(f.roots, pemCert, 0o600); err != nil {
		f.t.Fatal(err)
	}
	return srv.URL
}

// refusedAtColdStart starts the enqueue bootstrap as name with auth (its
// HOURGLASS_AUTH setting) and nothing else configured, and checks that it
// serves nothing and that its cold start's log names each of names. It
// returns the log.
func refusedAtColdStart(t *testing.T, name, auth string, names ...string) string {
	t.Helper()
	fn, err := rie.Start(name, rie.Options{
		Emulator: os.Getenv(emulatorEnv), Bootstrap: filepath.Join(os.Getenv(bootstrapsEnv), "enqueue", "bootstrap"),
		Timeout: 10 * time.Second,
		Env:     []string{"REDIS_URL=redis://127.0.0.1:1", auth, "AWS_REGION=us-east-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fn.Stop)
	payload, _ := json.Marshal(event(t, "healthz.json"))
	if out, err := fn.Invoke(context.Background(), payload); err == nil {
		t.Fatalf("%s served %s", name, out)
	}
	log := fn.Log()
	for _, n := range names {
		if !strings.Contains(log, n) {
			t.Errorf("the cold start's log does not name %s:\n%s", n, tail(log, 2048))
		}
	}
	return log
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// event reads a sample API event of events/.
func event(t *testing.T, file string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", file))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return ev
}

// withPath points ev at path, with its path parameters.
func withPath(ev events.APIGatewayV2HTTPRequest, path string, params map[string]string) events.APIGatewayV2HTTPRequest {
	ev.RawPath, ev.RequestContext.HTTP.Path, ev.PathParameters = path, path, params
	return ev
}

// api invokes an API function with ev and decodes the response body into out.
func (s *stack) api(fn string, ev events.APIGatewayV2HTTPRequest, out any) int {
	s.t.Helper()
	payload, err := json.Marshal(ev)
	if err != nil {
		s.t.Fatal(err)
	}
	raw, err := s.fns[fn].Invoke(context.Background(), payload)
	if err != nil {
		s.t.Fatalf("%s %s: %v", ev.RequestContext.HTTP.Method, ev.RawPath, err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		s.t.Fatalf("%s %s: response %s: %v", ev.RequestContext.HTTP.Method, ev.RawPath, raw, err)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(resp.Body), out); err != nil {
			s.t.Fatalf("%s %s: body %s: %v", ev.RequestContext.HTTP.Method, ev.RawPath, resp.Body, err)
		}
	}
	s.t.Logf("%-8s %s %s -> %d %s", fn, ev.RequestContext.HTTP.Method, ev.RawPath, resp.StatusCode, oneLine(resp.Body, 160))
	return resp.StatusCode
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// poll invokes the poller with the scheduled event until the work queue
// holds want messages (each invocation polls for its whole deadline).
func (s *stack) poll(want int) {
	s.t.Helper()
	payload, err := os.ReadFile(filepath.Join("..", "..", "events", "poller-scheduled.json"))
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 1; ; i++ {
		out, err := s.fns["poller"].Invoke(context.Background(), payload)
		if err != nil {
			s.t.Fatalf("poller: %v", err)
		}
		s.t.Logf("poller   invocation %d -> %s; %d messages in the work queue", i, out, s.sqs.Len())
		if s.sqs.Len() >= want {
			return
		}
		if i == 5 {
			s.t.Fatalf("the work queue holds %d messages after %d poller invocations, want %d", s.sqs.Len(), i, want)
		}
	}
}

// consume feeds the work queue's messages to the consumer as SQS events
// until the queue is empty.
func (s *stack) consume() {
	s.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.sqs.Len() > 0; {
		n, err := s.consumer.Poll(context.Background())
		if err != nil {
			s.t.Fatalf("consumer: %v", err)
		}
		if n > 0 {
			s.t.Logf("consumer SQS event of %d messages -> %d failed", n, s.consumer.ItemFailures.Load())
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d messages still queued", s.sqs.Len())
		}
	}
}

// TestE2E runs a withdrawal and a flash-sale purchase through the built
// functions, each from its API request to the payout or the order, and
// prints each function's cold start and size.
func TestE2E(t *testing.T) {
	s := start(t)

	var paidID string
	t.Run("withdrawal", func(t *testing.T) {
		s.t = t
		create := event(t, "withdrawal-create.json")
		create.Headers["idempotency-key"] = fmt.Sprintf("e2e-%d", time.Now().UnixNano())
		create.Body = `{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1}`
		var created struct{ ID, Status, DueAt string }
		if code := s.api("enqueue", create, &created); code != http.StatusAccepted || created.Status != "scheduled" {
			t.Fatalf("create: %d %+v", code, created)
		}

		s.poll(1)
		req := s.sqs.Requests()
		if len(req) == 0 || len(req[0].Entries) != 1 || !strings.Contains(req[0].Entries[0].MessageBody, created.ID) ||
			req[0].Entries[0].MessageAttributes["kind"].StringValue != "withdrawal.payout" {
			t.Fatalf("SendMessageBatch calls %+v, want one payout message for %s", req, created.ID)
		}
		s.consume()

		var got struct {
			Status   string
			Attempts int
			PayoutID string `json:"payout_id"`
		}
		get := withPath(event(t, "withdrawal-get.json"), "/v1/withdrawals/"+created.ID, map[string]string{"id": created.ID})
		if code := s.api("enqueue", get, &got); code != http.StatusOK || got.Status != "paid" || got.Attempts != 1 || got.PayoutID != "po_"+created.ID {
			t.Fatalf("withdrawal %s: %d %+v, want paid once", created.ID, code, got)
		}
		if calls, paid := s.provider.Calls(created.ID); calls != 1 || !paid {
			t.Errorf("provider: %d calls under %s (paid %v), want 1", calls, created.ID, paid)
		}
		if msgs := s.finance.Of(created.ID); len(msgs) != 1 || msgs[0].Status != "paid" || msgs[0].UserID != "user-123" {
			t.Errorf("finance got %+v, want one paid message", msgs)
		}
		paidID = created.ID
	})

	// The providers' webhooks come through a REST API of their own (WAF
	// in front), whose events are Lambda proxy events, format 1.0.
	t.Run("payout callback through the REST API", func(t *testing.T) {
		s.t = t
		if paidID == "" {
			t.Skip("no paid withdrawal")
		}
		raw, err := os.ReadFile(filepath.Join("..", "..", "events", "webhook-payout-rest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		ev.Body = fmt.Sprintf(`{"event_id":"e2e-rest-1","withdrawal_id":%q,"payout_id":"po_%s","status":"paid"}`, paidID, paidID)
		for name, key := range map[string]string{"signed": "e2e-payout-webhook-key", "forged": "dev-webhook-secret"} {
			sig := signature.Sign([]byte(key), time.Now(), []byte(ev.Body))
			ev.Headers["X-Hourglass-Signature"], ev.MultiValueHeaders["X-Hourglass-Signature"] = sig, []string{sig}
			payload, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.fns["enqueue"].Invoke(context.Background(), payload)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var resp events.APIGatewayProxyResponse
			dec := json.NewDecoder(strings.NewReader(string(out)))
			dec.DisallowUnknownFields() // what a REST API reads, nothing more
			if err := dec.Decode(&resp); err != nil {
				t.Fatalf("%s: a REST API cannot read %s: %v", name, out, err)
			}
			var got struct {
				WithdrawalID string `json:"withdrawal_id"`
				Status       string
			}
			_ = json.Unmarshal([]byte(resp.Body), &got)
			t.Logf("enqueue  REST POST %s (%s) -> %d %s", ev.Path, name, resp.StatusCode, oneLine(resp.Body, 160))
			switch {
			case name == "signed" && (resp.StatusCode != http.StatusOK || got.Status != "paid" || got.WithdrawalID != paidID):
				t.Errorf("signed callback: %d %s, want 200 paid", resp.StatusCode, resp.Body)
			case name == "forged" && resp.StatusCode != http.StatusUnauthorized:
				t.Errorf("callback signed with the public default: %d, want 401", resp.StatusCode)
			}
		}
	})

	t.Run("flash sale", func(t *testing.T) {
		s.t = t
		preheat := event(t, "seckill-preheat.json")
		preheat.Body = fmt.Sprintf(`{"stock":5,"per_user_limit":1,"ends_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		var state struct {
			Status    string
			StockLeft int `json:"stock_left"`
		}
		if code := s.api("seckill", preheat, &state); code != http.StatusOK || state.Status != "live" || state.StockLeft != 5 {
			t.Fatalf("preheat: %d %+v", code, state)
		}
		var bought struct {
			PurchaseID string `json:"purchase_id"`
			Status     string
		}
		if code := s.api("seckill", event(t, "seckill-purchase.json"), &bought); code != http.StatusAccepted || bought.Status != "reserved" {
			t.Fatalf("purchase: %d %+v", code, bought)
		}
		if code := s.api("seckill", event(t, "seckill-purchase.json"), nil); code != http.StatusConflict {
			t.Fatalf("second purchase by the same buyer: %d, want 409", code)
		}

		s.poll(1)
		s.consume()

		var mine struct {
			PurchaseID string `json:"purchase_id"`
			Status     string
			OrderID    string `json:"order_id"`
		}
		if code := s.api("seckill", event(t, "seckill-purchase-me.json"), &mine); code != http.StatusOK || mine.Status != "confirmed" ||
			mine.PurchaseID != bought.PurchaseID || mine.OrderID != "or_"+strings.TrimPrefix(bought.PurchaseID, "pu_") {
			t.Fatalf("purchases/me: %d %+v, want %s confirmed with its order", code, mine, bought.PurchaseID)
		}
		if code := s.api("seckill", event(t, "seckill-item.json"), &state); code != http.StatusOK || state.StockLeft != 4 {
			t.Fatalf("item: %d %+v, want 4 left", code, state)
		}

		// The order.created event waits in the item's outbox (its queue,
		// due now): the next poll hands it to the consumer, which tells the
		// downstream webhook, signed, keyed by the order.
		s.poll(1)
		s.consume()
		key := mine.OrderID + ":order.created"
		var told bool
		for _, e := range s.orders.Events() {
			told = told || e.Key == key
		}
		if !told {
			t.Fatalf("order events told %+v, want %s", s.orders.Events(), key)
		}
	})

	t.Run("operator stats", func(t *testing.T) {
		s.t = t
		var stats struct {
			Queues map[string]struct{ Due, Inflight, Dead int }
			Items  map[string]struct{ Admitted, Confirmed int }
		}
		if code := s.api("enqueue", event(t, "admin-stats.json"), &stats); code != http.StatusOK {
			t.Fatalf("stats: %d", code)
		}
		for name, q := range stats.Queues {
			if q.Due != 0 || q.Inflight != 0 || q.Dead != 0 {
				t.Errorf("queue %s: %+v, want it drained", name, q)
			}
		}
		if it := stats.Items["phone-2026"]; it.Admitted != 1 || it.Confirmed != 1 {
			t.Errorf("item stats %+v, want 1 admitted and confirmed", it)
		}
		// A signed caller that is not a session of the operator role is
		// refused by the function itself.
		other := event(t, "admin-stats.json")
		other.RequestContext.Authorizer.IAM.UserARN = "arn:aws:sts::123456789012:assumed-role/hourglass-deployer/ci"
		if code := s.api("enqueue", other, nil); code != http.StatusForbidden {
			t.Errorf("stats by another role: %d, want 403", code)
		}
	})

	t.Run("public secrets refused at cold start", func(t *testing.T) {
		s.t = t
		// The withdrawal API deployed outside the stack, its callback keys'
		// secret ids unset: it would authenticate payment confirmations and
		// payout callbacks with the public defaults.
		log := refusedAtColdStart(t, "enqueue-dev-secrets", "HOURGLASS_AUTH=jwt",
			"PAYOUT_WEBHOOK_SECRET_ID", "PAYMENTS_WEBHOOK_SECRET_ID")
		if strings.Contains(log, "dev-payments-secret") || strings.Contains(log, "dev-webhook-secret") {
			t.Errorf("the cold start's log quotes a secret:\n%s", tail(log, 2048))
		}
	})

	t.Run("operator commands", func(t *testing.T) {
		s.t = t
		type result struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
			Stderr   string `json:"stderr"`
		}
		// events/admin-operator.json: payouts unresolved, by a session of
		// the operator role; every payout above was settled.
		var r result
		if code := s.api("operator", event(t, "admin-operator.json"), &r); code != http.StatusOK || r.ExitCode != 0 {
			t.Fatalf("payouts unresolved: %d %+v", code, r)
		}
		stats := event(t, "admin-operator.json")
		stats.Body = `{"args":["stats","--json"]}`
		var snap struct {
			Queues map[string]struct{ Due, Inflight, Dead int }
			Items  map[string]struct{ Admitted, Confirmed int }
		}
		if code := s.api("operator", stats, &r); code != http.StatusOK || r.ExitCode != 0 {
			t.Fatalf("stats: %d %+v", code, r)
		}
		if err := json.Unmarshal([]byte(r.Stdout), &snap); err != nil || snap.Items["phone-2026"].Confirmed != 1 {
			t.Errorf("stats --json printed %q (%v), want the sale's confirmed order", r.Stdout, err)
		}
		if _, ok := snap.Queues["withdrawals"]; !ok {
			t.Errorf("stats --json printed %q, want the withdrawals queue", r.Stdout)
		}
		peek := event(t, "admin-operator.json")
		peek.Body = `{"args":["peek","nosuch"]}`
		if code := s.api("operator", peek, &r); code != http.StatusOK || r.ExitCode != 1 || !strings.Contains(r.Stderr, "nosuch") {
			t.Errorf("peek nosuch: %d %+v, want exit code 1", code, r)
		}
		serve := event(t, "admin-operator.json")
		serve.Body = `{"args":["serve"]}`
		if code := s.api("operator", serve, nil); code != http.StatusBadRequest {
			t.Errorf("serve: %d, want 400", code)
		}
		other := event(t, "admin-operator.json")
		other.RequestContext.Authorizer.IAM.UserARN = "arn:aws:sts::123456789012:assumed-role/hourglass-deployer/ci"
		if code := s.api("operator", other, nil); code != http.StatusForbidden {
			t.Errorf("another role: %d, want 403", code)
		}
		log := s.fns["operator"].Log()
		if !strings.Contains(log, `"caller":"arn:aws:sts::123456789012:assumed-role/hourglass-operator/ops"`) ||
			!strings.Contains(log, `"args":["stats","--json"]`) {
			t.Errorf("the operator function's log names no caller and args:\n%s", tail(log, 2048))
		}
	})

	t.Run("dev auth refused at cold start", func(t *testing.T) {
		s.t = t
		refusedAtColdStart(t, "enqueue-dev", "HOURGLASS_AUTH=dev", "HOURGLASS_AUTH")
	})

	s.t = t
	t.Logf("cold starts under aws-lambda-rie (SPEC target: init < 50 ms), bootstraps built for this machine (stripped):")
	t.Logf("  %-9s %10s %12s %16s %14s", "function", "bootstrap", "init", "first invocation", "warm (median)")
	for _, name := range functions {
		fn := s.fns[name]
		init, first, ok := fn.ColdStart()
		initText := "not reported"
		if ok {
			initText = fmt.Sprintf("%.1f ms", millis(init))
		}
		var warm []time.Duration
		for i, r := range fn.Reports() {
			if i > 0 {
				warm = append(warm, r.Duration)
			}
		}
		warmText := "-"
		if len(warm) > 0 {
			slices.Sort(warm)
			warmText = fmt.Sprintf("%.1f ms", millis(warm[len(warm)/2]))
		}
		if name == "poller" {
			warmText += " (polls to its deadline)"
		}
		t.Logf("  %-9s %6.1f MiB %12s %13.1f ms %14s", name, float64(s.sizes[name])/(1<<20), initText, millis(first), warmText)
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

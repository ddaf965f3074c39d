package redisacl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/cli"
	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ops"
	"github.com/hourglass/hourglass/shared/redisacl"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

const (
	prefix       = "hg:"
	shards       = 2
	operatorRole = "arn:aws:iam::123456789012:role/hourglass-operator"
	// The fixtures' caller and item (events/withdrawal-create.json,
	// events/seckill-purchase.json).
	fixtureUser = "user-123"
	fixtureItem = "phone-2026"
)

// deployment is a Redis (one server or a cluster) set up as ElastiCache is
// by the stack: a user per function with its rendered access string and a
// password of its own, the default user switched off. admin is a user with
// every right, for the test's own reads.
type deployment struct {
	nodes   []string // every node's address
	url     func(user string) string
	connect func(user, pass string) redis.UniversalClient
	admin   redis.UniversalClient
}

func password(fn string) string { return "pw-" + fn + "-0123456789abcdef" }

// deploy creates the users on every node of nodes (ACLs are per node) and
// switches the default user off, as the stack's user group does.
func deploy(t *testing.T, nodes []string, url func(user string) string, adminOf func(user, pass string) redis.UniversalClient) *deployment {
	t.Helper()
	ctx := context.Background()
	for _, addr := range nodes {
		c := redis.NewClient(&redis.Options{Addr: addr})
		must(t, c.Do(ctx, "ACL", "SETUSER", "acl-admin", "reset", "on", ">admin-pw", "~*", "&*", "+@all").Err())
		for _, fn := range redisacl.Functions() {
			rules, err := redisacl.AccessString(fn, prefix)
			must(t, err)
			args := []any{"ACL", "SETUSER", redisacl.UserName(fn), "reset", ">" + password(fn)}
			for _, tok := range strings.Fields(rules) {
				args = append(args, tok)
			}
			must(t, c.Do(ctx, args...).Err())
		}
		args := []any{"ACL", "SETUSER", "default", "reset"}
		for _, tok := range strings.Fields(redisacl.DefaultUser) {
			args = append(args, tok)
		}
		must(t, c.Do(ctx, args...).Err())
		_ = c.Close()
	}
	admin := adminOf("acl-admin", "admin-pw")
	t.Cleanup(func() { _ = admin.Close() })
	return &deployment{nodes: nodes, url: url, connect: adminOf, admin: admin}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// aclLog returns every node's ACL LOG entries (what was refused, to whom)
// and clears them.
func (d *deployment) aclLog(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, addr := range d.nodes {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: "acl-admin", Password: "admin-pw"})
		entries, err := c.ACLLog(ctx, 100).Result()
		must(t, err)
		for _, e := range entries {
			out = append(out, fmt.Sprintf("%s: %s %s %s", e.Username, e.Reason, e.Context, e.Object))
		}
		must(t, c.ACLLogReset(ctx).Err())
		_ = c.Close()
	}
	return out
}

// function is one function's App, connected as its Redis user with its
// password from a secret source, as OpenLambda connects in AWS.
func (d *deployment) function(t *testing.T, fn string, logs io.Writer) *app.App {
	t.Helper()
	cfg, err := config.Load(config.Local)
	must(t, err)
	cfg.RedisURL = config.Secret(d.url(redisacl.UserName(fn)))
	rdb, err := app.ConnectWith(cfg, app.Secrets{Redis: secrets.Static{Current: password(fn)}})
	must(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	redistest.AssertNoRefusals(t)
	a, err := app.New(cfg, app.NewLogger(logs, cfg.SlogLevel()), rdb)
	must(t, err)
	return a
}

// dispatcher stands for SQS: each batch goes at once to the consumer's
// handler; what it reports failed is refused. cancel, if set, is called
// after the first batch (it ends a poller's Run after one round).
type dispatcher struct {
	handler *consumer.Handler
	mu      sync.Mutex
	cancel  context.CancelFunc
	failed  int
}

func (d *dispatcher) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	ev := events.SQSEvent{}
	byMsg := map[string]delayq.Job{}
	for i, j := range jobs {
		body, err := json.Marshal(j)
		if err != nil {
			return jobs, err
		}
		id := fmt.Sprintf("msg-%d-%s", i, j.ID)
		byMsg[id] = j
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: id, Body: string(body), EventSource: "aws:sqs"})
	}
	resp, err := d.handler.Handle(ctx, ev)
	if err != nil {
		return jobs, err
	}
	var refused []delayq.Job
	for _, f := range resp.BatchItemFailures {
		refused = append(refused, byMsg[f.ItemIdentifier])
	}
	d.mu.Lock()
	d.failed += len(refused)
	cancel := d.cancel
	d.cancel = nil
	d.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return refused, nil
}

// invoke runs a fixture event (events/<name>.json, changed by edit)
// through handler as the Lambda runtime would.
func invoke(t *testing.T, handler any, name string, edit func(*events.APIGatewayV2HTTPRequest)) events.APIGatewayV2HTTPResponse {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", name+".json"))
	must(t, err)
	if edit != nil {
		var ev events.APIGatewayV2HTTPRequest
		must(t, json.Unmarshal(raw, &ev))
		edit(&ev)
		raw, err = json.Marshal(ev)
		must(t, err)
	}
	out, err := lambda.NewHandler(handler).Invoke(context.Background(), raw)
	must(t, err)
	var resp events.APIGatewayV2HTTPResponse
	must(t, json.Unmarshal(out, &resp))
	return resp
}

// operator runs one operator command through the operator function's
// route, as `hourglass --remote` does.
func operator(t *testing.T, a *app.App, args ...string) cli.OperatorResult {
	t.Helper()
	rt := a.OperatorAPI(cli.OperatorDeadline, cli.Operator{App: a, Log: a.Log}.Register)
	body, err := json.Marshal(cli.OperatorRequest{Args: args})
	must(t, err)
	resp := invoke(t, rt.Serve, "admin-operator", func(ev *events.APIGatewayV2HTTPRequest) { ev.Body = string(body) })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("operator %v: %d %s", args, resp.StatusCode, resp.Body)
	}
	var res cli.OperatorResult
	must(t, json.Unmarshal([]byte(resp.Body), &res))
	if strings.Contains(res.Stdout+res.Stderr, "NOPERM") {
		t.Errorf("operator %v refused by Redis:\n%s\n%s", args, res.Stdout, res.Stderr)
	}
	return res
}

// backends are the Redis the suite runs on: one server, and a 3-master
// cluster reached with cluster=true (CLUSTER SLOTS as the user).
func backends(t *testing.T) map[string]func(t *testing.T) *deployment {
	return map[string]func(t *testing.T) *deployment{
		"server": func(t *testing.T) *deployment {
			rs := redistest.Start(t)
			return deploy(t, []string{rs.Addr()}, func(user string) string {
				return "redis://" + user + "@" + rs.Addr()
			}, func(user, pass string) redis.UniversalClient {
				return redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: user, Password: pass})
			})
		},
		"cluster": func(t *testing.T) *deployment {
			c := redistest.StartCluster(t, 3)
			u, err := url.Parse(c.URL())
			must(t, err)
			return deploy(t, c.Addrs(), func(user string) string {
				v := *u
				v.User = url.User(user)
				return v.String()
			}, func(user, pass string) redis.UniversalClient {
				// Unguarded: the refusal checks send, on purpose, what
				// ElastiCache Serverless would refuse too.
				return c.AdminClient(t, func(o *redis.ClusterOptions) { o.Username, o.Password = user, pass })
			})
		},
	}
}

func setEnv(t *testing.T, prov *fakes.Provider, fin *fakes.Finance, ledgerName, dynamoEndpoint string) {
	for k, v := range map[string]string{
		"HOURGLASS_LEDGER": ledgerName, "DYNAMODB_ENDPOINT": dynamoEndpoint,
		// Every withdrawal of the test stays in Redis with either ledger.
		"HOURGLASS_REDIS_HORIZON": "24h",
		// dynalite takes any credentials; none are looked for elsewhere.
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
		"HOURGLASS_REDIS_PREFIX": prefix, "HOURGLASS_QUEUE_SHARDS": fmt.Sprint(shards),
		"HOURGLASS_AUTH": "jwt", "HOURGLASS_ADMIN_ROLE_ARNS": operatorRole,
		"PAYOUT_URL": prov.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": fin.URL, "FINANCE_SIGNING_SECRET": "fin-secret", "FINANCE_TOPIC_ARN": "",
		"HOURGLASS_RATE_WITHDRAWAL_USER": "100/s", "HOURGLASS_RATE_WITHDRAWAL_SOURCE": "100/s",
		"HOURGLASS_RATE_PURCHASE_USER": "100/s", "HOURGLASS_RATE_PURCHASE_SOURCE": "100/s",
		// Each function's client passes the ElastiCache Serverless guard too.
		"HOURGLASS_REDIS_COMMANDS": redistest.ServerlessCommands,
	} {
		t.Setenv(k, v)
	}
}

// TestEveryFunctionWorksWithinItsACL runs each function's real operations,
// through the real code, connected as its own Redis user with the rules
// the stack gives it, on one server and on a cluster, with the Redis
// ledger (which keeps the most in Redis) and the DynamoDB one (what the
// stack deploys); Redis must refuse none of them (its ACL LOG stays
// empty), and every key they made must fall in a family of the rules.
// Then it checks what each user is refused.
func TestEveryFunctionWorksWithinItsACL(t *testing.T) {
	for name, start := range backends(t) {
		for _, ledgerName := range []string{"redis", "dynamodb"} {
			t.Run(name+"/"+ledgerName, func(t *testing.T) {
				prov := fakes.NewProvider(t, "pay-secret")
				fin := fakes.NewFinance(t, "fin-secret")
				endpoint := ""
				if ledgerName == "dynamodb" {
					endpoint = dynalitetest.Start(t).Endpoint
				}
				setEnv(t, prov, fin, ledgerName, endpoint)
				d := start(t)
				runFunctions(t, d, prov)
				if t.Failed() {
					return
				}
				checkKeysCovered(t, d)
				checkRefusals(t, d)
			})
		}
	}
}

func runFunctions(t *testing.T, d *deployment, prov *fakes.Provider) {
	ctx := context.Background()
	logs := &lockedBuffer{}
	enqueue := d.function(t, redisacl.Enqueue, logs)
	sk := d.function(t, redisacl.Seckill, logs)
	poll := d.function(t, redisacl.Poller, logs)
	cons := d.function(t, redisacl.Consumer, logs)
	oper := d.function(t, redisacl.Operator, logs)
	must(t, enqueue.CreateTables(ctx)) // DynamoDB's, when it is the ledger
	checkLog := func(step string) {
		t.Helper()
		if refused := d.aclLog(t); len(refused) > 0 {
			t.Fatalf("%s: Redis refused:\n%s", step, strings.Join(refused, "\n"))
		}
	}

	// enqueue: the withdrawal API, through its router for a create (the
	// rate limits run too), through the service for the rest.
	wapi := enqueue.WithdrawalAPI()
	if resp := invoke(t, wapi.Serve, "withdrawal-create", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/withdrawals: %d %s", resp.StatusCode, resp.Body)
	}
	due, err := httpapi.CreateWithdrawal(ctx, enqueue.Service, "alice", "k-due",
		[]byte(`{"amount":"10.00","currency":"CNY","destination":"bank_1","delay_seconds":0}`))
	must(t, err)
	later, err := httpapi.CreateWithdrawal(ctx, enqueue.Service, "alice", "k-later",
		[]byte(`{"amount":"11.00","currency":"CNY","destination":"bank_1","delay_seconds":3600}`))
	must(t, err)
	cancelled, err := httpapi.CreateWithdrawal(ctx, enqueue.Service, "bob", "k-cancel",
		[]byte(`{"amount":"12.00","currency":"CNY","destination":"bank_2","delay_seconds":3600}`))
	must(t, err)
	if again, err := httpapi.CreateWithdrawal(ctx, enqueue.Service, "alice", "k-due",
		[]byte(`{"amount":"10.00","currency":"CNY","destination":"bank_1","delay_seconds":0}`)); err != nil || again.ID != due.ID {
		t.Fatalf("idempotent replay: %+v, %v; want %s", again, err, due.ID)
	}
	if w, err := enqueue.Service.Get(ctx, "alice", due.ID); err != nil || w.Status != withdrawal.Scheduled {
		t.Fatalf("get: %+v, %v", w, err)
	}
	if page, err := enqueue.Service.List(ctx, "alice", 10, ""); err != nil || len(page.Items) != 2 {
		t.Fatalf("list: %+v, %v; want 2", page, err)
	}
	if _, err := httpapi.RescheduleWithdrawal(ctx, enqueue.Service, "alice", later.ID, []byte(`{"delay_seconds":7200}`), later.ETag()); err != nil {
		t.Fatalf("reschedule: %v", err)
	}
	if w, err := enqueue.Service.Cancel(ctx, "bob", cancelled.ID); err != nil || w.Status != withdrawal.Cancelled {
		t.Fatalf("cancel: %+v, %v", w, err)
	}
	checkLog("enqueue: withdrawal API")

	// seckill: preheat a priced sale, read it, buy through the router (rate
	// limits, admission) and the service, read the buyer's purchase.
	sale := seckill.Sale{ItemID: fixtureItem, Stock: 5, Shards: 2, PerUserLimit: 1, EndsAt: time.Now().Add(time.Hour)}
	sale.Price, sale.Currency, sale.PaymentWindow = mustDecimal(t, "9.99"), "CNY", time.Hour
	if _, err := sk.Seckill.Preheat(ctx, sale); err != nil {
		t.Fatalf("preheat: %v", err)
	}
	if st, err := sk.Seckill.State(ctx, fixtureItem); err != nil || st.StockLeft != 5 {
		t.Fatalf("state: %+v, %v", st, err)
	}
	sapi := sk.SeckillAPI()
	if resp := invoke(t, sapi.Serve, "seckill-purchase", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST purchases: %d %s", resp.StatusCode, resp.Body)
	}
	bought, err := sk.Seckill.Purchase(ctx, fixtureItem, "carol", 1)
	must(t, err)
	if p, err := sk.Seckill.Mine(ctx, fixtureItem, "carol"); err != nil || p.ID != bought.ID {
		t.Fatalf("mine: %+v, %v", p, err)
	}
	checkLog("seckill")

	// poller and consumer: one Run (housekeeping: reconcile, compensation,
	// queue metrics, idempotency purge; then a round), then rounds until
	// the due withdrawal is paid and both purchases are ordered.
	proc, err := cons.Processor(mustProvider(t, cons), mustNotifier(t, cons))
	must(t, err)
	runCtx, stop := context.WithCancel(ctx)
	disp := &dispatcher{handler: cons.Consumer(proc, false), cancel: stop}
	p, err := poll.Poller(disp, true)
	must(t, err)
	p.Run(runCtx, time.Time{})
	stop()
	if strings.Contains(logs.String(), "housekeeping failed") {
		t.Fatalf("poller housekeeping failed:\n%s", logs.String())
	}
	ordered := func() bool {
		st, err := poll.Items.Stats(ctx)
		return err == nil && st[fixtureItem].AwaitingPayment == 2
	}
	for round := 0; ; round++ {
		w, err := enqueue.Service.Get(ctx, "alice", due.ID)
		must(t, err)
		if w.Status == withdrawal.Paid && !w.Untold() && ordered() {
			break
		}
		if round == 50 {
			t.Fatalf("after %d rounds: withdrawal %+v, item %v, %d deliveries failed\n%s", round, w, ordered(), disp.failed, logs.String())
		}
		if _, err := p.Round(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if calls, paid := prov.Calls(due.ID); calls != 1 || !paid {
		t.Errorf("provider: %s called %d times (paid %v), want once", due.ID, calls, paid)
	}
	checkLog("poller and consumer")
	// The poller's housekeeping on its own, at injected times: reconcile
	// and compensation now, the idempotency purge two days on.
	now := time.Now()
	if _, _, err := poll.Reconcile(ctx, now); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if r, ok := poll.Ledger.(*ledger.Redis); ok {
		if _, err := r.PurgeExpiredKeys(ctx, now.Add(48*time.Hour)); err != nil {
			t.Fatalf("purge: %v", err)
		}
	}
	qs, err := poll.Queues(ctx)
	must(t, err)
	if _, err := ops.Collect(ctx, now, qs, poll.Items); err != nil {
		t.Fatalf("queue metrics: %v", err)
	}
	checkLog("poller housekeeping")

	// enqueue: the payout provider's callback (the paid withdrawal comes
	// back), the payment provider's confirmation of carol's order, the
	// admin stats.
	paid, err := enqueue.Service.Get(ctx, "alice", due.ID)
	must(t, err)
	if _, err := enqueue.Service.Callback(ctx, due.ID, withdrawal.Callback{
		EventID: "evt-returned", Status: withdrawal.Returned, PayoutID: paid.PayoutID, Reason: "account closed", At: time.Now(),
	}); err != nil {
		t.Fatalf("payout callback: %v", err)
	}
	payer := seckill.NewOrderProcessor(enqueue.Items, enqueue.Orders, clock.System{}, enqueue.Log)
	ans, err := httpapi.ApplyPayment(ctx, payer, fmt.Appendf(nil,
		`{"event_id":"evt-pay","order_id":%q,"status":"succeeded","amount":"9.99","currency":"CNY"}`, seckill.OrderID(bought.ID)))
	if err != nil || ans.Status != seckill.Paid {
		t.Fatalf("payment: %+v, %v", ans, err)
	}
	if resp := invoke(t, wapi.Serve, "admin-stats", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/admin/stats: %d %s", resp.StatusCode, resp.Body)
	}
	checkLog("enqueue: callbacks and stats")

	// consumer: the returned withdrawal and the payment's event reach
	// finance and the order events (more rounds); then a job that kept
	// failing goes to its dead set.
	for round := 0; ; round++ {
		w, err := enqueue.Service.Get(ctx, "alice", due.ID)
		must(t, err)
		if w.Status == withdrawal.Returned && !w.Untold() {
			break
		}
		if round == 50 {
			t.Fatalf("returned withdrawal not told after %d rounds: %+v", round, w)
		}
		if _, err := p.Round(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	checkLog("consumer: returned")

	// operator: the runbooks' commands.
	if r := operator(t, oper, "stats", "--json"); r.ExitCode != 0 || !strings.Contains(r.Stdout, withdrawal.QueueName) {
		t.Errorf("stats: %+v", r)
	}
	if r := operator(t, oper, "peek", withdrawal.QueueName); r.ExitCode != 0 || !strings.Contains(r.Stdout, later.ID) {
		t.Errorf("peek: %+v", r)
	}
	if r := operator(t, oper, "dead", "list"); r.ExitCode != 0 {
		t.Errorf("dead list: %+v", r)
	}
	if r := operator(t, oper, "reconcile"); r.ExitCode != 0 {
		t.Errorf("reconcile: %+v", r)
	}
	if r := operator(t, oper, "payouts", "unresolved"); r.ExitCode != 0 {
		t.Errorf("payouts unresolved: %+v", r)
	}
	// A scheduled withdrawal is not resolvable: the command reads it and
	// says so (exit 1), which it could not without the rights.
	w, err := oper.Service.Get(ctx, "alice", later.ID)
	must(t, err)
	if r := operator(t, oper, "payouts", "resolve", later.ID, "--revision", fmt.Sprint(w.Revision), "--paid", "po_x", "--by", "ops"); r.ExitCode != 1 ||
		!strings.Contains(r.Stderr, "not resolvable") {
		t.Errorf("payouts resolve of a scheduled withdrawal: %+v", r)
	}
	checkLog("operator")

	// dead list|requeue|purge on a dead job: the poller claims the later
	// withdrawal's job (due by the injected time), the consumer kills it.
	q := poll.Withdrawals
	claim, err := q.Claim(ctx, delayq.ShardOf("alice", shards), now.Add(3*time.Hour), time.Minute, 10)
	must(t, err)
	if !slices.ContainsFunc(claim.Jobs, func(j delayq.Job) bool { return j.ID == later.ID }) {
		t.Fatalf("claim: %+v, want the later withdrawal's job", claim)
	}
	for _, j := range claim.Jobs {
		must(t, cons.Kill(ctx, j))
	}
	if r := operator(t, oper, "dead", "list"); r.ExitCode != 0 || !strings.Contains(r.Stdout, later.ID) {
		t.Errorf("dead list: %+v", r)
	}
	if r := operator(t, oper, "dead", "requeue", later.ID); r.ExitCode != 0 {
		t.Errorf("dead requeue: %+v", r)
	}
	claim, err = q.Claim(ctx, delayq.ShardOf("alice", shards), now.Add(3*time.Hour), time.Minute, 10)
	must(t, err)
	if len(claim.Jobs) != 1 || claim.Jobs[0].ID != later.ID {
		t.Fatalf("claim after the requeue: %+v, want the later withdrawal's job alone", claim)
	}
	must(t, cons.Kill(ctx, claim.Jobs[0]))
	if r := operator(t, oper, "dead", "purge", later.ID, "--yes"); r.ExitCode != 0 {
		t.Errorf("dead purge: %+v", r)
	}
	checkLog("dead jobs")
}

// checkKeysCovered: every key the functions made falls in one of the
// rules' key patterns, so the rules name the real layout.
func checkKeysCovered(t *testing.T, d *deployment) {
	ctx := context.Background()
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, "*", 1000).Iterator()
		var mine []string
		for it.Next(ctx) {
			mine = append(mine, it.Val())
		}
		keys = append(keys, mine...)
		return it.Err()
	}
	switch c := d.admin.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		must(t, c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, n)
		}))
	case *redis.Client:
		must(t, scan(ctx, c))
	}
	// ElastiCache Serverless evicts keys with a TTL under memory pressure
	// (a fixed volatile-lru): only the rate limits' buckets may carry one.
	for _, k := range keys {
		ttl, err := d.admin.PTTL(ctx, k).Result()
		must(t, err)
		if ttl >= 0 && !strings.HasPrefix(k, prefix+"rl:") {
			t.Errorf("key %q has a TTL (%s): ElastiCache Serverless may evict it early", k, ttl)
		}
	}
	// The families every run leaves keys in (rate limits expire; the
	// DynamoDB ledger keeps records out of Redis).
	for _, family := range []string{"{dq:withdrawals:", "{dq:sk:", "seckill:items", "{sk:"} {
		if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, prefix+family) }) {
			t.Errorf("no key of %s%s among %v", prefix, family, keys)
		}
	}
	reached := map[string][]string{}
	for _, k := range keys {
		for _, fn := range redisacl.Functions() {
			r, err := redisacl.For(fn)
			must(t, err)
			if slices.ContainsFunc(r.Keys, func(p string) bool { return matches(prefix+p, k) }) {
				reached[k] = append(reached[k], fn)
			}
		}
		if len(reached[k]) == 0 {
			t.Errorf("key %q is in no function's rules", k)
		}
	}
	t.Logf("%d keys, each in some function's rules", len(keys))
}

// matches is Redis's glob for the patterns the rules use: a literal, or a
// literal then one trailing '*'.
func matches(pattern, key string) bool {
	if lit, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(key, lit)
	}
	return pattern == key
}

// checkRefusals: what each user may not do, Redis refuses with NOPERM.
func checkRefusals(t *testing.T, d *deployment) {
	ctx := context.Background()
	wkey := prefix + "{dq:withdrawals:0}:w:wd_x"
	wdue := prefix + "{dq:withdrawals:0}:due"
	type refusal struct {
		fns  []string
		args []any
	}
	all := redisacl.Functions()
	refusals := []refusal{
		// The flash-sale function has no withdrawal key: not to read, not
		// to write, not through a script, whatever KEYS says.
		{[]string{redisacl.Seckill}, []any{"HGETALL", wkey}},
		{[]string{redisacl.Seckill}, []any{"HSET", wkey, "status", "paid"}},
		{[]string{redisacl.Seckill}, []any{"ZADD", wdue, "0", "wd_x"}},
		{[]string{redisacl.Seckill}, []any{"ZCARD", wdue}},
		{[]string{redisacl.Seckill}, []any{"EVAL", "return redis.call('HGET', KEYS[1], 'status')", "1", wkey}},
		{[]string{redisacl.Seckill}, []any{"EVAL", "return redis.call('HSET', ARGV[1], 'status', 'paid')", "1", prefix + "{dq:sk:" + fixtureItem + ":0}:meta", wkey}},
		// The withdrawal API does not preheat sales.
		{[]string{redisacl.Enqueue, redisacl.Consumer}, []any{"HSET", prefix + "{sk:" + fixtureItem + "}:preheat", "v", "1"}},
		{[]string{redisacl.Enqueue, redisacl.Consumer}, []any{"ZADD", prefix + "seckill:preheats", "0", fixtureItem}},
		{[]string{redisacl.Enqueue, redisacl.Consumer}, []any{"EVAL", "return redis.call('DEL', ARGV[1])", "0", prefix + "seckill:preheats"}},
		// The rate limits are the API functions' alone.
		{[]string{redisacl.Poller, redisacl.Consumer, redisacl.Operator}, []any{"SET", prefix + "rl:withdrawal:u:alice", "0"}},
		// The flash-sale API has no order ledger.
		{[]string{redisacl.Seckill}, []any{"HSET", prefix + "seckill:orders", "or_x", "0|x"}},
		// Outside the prefix, and what no function sends.
		{all, []any{"SET", "other:key", "1"}},
		{all, []any{"GET", prefix + "anything"}},
		{all, []any{"FLUSHALL"}},
		{all, []any{"FLUSHDB"}},
		{all, []any{"CONFIG", "GET", "*"}},
		{all, []any{"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}},
		{all, []any{"KEYS", "*"}},
		{all, []any{"SCAN", "0"}},
		{all, []any{"ACL", "WHOAMI"}},
		{all, []any{"ACL", "SETUSER", "x", "on", "+@all", "~*"}},
		{all, []any{"CLIENT", "LIST"}},
		{all, []any{"SCRIPT", "FLUSH"}},
		{all, []any{"SAVE"}},
		{all, []any{"SWAPDB", "0", "0"}},
		{all, []any{"MONITOR"}},
		{all, []any{"SHUTDOWN", "NOSAVE"}},
		{all, []any{"EVAL", "return redis.call('FLUSHALL')", "0"}},
	}
	count := 0
	for _, fn := range all {
		c := d.raw(t, fn)
		for _, r := range refusals {
			if !slices.Contains(r.fns, fn) {
				continue
			}
			if err := c.Do(ctx, r.args...).Err(); !refused(err) {
				t.Errorf("%s: %v: %v, want NOPERM", fn, r.args, err)
			}
			count++
		}
	}
	if refused := d.aclLog(t); len(refused) == 0 {
		t.Error("ACL LOG holds no refusal")
	}
	t.Logf("%d commands refused", count)

	// The default user is off: no password, or any, lets a client in.
	for _, addr := range d.nodes {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		if err := c.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("%s: PING without a user: %v, want NOAUTH", addr, err)
		}
		_ = c.Close()
		c = redis.NewClient(&redis.Options{Addr: addr, Username: "default", Password: "x", MaxRetries: -1})
		if err := c.Ping(ctx).Err(); err == nil {
			t.Errorf("%s: PING as default: no error", addr)
		}
		_ = c.Close()
	}
	// Nor does another function's password.
	c := redis.NewClient(&redis.Options{Addr: d.nodes[0], Username: redisacl.UserName(redisacl.Seckill),
		Password: password(redisacl.Enqueue), MaxRetries: -1})
	if err := c.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("seckill's user with enqueue's password: %v, want WRONGPASS", err)
	}
	_ = c.Close()
}

// refused reports whether err is the ACL's refusal: NOPERM for a command,
// and, for a redis.call inside a script, Redis 7.0's "The user executing
// the script can't ..." (NOPERM in later versions).
func refused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.Contains(msg, "The user executing the script can't") || strings.Contains(msg, "NOPERM")
}

// raw is a client of fn's user without go-redis's wiring of the app.
func (d *deployment) raw(t *testing.T, fn string) redis.UniversalClient {
	t.Helper()
	c := d.connect(redisacl.UserName(fn), password(fn))
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
	return c
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func mustDecimal(t *testing.T, s string) decimal.Decimal {
	t.Helper()
	d, err := decimal.NewFromString(s)
	must(t, err)
	return d
}

func mustProvider(t *testing.T, a *app.App) withdrawal.Provider {
	t.Helper()
	p, err := a.Provider(false)
	must(t, err)
	return p
}

func mustNotifier(t *testing.T, a *app.App) withdrawal.Notifier {
	t.Helper()
	n, err := a.Notifier(context.Background(), io.Discard, false)
	must(t, err)
	return n
}

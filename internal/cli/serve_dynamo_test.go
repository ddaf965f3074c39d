package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
)

// dynamoEnv is the environment of `hourglass serve` on the dynamodb ledger:
// dynalite for the tables (created at start), the embedded Redis for the
// schedule, tables named for this test.
func dynamoEnv(db *dynalitetest.Server, name string) map[string]string {
	return map[string]string{
		"REDIS_URL": "", "HOURGLASS_LEDGER": "dynamodb", "DYNAMODB_ENDPOINT": db.Endpoint, "HOURGLASS_CREATE_TABLES": "true",
		"HOURGLASS_WITHDRAWALS_TABLE": name + "-withdrawals", "HOURGLASS_ORDERS_TABLE": name + "-orders",
		"HOURGLASS_IDEMPOTENCY_TABLE": name + "-idempotency",
	}
}

// embeddedRedis is the address of the embedded Redis serve announced.
func (s *server) embeddedRedis() string {
	s.t.Helper()
	f, err := os.Open(s.log)
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Addr string `json:"redis_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Addr != "" {
			return line.Addr
		}
	}
	s.t.Fatal("serve did not announce its embedded Redis")
	return ""
}

// item reads a record straight from a DynamoDB table: proof that the ledger
// is there and not in Redis.
func dynamoItem(t *testing.T, db *dynalitetest.Server, table, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.Client().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attrS(it map[string]types.AttributeValue, k string) string {
	if v, ok := it[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// reconcileReport is what `hourglass reconcile` prints.
type reconcileReport struct {
	Ledger      string `json:"ledger"`
	Withdrawals struct {
		Scheduled    int `json:"scheduled"`
		Promoted     int `json:"promoted"`
		Redispatched int `json:"redispatched"`
		Renotified   int `json:"renotified"`
	} `json:"withdrawals"`
	FlashSale json.RawMessage `json:"flash_sale"`
}

// runReconcile runs `hourglass reconcile` with env and returns its report; it
// must exit 0.
func runReconcile(t *testing.T, env map[string]string) reconcileReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, proctest.Build(t, hourglassPkg), "reconcile")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hourglass reconcile: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.Bytes(), tail(stderr.Bytes(), 2048))
	}
	var rep reconcileReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Ledger == "" || len(rep.FlashSale) == 0 {
		t.Fatalf("hourglass reconcile printed no JSON report (%v):\n%s", err, stdout.Bytes())
	}
	return rep
}

// reconcileEnv is the environment of `hourglass reconcile` beside serve s
// started with env: s's embedded Redis, env's ledger, no table creation.
func reconcileEnv(s *server, env map[string]string) map[string]string {
	renv := map[string]string{"REDIS_URL": "redis://" + s.embeddedRedis(), "HOURGLASS_LOG_LEVEL": "warn"}
	for k, v := range env {
		if k != "REDIS_URL" && k != "HOURGLASS_CREATE_TABLES" {
			renv[k] = v
		}
	}
	return renv
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func withdrawalsDue(t *testing.T, s *server) float64 {
	t.Helper()
	stats := s.do(http.MethodGet, "/v1/admin/stats", "", map[string]string{"X-Admin-Token": "dev-admin"}, "")
	if stats.status != http.StatusOK {
		t.Fatalf("stats: %d %s", stats.status, stats.raw)
	}
	queues, _ := stats.body["queues"].(map[string]any)
	wq, _ := queues["withdrawals"].(map[string]any)
	due, ok := wq["due"].(float64)
	if !ok {
		t.Fatalf("stats without the withdrawals queue: %s", stats.raw)
	}
	return due
}

// TestServeDynamoWalkthroughs runs the README walkthroughs (the same checks
// as TestServeWalkthrough and TestServeFlashSaleWalkthrough) against
// `hourglass serve` with HOURGLASS_LEDGER=dynamodb on dynalite, then loses
// the embedded Redis's data and has `hourglass reconcile` put it back.
func TestServeDynamoWalkthroughs(t *testing.T) {
	db := dynalitetest.Start(t)

	t.Run("withdrawals", func(t *testing.T) {
		env := dynamoEnv(db, "walk")
		s := serve(t, proctest.FreeAddr(t), env)
		body := walkthroughBody
		id, otherID := walkWithdrawals(t, s)
		// The records live in DynamoDB (the paid one returned by the
		// provider's callback).
		if it := dynamoItem(t, db, env["HOURGLASS_WITHDRAWALS_TABLE"], id); attrS(it, "status") != "returned" || attrS(it, "payout_id") != "sim_"+id {
			t.Fatalf("DynamoDB record of %s: %v", id, it)
		}
		if it := dynamoItem(t, db, env["HOURGLASS_WITHDRAWALS_TABLE"], otherID); attrS(it, "status") != "cancelled" {
			t.Fatalf("DynamoDB record of %s: %v", otherID, it)
		}

		// Beyond the 1 h horizon a withdrawal waits in the ledger only.
		if r := s.create("alice", "demo-4", strings.Replace(body, `"delay_seconds":2`, `"delay_seconds":7200`, 1)); r.status != http.StatusAccepted {
			t.Fatalf("create demo-4: %d %s", r.status, r.raw)
		}
		if n := withdrawalsDue(t, s); n != 0 {
			t.Fatalf("%v withdrawals due in Redis, want 0: the one due in 2 h stays out", n)
		}
		soon := s.create("alice", "demo-5", strings.Replace(body, `"delay_seconds":2`, `"delay_seconds":600`, 1))
		if soon.status != http.StatusAccepted {
			t.Fatalf("create demo-5: %d %s", soon.status, soon.raw)
		}
		if n := withdrawalsDue(t, s); n != 1 {
			t.Fatalf("%v withdrawals due in Redis, want 1", n)
		}

		// Redis loses its data; `hourglass reconcile` puts back what the
		// ledger says is due within the horizon.
		rdb := redis.NewClient(&redis.Options{Addr: s.embeddedRedis()})
		defer func() { _ = rdb.Close() }()
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if n := withdrawalsDue(t, s); n != 0 {
			t.Fatalf("%v withdrawals due after FLUSHALL", n)
		}
		renv := reconcileEnv(s, env)
		rep := runReconcile(t, renv)
		if rep.Ledger != "dynamodb" || rep.Withdrawals.Scheduled != 1 || rep.Withdrawals.Promoted != 0 ||
			rep.Withdrawals.Redispatched != 0 || rep.Withdrawals.Renotified != 0 {
			t.Fatalf("reconcile report %+v, want dynamodb with 1 scheduled", rep)
		}
		if n := withdrawalsDue(t, s); n != 1 {
			t.Fatalf("%v withdrawals due after reconcile, want 1", n)
		}
		if rep := runReconcile(t, renv); rep.Withdrawals.Scheduled != 0 {
			t.Fatalf("second reconcile %+v, want nothing to repair", rep)
		}
		t.Logf("reconcile report after FLUSHALL: %+v flash_sale=%s", rep.Withdrawals, compact(rep.FlashSale))
	})

	t.Run("flash sale", func(t *testing.T) {
		env := dynamoEnv(db, "sale")
		s := serve(t, proctest.FreeAddr(t), env)
		for u, id := range walkFlashSale(t, s) {
			// The order is in DynamoDB's orders table.
			if it := dynamoItem(t, db, env["HOURGLASS_ORDERS_TABLE"], orderOf(id)); attrS(it, "purchase_id") != id || attrS(it, "user_id") != u {
				t.Fatalf("DynamoDB order %s: %v", orderOf(id), it)
			}
		}
		renv := reconcileEnv(s, env)
		if rep := runReconcile(t, renv); rep.Ledger != "dynamodb" || rep.Withdrawals.Scheduled+rep.Withdrawals.Redispatched+rep.Withdrawals.Renotified != 0 {
			t.Fatalf("reconcile of a settled sale: %+v %s", rep, rep.FlashSale)
		} else {
			t.Logf("reconcile report: withdrawals %+v flash_sale=%s", rep.Withdrawals, compact(rep.FlashSale))
		}
	})
}

// TestServeDynamoKilledWithRedisLosesNothing: with the dynamodb ledger,
// `hourglass serve` is killed with SIGKILL while withdrawals are being paid
// and its Redis (no AOF) is killed with it, so the restart finds Redis
// empty: no schedule, no lease. The restarted serve's reconciler rebuilds the
// queue from DynamoDB (scheduled ones, attempts past their deadline, outcomes
// finance has not heard of): every withdrawal is paid, each once, and finance
// hears of each.
func TestServeDynamoKilledWithRedisLosesNothing(t *testing.T) {
	db := dynalitetest.Start(t)
	rs := redistest.Start(t) // no AOF: a restart loses everything
	provider := fakes.NewProvider(t, "pay-secret")
	provider.Slow(100 * time.Millisecond)
	finance := fakes.NewFinance(t, "fin-secret")
	env := dynamoEnv(db, "kill")
	for k, v := range map[string]string{
		"REDIS_URL": rs.URL(), "PAYOUT_URL": provider.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": finance.URL, "FINANCE_SIGNING_SECRET": "fin-secret",
		"HOURGLASS_LEASE": "2s", "HOURGLASS_VISIBILITY_TIMEOUT": "300ms", "PAYOUT_TIMEOUT": "1s",
		"HOURGLASS_POLL_INTERVAL": "200ms", "HOURGLASS_RECONCILE_INTERVAL": "1s", "HOURGLASS_LOG_LEVEL": "warn",
	} {
		env[k] = v
	}
	addr := proctest.FreeAddr(t)
	s := serve(t, addr, env)

	const n = 300
	ids := make(map[string]string, n) // id -> user
	for i := range n {
		user := fmt.Sprintf("user-%d", i%17)
		r := s.create(user, fmt.Sprintf("k-%d", i), `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":1}`)
		if r.status != http.StatusAccepted {
			t.Fatalf("create %d: %d %s", i, r.status, r.raw)
		}
		ids[r.body["id"].(string)] = user
	}
	waitFor(t, 30*time.Second, "payouts to start", func() bool { return provider.TotalCalls() >= 30 })
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	rs.Restart() // empty
	paidAtKill := provider.Paid()
	if paidAtKill >= n {
		t.Fatalf("all %d were paid before the kill; the test proved nothing", n)
	}
	if keys := rs.Client(t).DBSize(context.Background()).Val(); keys != 0 {
		t.Fatalf("restarted Redis holds %d keys, want none", keys)
	}
	t.Logf("killed serve and Redis with %d of %d paid at the provider, finance told of %d", paidAtKill, n, len(finance.IDs()))

	start := time.Now()
	s2 := serve(t, addr, env)
	waitFor(t, 90*time.Second, "every withdrawal to be paid", func() bool { return provider.Paid() == n })
	waitFor(t, 60*time.Second, "finance to hear of every withdrawal", func() bool { return len(finance.IDs()) == n })
	t.Logf("all paid and reported %s after the restart", time.Since(start).Round(time.Millisecond))
	repeats := 0
	for id, user := range ids {
		calls, paid := provider.Calls(id)
		if !paid {
			t.Errorf("%s never paid", id)
		}
		repeats += calls - 1
		r := s2.do(http.MethodGet, "/v1/withdrawals/"+id, user, nil, "")
		if r.body["status"] != "paid" || r.body["payout_id"] != "po_"+id {
			t.Errorf("%s ends %s", id, r.raw)
		}
	}
	msgs := 0
	for id, c := range finance.IDs() {
		msgs += c
		if _, ok := ids[id]; !ok {
			t.Errorf("finance heard of unknown withdrawal %s", id)
		}
	}
	out, _ := os.ReadFile(s2.log)
	var repairs []string
	for line := range bytes.Lines(out) {
		if bytes.Contains(line, []byte(`"msg":"reconciler repaired withdrawals"`)) {
			repairs = append(repairs, strings.TrimSpace(string(line)))
		}
	}
	if len(repairs) == 0 {
		t.Errorf("the restarted serve logged no reconciler repair, though Redis came back empty")
	}
	t.Logf("%d paid once each; %d repeated provider calls under an existing key (allowed); finance: %d messages for %d withdrawals; reconciler: %v",
		n, repeats, msgs, n, repairs)
}

package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/redisguard"
)

// hourglassPkg is the program the tests drive.
const hourglassPkg = "github.com/hourglass/hourglass/cmd/hourglass" // the binary around this package

func TestMain(m *testing.M) {
	// Every hourglass serve the tests start advertises itself here, never
	// in the user's cache directory, where a developer's own may run.
	dir, err := os.MkdirTemp("", "hourglass-state-")
	if err != nil {
		panic(err)
	}
	if err := os.Setenv("HOURGLASS_STATE_DIR", dir); err != nil {
		panic(err)
	}
	// Every hourglass serve and operator command of the tests sends only
	// what ElastiCache Serverless serves (a test may set "all").
	if err := os.Setenv("HOURGLASS_REDIS_COMMANDS", redistest.ServerlessCommands); err != nil {
		panic(err)
	}
	code := m.Run()
	if n := redisguard.Total(); n > 0 {
		fmt.Fprintf(os.Stderr, "the command guard refused %d commands ElastiCache Serverless does not serve\n", n)
		code = 1
	}
	_ = os.RemoveAll(dir)
	proctest.RemoveBuilds()
	os.Exit(code)
}

type server struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string
	log  string
	// exited is closed when the process ends; err is then its exit error.
	exited chan struct{}
	err    error
}

// serve starts `hourglass serve` with env and waits for /healthz.
func serve(t *testing.T, addr string, env map[string]string) *server {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "serve-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(proctest.Build(t, hourglassPkg), "serve")
	cmd.Env = append(os.Environ(), "HOURGLASS_ADDR="+addr)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	redistest.AssertNoRefusals(t, logf.Name())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, base: "http://" + addr, log: logf.Name(), exited: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			out, _ := os.ReadFile(s.log)
			t.Logf("serve output (last 4 KiB):\n%s", tail(out, 4096))
		}
	})
	if !proctest.AwaitHealthy(t, s.base+"/healthz", s.exited, 30*time.Second) {
		out, _ := os.ReadFile(s.log)
		t.Fatalf("serve exited early: %v\n%s", s.err, out)
	}
	return s
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (s *server) do(method, path, user string, headers map[string]string, body string) reply {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("X-User-Id", user)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (s *server) create(user, key, body string) reply {
	return s.do(http.MethodPost, "/v1/withdrawals", user, map[string]string{"Idempotency-Key": key}, body)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeWalkthrough follows the README's walkthrough against the default
// `make run` setup: embedded Redis, simulated provider, finance on stdout.
func TestServeWalkthrough(t *testing.T) {
	s := serve(t, proctest.FreeAddr(t), map[string]string{"REDIS_URL": ""})
	walkWithdrawals(t, s)
	stats := s.do(http.MethodGet, "/v1/admin/stats", "", map[string]string{"X-Admin-Token": "dev-admin"}, "")
	if stats.status != http.StatusOK {
		t.Fatalf("stats: %d %s", stats.status, stats.raw)
	}
}

// walkthroughBody is the README's first withdrawal, due in 2 s.
const walkthroughBody = `{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":2}`

// walkWithdrawals follows the README's withdrawal walkthrough against s:
// create, replay, conflict, cancel another (twice), a validation error,
// someone else's read, the payout, the list and finance's message. It
// returns the paid withdrawal's id and the cancelled one's.
func walkWithdrawals(t *testing.T, s *server) (paid, cancelled string) {
	t.Helper()
	body := walkthroughBody
	created := s.create("alice", "demo-1", body)
	if created.status != http.StatusAccepted || created.body["status"] != "scheduled" {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	id := created.body["id"].(string)
	if loc := created.header.Get("Location"); loc != "/v1/withdrawals/"+id {
		t.Fatalf("Location %q", loc)
	}
	replay := s.create("alice", "demo-1", body)
	if replay.status != http.StatusAccepted || replay.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.raw, created.raw) {
		t.Fatalf("replay: %d %v %s", replay.status, replay.header, replay.raw)
	}
	if r := s.create("alice", "demo-1", strings.Replace(body, "125.50", "1.00", 1)); r.status != http.StatusUnprocessableEntity || r.body["code"] != "idempotency_conflict" {
		t.Fatalf("conflict: %d %s", r.status, r.raw)
	}
	other := s.create("alice", "demo-2", strings.Replace(body, `"delay_seconds":2`, `"delay_seconds":600`, 1))
	if other.status != http.StatusAccepted {
		t.Fatalf("create demo-2: %d %s", other.status, other.raw)
	}
	otherID := other.body["id"].(string)
	for _, what := range []string{"cancel", "cancel again"} {
		if r := s.do(http.MethodDelete, "/v1/withdrawals/"+otherID, "alice", nil, ""); r.status != http.StatusOK || r.body["status"] != "cancelled" {
			t.Fatalf("%s: %d %s", what, r.status, r.raw)
		}
	}
	if r := s.create("alice", "demo-3", `{"amount":"12.345","currency":"CNY","destination":"bank_6222"}`); r.status != http.StatusBadRequest ||
		r.body["code"] != "validation_failed" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("validation: %d %s", r.status, r.raw)
	}
	if r := s.do(http.MethodGet, "/v1/withdrawals/"+id, "bob", nil, ""); r.status != http.StatusNotFound {
		t.Fatalf("bob read alice's withdrawal: %d %s", r.status, r.raw)
	}
	waitFor(t, 30*time.Second, "the withdrawal to be paid", func() bool {
		return s.do(http.MethodGet, "/v1/withdrawals/"+id, "alice", nil, "").body["status"] == "paid"
	})
	got := s.do(http.MethodGet, "/v1/withdrawals/"+id, "alice", nil, "")
	if got.body["attempts"] != float64(1) || got.body["payout_id"] != "sim_"+id {
		t.Fatalf("paid withdrawal: %s", got.raw)
	}
	due, _ := time.Parse(time.RFC3339, created.body["due_at"].(string))
	updated, _ := time.Parse(time.RFC3339, got.body["updated_at"].(string))
	if updated.Before(due) {
		t.Fatalf("paid at %v, before its due time %v", updated, due)
	}
	if r := s.do(http.MethodDelete, "/v1/withdrawals/"+id, "alice", nil, ""); r.status != http.StatusConflict || r.body["code"] != "not_cancellable" {
		t.Fatalf("cancel of a paid withdrawal: %d %s", r.status, r.raw)
	}
	list := s.do(http.MethodGet, "/v1/withdrawals", "alice", nil, "")
	items, _ := list.body["items"].([]any)
	if list.status != http.StatusOK || len(items) != 2 || items[0].(map[string]any)["id"] != otherID || items[1].(map[string]any)["id"] != id {
		t.Fatalf("list: %d %s", list.status, list.raw)
	}
	waitFor(t, 10*time.Second, "finance's message on stdout", func() bool {
		out, _ := os.ReadFile(s.log)
		return bytes.Contains(out, []byte(`{"type":"payout.processed","withdrawal_id":"`+id+`"`))
	})

	// The provider reports that the money came back, signed as the README
	// shows with `hourglass sign`.
	callback := `{"event_id":"evt_1","withdrawal_id":"` + id + `","payout_id":"sim_` + id + `","status":"returned","reason":"account closed"}`
	sign := exec.Command(proctest.Build(t, hourglassPkg), "sign")
	sign.Stdin = strings.NewReader(callback)
	sig, err := sign.Output()
	if err != nil {
		t.Fatalf("hourglass sign: %v", err)
	}
	headers := map[string]string{"X-Hourglass-Signature": strings.TrimSpace(string(sig)), "Content-Type": "application/json"}
	for _, want := range []string{"applied", "duplicate"} {
		r := s.do(http.MethodPost, "/v1/webhooks/payouts", "", headers, callback)
		if r.status != http.StatusOK || r.body["status"] != "returned" || r.body["result"] != want {
			t.Fatalf("callback (%s): %d %s", want, r.status, r.raw)
		}
	}
	if r := s.do(http.MethodGet, "/v1/withdrawals/"+id, "alice", nil, ""); r.body["status"] != "returned" {
		t.Fatalf("after the callback: %s", r.raw)
	}
	waitFor(t, 10*time.Second, "finance to hear of the return", func() bool {
		out, _ := os.ReadFile(s.log)
		return bytes.Contains(out, []byte(`{"type":"payout.processed","withdrawal_id":"`+id+`","user_id":"alice","status":"returned"`))
	})
	return id, otherID
}

// TestServeKilledLosesNothing kills `hourglass serve` with SIGKILL while
// withdrawals are due and being paid, restarts it, and checks that every one
// is paid, each once, and that finance hears of each.
func TestServeKilledLosesNothing(t *testing.T) {
	redis := redistest.Start(t)
	provider := fakes.NewProvider(t, "pay-secret")
	provider.Slow(100 * time.Millisecond)
	finance := fakes.NewFinance(t, "fin-secret")
	env := map[string]string{
		"REDIS_URL": redis.URL(), "PAYOUT_URL": provider.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": finance.URL, "FINANCE_SIGNING_SECRET": "fin-secret",
		"HOURGLASS_LEASE": "2s", "HOURGLASS_VISIBILITY_TIMEOUT": "300ms", "PAYOUT_TIMEOUT": "1s",
		"HOURGLASS_POLL_INTERVAL": "200ms", "HOURGLASS_LOG_LEVEL": "warn",
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
	waitFor(t, 20*time.Second, "payouts to start", func() bool { return provider.TotalCalls() >= 30 })
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	paidAtKill := provider.Paid()
	if paidAtKill >= n {
		t.Fatalf("all %d were paid before the kill; the test proved nothing", n)
	}
	t.Logf("killed with %d of %d paid at the provider", paidAtKill, n)

	s2 := serve(t, addr, env)
	waitFor(t, 60*time.Second, "every withdrawal to be paid", func() bool { return provider.Paid() == n })
	waitFor(t, 30*time.Second, "finance to hear of every withdrawal", func() bool { return len(finance.IDs()) == n })
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
	for id := range finance.IDs() {
		if _, ok := ids[id]; !ok {
			t.Errorf("finance heard of unknown withdrawal %s", id)
		}
	}
	t.Logf("%d paid once each; %d repeated provider calls under an existing key (allowed: same idempotency key)", n, repeats)
}

// TestServeStopsCleanly: SIGTERM finishes claimed work and exits 0.
func TestServeStopsCleanly(t *testing.T) {
	redis := redistest.Start(t)
	provider := fakes.NewProvider(t, "pay-secret")
	provider.Slow(200 * time.Millisecond)
	finance := fakes.NewFinance(t, "fin-secret")
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": redis.URL(), "PAYOUT_URL": provider.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": finance.URL, "FINANCE_SIGNING_SECRET": "fin-secret",
	})
	for i := range 20 {
		if r := s.create("alice", fmt.Sprintf("k-%d", i), `{"amount":"1.00","currency":"USD","destination":"a","delay_seconds":0}`); r.status != http.StatusAccepted {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
	}
	waitFor(t, 10*time.Second, "payouts to start", func() bool { return provider.TotalCalls() > 0 })
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		if s.err != nil {
			t.Fatalf("exit after SIGTERM: %v", s.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of SIGTERM")
	}
	out, _ := os.ReadFile(s.log)
	if !bytes.Contains(out, []byte(`"msg":"stopped"`)) {
		t.Fatalf("no clean stop in the log:\n%s", tail(out, 2048))
	}
	// Whatever was claimed before the signal was finished, not abandoned:
	// nothing is left leased.
	st := redis.Client(t).ZCard(t.Context(), "hg:{dq:withdrawals:0}:inflight").Val()
	if st != 0 {
		t.Fatalf("%d jobs left leased after a clean stop", st)
	}
}

// TestServeFlashSaleWalkthrough follows the README's flash-sale walkthrough
// against the default `make run` setup.
func TestServeFlashSaleWalkthrough(t *testing.T) {
	walkFlashSale(t, serve(t, proctest.FreeAddr(t), map[string]string{"REDIS_URL": ""}))
}

// walkFlashSale follows the README's flash-sale walkthrough against s: 2
// phones, ann and bob admitted, cat refused, ann's second try refused, both
// orders made. It returns the purchase ids of ann and bob.
func walkFlashSale(t *testing.T, s *server) map[string]string {
	t.Helper()
	admin := map[string]string{"X-Admin-Token": "dev-admin"}
	item := "/v1/seckill/items/phone-1"

	pre := s.do(http.MethodPut, item, "", admin, `{"stock":2,"per_user_limit":1,"ends_at":"2030-01-01T00:00:00Z"}`)
	if pre.status != http.StatusOK || pre.body["status"] != "live" || pre.body["stock_left"] != float64(2) {
		t.Fatalf("preheat: %d %s", pre.status, pre.raw)
	}
	ids := map[string]string{}
	for _, u := range []string{"ann", "bob"} {
		r := s.do(http.MethodPost, item+"/purchases", u, nil, "")
		if r.status != http.StatusAccepted || r.body["status"] != "reserved" {
			t.Fatalf("%s: %d %s", u, r.status, r.raw)
		}
		ids[u] = r.body["purchase_id"].(string)
	}
	if r := s.do(http.MethodPost, item+"/purchases", "cat", nil, ""); r.status != http.StatusGone || r.body["code"] != "sold_out" {
		t.Fatalf("cat: %d %s", r.status, r.raw)
	}
	if r := s.do(http.MethodPost, item+"/purchases", "ann", nil, ""); r.status != http.StatusConflict || r.body["code"] != "already_purchased" {
		t.Fatalf("ann again: %d %s", r.status, r.raw)
	}
	for _, u := range []string{"ann", "bob"} {
		waitFor(t, 30*time.Second, u+"'s order", func() bool {
			r := s.do(http.MethodGet, item+"/purchases/me", u, nil, "")
			return r.body["status"] == "confirmed" && r.body["order_id"] == orderOf(ids[u])
		})
	}
	if r := s.do(http.MethodGet, item+"/purchases/me", "cat", nil, ""); r.status != http.StatusNotFound {
		t.Fatalf("cat's purchase: %d %s", r.status, r.raw)
	}
	if r := s.do(http.MethodGet, item, "", nil, ""); r.body["status"] != "sold_out" || r.body["stock_left"] != float64(0) {
		t.Fatalf("item: %s", r.raw)
	}
	stats := s.do(http.MethodGet, "/v1/admin/stats", "", admin, "")
	items, _ := stats.body["items"].(map[string]any)
	phone, _ := items["phone-1"].(map[string]any)
	if phone["admitted"] != float64(2) || phone["confirmed"] != float64(2) || phone["stock_left"] != float64(0) {
		t.Fatalf("stats: %s", stats.raw)
	}
	return ids
}

// orderOf is the order id of a purchase id.
func orderOf(purchase string) string { return "or_" + strings.TrimPrefix(purchase, "pu_") }

package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// secretValue is a fresh secret that appears nowhere by chance.
func secretValue(t *testing.T, name string) string {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return name + "-" + hex.EncodeToString(b[:])
}

// echoProvider is a payout provider that checks signatures, answers the
// first calls of each withdrawal 500 with the request's headers echoed in
// the body (some servers do), refuses destination "reject" with 400, and
// pays otherwise.
type echoProvider struct {
	secret []byte
	fails  int

	mu    sync.Mutex
	calls map[string]int
	paid  map[string]int
}

func (p *echoProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := signature.Verify(p.secret, r.Header.Get(signature.Header), body, time.Now(), time.Minute); err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var req struct {
		ID          string `json:"withdrawal_id"`
		Destination string `json:"destination"`
	}
	_ = json.Unmarshal(body, &req)
	p.mu.Lock()
	p.calls[req.ID]++
	n := p.calls[req.ID]
	p.mu.Unlock()
	switch {
	case req.Destination == "reject":
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, "unknown destination; you signed %s", r.Header.Get(signature.Header))
	case n <= p.fails:
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "upstream broke while handling %s: %s %s", r.Header.Get(signature.Header), r.Header, body)
	default:
		p.mu.Lock()
		p.paid[req.ID]++
		p.mu.Unlock()
		_, _ = fmt.Fprintf(w, `{"payout_id":"po_%s"}`, req.ID)
	}
}

// TestSecretsNeverLeak runs the real `hourglass serve` with a password-
// protected redis-server, a payout secret, a finance secret and an admin
// token, through payouts that fail (500 echoing the signature back, 400),
// flash-sale and operator calls, bad credentials, rate-limit refusals and a
// Redis that stops and comes back; then starts it with bad REDIS_URL
// variants. No secret value appears in anything it printed or answered.
func TestSecretsNeverLeak(t *testing.T) {
	redisPass := secretValue(t, "redispw")
	payoutSecret := secretValue(t, "payoutsk")
	financeSecret := secretValue(t, "financesk")
	adminToken := secretValue(t, "admintok")
	secrets := []string{redisPass, payoutSecret, financeSecret, adminToken}

	srv := redistest.Start(t)
	protect := func() {
		t.Helper()
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer func() { _ = c.Close() }()
		if err := c.ConfigSet(context.Background(), "requirepass", redisPass).Err(); err != nil {
			t.Fatal(err)
		}
	}
	protect()
	redisURL := "redis://:" + url.QueryEscape(redisPass) + "@" + srv.Addr()

	prov := &echoProvider{secret: []byte(payoutSecret), fails: 2, calls: map[string]int{}, paid: map[string]int{}}
	provSrv := httptest.NewServer(prov)
	t.Cleanup(provSrv.Close)
	fin := fakes.NewFinance(t, financeSecret)

	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL":                      redisURL,
		"PAYOUT_URL":                     provSrv.URL,
		"PAYOUT_SIGNING_SECRET":          payoutSecret,
		"FINANCE_WEBHOOK_URL":            fin.URL,
		"FINANCE_SIGNING_SECRET":         financeSecret,
		"HOURGLASS_ADMIN_TOKEN":          adminToken,
		"HOURGLASS_LOG_LEVEL":            "debug",
		"HOURGLASS_RETRY_BASE":           "100ms",
		"HOURGLASS_RETRY_CAP":            "200ms",
		"HOURGLASS_POLL_INTERVAL":        "50ms",
		"HOURGLASS_RATE_PURCHASE_USER":   "2/m",
		"HOURGLASS_RATE_WITHDRAWAL_USER": "100/s",
	})
	var answers bytes.Buffer
	keep := func(r reply) reply {
		answers.Write(r.raw)
		for k, vs := range r.header {
			fmt.Fprintf(&answers, "\n%s: %s", k, strings.Join(vs, ","))
		}
		answers.WriteByte('\n')
		return r
	}
	admin := map[string]string{"X-Admin-Token": adminToken}

	// Payouts: one paid after two 500s that echo the signature back, one
	// refused with 400.
	paid := keep(s.create("alice", "k1", `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":0}`))
	rejected := keep(s.create("alice", "k2", `{"amount":"5.00","currency":"USD","destination":"reject","delay_seconds":0}`))
	if paid.status != 202 || rejected.status != 202 {
		t.Fatalf("create: %d %s / %d %s", paid.status, paid.raw, rejected.status, rejected.raw)
	}
	status := func(id string) string {
		r := keep(s.do(http.MethodGet, "/v1/withdrawals/"+id, "alice", nil, ""))
		st, _ := r.body["status"].(string)
		return st
	}
	waitFor(t, 30*time.Second, "the payouts to finish", func() bool {
		return status(paid.body["id"].(string)) == "paid" && status(rejected.body["id"].(string)) == "failed"
	})
	keep(s.do(http.MethodGet, "/v1/withdrawals", "alice", nil, ""))

	// Flash sale and operators; wrong tokens; rate-limit refusals.
	keep(s.do(http.MethodPut, "/v1/seckill/items/phone", "", admin, `{"stock":5,"ends_at":"2099-01-01T00:00:00Z"}`))
	for range 4 {
		keep(s.do(http.MethodPost, "/v1/seckill/items/phone/purchases", "bob", nil, ""))
	}
	keep(s.do(http.MethodGet, "/v1/admin/stats", "", admin, ""))
	keep(s.do(http.MethodGet, "/v1/admin/stats", "", map[string]string{"X-Admin-Token": adminToken[:len(adminToken)-1]}, ""))
	keep(s.do(http.MethodGet, "/v1/admin/stats", "", map[string]string{"X-Admin-Token": adminToken + "x"}, ""))
	keep(s.do(http.MethodGet, "/", "", nil, ""))

	// Redis stops: the API answers 503, health says so, the poller and the
	// limiter log their errors; Redis comes back and all works again.
	srv.Kill()
	for range 3 {
		if r := keep(s.create("alice", "k-down", `{"amount":"1.00","currency":"USD","destination":"acct_1"}`)); r.status != 503 {
			t.Errorf("create while Redis is down: %d %s", r.status, r.raw)
		}
		keep(s.do(http.MethodPost, "/v1/seckill/items/phone/purchases", "carol", nil, ""))
		keep(s.do(http.MethodGet, "/healthz", "", nil, ""))
		keep(s.do(http.MethodGet, "/v1/admin/stats", "", admin, ""))
	}
	time.Sleep(500 * time.Millisecond)
	srv.Restart()
	protect()
	waitFor(t, 15*time.Second, "health after Redis restarts", func() bool {
		return keep(s.do(http.MethodGet, "/healthz", "", nil, "")).status == 200
	})
	if r := keep(s.create("alice", "k3", `{"amount":"1.00","currency":"USD","destination":"acct_3","delay_seconds":0}`)); r.status != 202 {
		t.Errorf("create after Redis is back: %d %s", r.status, r.raw)
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	logs, err := os.ReadFile(s.log)
	if err != nil {
		t.Fatal(err)
	}
	// The run did go through the failures it was meant to.
	for _, want := range []string{"500 Internal Server Error", "connection refused", "[redacted]"} {
		if !bytes.Contains(logs, []byte(want)) {
			t.Errorf("the logs never mention %q: the run missed a failure it should log", want)
		}
	}
	// The refused payout: its owner reads the fixed reason, never the
	// provider's answer (that is for operators: the logs have it).
	if !bytes.Contains(answers.Bytes(), []byte(withdrawal.ReasonNotMade)) {
		t.Errorf("no answer gives the refused payout's reason %q: the run missed a failure it should show", withdrawal.ReasonNotMade)
	}
	for _, leak := range []string{"400 Bad Request", "you signed"} {
		if bytes.Contains(answers.Bytes(), []byte(leak)) {
			t.Errorf("an answer shows the provider's own words %q", leak)
		}
		if !bytes.Contains(logs, []byte(leak)) {
			t.Errorf("the logs never mention %q: operators lose the provider's answer", leak)
		}
	}
	if prov.paid[paid.body["id"].(string)] != 1 {
		t.Errorf("provider paid %v", prov.paid)
	}
	if len(fin.Of(paid.body["id"].(string))) == 0 {
		t.Error("finance never heard of the paid withdrawal")
	}

	// Bad REDIS_URL variants: a wrong password, a port nobody listens on,
	// a URL that does not parse, an unknown option. Each may refuse to
	// start or start unhealthy; none prints the secret.
	for _, bad := range []string{
		"redis://:" + url.QueryEscape(redisPass+"x") + "@" + srv.Addr(),
		"redis://default:" + url.QueryEscape(redisPass) + "@127.0.0.1:1",
		"redis://:" + url.QueryEscape(redisPass) + "@127.0.0.1:notaport",
		"redis://:" + url.QueryEscape(redisPass) + "@" + srv.Addr() + "?cluster=perhaps&pool_size=x",
		"rediss://user:" + redisPass + "@[::1",
	} {
		out := runBriefly(t, map[string]string{"REDIS_URL": bad, "PAYOUT_SIGNING_SECRET": payoutSecret,
			"HOURGLASS_ADMIN_TOKEN": adminToken, "HOURGLASS_LOG_LEVEL": "debug"})
		logs = append(logs, out...)
	}

	for _, sec := range secrets {
		for _, form := range []string{sec, url.QueryEscape(sec)} {
			if i := bytes.Index(logs, []byte(form)); i >= 0 {
				t.Errorf("a secret is in the output: …%s…", logs[max(0, i-200):min(len(logs), i+len(form)+50)])
			}
			if i := bytes.Index(answers.Bytes(), []byte(form)); i >= 0 {
				b := answers.Bytes()
				t.Errorf("a secret is in an answer: …%s…", b[max(0, i-200):min(len(b), i+len(form)+50)])
			}
		}
	}
	t.Logf("checked %d bytes of output and %d bytes of answers", len(logs), answers.Len())
}

// runBriefly runs `hourglass serve` with env on a free address for up to
// 3 seconds (it may exit at once on a bad setting) and returns its output.
func runBriefly(t *testing.T, env map[string]string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, proctest.Build(t, hourglassPkg), "serve")
	cmd.Env = append(os.Environ(), "HOURGLASS_ADDR="+proctest.FreeAddr(t))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	_ = cmd.Run()
	if out.Len() == 0 {
		t.Errorf("serve with %d settings printed nothing", len(env))
	}
	return out.Bytes()
}

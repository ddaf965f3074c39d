package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
)

// chromiumPath is Debian's chromium package (bash .ci/run installs it).
const chromiumPath = "/usr/bin/chromium"

// browserDeps returns node and the dashboard script, or fails the test with
// what to install: this test must run, not skip, where the browser is missing.
func browserDeps(t *testing.T) (node, script string) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless Chromium is missing at %s: apt-get install -y chromium (bash .ci/run installs it): %v", chromiumPath, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is missing (Node.js 20+; bash .ci/run installs it): %v", err)
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	if _, err := os.Stat(filepath.Join(root, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Fatalf("playwright-core is not installed: run npm ci in %s (make test does): %v", root, err)
	}
	script, _ = filepath.Abs(filepath.Join("testdata", "dashboard.js"))
	return node, script
}

// shown is one number on the page: its text and its data-value.
type shown struct {
	Text  string `json:"text"`
	Value string `json:"value"`
}

type pageReport struct {
	Browser         string           `json:"browser"`
	ConsoleErrors   []string         `json:"console_errors"`
	FailedRequests  []string         `json:"failed_requests"`
	LoginShown      bool             `json:"login_shown"`
	RequestsNoToken []string         `json:"requests_before_token"`
	Title           string           `json:"title"`
	Metrics         map[string]shown `json:"metrics"`
	ChartLines      int              `json:"chart_lines"`
	URLAfterLink    string           `json:"url_after_token_link"`
	LoginHiddenLink bool             `json:"login_hidden_with_link"`
	Status          string           `json:"status"`
	Requests        []string         `json:"requests"`
}

// TestDashboardInChromium starts `hourglass serve`, makes some activity (a
// dead payout, scheduled withdrawals, a flash sale with orders), opens the
// dashboard in headless Chromium and checks that it loads without console
// errors and shows the numbers GET /v1/admin/stats answers. The screenshot
// is kept in the test's temp dir (its path is logged).
func TestDashboardInChromium(t *testing.T) {
	node, script := browserDeps(t)
	rs := redistest.Start(t)
	finance := newFinanceSwitch(t) // down: the payout's job dies
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": rs.URL(), "FINANCE_WEBHOOK_URL": finance.URL, "HOURGLASS_MAX_RECEIVES": "1",
		"HOURGLASS_POLL_INTERVAL": "200ms", "HOURGLASS_LOG_LEVEL": "warn",
	})
	admin := map[string]string{"X-Admin-Token": "dev-admin"}
	for i := range 3 {
		if r := s.create("alice", fmt.Sprint("later-", i), `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":3600}`); r.status != 202 {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
	}
	if r := s.create("bob", "now", `{"amount":"1.00","currency":"USD","destination":"acct_2","delay_seconds":0}`); r.status != 202 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	if r := s.do("PUT", "/v1/seckill/items/phone-1", "", admin, `{"stock":5,"per_user_limit":1,"ends_at":"2030-01-01T00:00:00Z"}`); r.status != 200 {
		t.Fatalf("preheat: %d %s", r.status, r.raw)
	}
	for _, u := range []string{"ann", "cat"} {
		if r := s.do("POST", "/v1/seckill/items/phone-1/purchases", u, nil, ""); r.status != 202 {
			t.Fatalf("purchase: %d %s", r.status, r.raw)
		}
	}
	// A sale with a payment window: one order awaits payment.
	if r := s.do("PUT", "/v1/seckill/items/phone-2", "", admin,
		`{"stock":3,"ends_at":"2030-01-01T00:00:00Z","price":"10.00","currency":"USD","payment_window_seconds":3600}`); r.status != 200 {
		t.Fatalf("preheat: %d %s", r.status, r.raw)
	}
	if r := s.do("POST", "/v1/seckill/items/phone-2/purchases", "ann", nil, ""); r.status != 202 {
		t.Fatalf("purchase: %d %s", r.status, r.raw)
	}
	stats := func() map[string]map[string]map[string]float64 {
		var body map[string]map[string]map[string]float64
		r := s.do("GET", "/v1/admin/stats", "", admin, "")
		if err := json.Unmarshal(r.raw, &body); err != nil {
			t.Fatalf("stats %s: %v", r.raw, err)
		}
		return body
	}
	waitFor(t, 20*time.Second, "a dead payout and confirmed orders", func() bool {
		st := stats()
		return st["queues"]["withdrawals"]["dead"] == 1 && st["items"]["phone-1"]["confirmed"] == 2 &&
			st["items"]["phone-2"]["awaiting_payment"] == 1 &&
			st["queues"]["withdrawals"]["inflight"] == 0
	})

	dir := t.TempDir()
	shot := filepath.Join(dir, "dashboard.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(),
		"DASHBOARD_URL="+s.base+"/dashboard", "ADMIN_TOKEN=dev-admin", "SCREENSHOT="+shot,
		"USER_DATA_DIR="+filepath.Join(dir, "profile"), "CHROMIUM="+chromiumPath, "MIN_REFRESHES=2")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dashboard.js: %v\n%s", err, stderr.String())
	}
	t.Logf("browser run took %s", time.Since(start).Round(time.Millisecond))
	var page pageReport
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("dashboard.js printed %s: %v", out, err)
	}
	t.Logf("Chromium %s; screenshot: %s", page.Browser, shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Errorf("screenshot %s: %v", shot, err)
	}

	if len(page.ConsoleErrors) > 0 || len(page.FailedRequests) > 0 {
		t.Errorf("console errors %q, failed requests %q", page.ConsoleErrors, page.FailedRequests)
	}
	if !page.LoginShown || len(page.RequestsNoToken) > 0 {
		t.Errorf("without a token the page must ask for one and fetch nothing: login %v, requests %v", page.LoginShown, page.RequestsNoToken)
	}
	if strings.Contains(page.URLAfterLink, "token=") || !page.LoginHiddenLink {
		t.Errorf("a ?token= link: url after %q, login hidden %v", page.URLAfterLink, page.LoginHiddenLink)
	}
	if page.ChartLines == 0 {
		t.Error("no chart drew a line")
	}

	// The numbers shown are the numbers of the API.
	want := stats()
	number := func(key string) (float64, bool) {
		m, ok := page.Metrics[key]
		if !ok {
			t.Errorf("the page shows no %s", key)
			return 0, false
		}
		v, err := strconv.ParseFloat(m.Value, 64)
		if err != nil {
			t.Errorf("%s: value %q", key, m.Value)
			return 0, false
		}
		return v, true
	}
	totals := map[string]float64{}
	for q, fields := range want["queues"] {
		for f, v := range fields {
			got, ok := number("queue:" + q + ":" + f)
			if ok && got != v {
				t.Errorf("queue %s %s: page %v, API %v", q, f, got, v)
			}
			if f == "oldest_due_lag_ms" {
				totals[f] = max(totals[f], v)
				continue
			}
			totals[f] += v
			if text := strings.ReplaceAll(page.Metrics["queue:"+q+":"+f].Text, ",", ""); text != strconv.FormatFloat(v, 'f', -1, 64) {
				t.Errorf("queue %s %s shows %q, API %v", q, f, text, v)
			}
		}
	}
	for f, v := range totals {
		if got, ok := number("total:" + f); ok && got != v {
			t.Errorf("total %s: page %v, API %v", f, got, v)
		}
	}
	for item, fields := range want["items"] {
		for f, v := range fields {
			if got, ok := number("item:" + item + ":" + f); ok && got != v {
				t.Errorf("item %s %s: page %v, API %v", item, f, got, v)
			}
		}
	}
	if st := page.Metrics["item:phone-1:status"].Value; st != "live" {
		t.Errorf("phone-1 shows status %q, want live", st)
	}
	var metrics struct {
		Totals map[string]float64 `json:"totals"`
	}
	if err := json.Unmarshal(s.do("GET", "/dashboard/api/metrics", "", admin, "").raw, &metrics); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"payouts_paid", "payouts_failed", "reconciled", "promoted"} {
		if got, ok := number("counter:" + c); ok && got != metrics.Totals[c] {
			t.Errorf("%s: page %v, metrics %v", c, got, metrics.Totals[c])
		}
	}
	if metrics.Totals["payouts_paid"] != 1 {
		t.Errorf("payouts_paid %v, want 1 (the dead job's payout was made)", metrics.Totals["payouts_paid"])
	}
	if t.Failed() {
		t.Logf("page: %+v", page)
	}
}

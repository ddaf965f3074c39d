package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	LegendMismatch  []string         `json:"legend_mismatches"`
	HistoryPoints   int              `json:"history_points"`
}

// actionOutcome is what an action's message said.
type actionOutcome struct {
	Outcome string `json:"outcome"`
	Text    string `json:"text"`
}

// actReport is what dashboard.js saw doing the actions.
type actReport struct {
	ConsoleErrors  []string      `json:"console_errors"`
	FailedRequests []string      `json:"failed_requests"`
	Requests       []string      `json:"requests"`
	Inspected      string        `json:"inspected"`
	Requeue        actionOutcome `json:"requeue"`
	ConfirmText    string        `json:"confirm_text"`
	PurgeCancelled actionOutcome `json:"purge_cancelled"`
	StillDead      bool          `json:"still_dead_after_cancel"`
	Purge          actionOutcome `json:"purge"`
	Lookup         struct{ Text string }
	Resolve        actionOutcome   `json:"resolve"`
	Refusals       []actionOutcome `json:"refusals"`
	Routes         []string        `json:"routes"`
}

// runBrowser runs dashboard.js with env added and decodes what it printed
// into report.
func runBrowser(t *testing.T, node, script string, env []string, report any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dashboard.js: %v\n%s", err, stderr.String())
	}
	t.Logf("browser run took %s", time.Since(start).Round(time.Millisecond))
	if err := json.Unmarshal(out, report); err != nil {
		t.Fatalf("dashboard.js printed %s: %v", out, err)
	}
}

// shotsDir is where the screenshots of the panels go: the test's temp dir,
// or with HOURGLASS_DOC_SHOTS set (make screenshots) docs/img, shown by
// docs/operations.md. A test run leaves the checkout as it found it.
func shotsDir(t *testing.T) string {
	t.Helper()
	if os.Getenv("HOURGLASS_DOC_SHOTS") == "" {
		return t.TempDir()
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "docs", "img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stuckProvider pays at once, except to destination acct_stuck: that payout
// is made but answered past PAYOUT_TIMEOUT, and the status lookup is down,
// so its outcome stays unknown until an operator resolves it.
func stuckProvider(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var req struct {
			ID          string `json:"withdrawal_id"`
			Destination string `json:"destination"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Destination == "acct_stuck" {
			select { // paid, answered too late
			case <-time.After(time.Second):
			case <-r.Context().Done():
			}
		}
		_, _ = fmt.Fprintf(w, `{"payout_id":"po_%s"}`, req.ID)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestDashboardInChromium starts `hourglass serve`, makes some activity (two
// dead payout jobs, scheduled withdrawals, a flash sale with orders), opens
// the dashboard in headless Chromium and checks that it loads without
// console errors and shows the numbers GET /v1/admin/stats answers. Then,
// finance back up and a payout of unknown outcome made, it acts from the
// page: inspects and requeues one dead job (finance hears of it), purges
// the other after a confirmation (cancelled once: nothing purged), looks
// the requeued withdrawal up until it is paid, and resolves the unknown
// payout (finance hears of it). The full-page screenshot is kept in the
// test's temp dir; the panels' go to docs/img.
func TestDashboardInChromium(t *testing.T) {
	node, script := browserDeps(t)
	rs := redistest.Start(t)
	finance := newFinanceSwitch(t) // down: the payouts' jobs die
	s := serve(t, proctest.FreeAddr(t), map[string]string{
		"REDIS_URL": rs.URL(), "FINANCE_WEBHOOK_URL": finance.URL, "HOURGLASS_MAX_RECEIVES": "1",
		"HOURGLASS_POLL_INTERVAL": "200ms", "HOURGLASS_LOG_LEVEL": "warn",
		"PAYOUT_URL": stuckProvider(t), "PAYOUT_TIMEOUT": "300ms", "PAYOUT_IDEMPOTENCY_WINDOW": "300ms",
		"HOURGLASS_RETRY_BASE": "3s", "HOURGLASS_RETRY_CAP": "6s",
	})
	admin := map[string]string{"X-Admin-Token": "dev-admin"}
	for i := range 3 {
		if r := s.create("alice", fmt.Sprint("later-", i), `{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":3600}`); r.status != 202 {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
	}
	var dead []string
	for i := range 2 {
		r := s.create("bob", fmt.Sprint("now-", i), `{"amount":"1.00","currency":"USD","destination":"acct_2","delay_seconds":0}`)
		if r.status != 202 {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
		dead = append(dead, r.body["id"].(string))
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
	bought := s.do("POST", "/v1/seckill/items/phone-2/purchases", "ann", nil, "")
	if bought.status != 202 {
		t.Fatalf("purchase: %d %s", bought.status, bought.raw)
	}
	if r := s.do("POST", "/v1/seckill/items/phone-1/purchases", "ann", nil, ""); r.status != 409 {
		t.Fatalf("a second purchase: %d %s", r.status, r.raw)
	}
	stats := func() map[string]map[string]map[string]float64 {
		var body map[string]map[string]map[string]float64
		r := s.do("GET", "/v1/admin/stats", "", admin, "")
		if err := json.Unmarshal(r.raw, &body); err != nil {
			t.Fatalf("stats %s: %v", r.raw, err)
		}
		return body
	}
	waitFor(t, 20*time.Second, "dead payouts and confirmed orders", func() bool {
		st := stats()
		return st["queues"]["withdrawals"]["dead"] == 2 && st["items"]["phone-1"]["confirmed"] == 2 &&
			st["items"]["phone-2"]["awaiting_payment"] == 1 &&
			st["queues"]["withdrawals"]["inflight"] == 0
	})

	// A look-up by purchase id finds its order, awaiting payment: its
	// expiry job is scheduled (beside, for a moment, its order.created
	// event).
	var order struct {
		Kind  string `json:"kind"`
		Order struct {
			ItemID string `json:"item_id"`
			UserID string `json:"user_id"`
		} `json:"order"`
		Jobs []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"jobs"`
	}
	pid := bought.body["purchase_id"].(string)
	waitFor(t, 10*time.Second, "the order of "+pid, func() bool {
		return s.do("GET", "/dashboard/api/lookup?id="+pid, "", admin, "").status == 200
	})
	if err := json.Unmarshal(s.do("GET", "/dashboard/api/lookup?id="+pid, "", admin, "").raw, &order); err != nil {
		t.Fatal(err)
	}
	expiry := slices.ContainsFunc(order.Jobs, func(j struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}) bool {
		return j.State == "scheduled" && strings.HasPrefix(j.ID, "ex|"+pid)
	})
	if order.Kind != "order" || order.Order.ItemID != "phone-2" || order.Order.UserID != "ann" || !expiry {
		t.Errorf("look-up of purchase %s: %+v", pid, order)
	}

	dir := t.TempDir()
	shot := filepath.Join(dir, "dashboard.png")
	shots := shotsDir(t)
	var page pageReport
	runBrowser(t, node, script, []string{
		"DASHBOARD_URL=" + s.base + "/dashboard", "ADMIN_TOKEN=dev-admin", "SCREENSHOT=" + shot, "SHOTS=" + shots,
		"USER_DATA_DIR=" + filepath.Join(dir, "profile"), "CHROMIUM=" + chromiumPath, "MIN_REFRESHES=2",
	}, &page)
	t.Logf("Chromium %s; screenshot: %s", page.Browser, shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
	if len(page.LegendMismatch) > 0 {
		t.Errorf("lines without a legend of their colour: %q", page.LegendMismatch)
	}
	if page.HistoryPoints < 2 {
		t.Errorf("the queue-size chart drew %d points on load: the server's history is not drawn", page.HistoryPoints)
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
	var figures struct {
		Refusals map[string]float64 `json:"refusals_by_reason"`
	}
	if err := json.Unmarshal(s.do("GET", "/dashboard/api/metrics", "", admin, "").raw, &figures); err != nil ||
		figures.Refusals["already_purchased"] != 1 {
		t.Errorf("refusals by reason %v (%v), want already_purchased 1", figures.Refusals, err)
	}
	if metrics.Totals["payouts_paid"] != 2 {
		t.Errorf("payouts_paid %v, want 2 (the dead jobs' payouts were made)", metrics.Totals["payouts_paid"])
	}
	if t.Failed() {
		t.Fatalf("page: %+v", page)
	}

	// Now act from the page: finance is back, and a payout's outcome is
	// unknown (past the idempotency window, with no lookup).
	finance.on.Store(true)
	c := s.create("carol", "stuck", `{"amount":"7.00","currency":"USD","destination":"acct_stuck","delay_seconds":0}`)
	if c.status != 202 {
		t.Fatalf("create: %d %s", c.status, c.raw)
	}
	stuck := c.body["id"].(string)
	waitFor(t, 20*time.Second, "the payout to be unresolved", func() bool {
		r := s.do("GET", "/dashboard/api/payouts", "", admin, "")
		return strings.Contains(string(r.raw), stuck)
	})
	todo, _ := json.Marshal(map[string]string{"requeue": dead[0], "purge": dead[1], "resolve": stuck, "payout_id": "po_checked_by_hand"})
	var acted actReport
	runBrowser(t, node, script, []string{
		"DASHBOARD_URL=" + s.base + "/dashboard", "ADMIN_TOKEN=dev-admin", "SHOTS=" + shots, "ACT=" + string(todo),
		"USER_DATA_DIR=" + filepath.Join(dir, "profile-act"), "CHROMIUM=" + chromiumPath,
	}, &acted)
	for _, e := range acted.ConsoleErrors {
		// A refused resolution (the record moved) is a 409 or 412 the page
		// explains; Chromium logs the response too.
		if !strings.Contains(e, "status of 409") && !strings.Contains(e, "status of 412") || len(acted.Refusals) == 0 {
			t.Errorf("console error: %s", e)
		}
	}
	if len(acted.FailedRequests) > 0 {
		t.Errorf("failed requests %q", acted.FailedRequests)
	}
	for _, r := range acted.Requests {
		if strings.HasPrefix(r, "GET ") && (strings.Contains(r, "/requeue") || strings.Contains(r, "/purge") || strings.Contains(r, "/resolve")) {
			t.Errorf("an action by GET: %s", r)
		}
	}
	if !strings.Contains(acted.Inspected, dead[0]) || !strings.Contains(acted.Inspected, "bob") {
		t.Errorf("the inspected dead job shows %q", acted.Inspected)
	}
	if !strings.Contains(acted.Requeue.Text, "requeued 1 dead job") {
		t.Errorf("requeue said %+v", acted.Requeue)
	}
	waitFor(t, 20*time.Second, "finance to hear of the requeued payout", func() bool { return finance.heard(dead[0]) > 0 })
	if !strings.Contains(acted.Lookup.Text, "paid") {
		t.Errorf("the look-up showed %q", acted.Lookup.Text)
	}
	if !strings.Contains(acted.ConfirmText, dead[1]) || acted.PurgeCancelled.Text != "nothing purged" || !acted.StillDead {
		t.Errorf("a cancelled purge: asked %q, said %+v, still dead %v", acted.ConfirmText, acted.PurgeCancelled, acted.StillDead)
	}
	if !strings.Contains(acted.Purge.Text, "purged 1 dead job") {
		t.Errorf("purge said %+v", acted.Purge)
	}
	if st := stats(); st["queues"]["withdrawals"]["dead"] != 0 {
		t.Errorf("%v dead jobs left", st["queues"]["withdrawals"]["dead"])
	}
	if n := finance.heard(dead[1]); n != 0 {
		t.Errorf("finance heard %d times of the purged job's withdrawal", n)
	}
	if !strings.Contains(acted.Resolve.Text, stuck+" is paid (resolved by dashboard") {
		t.Errorf("resolve said %+v (refusals before: %+v)", acted.Resolve, acted.Refusals)
	}
	waitFor(t, 20*time.Second, "finance to hear of the resolution", func() bool { return finance.heard(stuck) > 0 })
	if w := s.do("GET", "/v1/withdrawals/"+stuck, "carol", nil, ""); w.body["status"] != "paid" || w.body["payout_id"] != "po_checked_by_hand" {
		t.Errorf("after the resolution the user sees %s", w.raw)
	}
	if !slices.Contains(acted.Routes, "POST /v1/withdrawals") || !slices.Contains(acted.Routes, "GET /v1/admin/stats") {
		t.Errorf("figures by route: %q", acted.Routes)
	}
	for _, r := range acted.Routes {
		if strings.Contains(r, "wd_") {
			t.Errorf("a route label carries an id: %q", r)
		}
	}
	for _, name := range []string{"overview", "dead", "purge-confirm", "lookup", "payouts", "figures"} {
		fi, err := os.Stat(filepath.Join(shots, "dashboard-"+name+".png"))
		if err != nil {
			t.Errorf("screenshot %s: %v", name, err)
			continue
		}
		t.Logf("dashboard-%s.png: %d KB", name, fi.Size()/1024)
		if fi.Size() > 200<<10 {
			t.Errorf("dashboard-%s.png is %d KB: keep it small", name, fi.Size()/1024)
		}
	}
	if t.Failed() {
		t.Logf("actions: %+v", acted)
	}
}

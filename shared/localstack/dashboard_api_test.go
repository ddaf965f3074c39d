package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// board is a dashboard over an App on miniredis, served with the API as
// serve does.
type board struct {
	t   *testing.T
	app *app.App
	srv *httptest.Server
}

func newBoard(t *testing.T) *board {
	t.Helper()
	mr := miniredis.RunT(t)
	for k, v := range map[string]string{
		"REDIS_URL": "redis://" + mr.Addr(), "HOURGLASS_AUTH": "dev", "HOURGLASS_ADMIN_TOKEN": "secret",
		"HOURGLASS_REDIS_PREFIX": "hg:", "PAYOUT_URL": "", "FINANCE_WEBHOOK_URL": "", "FINANCE_TOPIC_ARN": "",
		"HOURGLASS_QUEUE_SHARDS": "2", "HOURGLASS_MAX_ATTEMPTS": "8",
		"HOURGLASS_REDIS_COMMANDS": redistest.ServerlessCommands,
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Local)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	redistest.AssertNoRefusals(t)
	a, err := app.New(cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), rdb)
	if err != nil {
		t.Fatal(err)
	}
	tally := NewTally(a.Clock, 10*time.Second, time.Hour)
	rt := a.Router()
	srv := httptest.NewServer(localServer{
		api:       Gateway{Handler: rt.Serve, Log: a.Log, Route: rt.Pattern, Observe: tally.ObserveRequest},
		dashboard: Dashboard{Token: "secret", Tally: tally, App: a},
	})
	t.Cleanup(srv.Close)
	return &board{t: t, app: a, srv: srv}
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// do sends a request: the admin token unless token says otherwise ("-"
// for none), a JSON body if body is set.
func (b *board) do(method, path, token, body string, header ...string) answer {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	if token != "-" {
		req.Header.Set("X-Admin-Token", token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// want fails unless a has status and, for a problem, code.
func (a answer) want(t *testing.T, status int, code string) answer {
	t.Helper()
	if a.status != status || (code != "" && a.body["code"] != code) {
		t.Fatalf("answer %d %s, want %d %s", a.status, a.raw, status, code)
	}
	if code != "" && !strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("a problem as %q", a.header.Get("Content-Type"))
	}
	return a
}

// create makes a withdrawal due delay from now through the API.
func (b *board) create(delay int) string {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.srv.URL+"/v1/withdrawals", strings.NewReader(
		fmt.Sprintf(`{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":%d}`, delay)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "alice")
	req.Header.Set("Idempotency-Key", fmt.Sprint("k-", time.Now().UnixNano()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var v struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 202 {
		b.t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	return v.ID
}

// kill claims the jobs of withdrawals ids and moves them to the dead set,
// as the work queue does once one failed every delivery.
func (b *board) kill(ids ...string) {
	b.t.Helper()
	ctx := context.Background()
	q := b.app.Withdrawals
	leases := map[int]int64{}
	for _, id := range ids {
		w, err := b.app.Ledger.Find(ctx, id)
		if err != nil {
			b.t.Fatal(err)
		}
		lease, ok := leases[w.Shard]
		if !ok {
			c, err := q.Claim(ctx, w.Shard, time.Now().Add(time.Second), time.Minute, 100)
			if err != nil {
				b.t.Fatal(err)
			}
			lease, leases[w.Shard] = c.Lease, c.Lease
		}
		if err := q.Kill(ctx, w.Shard, id, lease, time.Now()); err != nil {
			b.t.Fatal(err)
		}
	}
}

func (b *board) deadCount() int64 {
	b.t.Helper()
	n, err := b.app.Withdrawals.DeadCount(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// TestDashboardAPIRefusesBeforeActing: every endpoint wants its method
// (405 with Allow), the token (401 without, 403 wrong), and the state
// changes a JSON body (415, 400 on unknown fields, 413).
func TestDashboardAPIRefusesBeforeActing(t *testing.T) {
	b := newBoard(t)
	get := []string{"metrics", "dead", "dead/job?queue=withdrawals&id=x", "payouts", "lookup?id=wd_x"}
	post := []string{"dead/requeue", "dead/purge", "payouts/resolve"}
	for _, p := range get {
		b.do("GET", "/dashboard/api/"+p, "-", "").want(t, 401, "unauthenticated")
		b.do("GET", "/dashboard/api/"+p, "wrong", "").want(t, 403, "forbidden")
		a := b.do("POST", "/dashboard/api/"+p, "secret", "{}").want(t, 405, "method_not_allowed")
		if a.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: Allow %q", p, a.header.Get("Allow"))
		}
	}
	for _, p := range post {
		b.do("POST", "/dashboard/api/"+p, "-", "{}").want(t, 401, "unauthenticated")
		b.do("POST", "/dashboard/api/"+p, "wrong", "{}").want(t, 403, "forbidden")
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			if a := b.do(m, "/dashboard/api/"+p, "secret", "").want(t, 405, "method_not_allowed"); a.header.Get("Allow") != "POST" {
				t.Errorf("%s %s: Allow %q", m, p, a.header.Get("Allow"))
			}
		}
		b.do("POST", "/dashboard/api/"+p, "secret", "").want(t, 415, "unsupported_media_type")
		b.do("POST", "/dashboard/api/"+p, "secret", `{"queue":"withdrawals"}`, "Content-Type", "text/plain").
			want(t, 415, "unsupported_media_type")
		b.do("POST", "/dashboard/api/"+p, "secret", `{"nonsense":1}`).want(t, 400, "validation_failed")
		b.do("POST", "/dashboard/api/"+p, "secret", `{} {}`).want(t, 400, "validation_failed")
		b.do("POST", "/dashboard/api/"+p, "secret", `{"queue":"`+strings.Repeat("x", 20<<10)+`"}`).want(t, 413, "payload_too_large")
	}
	b.do("GET", "/dashboard/api/nothing", "secret", "").want(t, 404, "not_found")
	b.do("GET", "/metrics", "-", "").want(t, 401, "unauthenticated")
	b.do("GET", "/metrics", "wrong", "").want(t, 403, "forbidden")
	b.do("POST", "/metrics", "secret", "{}").want(t, 405, "method_not_allowed")
}

// TestDashboardDeadJobs: list, inspect, requeue and purge dead jobs; a
// refused action (unknown queue, a job that is not dead, a purge not
// confirmed) moves nothing.
func TestDashboardDeadJobs(t *testing.T) {
	b := newBoard(t)
	id, other := b.create(0), b.create(0)
	b.kill(id, other)

	list := b.do("GET", "/dashboard/api/dead", "secret", "").want(t, 200, "")
	jobs, _ := list.body["jobs"].([]any)
	if len(jobs) != 2 || list.body["counts"].(map[string]any)["withdrawals"] != 2.0 {
		t.Fatalf("dead list %s", list.raw)
	}
	b.do("GET", "/dashboard/api/dead?queue=sk:nothing", "secret", "").want(t, 404, "unknown_queue")
	b.do("GET", "/dashboard/api/dead?limit=0", "secret", "").want(t, 400, "validation_failed")

	job := b.do("GET", "/dashboard/api/dead/job?queue=withdrawals&id="+id, "secret", "").want(t, 200, "")
	rec, _ := job.body["record"].(map[string]any)
	if w, _ := rec["withdrawal"].(map[string]any); w["id"] != id || w["user_id"] != "alice" || rec["kind"] != "withdrawal" {
		t.Fatalf("dead job %s", job.raw)
	}
	if places, _ := rec["jobs"].([]any); len(places) != 1 || places[0].(map[string]any)["state"] != "dead" {
		t.Errorf("the record's jobs %v, want it dead", rec["jobs"])
	}
	b.do("GET", "/dashboard/api/dead/job?queue=withdrawals&id=wd_nothing", "secret", "").want(t, 404, "not_dead")
	b.do("GET", "/dashboard/api/dead/job?queue=withdrawals", "secret", "").want(t, 400, "validation_failed")

	// Refusals move nothing.
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"requeue", `{"queue":"withdrawals","ids":["` + id + `","wd_nothing"]}`, 404, "not_dead"},
		{"requeue", `{"queue":"sk:nothing","ids":["` + id + `"]}`, 404, "unknown_queue"},
		{"requeue", `{"queue":"withdrawals"}`, 400, "validation_failed"},
		{"requeue", `{"queue":"withdrawals","all":true,"ids":["` + id + `"]}`, 400, "validation_failed"},
		{"requeue", `{"ids":["` + id + `"]}`, 400, "validation_failed"},
		{"purge", `{"queue":"withdrawals","all":true}`, 400, "confirmation_required"},
		{"purge", `{"queue":"withdrawals","ids":["` + id + `"],"confirm":false}`, 400, "confirmation_required"},
		{"purge", `{"queue":"withdrawals","ids":["wd_nothing"],"confirm":true}`, 404, "not_dead"},
	} {
		b.do("POST", "/dashboard/api/dead/"+tc.path, "secret", tc.body).want(t, tc.status, tc.code)
		if n := b.deadCount(); n != 2 {
			t.Fatalf("after a refused %s %s: %d dead, want 2", tc.path, tc.body, n)
		}
	}

	// Requeue one: due now.
	moved := b.do("POST", "/dashboard/api/dead/requeue", "secret", `{"queue":"withdrawals","ids":["`+id+`"]}`).want(t, 200, "")
	if diff := cmp.Diff([]any{id}, moved.body["moved"]); diff != "" {
		t.Errorf("requeued (-want +got):\n%s", diff)
	}
	look := b.do("GET", "/dashboard/api/lookup?id="+id, "secret", "").want(t, 200, "")
	places, _ := look.body["jobs"].([]any)
	if len(places) != 1 || places[0].(map[string]any)["state"] != "scheduled" {
		t.Fatalf("after the requeue: %s", look.raw)
	}
	if n := b.deadCount(); n != 1 {
		t.Fatalf("%d dead after requeueing one of 2", n)
	}
	// Purge the other, confirmed: gone from every set, the record kept.
	b.do("POST", "/dashboard/api/dead/purge", "secret", `{"queue":"withdrawals","all":true,"confirm":true}`).want(t, 200, "")
	if n := b.deadCount(); n != 0 {
		t.Fatalf("%d dead after a purge", n)
	}
	look = b.do("GET", "/dashboard/api/lookup?id="+other, "secret", "").want(t, 200, "")
	if places, _ := look.body["jobs"].([]any); len(places) != 0 {
		t.Errorf("a purged job is still somewhere: %s", look.raw)
	}
}

// stuckProvider never answers in time and has no lookup: every payout's
// outcome is unknown.
type stuckProvider struct{}

func (stuckProvider) Pay(context.Context, withdrawal.Withdrawal) (string, error) {
	return "", fmt.Errorf("timed out: %w", withdrawal.ErrOutcomeUnknown)
}

func (stuckProvider) Lookup(context.Context, withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	return withdrawal.Lookup{}, withdrawal.ErrNoLookup
}

type heard struct{ msgs []withdrawal.Processed }

func (h *heard) Notify(_ context.Context, m withdrawal.Processed) error {
	h.msgs = append(h.msgs, m)
	return nil
}

// TestDashboardResolvesPayouts: an unknown outcome is listed with its
// revision; a verdict on a stale revision, on a withdrawal never sent, on
// an unknown id, or without exactly one of payout id and reason, is refused
// and writes nothing; the right one settles it, by "dashboard".
func TestDashboardResolvesPayouts(t *testing.T) {
	b := newBoard(t)
	ctx := context.Background()
	id, scheduled := b.create(0), b.create(3600)
	finance := &heard{}
	proc, err := b.app.Processor(stuckProvider{}, finance)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := b.app.Ledger.Find(ctx, id)
	if err := proc.Process(ctx, w.Ref()); err != nil {
		t.Fatal(err)
	}

	list := b.do("GET", "/dashboard/api/payouts", "secret", "").want(t, 200, "")
	rows, _ := list.body["withdrawals"].([]any)
	if len(rows) != 1 {
		t.Fatalf("unresolved %s", list.raw)
	}
	row := rows[0].(map[string]any)
	if row["id"] != id || row["may_have_paid"] != true || row["record"].(map[string]any)["user_id"] != "alice" {
		t.Fatalf("unresolved %s", list.raw)
	}
	rev := int64(row["revision"].(float64))
	before, _ := b.app.Ledger.Find(ctx, id)
	sched, _ := b.app.Ledger.Find(ctx, scheduled)

	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{fmt.Sprintf(`{"id":%q,"revision":%d,"payout_id":"po_1"}`, id, rev-1), 412, "precondition_failed"},
		{fmt.Sprintf(`{"id":%q,"payout_id":"po_1"}`, id), 400, "validation_failed"},
		{fmt.Sprintf(`{"id":%q,"revision":%d}`, id, rev), 400, "validation_failed"},
		{fmt.Sprintf(`{"id":%q,"revision":%d,"payout_id":"po_1","reason":"x"}`, id, rev), 400, "validation_failed"},
		{fmt.Sprintf(`{"revision":%d,"payout_id":"po_1"}`, rev), 400, "validation_failed"},
		{fmt.Sprintf(`{"id":"wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z","revision":%d,"payout_id":"po_1"}`, rev), 404, "not_found"},
		{fmt.Sprintf(`{"id":%q,"revision":%d,"payout_id":"po_1"}`, scheduled, sched.Revision), 409, "not_resolvable"},
	} {
		a := b.do("POST", "/dashboard/api/payouts/resolve", "secret", tc.body).want(t, tc.status, tc.code)
		if tc.code == "not_resolvable" && !strings.Contains(a.body["detail"].(string), "never sent") {
			t.Errorf("the refusal does not say why: %s", a.raw)
		}
		for _, check := range []withdrawal.Withdrawal{before, sched} {
			if now, _ := b.app.Ledger.Find(ctx, check.ID); now.Revision != check.Revision || now.Status != check.Status {
				t.Fatalf("a refused resolution %s wrote %s: revision %d -> %d", tc.body, check.ID, check.Revision, now.Revision)
			}
		}
	}
	if len(finance.msgs) != 0 {
		t.Fatalf("finance heard of refusals: %+v", finance.msgs)
	}

	a := b.do("POST", "/dashboard/api/payouts/resolve", "secret", fmt.Sprintf(`{"id":%q,"revision":%d,"payout_id":"po_late"}`, id, rev)).
		want(t, 200, "")
	got := a.body["withdrawal"].(map[string]any)
	if got["status"] != "paid" || got["payout_id"] != "po_late" || got["resolved_by"] != DashboardBy {
		t.Fatalf("resolved %s", a.raw)
	}
	if list := b.do("GET", "/dashboard/api/payouts", "secret", ""); len(list.body["withdrawals"].([]any)) != 0 {
		t.Errorf("still unresolved: %s", list.raw)
	}
}

// TestDashboardLookup: a withdrawal with its history and queue state; an
// unknown id 404; no id 400.
func TestDashboardLookup(t *testing.T) {
	b := newBoard(t)
	id := b.create(3600)
	a := b.do("GET", "/dashboard/api/lookup?id="+id, "secret", "").want(t, 200, "")
	w := a.body["withdrawal"].(map[string]any)
	places := a.body["jobs"].([]any)
	if a.body["kind"] != "withdrawal" || w["status"] != "scheduled" || w["revision"] != 0.0 || len(places) != 1 {
		t.Fatalf("lookup %s", a.raw)
	}
	if p := places[0].(map[string]any); p["state"] != "scheduled" || p["at"] != w["due_at"] || p["queue"] != "withdrawals" {
		t.Errorf("queue state %v, want scheduled at %v", p, w["due_at"])
	}
	b.do("GET", "/dashboard/api/lookup?id=wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "secret", "").want(t, 404, "not_found")
	b.do("GET", "/dashboard/api/lookup?id=or_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "secret", "").want(t, 404, "not_found")
	b.do("GET", "/dashboard/api/lookup?id=nonsense", "secret", "").want(t, 404, "not_found")
	b.do("GET", "/dashboard/api/lookup", "secret", "").want(t, 400, "validation_failed")
}

// TestDashboardFiguresAndPrometheus: the gateway's answers are counted by
// route template (ids do not become labels), and /metrics exposes the
// tally in a form Prometheus's own parser reads.
func TestDashboardFiguresAndPrometheus(t *testing.T) {
	b := newBoard(t)
	for range 3 {
		id := b.create(3600)
		req, _ := http.NewRequest("GET", b.srv.URL+"/v1/withdrawals/"+id, nil)
		req.Header.Set("X-User-Id", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	b.do("GET", "/v1/withdrawals/wd_nothing", "-", "", "X-User-Id", "alice")
	b.do("GET", "/no/such/path/"+fmt.Sprint(time.Now().UnixNano()), "-", "")
	b.do("BREW", "/v1/withdrawals", "-", "") // a client picks the method, not our labels

	var r TallyReport
	if err := json.Unmarshal([]byte(b.do("GET", "/dashboard/api/metrics", "secret", "").want(t, 200, "").raw), &r); err != nil {
		t.Fatal(err)
	}
	routes := map[string]map[string]float64{}
	for _, f := range r.Routes {
		routes[f.Route] = f.Classes
	}
	want := map[string]map[string]float64{
		"POST /v1/withdrawals":     {"2xx": 3},
		"GET /v1/withdrawals/{id}": {"2xx": 3, "4xx": 1},
		"GET (no route)":           {"4xx": 1},
		"OTHER (no route)":         {"4xx": 1},
	}
	if diff := cmp.Diff(want, routes); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	if r.WindowSeconds != 3600 {
		t.Errorf("window %v s, want an hour", r.WindowSeconds)
	}

	prom := b.do("GET", "/metrics", "secret", "").want(t, 200, "")
	if ct := prom.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(strings.NewReader(prom.raw))
	if err != nil {
		t.Fatalf("Prometheus cannot read /metrics: %v\n%s", err, prom.raw)
	}
	reqs := families["hourglass_http_requests_total"]
	if reqs == nil {
		t.Fatalf("no hourglass_http_requests_total in\n%s", prom.raw)
	}
	total := 0.0
	for _, m := range reqs.GetMetric() {
		total += m.GetCounter().GetValue()
	}
	if total != 9 {
		t.Errorf("%v requests counted, want 9", total)
	}
	if h := families["hourglass_http_request_duration_seconds"]; h == nil || len(h.GetMetric()) != 4 {
		t.Errorf("latency histograms: %v", h)
	}
	for _, name := range []string{"hourglass_payouts_paid_total", "hourglass_claimed_total", "hourglass_payout_due_to_paid_seconds"} {
		if families[name] == nil {
			t.Errorf("no %s", name)
		}
	}
}

// TestTallyKeepsRefusalsAndPaidLag: refusals by reason and the due-to-paid
// time come from the metrics lines, and charts have the last hour.
func TestTallyKeepsRefusalsAndPaidLag(t *testing.T) {
	clk := clock.NewFake(t0)
	tally := NewTally(clk, 10*time.Second, time.Hour)
	em := newEmitter(tally, clk)
	for range 3 {
		em.Count("Refusals", 1, map[string]string{"Reason": "sold_out"})
	}
	em.Count("Refusals", 1, map[string]string{"Reason": "backlog_full"})
	for _, ms := range []float64{200, 400, 3000} {
		em.Emit(nil, msValue("PayoutDueToPaidMs", ms))
	}
	for _, q := range []struct {
		family   string
		due, lag float64
	}{{"withdrawals", 5, 100}, {"seckill", 2, 900}, {"withdrawals", 7, 50}} {
		em.Emit(map[string]string{"Queue": q.family}, metrics.Of(metrics.DueBacklog, metrics.Count, q.due),
			metrics.Of(metrics.OldestDueLagMs, metrics.Milliseconds, q.lag))
	}
	clk.Advance(50 * time.Minute)
	r := tally.Report()
	if e := r.History[0]; e["due"] != 9 || e["oldest_due_lag_ms"] != 900 {
		t.Errorf("gauges of the first bucket: %v, want due 7+2 (the last of each family) and lag 900", e)
	}
	if _, ok := r.History[1]["due"]; ok {
		t.Errorf("a bucket without gauge lines has a gauge: %v", r.History[1])
	}
	if diff := cmp.Diff(map[string]float64{"sold_out": 3, "backlog_full": 1}, r.RefusalsByReason); diff != "" {
		t.Errorf("refusals (-want +got):\n%s", diff)
	}
	if r.Totals["refusals"] != 4 {
		t.Errorf("refusals total %v", r.Totals["refusals"])
	}
	if l := r.DueToPaid; l.Count != 3 || l.MaxMS != 3000 || l.P50MS != 500 || l.MeanMS != 1200 {
		t.Errorf("due to paid %+v", l)
	}
	if r.History[0]["refusals"] != 4 {
		t.Errorf("50 minutes on, the first bucket is %v: the hour is kept", r.History[0])
	}
}

func newEmitter(w io.Writer, clk clock.Clock) *metrics.Emitter { return metrics.New(w, clk) }

func msValue(name string, v float64) metrics.Value { return metrics.Of(name, metrics.Milliseconds, v) }

package localstack

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/validation"
)

// The live dashboard of the local stack: a static page (embedded, no CDN)
// that polls GET /v1/admin/stats and the item states through the API, and
// GET /dashboard/api/metrics for what only the running process knows: the
// counters its metrics lines report (jobs claimed, payouts paid and failed,
// ...), in total and over the last minutes.

//go:embed dashboard
var dashboardFiles embed.FS

// DashboardPath is where the dashboard is served.
const DashboardPath = "/dashboard"

// counted are the metrics the tally adds up, by the name the dashboard's
// JSON gives them.
var counted = map[string]string{
	metrics.Claimed:              "claimed",
	metrics.Reaped:               "reaped",
	metrics.Refused:              "refused",
	metrics.PayoutsPaid:          "payouts_paid",
	metrics.PayoutsFailed:        "payouts_failed",
	metrics.PayoutRetries:        "payout_retries",
	metrics.Admitted:             "admitted",
	metrics.Refusals:             "refusals",
	metrics.OrdersConfirmed:      "orders_confirmed",
	metrics.OrdersReleased:       "orders_released",
	metrics.OrdersPaid:           "orders_paid",
	metrics.OrdersExpired:        "orders_expired",
	metrics.OrderExpiryFailures:  "order_expiry_failures",
	metrics.PaymentMismatches:    "payment_mismatches",
	metrics.RefundsRequired:      "refunds_required",
	metrics.CompensationRequeued: "compensation_requeued",
	metrics.CompensationReleased: "compensation_released",
	metrics.Reconciled:           "reconciled",
	metrics.Promoted:             "promoted",
}

// countedHelp is the Prometheus help of each counted metric.
var countedHelp = map[string]string{
	"claimed":               "Jobs the poller claimed from the delay queues.",
	"reaped":                "Jobs whose lease expired, put back to be due.",
	"refused":               "Claimed jobs the work queue refused, put back.",
	"payouts_paid":          "Payouts the payout step made.",
	"payouts_failed":        "Payouts that failed for good.",
	"payout_retries":        "Payout attempts that will be retried.",
	"admitted":              "Flash-sale units admitted.",
	"refusals":              "Flash-sale purchases refused (every reason).",
	"orders_confirmed":      "Flash-sale orders made.",
	"orders_released":       "Flash-sale purchases released back to stock.",
	"orders_paid":           "Flash-sale orders paid within their window.",
	"orders_expired":        "Flash-sale orders expired unpaid.",
	"order_expiry_failures": "Failed expiry jobs of unpaid orders.",
	"payment_mismatches":    "Payments whose amount or currency was not their order's.",
	"refunds_required":      "Payments that must be refunded.",
	"compensation_requeued": "Stragglers the compensation pass requeued.",
	"compensation_released": "Stragglers the compensation pass released.",
	"reconciled":            "Jobs the reconciler put back (Redis had lost them).",
	"promoted":              "Long-delay withdrawals handed to Redis ahead of time.",
}

// gauges are the queue gauges the history keeps (the last value of each
// queue family within a bucket), by the name the history gives them; the
// app emits them every 10 s (App.emitQueueMetrics).
var gauges = map[string]string{
	metrics.DueBacklog:     "due",
	metrics.DueNow:         "due_now",
	metrics.Inflight:       "inflight",
	metrics.Dead:           "dead",
	metrics.OldestDueLagMs: "oldest_due_lag_ms",
}

// httpClasses are the status classes the history counts per bucket.
var httpClasses = []string{"http_2xx", "http_3xx", "http_4xx", "http_5xx"}

// Tally adds up the counters of the EMF lines the app writes (it is an
// io.Writer to put beside the log): totals since start, and per bucket over
// a window (an hour in serve), so the dashboard charts the last hour as soon
// as it opens. It also keeps the figures of figures.go: refusals by reason,
// the due-to-paid time, and the gateway's answers per route.
type Tally struct {
	bucket time.Duration
	window int
	clock  clock.Clock

	mu      sync.Mutex
	started time.Time
	totals  map[string]float64
	// buckets[i] holds the counts of the bucket starting at bucketStart(i).
	buckets map[int64]map[string]float64
	partial []byte

	refusals map[string]float64 // by Reason
	paidLag  *histogram         // ms
	routes   map[string]*routeStats
}

// NewTally returns a Tally of buckets of bucket over window.
func NewTally(clk clock.Clock, bucket, window time.Duration) *Tally {
	return &Tally{
		bucket: bucket, window: int(window / bucket), clock: clk, started: clk.Now(),
		totals: map[string]float64{}, buckets: map[int64]map[string]float64{},
		refusals: map[string]float64{}, paidLag: newHistogram(paidLagBounds), routes: map[string]*routeStats{},
	}
}

// add counts n of name in bucket key, and forgets buckets that left the
// window; t.mu is held.
func (t *Tally) add(key int64, name string, n float64) {
	bk := t.buckets[key]
	if bk == nil {
		bk = map[string]float64{}
		t.buckets[key] = bk
		for k := range t.buckets {
			if k <= key-int64(t.window) {
				delete(t.buckets, k)
			}
		}
	}
	if name != "" {
		bk[name] += n
	}
}

// Write takes metric lines; other lines and bad JSON are ignored.
func (t *Tally) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		t.line(t.partial[:i])
		t.partial = t.partial[i+1:]
	}
	if len(t.partial) > 1<<20 { // a runaway line without end: drop it
		t.partial = nil
	}
	return len(p), nil
}

type emfLine struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Metrics []struct {
				Name string `json:"Name"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
}

func (t *Tally) line(b []byte) {
	if !bytes.Contains(b, []byte(`"_aws"`)) {
		return
	}
	var head emfLine
	if json.Unmarshal(b, &head) != nil || head.AWS.Timestamp == 0 {
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return
	}
	at := time.UnixMilli(head.AWS.Timestamp)
	key := at.UnixMilli() / t.bucket.Milliseconds()
	for _, d := range head.AWS.CloudWatchMetrics {
		for _, m := range d.Metrics {
			if g, ok := gauges[m.Name]; ok {
				var family string
				if json.Unmarshal(fields["Queue"], &family) == nil && family != "" && len(family) < 64 {
					t.add(key, "", 0)
					if nums := numbers(fields[m.Name]); len(nums) > 0 {
						t.buckets[key][g+"@"+family] = nums[len(nums)-1]
					}
				}
				continue
			}
			if m.Name == metrics.PayoutDueToPaidMs {
				for _, v := range numbers(fields[m.Name]) {
					t.paidLag.observe(v)
				}
				continue
			}
			name, ok := counted[m.Name]
			if !ok {
				continue
			}
			n := sum(fields[m.Name])
			if n == 0 {
				continue
			}
			t.totals[name] += n
			t.add(key, name, n)
			if m.Name == metrics.Refusals {
				var reason string
				if json.Unmarshal(fields["Reason"], &reason) == nil && len(t.refusals) < maxRoutes {
					t.refusals[reason] += n
				}
			}
		}
	}
}

// numbers reads an EMF value: a number or a list of numbers.
func numbers(raw json.RawMessage) []float64 {
	var one float64
	if json.Unmarshal(raw, &one) == nil {
		return []float64{one}
	}
	var many []float64
	if json.Unmarshal(raw, &many) != nil {
		return nil
	}
	return many
}

// sum adds up an EMF value.
func sum(raw json.RawMessage) float64 {
	total := 0.0
	for _, v := range numbers(raw) {
		total += v
	}
	return total
}

// TallyReport is the body of GET /dashboard/api/metrics.
type TallyReport struct {
	StartedAt     string             `json:"started_at"`
	Now           string             `json:"now"`
	BucketSeconds float64            `json:"bucket_seconds"`
	Totals        map[string]float64 `json:"totals"`
	// History has one entry per bucket of the window since start, oldest
	// first: "t" (bucket start, unix ms) and the counts within it (the
	// counters, and http_2xx … http_5xx: the gateway's answers).
	History       []map[string]float64 `json:"history"`
	WindowSeconds float64              `json:"window_seconds"`
	// RefusalsByReason counts refused purchases by reason since start.
	RefusalsByReason map[string]float64 `json:"refusals_by_reason"`
	// DueToPaid summarises the time from due to paid of the payouts made.
	DueToPaid Latency `json:"due_to_paid"`
	// Routes are the gateway's answers per route template since start.
	Routes []RouteFigures `json:"routes"`
}

// Report returns the totals and the history at now.
func (t *Tally) Report() TallyReport {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := t.bucket.Milliseconds()
	last := now.UnixMilli() / ms
	first := max(last-int64(t.window)+1, t.started.UnixMilli()/ms)
	r := TallyReport{
		StartedAt: clock.Format(t.started), Now: clock.Format(now), BucketSeconds: t.bucket.Seconds(),
		Totals: make(map[string]float64, len(counted)), History: make([]map[string]float64, 0, last-first+1),
		WindowSeconds: float64(t.window) * t.bucket.Seconds(), RefusalsByReason: maps.Clone(t.refusals),
		DueToPaid: t.paidLag.summary(), Routes: t.routeFigures(),
	}
	for _, name := range counted {
		r.Totals[name] = t.totals[name]
	}
	for k := first; k <= last; k++ {
		e := map[string]float64{"t": float64(k * ms)}
		for _, name := range counted {
			e[name] = t.buckets[k][name]
		}
		for _, name := range httpClasses {
			e[name] = t.buckets[k][name]
		}
		// Gauges: summed over the queue families (the lag: the largest),
		// absent from a bucket that had no gauge line.
		for name, v := range t.buckets[k] {
			g, _, ok := strings.Cut(name, "@")
			if !ok {
				continue
			}
			if g == "oldest_due_lag_ms" {
				e[g] = max(e[g], v)
			} else {
				e[g] += v
			}
		}
		r.History = append(r.History, e)
	}
	return r
}

// Dashboard serves the dashboard page, its assets, its JSON endpoints
// (dashboard_api.go) and /metrics.
type Dashboard struct {
	// Token is the admin token the endpoints want in X-Admin-Token.
	Token string
	Tally *Tally
	// App, if set, is what the actions act on; without it only the
	// metrics are served.
	App *app.App
}

// MetricsPath is where the tally is served in the Prometheus text format.
const MetricsPath = "/metrics"

// securityHeaders keep the page to its own assets and keep the token it
// may carry in its URL out of referrers.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
		"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func (d Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if r.URL.Path == MetricsPath {
		d.prometheus(w, r)
		return
	}
	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, DashboardPath), "/")
	if api, ok := strings.CutPrefix(name, "api/"); ok {
		d.api(w, r, api)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		d.problem(w, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed, "the dashboard's pages are read-only")
		return
	}
	if name == "" {
		name = "index.html"
	}
	files, _ := fs.Sub(dashboardFiles, "dashboard")
	if !fs.ValidPath(name) || path.Ext(name) == "" {
		d.problem(w, http.StatusNotFound, httpapi.CodeNotFound, "no such dashboard file")
		return
	}
	if _, err := fs.Stat(files, name); err != nil {
		d.problem(w, http.StatusNotFound, httpapi.CodeNotFound, "no such dashboard file")
		return
	}
	http.ServeFileFS(w, r, files, name)
}

// prometheus serves GET /metrics: the tally in the Prometheus text format,
// behind the admin token like the dashboard's data (a scraper sends it:
// Prometheus's http_headers setting).
func (d Dashboard) prometheus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		d.problem(w, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed, r.Method+" is not served here; GET, HEAD is")
		return
	}
	if !d.authorized(w, r) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = d.Tally.WritePrometheus(w)
}

func (d Dashboard) problem(w http.ResponseWriter, status int, code, detail string) {
	d.send(w, problemOf(status, code, detail))
}

func (d Dashboard) send(w http.ResponseWriter, p *apiProblem) {
	title, ok := dashboardTitles[p.code]
	if !ok {
		title = httpapi.Title(p.code)
	}
	errs := p.errors
	if errs == nil {
		errs = []validation.Field{}
	}
	body, _ := json.Marshal(map[string]any{
		"type": "urn:hourglass:problem:" + p.code, "title": title, "status": p.status,
		"detail": p.detail, "code": p.code, "errors": errs,
	})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.status)
	_, _ = w.Write(body)
}

// localServer sends the dashboard's paths to it (when it is served) and
// everything else to the API gateway, unchanged.
type localServer struct {
	api       http.Handler
	dashboard http.Handler
}

func (s localServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.dashboard != nil && (r.URL.Path == DashboardPath || strings.HasPrefix(r.URL.Path, DashboardPath+"/") ||
		r.URL.Path == MetricsPath) {
		s.dashboard.ServeHTTP(w, r)
		return
	}
	s.api.ServeHTTP(w, r)
}

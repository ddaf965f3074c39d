package localstack

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/metrics"
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

// Tally adds up the counters of the EMF lines the app writes (it is an
// io.Writer to put beside the log): totals since start, and per bucket over
// a window, so the dashboard can chart throughput over the last minutes.
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
}

// NewTally returns a Tally of buckets of bucket over window.
func NewTally(clk clock.Clock, bucket, window time.Duration) *Tally {
	return &Tally{
		bucket: bucket, window: int(window / bucket), clock: clk, started: clk.Now(),
		totals: map[string]float64{}, buckets: map[int64]map[string]float64{},
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
	var values map[string]json.RawMessage
	if json.Unmarshal(b, &values) != nil {
		return
	}
	at := time.UnixMilli(head.AWS.Timestamp)
	key := at.UnixMilli() / t.bucket.Milliseconds()
	for _, d := range head.AWS.CloudWatchMetrics {
		for _, m := range d.Metrics {
			name, ok := counted[m.Name]
			if !ok {
				continue
			}
			n := sum(values[m.Name])
			if n == 0 {
				continue
			}
			t.totals[name] += n
			bk := t.buckets[key]
			if bk == nil {
				bk = map[string]float64{}
				t.buckets[key] = bk
			}
			bk[name] += n
		}
	}
	for k := range t.buckets { // forget what left the window
		if k <= key-int64(t.window) {
			delete(t.buckets, k)
		}
	}
}

// sum reads an EMF value: a number or a list of numbers.
func sum(raw json.RawMessage) float64 {
	var one float64
	if json.Unmarshal(raw, &one) == nil {
		return one
	}
	var many []float64
	if json.Unmarshal(raw, &many) != nil {
		return 0
	}
	total := 0.0
	for _, v := range many {
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
	// first: "t" (bucket start, unix ms) and the counts within it.
	History []map[string]float64 `json:"history"`
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
	}
	for _, name := range counted {
		r.Totals[name] = t.totals[name]
	}
	for k := first; k <= last; k++ {
		e := map[string]float64{"t": float64(k * ms)}
		for _, name := range counted {
			e[name] = t.buckets[k][name]
		}
		r.History = append(r.History, e)
	}
	return r
}

// Dashboard serves the dashboard page, its assets and its metrics endpoint.
type Dashboard struct {
	// Token is the admin token the metrics endpoint wants in X-Admin-Token.
	Token string
	Tally *Tally
}

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
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		d.problem(w, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed, "the dashboard is read-only")
		return
	}
	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, DashboardPath), "/")
	switch name {
	case "":
		name = "index.html"
	case "api/metrics":
		d.metrics(w, r)
		return
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

func (d Dashboard) metrics(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get("X-Admin-Token")
	switch {
	case tok == "":
		d.problem(w, http.StatusUnauthorized, httpapi.CodeUnauthenticated, "the dashboard's data needs the X-Admin-Token header")
		return
	case d.Token == "" || !httpapi.SameSecret(tok, d.Token):
		d.problem(w, http.StatusForbidden, httpapi.CodeForbidden, "the admin token is not valid")
		return
	}
	body, err := json.Marshal(d.Tally.Report())
	if err != nil {
		d.problem(w, http.StatusInternalServerError, httpapi.CodeInternal, "an internal error occurred")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func (d Dashboard) problem(w http.ResponseWriter, status int, code, detail string) {
	body, _ := json.Marshal(map[string]any{
		"type": "urn:hourglass:problem:" + code, "title": httpapi.Title(code), "status": status,
		"detail": detail, "code": code, "errors": []any{},
	})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// localServer sends the dashboard's paths to it (when it is served) and
// everything else to the API gateway, unchanged.
type localServer struct {
	api       http.Handler
	dashboard http.Handler
}

func (s localServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.dashboard != nil && (r.URL.Path == DashboardPath || strings.HasPrefix(r.URL.Path, DashboardPath+"/")) {
		s.dashboard.ServeHTTP(w, r)
		return
	}
	s.api.ServeHTTP(w, r)
}

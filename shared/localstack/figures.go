package localstack

import (
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Figures the dashboard shows beside the counters: HTTP answers and
// latencies per route (the gateway reports them), purchase refusals by
// reason, and the time from a withdrawal's due time to its payment (both
// from the metrics lines), with their Prometheus exposition.

// histogram counts observations into fixed buckets (upper bounds, in the
// unit observed); the last count is past every bound.
type histogram struct {
	bounds []float64
	counts []uint64
	n      uint64
	sum    float64
	max    float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

// quantile estimates the q-quantile as the upper bound of the bucket it
// falls in (at most the largest value seen): coarse, and never too low.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			if i < len(h.bounds) {
				return min(h.bounds[i], h.max)
			}
			return h.max
		}
	}
	return h.max
}

// Latency is a summary of a histogram of milliseconds.
type Latency struct {
	Count  uint64  `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P95MS  float64 `json:"p95_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
}

func (h *histogram) summary() Latency {
	l := Latency{Count: h.n, MaxMS: h.max, P50MS: h.quantile(.5), P95MS: h.quantile(.95), P99MS: h.quantile(.99)}
	if h.n > 0 {
		l.MeanMS = math.Round(h.sum/float64(h.n)*100) / 100
	}
	return l
}

// Bucket bounds, in milliseconds.
var (
	requestBounds = []float64{1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
	paidLagBounds = []float64{100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 900000, 3600000, 86400000}
)

// maxRoutes bounds the routes a tally keeps apart; later ones are "other".
const maxRoutes = 200

type routeStats struct {
	classes map[string]float64 // "2xx" … "5xx"
	latency *histogram
}

// RouteFigures are one route's answers since start.
type RouteFigures struct {
	// Route is "METHOD /template" ("GET /v1/withdrawals/{id}").
	Route    string             `json:"route"`
	Requests float64            `json:"requests"`
	Classes  map[string]float64 `json:"classes"`
	Latency  Latency            `json:"latency"`
}

// standardMethods are the methods a route label keeps; any other is OTHER
// (a client picks the method: it must not pick our labels).
var standardMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// statusClass is "2xx" for 200..299 and so on.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "5xx"
	}
	return strconv.Itoa(status/100) + "xx"
}

// ObserveRequest counts one answer of the API gateway: route is its
// template label (Gateway.Route), status what it answered, took how long.
func (t *Tally) ObserveRequest(route string, status int, took time.Duration) {
	if m, _, _ := strings.Cut(route, " "); !standardMethods[m] {
		route = "OTHER" + route[len(m):]
	}
	class := statusClass(status)
	key := t.clock.Now().UnixMilli() / t.bucket.Milliseconds()
	t.mu.Lock()
	defer t.mu.Unlock()
	rs := t.routes[route]
	if rs == nil {
		if len(t.routes) >= maxRoutes {
			route = "other"
			rs = t.routes[route]
		}
		if rs == nil {
			rs = &routeStats{classes: map[string]float64{}, latency: newHistogram(requestBounds)}
			t.routes[route] = rs
		}
	}
	rs.classes[class]++
	rs.latency.observe(float64(took.Microseconds()) / 1000)
	t.add(key, "http_"+class, 1)
}

// routeFigures lists every route's figures, busiest first; t.mu is held.
func (t *Tally) routeFigures() []RouteFigures {
	out := make([]RouteFigures, 0, len(t.routes))
	for route, rs := range t.routes {
		f := RouteFigures{Route: route, Classes: maps.Clone(rs.classes), Latency: rs.latency.summary()}
		for _, n := range rs.classes {
			f.Requests += n
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b RouteFigures) int {
		if a.Requests != b.Requests {
			return int(b.Requests - a.Requests)
		}
		return strings.Compare(a.Route, b.Route)
	})
	return out
}

// WritePrometheus writes the tally in the Prometheus text exposition
// format (version 0.0.4): every counter since start, refusals by reason,
// HTTP answers and latency per route, and the due-to-paid time.
func (t *Tally) WritePrometheus(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(countedHelp)) {
		m := "hourglass_" + name + "_total"
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %s\n", m, countedHelp[name], m, m, num(t.totals[name]))
	}
	b.WriteString("# HELP hourglass_purchase_refusals_by_reason_total Flash-sale purchases refused, by reason.\n" +
		"# TYPE hourglass_purchase_refusals_by_reason_total counter\n")
	for _, reason := range slices.Sorted(maps.Keys(t.refusals)) {
		fmt.Fprintf(&b, "hourglass_purchase_refusals_by_reason_total{reason=%s} %s\n", label(reason), num(t.refusals[reason]))
	}
	b.WriteString("# HELP hourglass_http_requests_total API answers of the local gateway, by route template and status class.\n" +
		"# TYPE hourglass_http_requests_total counter\n")
	routes := slices.Sorted(maps.Keys(t.routes))
	for _, route := range routes {
		rs := t.routes[route]
		for _, class := range slices.Sorted(maps.Keys(rs.classes)) {
			fmt.Fprintf(&b, "hourglass_http_requests_total{route=%s,code=%s} %s\n", label(route), label(class), num(rs.classes[class]))
		}
	}
	b.WriteString("# HELP hourglass_http_request_duration_seconds API answer latency of the local gateway, by route template.\n" +
		"# TYPE hourglass_http_request_duration_seconds histogram\n")
	for _, route := range routes {
		writeHistogram(&b, "hourglass_http_request_duration_seconds", "route="+label(route)+",", t.routes[route].latency)
	}
	b.WriteString("# HELP hourglass_payout_due_to_paid_seconds Time from a withdrawal's due time to its payment, by the payout step.\n" +
		"# TYPE hourglass_payout_due_to_paid_seconds histogram\n")
	writeHistogram(&b, "hourglass_payout_due_to_paid_seconds", "", t.paidLag)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHistogram writes h (observed in ms) in seconds; labels, if any, end
// with a comma.
func writeHistogram(b *strings.Builder, name, labels string, h *histogram) {
	var cum uint64
	for i, bound := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(b, "%s_bucket{%sle=\"%s\"} %d\n", name, labels, num(bound/1000), cum)
	}
	fmt.Fprintf(b, "%s_bucket{%sle=\"+Inf\"} %d\n", name, labels, h.n)
	inner := strings.TrimSuffix(labels, ",")
	if inner != "" {
		inner = "{" + inner + "}"
	}
	fmt.Fprintf(b, "%s_sum%s %s\n%s_count%s %d\n", name, inner, num(h.sum/1000), name, inner, h.n)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// label quotes a label value: backslash, double quote and newline escaped.
func label(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}

package localstack

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func TestTallyAddsUpMetricLines(t *testing.T) {
	clk := clock.NewFake(t0)
	tally := NewTally(clk, 10*time.Second, time.Minute)
	em := metrics.New(tally, clk)
	em.Count(metrics.PayoutsPaid, 1, nil)
	em.Emit(nil, metrics.Of(metrics.Claimed, metrics.Count, 40), metrics.Of(metrics.Refused, metrics.Count, 0))
	clk.Advance(15 * time.Second)
	em.Count(metrics.PayoutsPaid, 2, nil)
	em.Count(metrics.PayoutsFailed, 1, nil)
	em.Emit(map[string]string{"Queue": "withdrawals"}, metrics.Of(metrics.DueBacklog, metrics.Count, 7)) // a gauge: not added up
	// Other log lines, and a line split over two writes, are fine.
	_, _ = tally.Write([]byte(`{"level":"INFO","msg":"hello"}` + "\n" + `{"_aws":{"Timestamp":`))
	_, _ = tally.Write([]byte(`1795946415000,"CloudWatchMetrics":[{"Metrics":[{"Name":"Claimed","Unit":"Count"}]}]},"Claimed":[1,2]}` + "\n"))

	r := tally.Report()
	for name, want := range map[string]float64{"payouts_paid": 3, "payouts_failed": 1, "claimed": 43, "refused": 0, "admitted": 0} {
		if r.Totals[name] != want {
			t.Errorf("total %s = %v, want %v", name, r.Totals[name], want)
		}
	}
	if len(r.History) != 2 {
		t.Fatalf("history %v, want the 2 buckets since start", r.History)
	}
	if r.History[0]["t"] != float64(t0.UnixMilli()) || r.History[0]["claimed"] != 40 || r.History[0]["payouts_paid"] != 1 {
		t.Errorf("first bucket %v", r.History[0])
	}
	if r.History[1]["claimed"] != 3 || r.History[1]["payouts_paid"] != 2 || r.History[1]["payouts_failed"] != 1 {
		t.Errorf("second bucket %v", r.History[1])
	}
	clk.Advance(5 * time.Minute)
	r = tally.Report()
	if len(r.History) != 6 || r.Totals["claimed"] != 43 {
		t.Errorf("after 5 minutes: %d buckets (want the minute's 6), totals %v", len(r.History), r.Totals)
	}
	for _, b := range r.History {
		if b["claimed"] != 0 {
			t.Errorf("a bucket older than the window is still counted: %v", b)
		}
	}
}

func TestDashboardServesPageAndData(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-From", "api") })
	tally := NewTally(clock.NewFake(t0), 10*time.Second, time.Minute)
	srv := httptest.NewServer(localServer{api: api, dashboard: Dashboard{Token: "secret", Tally: tally}})
	defer srv.Close()
	get := func(method, path string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	for _, tc := range []struct {
		method, path, token string
		status              int
		ctype, from         string
	}{
		{"GET", "/dashboard", "", 200, "text/html; charset=utf-8", ""},
		{"GET", "/dashboard/", "", 200, "text/html; charset=utf-8", ""},
		{"GET", "/dashboard/app.js", "", 200, "text/javascript; charset=utf-8", ""},
		{"GET", "/dashboard/style.css", "", 200, "text/css; charset=utf-8", ""},
		{"GET", "/dashboard/nothing.js", "", 404, "application/problem+json", ""},
		{"GET", "/dashboard/../serve.go", "", 404, "application/problem+json", ""},
		{"POST", "/dashboard", "", 405, "application/problem+json", ""},
		{"GET", "/dashboard/api/metrics", "", 401, "application/problem+json", ""},
		{"GET", "/dashboard/api/metrics", "wrong", 403, "application/problem+json", ""},
		{"GET", "/dashboard/api/metrics", "secret", 200, "application/json", ""},
		{"GET", "/dashboards", "", 200, "", "api"},
		{"GET", "/v1/admin/stats", "", 200, "", "api"},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.token, func(t *testing.T) {
			var h []string
			if tc.token != "" {
				h = []string{"X-Admin-Token", tc.token}
			}
			resp := get(tc.method, tc.path, h...)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("X-From"); got != tc.from {
				t.Errorf("served by %q, want %q", got, tc.from)
			}
			if tc.from == "api" {
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != tc.ctype {
				t.Errorf("Content-Type %q, want %q", ct, tc.ctype)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("CSP %q", csp)
			}
			if resp.Header.Get("Referrer-Policy") != "no-referrer" {
				t.Error("the page may carry the token in its URL: it must send no referrer")
			}
		})
	}
	var r TallyReport
	if err := json.NewDecoder(get("GET", "/dashboard/api/metrics", "X-Admin-Token", "secret").Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(10.0, r.BucketSeconds); diff != "" || r.Totals == nil || len(r.History) != 1 {
		t.Errorf("report %+v", r)
	}
}

// TestDashboardAssetsAreSelfContained: no CDN, nothing fetched from another
// origin, no inline script or style (the page's CSP allows only its own).
func TestDashboardAssetsAreSelfContained(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	n := 0
	err := fs.WalkDir(dashboardFiles, "dashboard", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		f, _ := dashboardFiles.Open(path)
		b, _ := io.ReadAll(f)
		for _, m := range external.FindAllString(string(b), -1) {
			if m != "http://www.w3.org" { // the SVG namespace, a name, not a fetch
				t.Errorf("%s refers to %s", path, m)
			}
		}
		if strings.HasSuffix(path, ".html") && (regexp.MustCompile(`<script>|<style|\sstyle="|\son[a-z]+="`).Match(b)) {
			t.Errorf("%s has inline script or style", path)
		}
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}

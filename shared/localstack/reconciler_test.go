package localstack

import (
	"io"
	"regexp"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
)

// TestDashboardShowsRepairsApartFromPromotions: the reconciler's repairs
// (Reconciled, which alarms in AWS) and its promotions of long delays into
// Redis (Promoted, normal traffic) are tallied apart and shown on tiles of
// their own, and only the repairs' tile turns red when set.
func TestDashboardShowsRepairsApartFromPromotions(t *testing.T) {
	clk := clock.NewFake(t0)
	tally := NewTally(clk, 10*time.Second, time.Minute)
	metrics.New(tally, clk).Emit(nil, metrics.Of(metrics.Reconciled, metrics.Count, 0), metrics.Of(metrics.Promoted, metrics.Count, 3))
	if r := tally.Report(); r.Totals["reconciled"] != 0 || r.Totals["promoted"] != 3 {
		t.Errorf("totals reconciled %v, promoted %v; want 0 and 3", r.Totals["reconciled"], r.Totals["promoted"])
	}

	read := func(name string) string {
		t.Helper()
		f, err := dashboardFiles.Open("dashboard/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	page, js := read("index.html"), read("app.js")
	tile := regexp.MustCompile(`<div class="([^"]*)"><h2>[^<]*</h2><p data-metric="counter:(\w+)">`)
	classes := map[string]string{}
	for _, m := range tile.FindAllStringSubmatch(page, -1) {
		classes[m[2]] = m[1]
	}
	for name, want := range map[string]string{"reconciled": "tile warn-when-set", "promoted": "tile"} {
		if got, ok := classes[name]; !ok || got != want {
			t.Errorf("tile of counter:%s has class %q (shown: %v), want %q", name, got, ok, want)
		}
		if !regexp.MustCompile(`for \(const k of \[[^\]]*'` + name + `'[^\]]*\]\) setMetric\('counter:'`).MatchString(js) {
			t.Errorf("app.js does not set counter:%s", name)
		}
	}
}

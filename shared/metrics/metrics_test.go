package metrics_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
)

type emf struct {
	AWS struct {
		Timestamp         int64 `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  string     `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name string `json:"Name"`
				Unit string `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	} `json:"_aws"`
}

func TestEmitWritesEmbeddedMetricFormat(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	e := metrics.New(&buf, clock.NewFake(now))
	e.Emit(map[string]string{"Queue": "withdrawals"},
		metrics.Of(metrics.DueBacklog, metrics.Count, 12),
		metrics.Value{Name: metrics.DispatchLagMs, Unit: metrics.Milliseconds, Values: []float64{1, 2, 3}},
		metrics.Value{Name: "Empty", Unit: metrics.Count})
	line := buf.String()
	if strings.Count(line, "\n") != 1 {
		t.Fatalf("want one line, got %q", line)
	}
	var got emf
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatal(err)
	}
	if got.AWS.Timestamp != now.UnixMilli() || len(got.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("directive %+v", got.AWS)
	}
	d := got.AWS.CloudWatchMetrics[0]
	if d.Namespace != "Hourglass" || cmp.Diff([][]string{{"Queue"}}, d.Dimensions) != "" || len(d.Metrics) != 2 {
		t.Fatalf("directive %+v", d)
	}
	var values map[string]any
	_ = json.Unmarshal([]byte(line), &values)
	if values["Queue"] != "withdrawals" || values["DueBacklog"] != float64(12) {
		t.Fatalf("values %v", values)
	}
	if diff := cmp.Diff([]any{1.0, 2.0, 3.0}, values["DispatchLagMs"]); diff != "" {
		t.Fatalf("lag values (-want +got):\n%s", diff)
	}
	if _, ok := values["Empty"]; ok {
		t.Fatal("a metric without values was written")
	}
}

func TestNothingToEmitWritesNothing(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.New(&buf, nil)
	e.Emit(nil, metrics.Value{Name: "Empty", Unit: metrics.Count})
	if buf.Len() != 0 {
		t.Fatalf("wrote %q", buf.String())
	}
	var nilEmitter *metrics.Emitter
	nilEmitter.Count(metrics.Admitted, 1, nil) // must not panic
}

func TestSampleKeepsAtMostAHundred(t *testing.T) {
	var s metrics.Sample
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() { s.Add(float64(i)) })
	}
	wg.Wait()
	if got := s.Take(); len(got) != 100 {
		t.Fatalf("kept %d values", len(got))
	}
	if got := s.Take(); len(got) != 0 {
		t.Fatalf("Take did not start over: %d", len(got))
	}
}

func TestConcurrentLinesStayWhole(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.New(&buf, nil)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { e.Count(metrics.Admitted, 1, nil) })
	}
	wg.Wait()
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var v emf
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("broken line %q: %v", line, err)
		}
	}
}

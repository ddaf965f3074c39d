package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/seckill"
)

// syncBuffer is a bytes.Buffer safe for the poller's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type discard struct{}

func (discard) Dispatch(context.Context, []delayq.Job) ([]delayq.Job, error) { return nil, nil }

// TestPollerEmitsTheDashboardMetrics runs a poller briefly and checks the EMF
// lines the CloudWatch dashboard and alarms read.
func TestPollerEmitsTheDashboardMetrics(t *testing.T) {
	s := redistest.Start(t)
	t.Setenv("REDIS_URL", s.URL())
	a := appFromEnv(t, config.Local)
	var out syncBuffer
	a.EmitMetricsTo(&out)
	ctx := context.Background()
	if _, err := a.Seckill.Preheat(ctx, seckill.Sale{ItemID: "phone", Stock: 5, EndsAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Seckill.Purchase(ctx, "phone", "alice", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := httpapi.CreateWithdrawal(ctx, a.Service, "alice", "k", []byte(`{"amount":"1.00","currency":"USD","destination":"d","delay_seconds":0}`)); err != nil {
		t.Fatal(err)
	}
	p, err := a.Poller(discard{}, true)
	if err != nil {
		t.Fatal(err)
	}
	p.Run(ctx, time.Now().Add(300*time.Millisecond))

	seen := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if _, ok := v["_aws"]; !ok {
			t.Fatalf("not an EMF line: %q", line)
		}
		for k := range v {
			if k != "_aws" {
				seen[k] = v
			}
		}
	}
	for _, name := range []string{"Admitted", "DueBacklog", "OldestDueLagMs", "Inflight", "Dead", "StockLeft", "Claimed", "DispatchLagMs"} {
		if _, ok := seen[name]; !ok {
			t.Errorf("no %s metric in:\n%s", name, out.String())
		}
	}
	if v := seen["StockLeft"]; v != nil && (v["Item"] != "phone" || v["StockLeft"] != float64(4)) {
		t.Errorf("StockLeft line %v", v)
	}
	if v := seen["Claimed"]; v != nil && v["Claimed"] != float64(2) {
		t.Errorf("Claimed line %v (want the withdrawal and the order)", v)
	}
}

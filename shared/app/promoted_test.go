package app_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/metrics"
)

// TestPromotionIsEmittedApartFromRepairs: with the DynamoDB ledger a
// withdrawal due beyond the Redis horizon is promoted by a reconciler
// pass; the pass emits it as Promoted, and Reconciled (what
// ReconcilerRepairsAlarm reads) stays 0.
func TestPromotionIsEmittedApartFromRepairs(t *testing.T) {
	ctx := context.Background()
	db := dynalitetest.Start(t)
	t.Setenv("REDIS_URL", redistest.Start(t).URL())
	t.Setenv("HOURGLASS_LEDGER", "dynamodb")
	t.Setenv("DYNAMODB_ENDPOINT", db.Endpoint)
	dynTables(t)
	a := appFromEnv(t, config.Lambda)
	if err := a.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	a.EmitMetricsTo(&out)
	c, err := httpapi.CreateWithdrawal(ctx, a.Service, "alice", "k1",
		[]byte(`{"amount":"10.00","currency":"USD","destination":"bank_1","delay_seconds":7200}`))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := a.Reconcile(ctx, c.DueAt.Add(-a.Config.RedisHorizon+time.Minute))
	if err != nil || rec.Promoted != 1 || rec.Total() != 0 {
		t.Fatalf("pass within the horizon: %+v %v, want one promotion and no repair", rec, err)
	}
	got := map[string]float64{}
	for _, line := range strings.Split(out.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		for _, name := range []string{metrics.Reconciled, metrics.Promoted} {
			if v, ok := m[name].(float64); ok {
				got[name] += v
			}
		}
	}
	if got[metrics.Reconciled] != 0 || got[metrics.Promoted] != 1 {
		t.Fatalf("emitted %v, want Promoted 1 and Reconciled 0:\n%s", got, out.String())
	}
	if _, ok := got[metrics.Reconciled]; !ok {
		t.Errorf("no Reconciled value emitted (the alarm treats missing data as fine, but the graph shows a gap)")
	}
}

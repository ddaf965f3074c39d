package main

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/shared/metrics"
)

// alarmMetricNames are the metric names an alarm reads: its own metric, or
// those of its math expression.
func alarmMetricNames(p map[string]any) []string {
	var names []string
	if n, ok := p["MetricName"].(string); ok {
		names = append(names, n)
	}
	for _, q := range asList(p["Metrics"]) {
		stat, _ := q.(map[string]any)["MetricStat"].(map[string]any)
		m, _ := stat["Metric"].(map[string]any)
		if n, ok := m["MetricName"].(string); ok {
			names = append(names, n)
		}
	}
	return names
}

// TestOnlyReconcilerRepairsAlarm: the reconciler's repairs alarm, its
// promotions of withdrawals due beyond the Redis horizon (every long delay
// makes one) do not: ReconcilerRepairsAlarm reads Reconciled alone, no alarm
// of any stack reads Promoted, and the dashboard graphs both, apart.
func TestOnlyReconcilerRepairsAlarm(t *testing.T) {
	f := stacks(t)
	for _, st := range []struct {
		name string
		tpl  map[string]any
	}{{"default", f.defMap}, {"options", f.optMap}, {"account", f.acctMap}} {
		t.Run(st.name, func(t *testing.T) {
			repairs := alarmProps(t, st.tpl, "ReconcilerRepairsAlarm")
			if got := alarmMetricNames(repairs); len(got) != 1 || got[0] != metrics.Reconciled || repairs["Namespace"] != metrics.Namespace {
				t.Errorf("ReconcilerRepairsAlarm reads %v in %v, want %s alone in %s", got, repairs["Namespace"], metrics.Reconciled, metrics.Namespace)
			}
			for id, p := range alarmsByID(st.tpl) {
				for _, n := range alarmMetricNames(p) {
					if n == metrics.Promoted {
						t.Errorf("alarm %s reads %s: promotions are normal traffic", id, n)
					}
				}
			}
			var body string
			for _, r := range resources(st.tpl, "AWS::CloudWatch::Dashboard") {
				body = mustJSON(propsOf(r)["DashboardBody"])
			}
			for _, want := range []string{
				`\"Hourglass\",\"` + metrics.Reconciled + `\"`, "reconciler repairs",
				`\"Hourglass\",\"` + metrics.Promoted + `\"`, "promoted into Redis",
			} {
				if !strings.Contains(body, want) {
					t.Errorf("dashboard lacks %s", want)
				}
			}
		})
	}
}

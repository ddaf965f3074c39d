package main

import (
	"slices"
	"strings"
	"testing"
	"time"

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

// TestReconcileGraceIsTheWorkQueuesRedelivery: the grace the poller's
// reconciler gives a job out of Redis (HOURGLASS_RECONCILE_GRACE) is how
// long the work queue may hold it, as synthesized: the consumer's batch
// window, then maxReceiveCount receives, each hiding the message for the
// visibility timeout, before the dead-letter queue takes it. Shorter, a
// job that waits in SQS or is retried once is sent again and counted as a
// repair (it was the 2-minute reconcile interval against 5 x 180 s).
func TestReconcileGraceIsTheWorkQueuesRedelivery(t *testing.T) {
	f := stacks(t)
	for _, st := range []struct {
		name  string
		stack *HourglassStack
		tpl   map[string]any
	}{{"default", f.def, f.defMap}, {"options", f.opt, f.optMap}, {"account", f.acct, f.acctMap}} {
		t.Run(st.name, func(t *testing.T) {
			work := propsOf(resources(st.tpl, "AWS::SQS::Queue")[logicalID(st.stack, st.stack.WorkQueue)])
			visibility, _ := work["VisibilityTimeout"].(float64)
			redrive, _ := work["RedrivePolicy"].(map[string]any)
			receives, _ := redrive["maxReceiveCount"].(float64)
			var window float64                                            // absent: none
			consumer := logicalID(st.stack, st.stack.Aliases[fnConsumer]) // its live alias (TestCanaryDeployments)
			n := 0
			for _, m := range resources(st.tpl, "AWS::Lambda::EventSourceMapping") {
				if ids, _ := named(propsOf(m)["FunctionName"]); slices.Equal(slices.Compact(ids), []string{consumer}) {
					p := propsOf(m)
					n++
					window, _ = p["MaximumBatchingWindowInSeconds"].(float64)
				}
			}
			if visibility <= 0 || receives < 1 || n != 1 {
				t.Fatalf("work queue visibility %v s, maxReceiveCount %v, %d event sources of the consumer", visibility, receives, n)
			}
			want := time.Duration((visibility*receives + window) * float64(time.Second))

			poller := propsOf(resources(st.tpl, "AWS::Lambda::Function")[logicalID(st.stack, st.stack.Functions[fnPoller])])
			vars, _ := poller["Environment"].(map[string]any)["Variables"].(map[string]any)
			set, _ := vars["HOURGLASS_RECONCILE_GRACE"].(string)
			got, err := time.ParseDuration(set) // as config reads it
			if err != nil || got != want {
				t.Errorf("poller's HOURGLASS_RECONCILE_GRACE %q (%v), want %v = %v s x %v receives + %v s batch window",
					set, err, want, visibility, receives, window)
			}
		})
	}
}

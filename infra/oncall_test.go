package main

import (
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/hourglass/hourglass/shared/metrics"
)

// TestAlarmsThatPage: the failures issue 22 found paging no one each have
// an alarm: housekeeping that keeps failing, payouts failing wholesale,
// throttled functions, messages nobody takes from the work, finance and
// orders queues, callbacks about unknown withdrawals; and a lag that is no
// longer reported pages like one that is too long.
func TestAlarmsThatPage(t *testing.T) {
	f := stacks(t)
	tpl := f.defMap
	single := []struct {
		id                  string
		namespace, name     string
		stat                string
		dims                []any
		threshold           float64
		periods, datapoints float64
		period              float64
		missing             string
	}{
		{"WithdrawalsDueLagAlarm", "Hourglass", metrics.OldestDueLagMs, "Maximum",
			[]any{props{"Name": "Queue", "Value": queueWithdrawals}}, dueLagThresholdMs, 3, 3, 60, "breaching"},
		{"HousekeepingFailuresAlarm", "Hourglass", metrics.HousekeepingFailures, "Sum", nil, 0, 5, 2, 60, "notBreaching"},
		{"CallbacksUnknownAlarm", "Hourglass", metrics.PayoutCallbacks, "Sum",
			[]any{props{"Name": "Result", "Value": metrics.CallbackUnknown}}, 0, 1, 0, 60, "notBreaching"},
		{"WorkQueueAgeAlarm", "AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum",
			[]any{props{"Name": "QueueName", "Value": getAtt(logicalID(f.def, f.def.WorkQueue), "QueueName")}}, workQueueAgeSeconds, 1, 0, 300, "notBreaching"},
		{"FinanceQueueAgeAlarm", "AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum",
			[]any{props{"Name": "QueueName", "Value": getAtt(logicalID(f.def, f.def.FinanceQueue), "QueueName")}}, 3 * 24 * 3600, 1, 0, 300, "notBreaching"},
		{"OrdersQueueAgeAlarm", "AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum",
			[]any{props{"Name": "QueueName", "Value": getAtt(logicalID(f.def, f.def.OrdersQueue), "QueueName")}}, 3 * 24 * 3600, 1, 0, 300, "notBreaching"},
	}
	for _, tt := range single {
		t.Run(tt.id, func(t *testing.T) {
			p := alarmProps(t, tpl, tt.id)
			var dims any
			if tt.dims != nil {
				dims = tt.dims
			}
			got := mustJSON([]any{p["Namespace"], p["MetricName"], p["Statistic"], p["Dimensions"]})
			if p["MetricName"] == nil && len(asList(p["Metrics"])) == 1 { // a labelled metric is a query
				q := asList(p["Metrics"])[0].(map[string]any)["MetricStat"].(map[string]any)
				m := q["Metric"].(map[string]any)
				got = mustJSON([]any{m["Namespace"], m["MetricName"], q["Stat"], m["Dimensions"]})
				p["Period"] = q["Period"]
			}
			if want := mustJSON([]any{tt.namespace, tt.name, tt.stat, dims}); got != want {
				t.Errorf("metric %s, want %s", got, want)
			}
			dp, _ := p["DatapointsToAlarm"].(float64)
			if p["ComparisonOperator"] != "GreaterThanThreshold" || p["Threshold"] != tt.threshold || p["EvaluationPeriods"] != tt.periods ||
				dp != tt.datapoints || p["Period"] != tt.period || p["TreatMissingData"] != tt.missing {
				t.Errorf("alarm > %v over %v x %v s (%v to alarm), missing data %v; want > %v over %v x %v s (%v), %s",
					p["Threshold"], p["EvaluationPeriods"], p["Period"], dp, p["TreatMissingData"],
					tt.threshold, tt.periods, tt.period, tt.datapoints, tt.missing)
			}
		})
	}
	// The work queue's threshold is how long redeliveries can keep a
	// message there: maxReceiveCount visibility timeouts.
	if vis := visibilityFactor * consumerTimeout.Seconds(); workQueueAgeSeconds != maxReceiveCount*vis {
		t.Errorf("work queue age threshold %v s, want %d x %v s", workQueueAgeSeconds, maxReceiveCount, vis)
	}

	// Two alarms on metric math: its expression and the metrics it reads.
	math := func(t *testing.T, id string) (expr string, reads map[string]string) {
		p := alarmProps(t, tpl, id)
		reads = map[string]string{}
		for _, m := range asList(p["Metrics"]) {
			mm := m.(map[string]any)
			if e, ok := mm["Expression"].(string); ok {
				expr = e
				continue
			}
			stat := mm["MetricStat"].(map[string]any)
			reads[mm["Id"].(string)] = mustJSON([]any{stat["Metric"].(map[string]any)["MetricName"], stat["Stat"], stat["Period"]})
		}
		if p["Threshold"] == nil || p["ComparisonOperator"] != "GreaterThanThreshold" {
			t.Errorf("%s: %v %v", id, p["ComparisonOperator"], p["Threshold"])
		}
		return expr, reads
	}
	t.Run("PayoutFailuresAlarm", func(t *testing.T) {
		expr, reads := math(t, "PayoutFailuresAlarm")
		if want := "IF(FILL(failed, 0) >= 5, 100 * FILL(failed, 0) / (FILL(paid, 0) + FILL(failed, 0)), 0)"; expr != want {
			t.Errorf("expression %q, want %q", expr, want)
		}
		want := map[string]string{
			"paid":   mustJSON([]any{metrics.PayoutsPaid, "Sum", 300}),
			"failed": mustJSON([]any{metrics.PayoutsFailed, "Sum", 300}),
		}
		if mustJSON(reads) != mustJSON(want) {
			t.Errorf("reads %v, want %v", reads, want)
		}
		if p := alarmProps(t, tpl, "PayoutFailuresAlarm"); p["Threshold"] != float64(payoutFailurePercent) {
			t.Errorf("threshold %v, want %d%%", p["Threshold"], payoutFailurePercent)
		}
	})
	t.Run("FunctionThrottlesAlarm", func(t *testing.T) {
		expr, reads := math(t, "FunctionThrottlesAlarm")
		if !strings.HasPrefix(expr, "SUM([") || len(reads) != len(functionNames) {
			t.Errorf("expression %q over %d metrics, want the SUM of every function's (%d)", expr, len(reads), len(functionNames))
		}
		for id, r := range reads {
			if r != mustJSON([]any{"Throttles", "Sum", 60}) || !strings.Contains(expr, id) {
				t.Errorf("%s reads %s", id, r)
			}
		}
	})

	// With a webhook, the subscriber queue is a copy nobody must read: no
	// age alarm then.
	for _, id := range []string{"FinanceQueueAgeAlarm", "OrdersQueueAgeAlarm"} {
		for lid := range alarmsByID(f.optMap) {
			if strings.HasPrefix(lid, id) {
				t.Errorf("the options stack (webhooks set) has %s", lid)
			}
		}
	}

	warn := func(st *HourglassStack) int {
		return len(*assertions.Annotations_FromStack(st.Stack).FindWarning(jsii.String("*"),
			assertions.Match_StringLikeRegexp(jsii.String("alarmEmail is empty"))))
	}
	if warn(f.def) != 1 || warn(f.opt) != 0 {
		t.Errorf("alarm-email warnings: %d without an address, %d with; want 1 and 0", warn(f.def), warn(f.opt))
	}
}

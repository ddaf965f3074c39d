package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awswafv2"
	"github.com/aws/jsii-runtime-go"

	"github.com/hourglass/hourglass/shared/metrics"
)

// Values of the Queue dimension the functions emit.
const (
	queueWithdrawals = "withdrawals"
	queueSeckill     = "seckill"
)

// refusalReasons are the values of the Refusals metric's Reason dimension.
var refusalReasons = []string{"sold_out", "already_purchased", "not_started", "ended", "backlog_full"}

// Alarm thresholds.
const (
	// dueLagThresholdMs: a withdrawal handed over a minute late, three
	// minutes running, means the poller cannot keep up or is not running.
	dueLagThresholdMs = 60_000
	dueLagPeriods     = 3
	// redisMemoryPercent: with noeviction, a full Redis refuses writes;
	// page well before, while adding shards is still calm.
	redisMemoryPercent = 80
	// serverlessLimitPercent: ElastiCache Serverless near its usage limits
	// (cacheMaxStorageGb, cacheMaxEcpuPerSecond) pages before it refuses
	// writes or throttles commands; serverlessThrottle*: commands
	// throttled in 2 of 3 minutes (one brief burst while it scales up
	// does not page).
	serverlessLimitPercent       = 80
	serverlessThrottlePeriods    = 3
	serverlessThrottleDatapoints = 2
	// apiServerErrorPeriods: the HTTP API answered 5xx in 3 of 5 minutes.
	// One 5xx (a cold start timing out, a deploy) does not page; a
	// dependency that is down (Redis, DynamoDB: 503) or a broken release
	// does, within 5 minutes. Each function's own errors page at once.
	apiServerErrorPeriods    = 5
	apiServerErrorDatapoints = 3
	// deadLetterAgeSeconds: a dead letter nobody redrove in 3 days pages
	// again. SQS counts its age in the dead-letter queue from when it moved
	// there but expires it 14 days after its first enqueue, of which the
	// work queue kept it 4 at most: at least 7 days are left then.
	deadLetterAgeSeconds = 3 * 24 * 3600
	// subscriberAgeSeconds: a finance message or order event nobody read in
	// 3 days pages; SQS drops it at 14.
	subscriberAgeSeconds = 3 * 24 * 3600
	// payoutFailurePercent of the payouts ending in 5 minutes failed, at
	// least payoutFailureMin of them: a provider refusing everything (a 4xx
	// to every call) fails each withdrawal, which no other alarm sees.
	payoutFailurePercent = 50
	payoutFailureMin     = 5
	// housekeepingFailures in 5 minutes: one failed pass (a blip) does not
	// page, a task that keeps failing does.
	housekeepingPeriods    = 5
	housekeepingDatapoints = 2
	// throttlePeriods: Lambda throttled a function in 2 of 3 minutes.
	throttlePeriods    = 3
	throttleDatapoints = 2
)

// workQueueAgeSeconds: the longest a job message lives in the work queue
// while its deliveries fail (each redelivered after the visibility timeout,
// dead-lettered after maxReceiveCount). Older than that, the consumer does
// not take messages at all.
var workQueueAgeSeconds = float64(maxReceiveCount*visibilityFactor) * consumerTimeout.Seconds()

// runbook is the docs/operations.md section of each alarm: its construct id
// lowercased (GitHub's anchor of a "### <id>" heading), the five function
// alarms and the Redis shard alarms sharing one.
func runbook(id string) string {
	anchor := strings.ToLower(id)
	switch {
	case strings.HasPrefix(id, "RedisMemoryShard"):
		anchor = "redismemoryalarm"
	case slices.ContainsFunc(functionNames, func(fn string) bool { return id == fnID(fn)+"ErrorsAlarm" }):
		anchor = "functionerrorsalarm"
	}
	return "Runbook: docs/operations.md#" + anchor
}

func (s *HourglassStack) createSchedule() {
	awsevents.NewRule(s.Stack, jsii.String("PollerSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Starts the poller every minute; each run lasts a little longer, so runs overlap"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(s.Functions[fnPoller], &awseventstargets.LambdaFunctionProps{
			MaxEventAge:   awscdk.Duration_Minutes(jsii.Number(1)),
			RetryAttempts: jsii.Number(2),
		})},
	})
}

var minute = awscdk.Duration_Minutes(jsii.Number(1))

// hgMetric is one of the functions' EMF metrics.
func hgMetric(name, stat, label string, dims map[string]string) awscloudwatch.Metric {
	props := &awscloudwatch.MetricProps{
		Namespace:  jsii.String(metrics.Namespace),
		MetricName: jsii.String(name),
		Statistic:  jsii.String(stat),
		Period:     minute,
	}
	if label != "" {
		props.Label = jsii.String(label)
	}
	if len(dims) > 0 {
		m := map[string]*string{}
		for k, v := range dims {
			m[k] = jsii.String(v)
		}
		props.DimensionsMap = &m
	}
	return awscloudwatch.NewMetric(props)
}

func queueMetric(name, stat, queue string) awscloudwatch.Metric {
	return hgMetric(name, stat, queue, map[string]string{"Queue": queue})
}

// redisMetric is an ElastiCache metric of one node (a cache cluster).
func redisMetric(name, node string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String("AWS/ElastiCache"),
		MetricName:    jsii.String(name),
		DimensionsMap: &map[string]*string{"CacheClusterId": jsii.String(node)},
		Statistic:     jsii.String("Maximum"),
		Period:        minute,
		Label:         jsii.String(node),
	})
}

// serverlessMetric is an ElastiCache Serverless metric of the whole cache
// (dimension clusterId, the cache's name).
func (s *HourglassStack) serverlessMetric(name, stat, label string, period awscdk.Duration) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String("AWS/ElastiCache"),
		MetricName:    jsii.String(name),
		DimensionsMap: &map[string]*string{"clusterId": jsii.String(s.redisGroupID())},
		Statistic:     jsii.String(stat),
		Period:        period,
		Label:         jsii.String(label),
	})
}

// gigabyte is ElastiCache Serverless's GB of its data storage limit, taken
// as 10^9 bytes: if it meant 2^30, the alarm would only fire a little early.
const gigabyte = 1e9

// serverlessStorage is the data the cache holds, in GB.
func (s *HourglassStack) serverlessStorage() awscloudwatch.IMetric {
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(fmt.Sprintf("bytes / %.0f", gigabyte)),
		UsingMetrics: &map[string]awscloudwatch.IMetric{"bytes": s.serverlessMetric("BytesUsedForCache", "Maximum", "bytes", minute)},
		Label:        jsii.String("data stored (GB)"),
		Period:       minute,
	})
}

// serverlessECPU is the ECPUs the cache served a second, averaged over
// period.
func (s *HourglassStack) serverlessECPU(period awscdk.Duration) awscloudwatch.IMetric {
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(fmt.Sprintf("ecpu / %g", *period.ToSeconds(nil))),
		UsingMetrics: &map[string]awscloudwatch.IMetric{
			"ecpu": s.serverlessMetric("ElastiCacheProcessingUnits", "Sum", "ECPUs", period),
		},
		Label:  jsii.String("ECPU/s"),
		Period: period,
	})
}

func widgetRow(ws []awscloudwatch.IWidget) *[]awscloudwatch.IWidget { return &ws }

func metricList(ms ...awscloudwatch.IMetric) *[]awscloudwatch.IMetric { return &ms }

func graph(title string, width float64, left []awscloudwatch.IMetric, opts ...func(*awscloudwatch.GraphWidgetProps)) awscloudwatch.IWidget {
	p := &awscloudwatch.GraphWidgetProps{
		Title:  jsii.String(title),
		Width:  jsii.Number(width),
		Height: jsii.Number(6),
		Left:   &left,
	}
	for _, o := range opts {
		o(p)
	}
	return awscloudwatch.NewGraphWidget(p)
}

func lineAt(value float64, label string) func(*awscloudwatch.GraphWidgetProps) {
	return func(p *awscloudwatch.GraphWidgetProps) {
		p.LeftAnnotations = &[]*awscloudwatch.HorizontalAnnotation{{Value: jsii.Number(value), Label: jsii.String(label)}}
	}
}

func (s *HourglassStack) createMonitoring() {
	queues := []string{queueWithdrawals, queueSeckill}
	perQueue := func(name, stat string) []awscloudwatch.IMetric {
		var ms []awscloudwatch.IMetric
		for _, q := range queues {
			ms = append(ms, queueMetric(name, stat, q))
		}
		return ms
	}
	sum := func(name string) awscloudwatch.Metric { return hgMetric(name, "Sum", name, nil) }

	paid, failed := hgMetric(metrics.PayoutsPaid, "Sum", "", nil), hgMetric(metrics.PayoutsFailed, "Sum", "", nil)
	successRate := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String("100 * paid / (paid + failed)"),
		UsingMetrics: &map[string]awscloudwatch.IMetric{"paid": paid, "failed": failed},
		Label:        jsii.String("Payout success rate (%)"),
		Period:       minute,
	})
	var refusals []awscloudwatch.IMetric
	for _, r := range refusalReasons {
		refusals = append(refusals, hgMetric(metrics.Refusals, "Sum", r, map[string]string{"Reason": r}))
	}
	// Items come and go with the sales; a search finds every one.
	stockLeft := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(fmt.Sprintf(`SEARCH('{%s,Item} MetricName="%s"', 'Minimum', 60)`, metrics.Namespace, metrics.StockLeft)),
		Label:      jsii.String("Stock left"),
		Period:     minute,
	})

	var fnErrors, fnDurations, fnThrottles []awscloudwatch.IMetric
	for _, name := range functionNames {
		fn := s.Functions[name]
		fnErrors = append(fnErrors, fn.MetricErrors(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute, Label: jsii.String(name)}))
		fnDurations = append(fnDurations, fn.MetricDuration(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Period: minute, Label: jsii.String(name + " p99")}))
		fnThrottles = append(fnThrottles, fn.MetricThrottles(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute, Label: jsii.String(name)}))
	}
	var redisMemory, redisCPU []awscloudwatch.IMetric
	for _, shard := range s.redisNodeClusters {
		for _, node := range shard {
			redisMemory = append(redisMemory, redisMetric("DatabaseMemoryUsagePercentage", node))
			redisCPU = append(redisCPU, redisMetric("EngineCPUUtilization", node))
		}
	}
	webhooksTitle, webhooks := "Webhooks (REST API)", []awscloudwatch.IMetric{
		s.Webhooks.MetricClientError(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}),
		s.Webhooks.MetricServerError(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}),
	}
	if s.WebhooksFirewall != nil {
		webhooksTitle, webhooks = "Webhooks (REST API, WAF)", append(webhooks, wafMetric(s.WebhooksFirewall, "BlockedRequests", "ALL"))
	}
	dlqDepth := s.DeadLetterQueue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Statistic: jsii.String("Maximum"), Period: minute, Label: jsii.String("SQS dead-letter queue"),
	})

	s.Dashboard = awscloudwatch.NewDashboard(s.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName:   jsii.String(*s.Stack.StackName()),
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
		Widgets: &[]*[]awscloudwatch.IWidget{
			{
				graph("Queue size (scheduled jobs)", 6, perQueue(metrics.DueBacklog, "Maximum")),
				graph("Due backlog (due now, not yet claimed)", 6, perQueue(metrics.DueNow, "Maximum")),
				graph("Oldest due lag (ms)", 6, perQueue(metrics.OldestDueLagMs, "Maximum"), lineAt(dueLagThresholdMs, "alarm")),
				graph("In flight (claimed, lease running)", 6, perQueue(metrics.Inflight, "Maximum")),
			},
			{
				graph("Dead letters", 6, append(perQueue(metrics.Dead, "Maximum"), dlqDepth,
					s.FinanceDeadLetterQueue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
						Statistic: jsii.String("Maximum"), Period: minute, Label: jsii.String("finance dead-letter queue"),
					}),
					s.OrdersDeadLetterQueue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
						Statistic: jsii.String("Maximum"), Period: minute, Label: jsii.String("orders dead-letter queue"),
					}))),
				graph("Payouts", 6, []awscloudwatch.IMetric{paid, failed, sum(metrics.PayoutRetries),
					sum(metrics.PayoutsUnresolved), sum(metrics.PayoutsRejected), sum(metrics.PayoutConflicts)}),
				graph("Payout success rate (%)", 6, []awscloudwatch.IMetric{successRate}),
				graph("Lag (ms): due to dispatch, due to consumer", 6, []awscloudwatch.IMetric{
					hgMetric(metrics.DispatchLagMs, "p99", "dispatch p99", nil),
					hgMetric(metrics.ConsumerLagMs, "p50", "consumer p50", nil),
					hgMetric(metrics.ConsumerLagMs, "p99", "consumer p99", nil),
				}),
			},
			{
				// Reconciler on the right axis: repairs (which alarm) apart
				// from promotions of long delays (normal traffic).
				graph("Poller: claimed, refused by SQS, reaped, housekeeping failures; reconciler", 6, []awscloudwatch.IMetric{
					sum(metrics.Claimed), sum(metrics.Refused), sum(metrics.Reaped), sum(metrics.HousekeepingFailures),
				}, func(p *awscloudwatch.GraphWidgetProps) {
					p.Right = metricList(hgMetric(metrics.Reconciled, "Sum", "reconciler repairs", nil),
						hgMetric(metrics.Promoted, "Sum", "promoted into Redis", nil))
				}),
				graph("Flash sale: admissions and orders", 6, []awscloudwatch.IMetric{
					sum(metrics.Admitted), sum(metrics.OrdersConfirmed), sum(metrics.OrdersReleased),
					sum(metrics.CompensationRequeued), sum(metrics.CompensationReleased), sum(metrics.OrderExpiryFailures),
				}),
				graph("Flash sale: refusals by reason", 6, refusals),
				graph("Flash sale: stock left by item", 6, []awscloudwatch.IMetric{stockLeft}),
			},
			{
				graph("Lambda errors", 6, fnErrors),
				graph("Lambda duration p99 (ms)", 6, fnDurations),
				graph("Lambda throttles", 6, fnThrottles),
				graph("HTTP API", 6, []awscloudwatch.IMetric{
					s.Api.MetricClientError(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}),
					s.Api.MetricServerError(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}),
				}, func(p *awscloudwatch.GraphWidgetProps) {
					p.Right = metricList(s.Api.MetricLatency(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Period: minute}))
				}),
				graph(webhooksTitle, 6, webhooks, func(p *awscloudwatch.GraphWidgetProps) {
					p.Right = metricList(s.Webhooks.MetricLatency(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Period: minute}))
				}),
			},
			widgetRow(append(s.redisWidgets(redisMemory, redisCPU),
				graph("Work queue", 8, []awscloudwatch.IMetric{
					s.WorkQueue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: minute}),
					s.WorkQueue.MetricApproximateNumberOfMessagesNotVisible(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: minute}),
				}, func(p *awscloudwatch.GraphWidgetProps) {
					p.Right = metricList(s.WorkQueue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: minute}))
				}))),
		},
	})

	s.createAlarms(dlqDepth)
}

// redisWidgets are the dashboard's Redis graphs: memory and engine CPU of
// each node; on ElastiCache Serverless, which has no nodes, the data it
// holds and the ECPUs it serves against their usage limits, and the
// commands it throttled.
func (s *HourglassStack) redisWidgets(memory, cpu []awscloudwatch.IMetric) []awscloudwatch.IWidget {
	if s.RedisServerless == nil {
		return []awscloudwatch.IWidget{
			graph("Redis memory used (%)", 8, memory, lineAt(redisMemoryPercent, "alarm")),
			graph("Redis engine CPU (%)", 8, cpu),
		}
	}
	return []awscloudwatch.IWidget{
		graph("Redis data stored (GB)", 8, []awscloudwatch.IMetric{s.serverlessStorage()},
			lineAt(float64(s.settings.CacheMaxStorageGB), "usage limit")),
		graph("Redis ECPU/s; throttled commands, connections", 8, []awscloudwatch.IMetric{s.serverlessECPU(minute)},
			lineAt(float64(s.settings.CacheMaxECPUPerSecond), "usage limit"),
			func(p *awscloudwatch.GraphWidgetProps) {
				p.Right = metricList(s.serverlessMetric("ThrottledCmds", "Sum", "throttled commands", minute),
					s.serverlessMetric("CurrConnections", "Maximum", "connections", minute))
			}),
	}
}

func (s *HourglassStack) createAlarms(dlqDepth awscloudwatch.IMetric) {
	sum := func(name string) awscloudwatch.Metric { return hgMetric(name, "Sum", "", nil) }
	action := awscloudwatchactions.NewSnsAction(s.AlarmTopic)
	alarm := func(id, description string, props *awscloudwatch.AlarmProps) {
		props.AlarmDescription = jsii.String(description + " " + runbook(id))
		props.ComparisonOperator = cmp.Or(props.ComparisonOperator, awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD)
		props.TreatMissingData = cmp.Or(props.TreatMissingData, awscloudwatch.TreatMissingData_NOT_BREACHING)
		a := awscloudwatch.NewAlarm(s.Stack, jsii.String(id), props)
		a.AddAlarmAction(action)
		a.AddOkAction(action)
		s.Alarms = append(s.Alarms, a)
		if s.alarmByID == nil {
			s.alarmByID = map[string]awscloudwatch.Alarm{}
		}
		s.alarmByID[id] = a
	}

	// No data is the alarm too: the poller emits the lag every 10 s (its
	// queue-metrics housekeeping), so without it the lag is unknown.
	alarm("WithdrawalsDueLagAlarm",
		"Withdrawals are handed over more than a minute after they fall due, or the lag is not reported at all, "+
			"three minutes running: the poller is behind or stuck, or its queue metrics fail.",
		&awscloudwatch.AlarmProps{
			Metric:            queueMetric(metrics.OldestDueLagMs, "Maximum", queueWithdrawals),
			Threshold:         jsii.Number(dueLagThresholdMs),
			EvaluationPeriods: jsii.Number(dueLagPeriods),
			DatapointsToAlarm: jsii.Number(dueLagPeriods),
			TreatMissingData:  awscloudwatch.TreatMissingData_BREACHING,
		})
	alarm("HousekeepingFailuresAlarm",
		fmt.Sprintf("The poller's housekeeping (queue metrics, reconciler, flash-sale compensation, key purge) failed in %d of %d minutes: "+
			"lost jobs are not given back, held stock is not released, or the queue metrics stop. "+
			"The HousekeepingFailures metric by Task and the poller's logs (\"housekeeping failed\") name the task.",
			housekeepingDatapoints, housekeepingPeriods),
		&awscloudwatch.AlarmProps{
			Metric:            sum(metrics.HousekeepingFailures),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(housekeepingPeriods),
			DatapointsToAlarm: jsii.Number(housekeepingDatapoints),
		})
	paid, failed := hgMetric(metrics.PayoutsPaid, "Sum", "", nil), hgMetric(metrics.PayoutsFailed, "Sum", "", nil)
	five := awscdk.Duration_Minutes(jsii.Number(5))
	alarm("PayoutFailuresAlarm",
		fmt.Sprintf("At least %d payouts ended failed in 5 minutes, more than %d%% of those that ended: the provider refuses them "+
			"(a changed API, a closed account, bad destinations). Users are told failed and finance receives failed.",
			payoutFailureMin, payoutFailurePercent),
		&awscloudwatch.AlarmProps{
			Metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression: jsii.String(fmt.Sprintf("IF(FILL(failed, 0) >= %d, 100 * FILL(failed, 0) / (FILL(paid, 0) + FILL(failed, 0)), 0)",
					payoutFailureMin)),
				UsingMetrics: &map[string]awscloudwatch.IMetric{
					"paid":   paid.With(&awscloudwatch.MetricOptions{Period: five}),
					"failed": failed.With(&awscloudwatch.MetricOptions{Period: five}),
				},
				Label:  jsii.String("failed payouts (%)"),
				Period: five,
			}),
			Threshold:         jsii.Number(payoutFailurePercent),
			EvaluationPeriods: jsii.Number(1),
		})
	var throttles []string
	usingThrottles := map[string]awscloudwatch.IMetric{}
	for i, name := range functionNames {
		id := fmt.Sprintf("t%d", i)
		usingThrottles[id] = s.Functions[name].MetricThrottles(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute})
		throttles = append(throttles, id)
	}
	alarm("FunctionThrottlesAlarm",
		fmt.Sprintf("Lambda throttled a function in %d of %d minutes (the account's concurrency, or a function's reservation, is used up): "+
			"API callers get 429 or 503, due jobs wait. The Lambda throttles graph names the function.", throttleDatapoints, throttlePeriods),
		&awscloudwatch.AlarmProps{
			Metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression:   jsii.String(fmt.Sprintf("SUM([%s])", strings.Join(throttles, ","))),
				UsingMetrics: &usingThrottles,
				Label:        jsii.String("throttles"),
				Period:       minute,
			}),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(throttlePeriods),
			DatapointsToAlarm: jsii.Number(throttleDatapoints),
		})
	oldest := func(q awssqs.Queue) awscloudwatch.Metric {
		return q.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: five})
	}
	alarm("WorkQueueAgeAlarm",
		fmt.Sprintf("A job message has waited in the work queue for over %.0f s, longer than its deliveries can take before "+
			"it is dead-lettered: the consumer is not taking messages (disabled event source, throttled, failing at start).", workQueueAgeSeconds),
		&awscloudwatch.AlarmProps{Metric: oldest(s.WorkQueue), Threshold: jsii.Number(workQueueAgeSeconds), EvaluationPeriods: jsii.Number(1)})
	// The subscriber queues are the readers' own channel only when no
	// webhook is: with one, the queue keeps a copy nobody has to read.
	if s.settings.FinanceWebhookURL == "" {
		alarm("FinanceQueueAgeAlarm",
			"A finance message has not been read from the finance queue for 3 days: finance does not receive the payouts, "+
				"and SQS drops each message 14 days after it was sent.",
			&awscloudwatch.AlarmProps{Metric: oldest(s.FinanceQueue), Threshold: jsii.Number(subscriberAgeSeconds), EvaluationPeriods: jsii.Number(1)})
	}
	if s.settings.OrdersWebhookURL == "" {
		alarm("OrdersQueueAgeAlarm",
			"An order event has not been read from the orders queue for 3 days: stock, SMS and shipping do not hear of orders, "+
				"and SQS drops each event 14 days after it was sent.",
			&awscloudwatch.AlarmProps{Metric: oldest(s.OrdersQueue), Threshold: jsii.Number(subscriberAgeSeconds), EvaluationPeriods: jsii.Number(1)})
	}
	alarm("CallbacksUnknownAlarm",
		"The payout provider sent a signed callback about a withdrawal that does not exist here (refused 404): "+
			"it paid or refused something nobody here asked for, or another environment's callbacks reach this one.",
		&awscloudwatch.AlarmProps{
			Metric:            hgMetric(metrics.PayoutCallbacks, "Sum", "", map[string]string{"Result": metrics.CallbackUnknown}),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(1),
		})
	// A payout whose outcome is unknown is never failed: it retries until
	// the provider's lookup, its callback or an operator settles it. Past the
	// attempts, or past the provider's idempotency window, a person looks.
	alarm("PayoutsUnresolvedAlarm",
		"A payout that may have been made is still unsettled after HOURGLASS_MAX_ATTEMPTS, or past the provider's idempotency window: "+
			"check the provider (its lookup, its dashboard), then `hourglass payouts unresolved` and `hourglass payouts resolve`.",
		&awscloudwatch.AlarmProps{
			Metric:            hgMetric(metrics.PayoutsUnresolved, "Sum", "", nil),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(1),
		})
	alarm("PayoutsRejectedAlarm",
		"The payout provider refused our credentials or signature (401/403): payouts retry and never fail, but none is paid. "+
			"Check PAYOUT_SIGNING_SECRET (a rotated key?) and the provider's account.",
		&awscloudwatch.AlarmProps{
			Metric:            hgMetric(metrics.PayoutsRejected, "Sum", "", nil),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(1),
		})
	alarm("PayoutCallbackConflictsAlarm",
		"A payout provider callback contradicts how a withdrawal ended (failed after paid, paid after cancelled), "+
			"or is about a withdrawal never sent to the provider (409 not_sent): "+
			"nothing was changed; reconcile it with the provider by hand.",
		&awscloudwatch.AlarmProps{
			Metric:            hgMetric(metrics.PayoutConflicts, "Sum", "", nil),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(1),
		})
	alarm("DeadLetterQueueAlarm",
		"A job message failed 5 deliveries and sits in the dead-letter queue: see the consumer's logs, then redrive it.",
		&awscloudwatch.AlarmProps{
			Metric:            dlqDepth,
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(1),
		})
	for _, name := range functionNames {
		fn := s.Functions[name]
		alarm(fnID(name)+"ErrorsAlarm",
			fmt.Sprintf("The %s function failed (an error, a timeout or a crash).", name),
			&awscloudwatch.AlarmProps{
				Metric:            fn.MetricErrors(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}),
				Threshold:         jsii.Number(0),
				EvaluationPeriods: jsii.Number(1),
			})
	}
	// No data is the alarm here (TreatMissingData breaching): a poller that
	// is not started leaves none.
	alarm("PollerNotRunningAlarm",
		"The poller has not run for 5 minutes: no withdrawal falls due. Check the EventBridge schedule and the function.",
		&awscloudwatch.AlarmProps{
			Metric: s.Functions[fnPoller].MetricInvocations(&awscloudwatch.MetricOptions{
				Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(5)),
			}),
			Threshold:          jsii.Number(1),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_LESS_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_BREACHING,
		})
	alarm("PollerFailuresAlarm",
		"Poller rounds failed (Redis unreachable or refusing AUTH, SQS refusing sends): due jobs are not handed over. "+
			"See the poller's logs for the failing dependency.",
		&awscloudwatch.AlarmProps{Metric: sum(metrics.PollerFailures), Threshold: jsii.Number(0), EvaluationPeriods: jsii.Number(1)})
	// HTTP API metrics have an ApiId dimension (all stages: here only
	// $default), and ApiId with Stage; the first is what the CDK names.
	alarm("ApiServerErrorsAlarm",
		fmt.Sprintf("The HTTP API answered 5xx in %d of %d minutes: users see failures. "+
			"See the enqueue and seckill functions' logs and the dependencies they report.", apiServerErrorDatapoints, apiServerErrorPeriods),
		&awscloudwatch.AlarmProps{
			Metric:            s.Api.MetricServerError(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(apiServerErrorPeriods),
			DatapointsToAlarm: jsii.Number(apiServerErrorDatapoints),
		})
	// A provider whose webhooks fail retries for a while, then gives up:
	// a payout's outcome or a sale's payment never arrives. The REST API's
	// metrics have ApiName (and Stage) dimensions; ApiName is the CDK's.
	alarm("WebhooksServerErrorsAlarm",
		fmt.Sprintf("The providers' webhooks (the REST API"+behindWAF(s.settings.Profile)+") answered 5xx in %d of %d minutes: providers retry, then give up, "+
			"and payouts' outcomes or flash-sale payments do not arrive. See the enqueue function's logs and the webhooks' access logs.",
			apiServerErrorDatapoints, apiServerErrorPeriods),
		&awscloudwatch.AlarmProps{
			Metric:            s.Webhooks.MetricServerError(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute}),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(apiServerErrorPeriods),
			DatapointsToAlarm: jsii.Number(apiServerErrorDatapoints),
		})
	alarm("ReconcilerRepairsAlarm",
		"The reconciler gave jobs back that Redis had lost (a failover, a failed schedule, an expired work-queue message): "+
			"nothing is lost, but find out why in the poller's logs (\"reconciler repaired withdrawals\").",
		&awscloudwatch.AlarmProps{Metric: sum(metrics.Reconciled), Threshold: jsii.Number(0), EvaluationPeriods: jsii.Number(1)})
	alarm("DeadLetterQueueAgeAlarm",
		"A job has sat in the dead-letter queue for 3 days: redrive or settle it before SQS drops it (14 days after it was first sent).",
		&awscloudwatch.AlarmProps{
			Metric: s.DeadLetterQueue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
				Statistic: jsii.String("Maximum"), Period: awscdk.Duration_Minutes(jsii.Number(5)),
			}),
			Threshold:         jsii.Number(deadLetterAgeSeconds),
			EvaluationPeriods: jsii.Number(1),
		})
	// A topic with a durable subscriber (messaging.go): SNS failing to
	// deliver, and what it or the reader gave up on.
	undelivered := func(deliveryID, deliveryDesc string, topic awssns.Topic, dlqID, dlqDesc string, dlq awssqs.Queue) {
		alarm(deliveryID, deliveryDesc, &awscloudwatch.AlarmProps{
			Metric: topic.MetricNumberOfNotificationsFailed(&awscloudwatch.MetricOptions{
				Statistic: jsii.String("Sum"), Period: minute,
			}),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(1),
		})
		alarm(dlqID, dlqDesc, &awscloudwatch.AlarmProps{
			Metric: dlq.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
				Statistic: jsii.String("Maximum"), Period: minute,
			}),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(1),
		})
	}
	undelivered("FinanceDeliveryFailuresAlarm",
		"SNS failed to deliver finance messages to a subscription (the finance queue, an e-mail): they are in the finance dead-letter queue.",
		s.FinanceTopic, "FinanceDeadLetterQueueAlarm",
		"Finance messages sit in the finance dead-letter queue (undeliverable by SNS, or received 5 times without being deleted): "+
			"finance has not got them. Fix the cause, then redrive them to the finance queue.",
		s.FinanceDeadLetterQueue)
	undelivered("OrderEventDeliveryFailuresAlarm",
		"SNS failed to deliver order events to a subscription (the orders queue, an HTTPS endpoint): they are in the orders dead-letter queue.",
		s.OrdersTopic, "OrdersDeadLetterQueueAlarm",
		"Order events sit in the orders dead-letter queue (undeliverable by SNS, or received 5 times without being deleted): "+
			"stock, SMS and shipping have not got them. Fix the cause, then move them to the orders queue.",
		s.OrdersDeadLetterQueue)
	// An unpaid order whose expiry fails keeps its stock from the sale and
	// may still be paid after pay_by: the job retries, a person looks.
	alarm("OrderExpiryFailuresAlarm",
		"Expiring unpaid flash-sale orders failed: those orders stay awaiting payment past pay_by and their units stay off sale "+
			"until an expiry succeeds. See the consumer's logs for the failing dependency.",
		&awscloudwatch.AlarmProps{Metric: sum(metrics.OrderExpiryFailures), Threshold: jsii.Number(0), EvaluationPeriods: jsii.Number(1)})
	// One alarm per shard, on its fullest node (primary or replica).
	for i, shard := range s.redisNodeClusters {
		using := map[string]awscloudwatch.IMetric{}
		var ids []string
		for j, node := range shard {
			id := fmt.Sprintf("m%d", j)
			using[id] = redisMetric("DatabaseMemoryUsagePercentage", node)
			ids = append(ids, id)
		}
		alarm(fmt.Sprintf("RedisMemoryShard%dAlarm", i+1),
			fmt.Sprintf("Redis shard %d is over %d%% of its memory; with noeviction a full shard refuses writes. Add shards (redisShards) or a larger node type.", i+1, redisMemoryPercent),
			&awscloudwatch.AlarmProps{
				Metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
					Expression:   jsii.String(fmt.Sprintf("MAX([%s])", strings.Join(ids, ","))),
					UsingMetrics: &using,
					Label:        jsii.String(fmt.Sprintf("shard %d memory (%%)", i+1)),
					Period:       minute,
				}),
				Threshold:         jsii.Number(redisMemoryPercent),
				EvaluationPeriods: jsii.Number(1),
			})
	}
	if s.RedisServerless != nil {
		s.createServerlessAlarms(alarm)
	}
}

// createServerlessAlarms pages before ElastiCache Serverless reaches its
// usage limits and when it throttles: its counterparts of the node
// profiles' memory alarms (it has no nodes, and no memory to fill but the
// limit).
func (s *HourglassStack) createServerlessAlarms(alarm func(id, description string, props *awscloudwatch.AlarmProps)) {
	five := awscdk.Duration_Minutes(jsii.Number(5))
	alarm("RedisThrottledCommandsAlarm",
		fmt.Sprintf("ElastiCache Serverless throttled commands in %d of %d minutes: it is at its ECPU usage limit "+
			"(cacheMaxEcpuPerSecond, %d/s) or scaling up behind a burst. Throttled calls fail: creates and purchases answer 503, "+
			"poller rounds fail.", serverlessThrottleDatapoints, serverlessThrottlePeriods, s.settings.CacheMaxECPUPerSecond),
		&awscloudwatch.AlarmProps{
			Metric:            s.serverlessMetric("ThrottledCmds", "Sum", "throttled commands", minute),
			Threshold:         jsii.Number(0),
			EvaluationPeriods: jsii.Number(serverlessThrottlePeriods),
			DatapointsToAlarm: jsii.Number(serverlessThrottleDatapoints),
		})
	alarm("RedisStorageAlarm",
		fmt.Sprintf("ElastiCache Serverless holds over %d%% of its data storage limit (cacheMaxStorageGb, %d GB): at the limit "+
			"it refuses writes and evicts keys with a TTL. Raise the limit, or find what fills it.",
			serverlessLimitPercent, s.settings.CacheMaxStorageGB),
		&awscloudwatch.AlarmProps{
			Metric:            s.serverlessMetric("BytesUsedForCache", "Maximum", "bytes", minute),
			Threshold:         jsii.Number(float64(s.settings.CacheMaxStorageGB) * gigabyte * serverlessLimitPercent / 100),
			EvaluationPeriods: jsii.Number(1),
		})
	alarm("RedisEcpuAlarm",
		fmt.Sprintf("ElastiCache Serverless served over %d%% of its ECPU usage limit (cacheMaxEcpuPerSecond, %d/s) for 5 minutes: "+
			"at the limit it throttles commands. Raise the limit before a sale, or find the runaway.",
			serverlessLimitPercent, s.settings.CacheMaxECPUPerSecond),
		&awscloudwatch.AlarmProps{
			Metric:            s.serverlessMetric("ElastiCacheProcessingUnits", "Sum", "ECPUs", five),
			Threshold:         jsii.Number(float64(s.settings.CacheMaxECPUPerSecond) * *five.ToSeconds(nil) * serverlessLimitPercent / 100),
			EvaluationPeriods: jsii.Number(1),
		})
}

// fnID is a function's construct id: Enqueue, Seckill, Poller, Consumer.
func fnID(name string) string { return string(name[0]-'a'+'A') + name[1:] }

// wafMetric is a WAF web ACL's count of one rule's (or ALL rules')
// requests a minute.
func wafMetric(acl awswafv2.CfnWebACL, name, rule string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String("AWS/WAFV2"),
		MetricName: jsii.String(name),
		DimensionsMap: &map[string]*string{
			"WebACL": acl.Name(), "Region": awscdk.Aws_REGION(), "Rule": jsii.String(rule),
		},
		Statistic: jsii.String("Sum"),
		Period:    minute,
		Label:     jsii.String("WAF blocked"),
	})
}

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
)

// The cost model: what one million withdrawals or purchases cost in
// us-east-1, from the counts the cost section measures per item and the
// list prices of bench/prices.json. Pure arithmetic, so that it is tested
// apart from the measurement (cost_test.go).

// pricesFile is read by the cost section.
var pricesFile = "bench/prices.json"

// price is one list price: USD per Per units of Unit.
type price struct {
	USD      float64 `json:"usd"`
	Per      float64 `json:"per"`
	Unit     string  `json:"unit"`
	Source   string  `json:"source"`
	Obtained string  `json:"obtained"`
}

// priceList is bench/prices.json.
type priceList struct {
	Date   string           `json:"date"`
	Region string           `json:"region"`
	Note   string           `json:"note"`
	Prices map[string]price `json:"prices"`
}

// The keys of prices.json the model uses.
var priceKeys = []string{
	"lambda_arm64_gb_second", "lambda_request", "http_api_request", "sqs_request",
	"dynamodb_wru", "dynamodb_rru", "sns_publish", "scheduler_invocation", "stepfunctions_transition",
	"elasticache_node_hour", "elasticache_serverless_gb_hour", "elasticache_serverless_ecpu",
	"nat_gateway_hour", "public_ipv4_hour", "interface_endpoint_az_hour",
}

func readPrices(path string) (priceList, error) {
	var pl priceList
	b, err := os.ReadFile(path)
	if err != nil {
		return pl, err
	}
	if err := json.Unmarshal(b, &pl); err != nil {
		return pl, fmt.Errorf("%s: %w", path, err)
	}
	for _, k := range priceKeys {
		p, ok := pl.Prices[k]
		if !ok || p.USD <= 0 || p.Per <= 0 || p.Source == "" {
			return pl, fmt.Errorf("%s: price %q is missing, not positive or without its source", path, k)
		}
	}
	return pl, nil
}

// unit is the price of one unit.
func (pl priceList) unit(key string) float64 {
	p := pl.Prices[key]
	return p.USD / p.Per
}

// The functions' settings in infra/functions.go (costmodel_test.go checks
// them against that file): memory in MB, all arm64; the poller runs until
// pollerMargin before its timeout, started every minute.
var (
	functionMemoryMB = map[string]float64{"enqueue": 512, "seckill": 1024, "poller": 1024, "consumer": 512}
	pollerRunMS      = 70_000.0 // pollerTimeout 75 s - pollerMargin 5 s
	consumerBatch    = 10.0     // consumerBatchSize
)

// The production profile of infra/profile.go: what runs whatever the load.
const (
	cacheNodes       = 4 // 2 shards x (primary + replica), cache.r7g.large
	natGateways      = 2
	endpointAZs      = 6 // 3 interface endpoints (SQS, SNS, Secrets Manager) x 2 AZs
	hoursPerMonth    = 720.0
	pollerRunsMonth  = 30 * 24 * 60
	idleReceivesHour = 5 * 3 * 60.0 // the event source's 5 long polls of 20 s each
)

// usage is what one item (a withdrawal, a purchase) costs in counts.
type usage struct {
	APIRequests float64
	Invocations map[string]float64 // per function
	BilledMS    map[string]float64 // per function, each invocation rounded up to 1 ms
	SQSRequests float64            // SendMessageBatch + ReceiveMessage + DeleteMessageBatch
	WRU, RRU    float64
	SNS         float64
	RedisCmds   float64
	RedisBytes  float64 // in + out
}

// The services of a breakdown, in the order the table lists them: those
// billed per item, then those billed whatever the load.
var (
	perItemServices = []string{"api_gateway", "lambda", "sqs", "dynamodb", "sns", "scheduler", "step_functions"}
	fixedServices   = []string{"elasticache", "poller", "sqs_empty_polls", "network"}
)

// breakdown is USD per service.
type breakdown map[string]float64

func (b breakdown) total() float64 {
	t := 0.0
	for _, v := range b {
		t += v
	}
	return t
}

func (b breakdown) plus(o breakdown) breakdown {
	s := breakdown{}
	for k, v := range b {
		s[k] += v
	}
	for k, v := range o {
		s[k] += v
	}
	return s
}

// lambdaUSD is the cost of invocations of fn of billedMS each in total.
func lambdaUSD(pl priceList, fn string, invocations, billedMS float64) float64 {
	gbs := billedMS / 1000 * functionMemoryMB[fn] / 1024
	return invocations*pl.unit("lambda_request") + gbs*pl.unit("lambda_arm64_gb_second")
}

// variable is what n items cost by their own counts.
func variable(pl priceList, u usage, n float64) breakdown {
	b := breakdown{
		"api_gateway": n * u.APIRequests * pl.unit("http_api_request"),
		"sqs":         n * u.SQSRequests * pl.unit("sqs_request"),
		"dynamodb":    n * (u.WRU*pl.unit("dynamodb_wru") + u.RRU*pl.unit("dynamodb_rru")),
		"sns":         n * u.SNS * pl.unit("sns_publish"),
	}
	fns := make([]string, 0, len(u.Invocations))
	for fn := range u.Invocations {
		fns = append(fns, fn)
	}
	sort.Strings(fns)
	for _, fn := range fns {
		b["lambda"] += lambdaUSD(pl, fn, n*u.Invocations[fn], n*u.BilledMS[fn])
	}
	return b
}

// fixedMonthly is what the stack costs a month at no load: the cache
// nodes, the poller's runs, the event source's empty long polls and the
// network the functions need to reach Redis in its VPC (NAT for the payout
// provider, interface endpoints for SQS, SNS and Secrets Manager).
func fixedMonthly(pl priceList) breakdown {
	return breakdown{
		"elasticache":     cacheNodes * hoursPerMonth * pl.unit("elasticache_node_hour"),
		"poller":          lambdaUSD(pl, "poller", pollerRunsMonth, pollerRunsMonth*pollerRunMS),
		"sqs_empty_polls": idleReceivesHour * hoursPerMonth * pl.unit("sqs_request"),
		"network": natGateways*hoursPerMonth*(pl.unit("nat_gateway_hour")+pl.unit("public_ipv4_hour")) +
			endpointAZs*hoursPerMonth*pl.unit("interface_endpoint_az_hour"),
	}
}

// only keeps the services of b that are in keys.
func (b breakdown) only(keys []string) breakdown {
	o := breakdown{}
	for _, k := range keys {
		if v, ok := b[k]; ok {
			o[k] = v
		}
	}
	return o
}

// breakEven is the items a month from which ours (variable per item plus
// fixed a month) costs less than theirs (per item only): 0 when never.
func breakEven(oursPerItem, fixed, theirsPerItem float64) float64 {
	if theirsPerItem <= oursPerItem {
		return 0
	}
	return fixed / (theirsPerItem - oursPerItem)
}

// ours is the cost of a million items of u with a month's fixed costs on
// them (one million items spread over 30 days).
func ours(pl priceList, u usage) breakdown {
	return variable(pl, u, 1e6).plus(fixedMonthly(pl))
}

// stepTransitions is what one execution of the minimal Standard workflow
// (Wait -> Task (Lambda) -> end) is billed: the transition into Wait, from
// Wait into Task, and from Task to the end.
const stepTransitions = 3

// alternative is the cost of a million withdrawals of u (the DynamoDB
// ledger's counts: without Redis the ledger is DynamoDB) with the delay hop
// swapped: no cache, poller, work queue or VPC; each withdrawal fires on its
// own (an EventBridge Scheduler one-time schedule, or a Step Functions
// execution waiting in a Wait state) and invokes the consumer for one job,
// billed its measured share of a batch rounded up to 1 ms. The API, the
// enqueue function, the ledger's units and the finance messages stay.
func alternative(pl priceList, u usage, stepFunctions bool) breakdown {
	n := 1e6
	b := variable(pl, usage{APIRequests: u.APIRequests, WRU: u.WRU, RRU: u.RRU, SNS: u.SNS,
		Invocations: map[string]float64{"enqueue": u.Invocations["enqueue"]},
		BilledMS:    map[string]float64{"enqueue": u.BilledMS["enqueue"]}}, n)
	delete(b, "sqs")
	b["lambda"] += lambdaUSD(pl, "consumer", n, n*math.Ceil(u.BilledMS["consumer"]))
	if stepFunctions {
		b["step_functions"] = n * stepTransitions * pl.unit("stepfunctions_transition")
	} else {
		b["scheduler"] = n * pl.unit("scheduler_invocation")
	}
	return b
}

// serverlessRedis is what the Redis work of a million items would cost on
// ElastiCache Serverless instead of nodes: ECPUs (at least one a command,
// one a KB transferred when that is more; scripts may take more, so this is
// a floor) and the data stored while each waits.
func serverlessRedis(pl priceList, u usage, bytesStored, hoursStored float64) float64 {
	ecpu := math.Max(u.RedisCmds, u.RedisBytes/1024)
	return 1e6 * (ecpu*pl.unit("elasticache_serverless_ecpu") +
		bytesStored/(1<<30)*hoursStored*pl.unit("elasticache_serverless_gb_hour"))
}

// costTable is the markdown table of the breakdowns, one column each: the
// per-item services, their subtotal, the fixed ones, their subtotal, the
// total.
func costTable(names []string, cols []breakdown) string {
	var b strings.Builder
	b.WriteString("| USD per million |")
	for _, n := range names {
		fmt.Fprintf(&b, " %s |", n)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(names)) + "\n")
	line := func(label string, v func(breakdown) float64, bold bool) {
		f := "%s"
		if bold {
			f = "**%s**"
		}
		fmt.Fprintf(&b, "| "+f+" |", label)
		for _, c := range cols {
			fmt.Fprintf(&b, " "+f+" |", usd(v(c)))
		}
		b.WriteString("\n")
	}
	section := func(keys []string, suffix, subtotal string) {
		for _, s := range keys {
			used := false
			for _, c := range cols {
				used = used || c[s] != 0
			}
			if used {
				line(s+suffix, func(c breakdown) float64 { return c[s] }, false)
			}
		}
		line(subtotal, func(c breakdown) float64 { return c.only(keys).total() }, true)
	}
	section(perItemServices, "", "per item")
	section(fixedServices, " (fixed, a month)", "fixed")
	line("total", breakdown.total, true)
	return b.String()
}

func usd(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

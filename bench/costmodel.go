package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/hourglass/hourglass/internal/costprofile"
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
	"elasticache_node_hour", "elasticache_node_hour_t4g_small", "elasticache_serverless_gb_hour", "elasticache_serverless_ecpu",
	"nat_gateway_hour", "nat_gateway_gb", "public_ipv4_hour", "interface_endpoint_az_hour", "endpoint_gb",
	"kms_key_month", "secret_month", "cloudwatch_dashboard_month", "cloudwatch_alarm_month", "waf_web_acl_month", "waf_rule_month",
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
// them against that file): memory in MB, all arm64 (the poller's memory is
// the profile's); the poller runs until pollerMargin before its timeout,
// started every minute.
var (
	functionMemoryMB = map[string]float64{"enqueue": 512, "seckill": 1024, "consumer": 512}
	pollerRunMS      = 70_000.0 // pollerTimeout 75 s - pollerMargin 5 s
	consumerBatch    = 10.0     // consumerBatchSize
)

const (
	hoursPerMonth    = 720.0
	pollerRunsMonth  = 30 * 24 * 60
	idleReceivesHour = 5 * 3 * 60.0 // the event source's 5 long polls of 20 s each
	// serverlessMinGB is the data ElastiCache Serverless for Valkey bills
	// at the least, whatever is stored.
	serverlessMinGB = 0.1
)

// profilesFile lists what each deployment profile of infra/profile.go runs
// whatever the load; the infra tests count the same things in each
// profile's synthesized template (infra/costprofiles_test.go).
var profilesFile = "bench/profiles.json"

// costProfile is one profile as the cost model sees it.
type costProfile = costprofile.Profile

// readProfiles reads profilesFile: prod first, then the others.
func readProfiles(path string) ([]costProfile, error) { return costprofile.Read(path) }

// memoryMB is fn's memory on profile p.
func memoryMB(p costProfile, fn string) float64 {
	if fn == "poller" {
		return p.PollerMemoryMB
	}
	return functionMemoryMB[fn]
}

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
	// AWSBytes went to SQS and SNS (through an endpoint or a NAT gateway),
	// OutBytes to the payout provider (through a NAT gateway); both ways,
	// HTTP headers included.
	AWSBytes, OutBytes float64
	// StoredBytes is what the item holds in Redis while it waits.
	StoredBytes float64
}

// The services of a breakdown, in the order the table lists them: those
// billed per item, then those billed whatever the load.
var (
	perItemServices = []string{"api_gateway", "lambda", "sqs", "dynamodb", "sns", "elasticache_ecpu", "network_data",
		"scheduler", "step_functions"}
	fixedServices = []string{"elasticache", "poller", "sqs_empty_polls", "network", "keys_secrets_alarms"}
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

// lambdaUSD is the cost of invocations of fn (memoryMB) of billedMS in total.
func lambdaUSD(pl priceList, memoryMB, invocations, billedMS float64) float64 {
	gbs := billedMS / 1000 * memoryMB / 1024
	return invocations*pl.unit("lambda_request") + gbs*pl.unit("lambda_arm64_gb_second")
}

// variable is what n items cost by their own counts on profile p: the
// services every profile bills per item, and, where p has them, ElastiCache
// Serverless's ECPUs and data stored (for hours each) and the NAT
// gateway's or the endpoints' data.
func variable(pl priceList, p costProfile, u usage, n, hours float64) breakdown {
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
		b["lambda"] += lambdaUSD(pl, memoryMB(p, fn), n*u.Invocations[fn], n*u.BilledMS[fn])
	}
	if p.Serverless {
		b["elasticache_ecpu"] = serverlessRedis(pl, u, n, hours)
	}
	const gb = 1 << 30
	aws := pl.unit("endpoint_gb")
	if p.InterfaceEndpoints == 0 {
		aws = pl.unit("nat_gateway_gb")
	}
	b["network_data"] = n * (u.OutBytes/gb*pl.unit("nat_gateway_gb") + u.AWSBytes/gb*aws)
	return b
}

// fixedMonthly is what profile p costs a month at no load: the cache (nodes,
// or ElastiCache Serverless's least data billed and the idle poller's
// ECPUs), the poller's runs, the event source's empty long polls, the
// network the functions need to reach Redis in its VPC (NAT gateways,
// interface endpoints), and the keys, secrets, dashboards, alarms and WAF
// web ACLs the stack holds.
func fixedMonthly(pl priceList, p costProfile, idleCmdsPerSecond float64) breakdown {
	b := breakdown{
		"poller":          lambdaUSD(pl, p.PollerMemoryMB, pollerRunsMonth, pollerRunsMonth*pollerRunMS),
		"sqs_empty_polls": idleReceivesHour * hoursPerMonth * pl.unit("sqs_request"),
		"network": float64(p.NatGateways)*hoursPerMonth*(pl.unit("nat_gateway_hour")+pl.unit("public_ipv4_hour")) +
			float64(p.InterfaceEndpoints*p.EndpointAZs)*hoursPerMonth*pl.unit("interface_endpoint_az_hour"),
		"keys_secrets_alarms": float64(p.KMSKeys)*pl.unit("kms_key_month") + float64(p.Secrets+p.OperatorSecrets)*pl.unit("secret_month") +
			float64(p.Dashboards)*pl.unit("cloudwatch_dashboard_month") + float64(p.Alarms)*pl.unit("cloudwatch_alarm_month") +
			float64(p.WAFWebACLs)*pl.unit("waf_web_acl_month") + float64(p.WAFRules)*pl.unit("waf_rule_month"),
	}
	if p.Serverless {
		b["elasticache"] = serverlessMinGB*hoursPerMonth*pl.unit("elasticache_serverless_gb_hour") +
			idleCmdsPerSecond*hoursPerMonth*3600*pl.unit("elasticache_serverless_ecpu")
	} else {
		b["elasticache"] = float64(p.CacheNodes) * hoursPerMonth * pl.unit(p.CacheNodePrice)
	}
	return b
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

// ours is the cost of a million items of u on profile p with a month's
// fixed costs on them (one million items spread over 30 days), each held
// in Redis for hours.
func ours(pl priceList, p costProfile, u usage, hours, idleCmdsPerSecond float64) breakdown {
	return variable(pl, p, u, 1e6, hours).plus(fixedMonthly(pl, p, idleCmdsPerSecond))
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
	b := variable(pl, costProfile{InterfaceEndpoints: 1}, usage{APIRequests: u.APIRequests, WRU: u.WRU, RRU: u.RRU, SNS: u.SNS,
		Invocations: map[string]float64{"enqueue": u.Invocations["enqueue"]},
		BilledMS:    map[string]float64{"enqueue": u.BilledMS["enqueue"]}}, n, 0)
	delete(b, "sqs")
	delete(b, "network_data")
	b["lambda"] += lambdaUSD(pl, functionMemoryMB["consumer"], n, n*math.Ceil(u.BilledMS["consumer"]))
	if stepFunctions {
		b["step_functions"] = n * stepTransitions * pl.unit("stepfunctions_transition")
	} else {
		b["scheduler"] = n * pl.unit("scheduler_invocation")
	}
	return b
}

// serverlessRedis is what the Redis work of n items costs on ElastiCache
// Serverless: ECPUs (at least one a command, one a KB transferred when that
// is more; scripts may take more, so this is a floor) and the data stored
// while each waits hoursStored.
func serverlessRedis(pl priceList, u usage, n, hoursStored float64) float64 {
	ecpu := math.Max(u.RedisCmds, u.RedisBytes/1024)
	return n * (ecpu*pl.unit("elasticache_serverless_ecpu") +
		u.StoredBytes/(1<<30)*hoursStored*pl.unit("elasticache_serverless_gb_hour"))
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

// The serverless profiles' goals (SPEC.md, issue 24), and how long an item
// holds its data in Redis (the default 30 min delay; a purchase's order
// its payment window, which is shorter by default).
const (
	serverlessFixedGoal     = 60.0 // USD a month at no load
	serverlessBreakEvenGoal = 10.0 // million withdrawals a month against EventBridge Scheduler
	storedHours             = 0.5
)

// profileCost is one profile's line of the cost table.
type profileCost struct {
	p     costProfile
	fixed breakdown
	// Per million items, the per-item services only.
	withdrawals, withdrawalsDynamo, purchases float64
	// Break-even against EventBridge Scheduler, in millions of withdrawals
	// a month (0: never).
	breakEven, breakEvenDynamo float64
}

// costOf prices profile p from the measured paths (ms, keyed
// "withdrawal/redis", ...) against EventBridge Scheduler's cost of one
// withdrawal.
func costOf(pl priceList, p costProfile, ms map[string]*measurement, schedPerItem, idleCmdsPerSecond float64) profileCost {
	per := func(key string) float64 { return variable(pl, p, ms[key].u, 1e6, storedHours).total() }
	pc := profileCost{p: p, fixed: fixedMonthly(pl, p, idleCmdsPerSecond),
		withdrawals: per("withdrawal/redis"), withdrawalsDynamo: per("withdrawal/dynamodb"), purchases: per("purchase/redis")}
	pc.breakEven = breakEven(pc.withdrawals/1e6, pc.fixed.total(), schedPerItem) / 1e6
	pc.breakEvenDynamo = breakEven(pc.withdrawalsDynamo/1e6, pc.fixed.total(), schedPerItem) / 1e6
	return pc
}

// breakEvenLimit says what keeps a profile's break-even above the goal:
// the largest fixed item, and the fixed cost the goal would allow.
func breakEvenLimit(pc profileCost, schedPerItem float64) string {
	allowed := serverlessBreakEvenGoal * 1e6 * (schedPerItem - pc.withdrawals/1e6)
	top, topUSD := "", 0.0
	for k, v := range pc.fixed {
		if v > topUSD {
			top, topUSD = k, v
		}
	}
	return fmt.Sprintf("the goal allows $%.2f a month fixed at a saving of $%.2f a million; the largest fixed item is %s at $%.2f",
		allowed, schedPerItem*1e6-pc.withdrawals, top, topUSD)
}

// fixedNote lists a profile's fixed items with their cost.
func fixedNote(pl priceList, p costProfile, f breakdown) string {
	// The node type: its price's unit up to " node-hour".
	node, _, _ := strings.Cut(pl.Prices[p.CacheNodePrice].Unit, " node-hour")
	cache := fmt.Sprintf("%d x %s", p.CacheNodes, node)
	if p.Serverless {
		cache = fmt.Sprintf("ElastiCache Serverless: %.0f MB billed at the least and the idle poller's ECPUs", serverlessMinGB*1000)
	}
	return fmt.Sprintf("cache $%.2f (%s); poller $%.2f (%.0f MB, a 70 s run a minute); network $%.2f (%d NAT gateways, "+
		"%d interface endpoints x %d AZs); keys, secrets, alarms $%.2f (%d KMS keys, %d secrets, %d dashboards, %d alarm metrics, "+
		"%d WAF web ACLs with %d rules); empty SQS polls $%.2f",
		f["elasticache"], cache, f["poller"], p.PollerMemoryMB, f["network"], p.NatGateways, p.InterfaceEndpoints, p.EndpointAZs,
		f["keys_secrets_alarms"], p.KMSKeys, p.Secrets+p.OperatorSecrets, p.Dashboards, p.Alarms, p.WAFWebACLs, p.WAFRules, f["sqs_empty_polls"])
}

// profileTable is the cost table per profile, in markdown.
func profileTable(pl priceList, rows []profileCost, sched float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## What each profile costs (us-east-1, list prices of %s)\n\n", pl.Date)
	b.WriteString("USD. Fixed: a month at no load, everything the stack holds (bench/profiles.json, which the infra tests " +
		"check against each profile's synthesized template). Per million: the per-item services alone, from the counts measured " +
		"above. Break-even: the withdrawals a month from which the profile, all in, costs less than EventBridge Scheduler " +
		fmt.Sprintf("one-time schedules ($%.2f a million, all in; 0: never).\n\n", sched))
	b.WriteString("| profile | fixed a month | per million withdrawals, Redis ledger | per million withdrawals, DynamoDB ledger " +
		"| per million purchases | 1M withdrawals a month, all in | break-even vs Scheduler, Redis / DynamoDB ledger (millions a month) " +
		"| what it gives up |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rows {
		even := func(v float64) string {
			if v == 0 {
				return "never"
			}
			return fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s / %s | %s |\n", r.p.Name, usd(r.fixed.total()), usd(r.withdrawals),
			usd(r.withdrawalsDynamo), usd(r.purchases), usd(r.fixed.total()+r.withdrawals), even(r.breakEven), even(r.breakEvenDynamo),
			r.p.GivesUp)
	}
	return b.String()
}

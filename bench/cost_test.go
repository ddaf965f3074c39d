package main

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// testPrices are round prices, so that every total below can be worked out
// by hand.
func testPrices() priceList {
	p := func(usd, per float64) price { return price{USD: usd, Per: per, Source: "test"} }
	return priceList{Prices: map[string]price{
		"lambda_arm64_gb_second": p(0.00001, 1), "lambda_request": p(0.20, 1e6), "http_api_request": p(1, 1e6),
		"sqs_request": p(0.40, 1e6), "dynamodb_wru": p(0.625, 1e6), "dynamodb_rru": p(0.125, 1e6),
		"sns_publish": p(0.50, 1e6), "scheduler_invocation": p(1, 1e6), "stepfunctions_transition": p(0.025, 1000),
		"elasticache_node_hour": p(0.2, 1), "elasticache_node_hour_t4g_small": p(0.02, 1), "elasticache_serverless_gb_hour": p(0.1, 1),
		"elasticache_serverless_ecpu": p(0.002, 1e6), "nat_gateway_hour": p(0.05, 1), "public_ipv4_hour": p(0.005, 1),
		"interface_endpoint_az_hour": p(0.01, 1), "nat_gateway_gb": p(0.05, 1), "endpoint_gb": p(0.01, 1),
		"kms_key_month": p(1, 1), "secret_month": p(0.5, 1), "cloudwatch_dashboard_month": p(3, 1),
		"cloudwatch_alarm_month": p(0.1, 1), "waf_web_acl_month": p(5, 1), "waf_rule_month": p(1, 1),
	}}
}

// testProd is prod as it was before profiles had their own poller memory.
var testProd = costProfile{Name: "prod", CacheNodes: 4, CacheNodePrice: "elasticache_node_hour", NatGateways: 2,
	InterfaceEndpoints: 3, EndpointAZs: 2, PollerMemoryMB: 1024, GivesUp: "nothing"}

// testServerless has round counts: 1 NAT gateway, no endpoints, 128 MB,
// 2 keys, 10 secrets, 1 dashboard, 20 alarms, no WAF.
var testServerless = costProfile{Name: "serverless", Serverless: true, NatGateways: 1, PollerMemoryMB: 128,
	KMSKeys: 2, Secrets: 10, Dashboards: 1, Alarms: 20, GivesUp: "things"}

// testUsage is a withdrawal: one API call of 2 ms at 512 MB, a tenth of a
// consumer batch (1 ms of it), 0.3 SQS requests, 6 WRU, 1 RRU, 1 publish.
var testUsage = usage{
	APIRequests: 1,
	Invocations: map[string]float64{"enqueue": 1, "consumer": 0.1},
	BilledMS:    map[string]float64{"enqueue": 2, "consumer": 1},
	SQSRequests: 0.3, WRU: 6, RRU: 1, SNS: 1, RedisCmds: 40, RedisBytes: 4096,
	AWSBytes: 1 << 20 / 1e3, OutBytes: 1 << 20 / 1e3, StoredBytes: float64(1<<30) / 1e6,
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.9f, want %.9f", what, got, want)
	}
}

func TestCostArithmetic(t *testing.T) {
	pl := testPrices()

	v := variable(pl, testProd, testUsage, 1e6, 0.5)
	near(t, "api_gateway", v["api_gateway"], 1)
	// A million items of 1 MiB / 1,000 each is 1000/1024 GB: to the
	// provider through NAT at $0.05, as much to SQS and SNS through the
	// endpoints at $0.01.
	near(t, "network_data", v["network_data"], 1000.0/1024*0.05+1000.0/1024*0.01)
	delete(v, "network_data")
	// enqueue: 1M requests $0.20 + 2,000 s x 0.5 GB x $0.00001 = $0.21;
	// consumer: 0.1M requests $0.02 + 1,000 s x 0.5 GB = $0.005.
	near(t, "lambda", v["lambda"], 0.235)
	near(t, "sqs", v["sqs"], 0.12)
	near(t, "dynamodb", v["dynamodb"], 6*0.625+0.125)
	near(t, "sns", v["sns"], 0.5)
	near(t, "variable total", v.total(), 5.73)

	f := fixedMonthly(pl, testProd, 10)
	near(t, "elasticache", f["elasticache"], 4*720*0.2)
	// 43,200 runs: $0.00864 in requests, 43,200 x 70 s x 1 GB x $0.00001.
	near(t, "poller", f["poller"], 0.00864+30.24)
	near(t, "sqs_empty_polls", f["sqs_empty_polls"], 900*720*0.4/1e6)
	near(t, "network", f["network"], 2*720*0.055+6*720*0.01)
	fixed := 576 + 30.24864 + 0.2592 + 122.4
	near(t, "fixed total", f.total(), fixed)
	near(t, "keys_secrets_alarms", f["keys_secrets_alarms"], 0)
	near(t, "ours", ours(pl, testProd, testUsage, 0.5, 10).total(), 5.73+1000.0/1024*0.06+fixed)

	// The alternatives: API, enqueue, DynamoDB, SNS as ours; one consumer
	// invocation of 1 ms per withdrawal ($0.20 + $0.005); no SQS, no fixed.
	sched := alternative(pl, testUsage, false)
	near(t, "scheduler's scheduler", sched["scheduler"], 1)
	near(t, "scheduler's lambda", sched["lambda"], 0.21+0.205)
	near(t, "scheduler total", sched.total(), 1+0.415+3.875+0.5+1)
	if sched["sqs"] != 0 || sched.only(fixedServices).total() != 0 {
		t.Errorf("scheduler alternative has SQS or fixed costs: %v", sched)
	}
	sfn := alternative(pl, testUsage, true)
	near(t, "step functions' transitions", sfn["step_functions"], 3e6*0.025/1000)
	near(t, "step functions total", sfn.total(), 1+0.415+3.875+0.5+75)

	near(t, "break-even", breakEven(5.73e-6, fixed, 6.79e-6), fixed/1.06e-6)
	near(t, "no break-even", breakEven(7e-6, fixed, 6.79e-6), 0)

	// 40 ECPUs (more than 4 KB moved) and 1 GiB / 1M stored for 0.5 h.
	near(t, "serverless", serverlessRedis(pl, testUsage, 1e6, 0.5), 40*0.002+0.5*0.1)

	table := costTable([]string{"ours", "scheduler"}, []breakdown{ours(pl, testProd, testUsage, 0.5, 10), sched})
	for _, want := range []string{"| **per item** | **5.79** | **6.79** |", "| elasticache (fixed, a month) | 576 | - |",
		"| **total** | **735** | **6.79** |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestPricesFile(t *testing.T) {
	pl, err := readPrices("prices.json")
	if err != nil {
		t.Fatal(err)
	}
	if pl.Date != "2026-12-01" || pl.Region != "us-east-1" {
		t.Errorf("prices.json: date %q, region %q", pl.Date, pl.Region)
	}
	for k, p := range pl.Prices {
		switch p.Obtained {
		case "verified", "third-party", "unverified":
		default:
			t.Errorf("price %s: obtained %q, want verified, third-party or unverified", k, p.Obtained)
		}
	}
}

// TestInfraSettings keeps the model's copy of infra's settings true: the
// functions' memory, the poller's run, the consumer's batch. What each
// profile runs is bench/profiles.json, which the infra tests check against
// the synthesized templates.
func TestInfraSettings(t *testing.T) {
	read := func(file string) string {
		b, err := os.ReadFile("../infra/" + file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	functions := read("functions.go")
	for fn, mb := range functionMemoryMB {
		name := "fn" + strings.ToUpper(fn[:1]) + fn[1:]
		re := regexp.MustCompile(`name: ` + name + `, memoryMB: (\d+)`)
		if m := re.FindStringSubmatch(functions); m == nil || m[1] != strconv.FormatFloat(mb, 'f', -1, 64) {
			t.Errorf("infra/functions.go: %s's memory is not %v MB (%v)", fn, mb, m)
		}
	}
	for _, want := range []string{"pollerTimeout = 75 * time.Second", "pollerMargin  = 5 * time.Second",
		"consumerBatchSize = 10"} {
		if !strings.Contains(functions, want) {
			t.Errorf("infra/functions.go lacks %q (pollerRunMS, consumerBatch)", want)
		}
	}

}

// TestProfileCosts works the serverless profile's fixed cost and
// break-even out by hand.
func TestProfileCosts(t *testing.T) {
	pl := testPrices()
	f := fixedMonthly(pl, testServerless, 10)
	// 0.1 GB x 720 h x $0.1, and 10 commands a second for 720 h at $0.002
	// a million.
	near(t, "elasticache", f["elasticache"], 0.1*720*0.1+10*720*3600*0.002/1e6)
	// 43,200 runs of 70 s at 0.125 GB.
	near(t, "poller", f["poller"], 43200*0.2/1e6+43200*70*0.125*0.00001)
	near(t, "network", f["network"], 720*0.055)
	near(t, "keys_secrets_alarms", f["keys_secrets_alarms"], 2+10*0.5+3+20*0.1)

	v := variable(pl, testServerless, testUsage, 1e6, 0.5)
	// No endpoints: SQS and SNS through the NAT gateway too.
	near(t, "network_data", v["network_data"], 2*1000.0/1024*0.05)
	near(t, "elasticache_ecpu", v["elasticache_ecpu"], 40*0.002+0.5*0.1)
	if _, ok := variable(pl, testProd, testUsage, 1e6, 0.5)["elasticache_ecpu"]; ok {
		t.Error("a profile on nodes bills ECPUs")
	}

	w := &measurement{u: testUsage}
	ms := map[string]*measurement{"withdrawal/redis": w, "withdrawal/dynamodb": w, "purchase/redis": w}
	sched := 10e-6 // $10 a million
	pc := costOf(pl, testServerless, ms, sched, 10)
	near(t, "per million", pc.withdrawals, v.total())
	near(t, "break-even", pc.breakEven, f.total()/(10-v.total()))
	if pc.breakEven <= 0 {
		t.Fatalf("break-even %v", pc.breakEven)
	}
	limit := breakEvenLimit(pc, sched)
	for _, want := range []string{"largest fixed item is network", fmt.Sprintf("$%.2f a month fixed", 10*(10-v.total()))} {
		if !strings.Contains(limit, want) {
			t.Errorf("breakEvenLimit = %q, lacks %q", limit, want)
		}
	}
	table := profileTable(pl, []profileCost{pc}, 10)
	if !strings.Contains(table, "| serverless | "+usd(f.total())+" | ") || !strings.Contains(table, "| things |") {
		t.Errorf("profile table:\n%s", table)
	}
}

// TestProfilesFile: the four profiles, in order, each whole.
func TestProfilesFile(t *testing.T) {
	ps, err := readProfiles("profiles.json")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "prod,dev,serverless,serverless-ipv6" {
		t.Errorf("profiles %v, want prod, dev, serverless, serverless-ipv6", names)
	}
	if _, err := readProfiles("testdata/no-such-file.json"); err == nil {
		t.Error("a missing profiles file read")
	}
}

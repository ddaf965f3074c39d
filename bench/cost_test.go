package main

import (
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
		"elasticache_node_hour": p(0.2, 1), "elasticache_serverless_gb_hour": p(0.1, 1),
		"elasticache_serverless_ecpu": p(0.002, 1e6), "nat_gateway_hour": p(0.05, 1), "public_ipv4_hour": p(0.005, 1),
		"interface_endpoint_az_hour": p(0.01, 1),
	}}
}

// testUsage is a withdrawal: one API call of 2 ms at 512 MB, a tenth of a
// consumer batch (1 ms of it), 0.3 SQS requests, 6 WRU, 1 RRU, 1 publish.
var testUsage = usage{
	APIRequests: 1,
	Invocations: map[string]float64{"enqueue": 1, "consumer": 0.1},
	BilledMS:    map[string]float64{"enqueue": 2, "consumer": 1},
	SQSRequests: 0.3, WRU: 6, RRU: 1, SNS: 1, RedisCmds: 40, RedisBytes: 4096,
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.9f, want %.9f", what, got, want)
	}
}

func TestCostArithmetic(t *testing.T) {
	pl := testPrices()

	v := variable(pl, testUsage, 1e6)
	near(t, "api_gateway", v["api_gateway"], 1)
	// enqueue: 1M requests $0.20 + 2,000 s x 0.5 GB x $0.00001 = $0.21;
	// consumer: 0.1M requests $0.02 + 1,000 s x 0.5 GB = $0.005.
	near(t, "lambda", v["lambda"], 0.235)
	near(t, "sqs", v["sqs"], 0.12)
	near(t, "dynamodb", v["dynamodb"], 6*0.625+0.125)
	near(t, "sns", v["sns"], 0.5)
	near(t, "variable total", v.total(), 5.73)

	f := fixedMonthly(pl)
	near(t, "elasticache", f["elasticache"], 4*720*0.2)
	// 43,200 runs: $0.00864 in requests, 43,200 x 70 s x 1 GB x $0.00001.
	near(t, "poller", f["poller"], 0.00864+30.24)
	near(t, "sqs_empty_polls", f["sqs_empty_polls"], 900*720*0.4/1e6)
	near(t, "network", f["network"], 2*720*0.055+6*720*0.01)
	fixed := 576 + 30.24864 + 0.2592 + 122.4
	near(t, "fixed total", f.total(), fixed)
	near(t, "ours", ours(pl, testUsage).total(), 5.73+fixed)

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
	near(t, "serverless", serverlessRedis(pl, testUsage, float64(1<<30)/1e6, 0.5), 40*0.002+0.5*0.1)

	table := costTable([]string{"ours", "scheduler"}, []breakdown{ours(pl, testUsage), sched})
	for _, want := range []string{"| **per item** | **5.73** | **6.79** |", "| elasticache (fixed, a month) | 576 | - |",
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
// functions' memory, the poller's run, the consumer's batch, the prod
// profile's cache nodes, NAT gateways and endpoints.
func TestInfraSettings(t *testing.T) {
	read := func(file string) string {
		b, err := os.ReadFile("../infra/" + file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	functions, profile, network := read("functions.go"), read("profile.go"), read("network.go")
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
	prod := profile[strings.Index(profile, "profileProd:"):]
	prod = prod[:strings.Index(prod, "},")]
	for _, want := range []string{"NatGateways:   2", `RedisNodeType: "cache.r7g.large"`, "RedisShards:   2",
		"RedisReplicas: 1", "EndpointAZs:   2"} {
		if !strings.Contains(prod, want) {
			t.Errorf("infra/profile.go's prod profile lacks %q (cacheNodes, natGateways, endpointAZs):\n%s", want, prod)
		}
	}
	if n := strings.Count(network, "awsec2.InterfaceVpcEndpointAwsService_"); n != endpointAZs/2 {
		t.Errorf("infra/network.go has %d interface endpoints, the model %d", n, endpointAZs/2)
	}
}

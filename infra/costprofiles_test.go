package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/costprofile"
)

// cacheNodePrices: the prices.json key of each node type a profile runs.
var cacheNodePrices = map[string]string{
	"cache.r7g.large": "elasticache_node_hour",
	"cache.t4g.small": "elasticache_node_hour_t4g_small",
}

// TestCostProfilesMatchTheStack keeps the cost model honest: what
// bench/profiles.json prices for each profile is what that profile's
// synthesized template holds (cdk.json's settings, -c profile=...).
func TestCostProfilesMatchTheStack(t *testing.T) {
	priced, err := costprofile.Read("../bench/profiles.json")
	if err != nil {
		t.Fatal(err)
	}
	stacks := map[string]aStack{}
	for _, s := range profileStacksByName(t) {
		stacks[s.name] = s
	}
	if len(priced) != len(profiles) {
		t.Errorf("bench/profiles.json prices %d profiles, infra has %d", len(priced), len(profiles))
	}
	for _, want := range priced {
		st, ok := stacks[want.Name]
		if !ok {
			t.Errorf("bench/profiles.json prices profile %q, which infra does not synthesize here", want.Name)
			continue
		}
		got := countCosts(t, st)
		want.GivesUp = ""
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("profile %s: bench/profiles.json (-) differs from the template (+):\n%s", want.Name, d)
		}
	}
}

// countCosts counts in st's template what the cost model prices.
func countCosts(t *testing.T, st aStack) costprofile.Profile {
	t.Helper()
	p := costprofile.Profile{Name: st.name}
	for _, rg := range resources(st.tpl, "AWS::ElastiCache::ReplicationGroup") {
		pr := propsOf(rg)
		p.CacheNodes += int(pr["NumNodeGroups"].(float64)) * (1 + int(pr["ReplicasPerNodeGroup"].(float64)))
		p.CacheNodePrice = cacheNodePrices[pr["CacheNodeType"].(string)]
	}
	p.Serverless = len(resources(st.tpl, "AWS::ElastiCache::ServerlessCache")) > 0
	p.NatGateways = len(resources(st.tpl, "AWS::EC2::NatGateway"))
	for _, ep := range resources(st.tpl, "AWS::EC2::VPCEndpoint") {
		pr := propsOf(ep)
		if pr["VpcEndpointType"] != "Interface" {
			continue
		}
		p.InterfaceEndpoints++
		p.EndpointAZs = len(pr["SubnetIds"].([]any))
	}
	poller := logicalID(st.stack, st.stack.Functions[fnPoller])
	p.PollerMemoryMB = propsOf(resources(st.tpl, "AWS::Lambda::Function")[poller])["MemorySize"].(float64)
	p.KMSKeys = len(resources(st.tpl, "AWS::KMS::Key"))
	p.Secrets = len(resources(st.tpl, "AWS::SecretsManager::Secret"))
	p.OperatorSecrets = len(operatorSecrets(st.stack.settings))
	p.Dashboards = len(resources(st.tpl, "AWS::CloudWatch::Dashboard"))
	// CloudWatch bills an alarm by the metrics it reads: one, or each
	// metric (not expression) of a metric math alarm.
	for _, a := range resources(st.tpl, "AWS::CloudWatch::Alarm") {
		metrics, ok := propsOf(a)["Metrics"].([]any)
		if !ok {
			p.Alarms++
			continue
		}
		for _, m := range metrics {
			if _, ok := m.(map[string]any)["MetricStat"]; ok {
				p.Alarms++
			}
		}
	}
	for _, acl := range resources(st.tpl, "AWS::WAFv2::WebACL") {
		p.WAFWebACLs++
		rules, _ := propsOf(acl)["Rules"].([]any)
		p.WAFRules += len(rules)
	}
	return p
}

// operatorSecrets are the existing secrets the stack's functions read: a
// channel's, where the settings use that channel.
func operatorSecrets(s Settings) map[string]bool {
	used := map[string]bool{s.PayoutSecretName: true, s.PayoutWebhookSecretName: true, s.PaymentsSecretName: true}
	if s.FinanceWebhookURL != "" {
		used[s.FinanceSecretName] = true
	}
	if s.OrdersWebhookURL != "" {
		used[s.OrdersSecretName] = true
	}
	return used
}

// profileStacksByName is each profile's stack with cdk.json's settings.
func profileStacksByName(t *testing.T) []aStack {
	t.Helper()
	f, p := stacks(t), profileStacks(t)
	return []aStack{{profileProd, f.def, f.defMap}, {profileDev, p.dev, p.devMap},
		{profileServerless, p.sls, p.slsMap}, {profileServerless6, p.sls6, p.sls6Map}}
}

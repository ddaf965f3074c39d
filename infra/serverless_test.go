package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestServerlessProfileTemplate: -c profile=serverless runs ElastiCache
// Serverless (Valkey) and no node, one NAT gateway, no interface endpoint
// (DynamoDB keeps its gateway endpoint), a 128 MB poller, on-demand
// tables, no WAF; and cdk-nag is as quiet as on prod.
func TestServerlessProfileTemplate(t *testing.T) {
	pf := profileStacks(t)
	st, tpl, m := pf.sls, pf.slsTpl, pf.slsMap

	count(t, tpl, "AWS::ElastiCache::ServerlessCache", 1)
	count(t, tpl, "AWS::ElastiCache::ReplicationGroup", 0)
	count(t, tpl, "AWS::ElastiCache::SubnetGroup", 0)
	count(t, tpl, "AWS::ElastiCache::ParameterGroup", 0)
	count(t, tpl, "AWS::EC2::NatGateway", 1)

	// Both app subnets route out through the one NAT gateway.
	routes := map[string]int{}
	for _, r := range resources(m, "AWS::EC2::Route") {
		if nat, ok := propsOf(r)["NatGatewayId"]; ok {
			routes[mustJSON(nat)]++
		}
	}
	if len(routes) != 1 || sum(routes) != 2 {
		t.Errorf("app subnet routes by NAT gateway %v; want 2 routes over 1 gateway", routes)
	}

	// EndpointAZs 0: no interface endpoint and no security group for one;
	// the DynamoDB gateway endpoint stays.
	kinds := map[string]int{}
	for id, r := range resources(m, "AWS::EC2::VPCEndpoint") {
		p := propsOf(r)
		kinds[fmt.Sprint(p["VpcEndpointType"])]++
		if p["VpcEndpointType"] == "Gateway" && !strings.Contains(mustJSON(p["ServiceName"]), "dynamodb") {
			t.Errorf("%s: a gateway endpoint of %s", id, mustJSON(p["ServiceName"]))
		}
	}
	if kinds["Interface"] != 0 || kinds["Gateway"] != 1 {
		t.Errorf("VPC endpoints by type %v; want no Interface and the one (DynamoDB) Gateway", kinds)
	}
	if len(st.EndpointSGs) != 0 {
		t.Errorf("endpoint security groups %v, with no endpoint", st.EndpointSGs)
	}

	// The cache: Valkey 8 in the data subnets, the Redis security group,
	// the data key, the RBAC user group, snapshots, usage limits.
	cacheID, cache := only(t, m, "AWS::ElastiCache::ServerlessCache")
	if cacheID != logicalID(st, st.RedisServerless) {
		t.Errorf("the cache is %s, not the stack's RedisServerless", cacheID)
	}
	var dataSubnets []any
	for _, sn := range *st.Vpc.IsolatedSubnets() {
		dataSubnets = append(dataSubnets, ref(logicalID(st, sn.Node().DefaultChild())))
	}
	want := props{
		"ServerlessCacheName":    st.redisGroupID(),
		"Engine":                 "valkey",
		"MajorEngineVersion":     "8",
		"SubnetIds":              dataSubnets,
		"SecurityGroupIds":       []any{getAtt(logicalID(st, st.RedisSG), "GroupId")},
		"KmsKeyId":               getAtt(logicalID(st, st.DataKey), "Arn"),
		"UserGroupId":            ref(logicalID(st, st.RedisUserGroup)),
		"SnapshotRetentionLimit": 7,
		"DailySnapshotTime":      "02:00",
		"FinalSnapshotName":      st.redisGroupID() + "-final",
		"CacheUsageLimits": props{
			"DataStorage":   props{"Maximum": 5, "Unit": "GB"},
			"ECPUPerSecond": props{"Maximum": 50_000},
		},
	}
	for k, v := range want {
		if got, w := mustJSON(cache[k]), mustJSON(v); got != w {
			t.Errorf("cache %s = %s, want %s", k, got, w)
		}
	}
	if len(dataSubnets) != 2 {
		t.Errorf("%d data subnets, want one per AZ (2)", len(dataSubnets))
	}

	// Every function: its own user on the serverless endpoint, cluster
	// mode; the command guard's variable; the poller at 128 MB, the rest
	// as in prod.
	f := stacks(t)
	fns, defFns := resources(m, "AWS::Lambda::Function"), resources(f.defMap, "AWS::Lambda::Function")
	urlRe := regexp.MustCompile(`^rediss://hourglass-([a-z]+)@<\{"Fn::GetAtt":\["` + cacheID + `","Endpoint.Address"\]\}>:<\{"Fn::GetAtt":\["` +
		cacheID + `","Endpoint.Port"\]\}>\?cluster=true$`)
	for _, fn := range functionNames {
		p := propsOf(fns[logicalID(st, st.Functions[fn])])
		vars := p["Environment"].(map[string]any)["Variables"].(map[string]any)
		url := render(m, vars["REDIS_URL"])
		if sm := urlRe.FindStringSubmatch(url); sm == nil || sm[1] != fn {
			t.Errorf("%s: REDIS_URL %s, want rediss://hourglass-%s@<endpoint address>:<endpoint port>?cluster=true", fn, url, fn)
		}
		if got := vars["HOURGLASS_REDIS_COMMANDS"]; got != "elasticache-serverless" {
			t.Errorf("%s: HOURGLASS_REDIS_COMMANDS %v, want elasticache-serverless", fn, got)
		}
		wantMB := propsOf(defFns[logicalID(f.def, f.def.Functions[fn])])["MemorySize"]
		if fn == fnPoller {
			wantMB = float64(pollerServerlessMB)
		}
		if p["MemorySize"] != wantMB {
			t.Errorf("%s: MemorySize %v, want %v", fn, p["MemorySize"], wantMB)
		}
	}

	// DynamoDB on demand, as in every profile.
	for id, r := range resources(m, "AWS::DynamoDB::Table") {
		if mode := propsOf(r)["BillingMode"]; mode != "PAY_PER_REQUEST" {
			t.Errorf("table %s: BillingMode %v, want PAY_PER_REQUEST", id, mode)
		}
	}

	// No WAF: no web ACL, rule set or association; the finding that
	// follows is suppressed on the stage with the profile's name.
	for _, typ := range []string{"AWS::WAFv2::WebACL", "AWS::WAFv2::WebACLAssociation", "AWS::WAFv2::IPSet"} {
		count(t, tpl, typ, 0)
	}
	if st.WebhooksFirewall != nil {
		t.Error("the stack holds a web ACL")
	}
	stage := resources(m, "AWS::ApiGateway::Stage")[logicalID(st, st.Webhooks.DeploymentStage())]
	if md := mustJSON(stage["Metadata"]); !strings.Contains(md, "AwsSolutions-APIG3") || !strings.Contains(md, "serverless profile") {
		t.Errorf("the webhooks' stage has no APIG3 suppression naming the profile: %s", md)
	}
	if all := mustJSON(m["Resources"]); strings.Contains(all, "AWS/WAFV2") || strings.Contains(all, "CacheClusterId") {
		t.Error("the dashboard or an alarm reads WAF or node metrics, which this profile does not have")
	}

	for _, e := range pf.nagErrors {
		if strings.HasPrefix(e, *st.Stack.StackName()+" ") {
			t.Errorf("cdk-nag: %s", e)
		}
	}
}

// TestServerlessAlarms: the node profiles' memory alarms have serverless
// counterparts on the cache's own metrics (dimension clusterId): commands
// throttled, and data and ECPUs near their usage limits.
func TestServerlessAlarms(t *testing.T) {
	pf := profileStacks(t)
	st, m := pf.sls, pf.slsMap
	for id := range alarmsByID(m) {
		if strings.HasPrefix(id, "RedisMemoryShard") {
			t.Errorf("alarm %s on nodes the serverless profile does not have", id)
		}
	}
	dims := []any{props{"Name": "clusterId", "Value": st.redisGroupID()}}
	for _, tt := range []struct {
		id, metric, stat string
		threshold        float64
		period           float64
		periods, dp      float64
	}{
		{"RedisThrottledCommandsAlarm", "ThrottledCmds", "Sum", 0, 60, 3, 2},
		{"RedisStorageAlarm", "BytesUsedForCache", "Maximum", 0.8 * 5 * 1e9, 60, 1, 0},
		{"RedisEcpuAlarm", "ElastiCacheProcessingUnits", "Sum", 0.8 * 50_000 * 300, 300, 1, 0},
	} {
		t.Run(tt.id, func(t *testing.T) {
			p := alarmProps(t, m, tt.id)
			got := mustJSON([]any{p["Namespace"], p["MetricName"], p["Statistic"], p["Dimensions"], p["Period"]})
			if p["MetricName"] == nil && len(asList(p["Metrics"])) == 1 { // a labelled metric is a query
				q := asList(p["Metrics"])[0].(map[string]any)["MetricStat"].(map[string]any)
				mm := q["Metric"].(map[string]any)
				got = mustJSON([]any{mm["Namespace"], mm["MetricName"], q["Stat"], mm["Dimensions"], q["Period"]})
			}
			if want := mustJSON([]any{"AWS/ElastiCache", tt.metric, tt.stat, dims, tt.period}); got != want {
				t.Errorf("metric %s, want %s", got, want)
			}
			dp, _ := p["DatapointsToAlarm"].(float64)
			if p["Threshold"] != tt.threshold || p["EvaluationPeriods"] != tt.periods || dp != tt.dp ||
				p["ComparisonOperator"] != "GreaterThanThreshold" {
				t.Errorf("alarm %v > %v over %v (%v to alarm); want > %v over %v (%v)",
					p["ComparisonOperator"], p["Threshold"], p["EvaluationPeriods"], dp, tt.threshold, tt.periods, tt.dp)
			}
		})
	}
}

// TestRedisCommandsOnlyServerless: HOURGLASS_REDIS_COMMANDS (the command
// guard) is set on no function of the node-based stacks.
func TestRedisCommandsOnlyServerless(t *testing.T) {
	for _, st := range everyStack(t) {
		if st.stack.settings.Profile.RedisServerless {
			continue // TestServerlessProfileTemplate
		}
		for id, r := range resources(st.tpl, "AWS::Lambda::Function") {
			env, _ := propsOf(r)["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			if v, ok := vars["HOURGLASS_REDIS_COMMANDS"]; ok {
				t.Errorf("%s: %s sets HOURGLASS_REDIS_COMMANDS=%v", st.name, id, v)
			}
		}
	}
}

// TestEndpointAZsZero: no interface endpoints means no endpoint, no
// security group for one, and each function that calls SQS, SNS or
// Secrets Manager opens 443 to any IPv4 address with a rule naming them.
func TestEndpointAZsZero(t *testing.T) {
	pf := profileStacks(t)
	st, m := pf.sls, pf.slsMap
	if st.settings.Profile.EndpointAZs != 0 {
		t.Fatalf("the serverless profile has EndpointAZs %d", st.settings.Profile.EndpointAZs)
	}
	want := map[string]string{
		fnEnqueue:  "Secrets Manager through the NAT gateway (no interface endpoints)",
		fnSeckill:  "Secrets Manager through the NAT gateway (no interface endpoints)",
		fnPoller:   "Secrets Manager and SQS through the NAT gateway (no interface endpoints)",
		fnConsumer: "Payout provider over TLS; Secrets Manager and SNS through the NAT gateway (no interface endpoints)",
		fnOperator: "Secrets Manager through the NAT gateway (no interface endpoints)",
	}
	groups := resources(m, "AWS::EC2::SecurityGroup")
	for _, fn := range functionNames {
		var got []string
		for _, r := range asList(propsOf(groups[logicalID(st, st.SecurityGroups[fn])])["SecurityGroupEgress"]) {
			if p := r.(map[string]any); p["CidrIp"] == "0.0.0.0/0" && p["FromPort"] == float64(443) {
				got = append(got, fmt.Sprint(p["Description"]))
			}
		}
		if len(got) != 1 || got[0] != want[fn] {
			t.Errorf("%s's rules to 0.0.0.0/0:443 %q, want one: %q", fn, got, want[fn])
		}
	}
	for id := range groups {
		if strings.Contains(id, "Endpoint") {
			t.Errorf("security group %s for an endpoint that does not exist", id)
		}
	}
}

// TestServerlessIPv6Template: -c profile=serverless-ipv6 is serverless with
// no NAT gateway: a dual-stack VPC, the app subnets' IPv6 route through an
// egress-only internet gateway, the functions allowed to use it, and their
// outbound rules to the provider's and AWS's ports on IPv6 alone (IPv4
// has no route out).
func TestServerlessIPv6Template(t *testing.T) {
	pf := profileStacks(t)
	st, tpl, m := pf.sls6, pf.sls6Tpl, pf.sls6Map

	count(t, tpl, "AWS::EC2::NatGateway", 0)
	count(t, tpl, "AWS::EC2::EIP", 0)
	count(t, tpl, "AWS::EC2::EgressOnlyInternetGateway", 1)
	count(t, tpl, "AWS::EC2::VPCCidrBlock", 1)
	count(t, tpl, "AWS::ElastiCache::ServerlessCache", 1)

	app := map[string]bool{}
	for _, sn := range *st.Vpc.SelectSubnets(nil).Subnets {
		if strings.Contains(*sn.Node().Path(), "/"+subnetApp) {
			app[*sn.RouteTable().RouteTableId()] = true
		}
	}
	eigw := 0
	for id, r := range resources(m, "AWS::EC2::Route") {
		p := propsOf(r)
		if _, ok := p["NatGatewayId"]; ok {
			t.Errorf("%s: a route through a NAT gateway", id)
		}
		if _, ok := p["EgressOnlyInternetGatewayId"]; ok {
			if p["DestinationIpv6CidrBlock"] != "::/0" {
				t.Errorf("%s: egress-only route to %v, want ::/0", id, p["DestinationIpv6CidrBlock"])
			}
			eigw++
		}
	}
	if eigw != 2 {
		t.Errorf("%d routes through the egress-only gateway, want the 2 app subnets'", eigw)
	}

	for _, name := range functionNames {
		fn := propsOf(resources(m, "AWS::Lambda::Function")[logicalID(st, st.Functions[name])])
		vpc, _ := fn["VpcConfig"].(map[string]any)
		if vpc["Ipv6AllowedForDualStack"] != true {
			t.Errorf("%s: VpcConfig %s, want Ipv6AllowedForDualStack", name, mustJSON(vpc))
		}
	}
	// Outbound beyond the VPC is IPv6 only: the consumer to the payout
	// provider and AWS on 443; no rule to 0.0.0.0/0.
	v6 := map[string]bool{}
	for id, r := range resources(m, "AWS::EC2::SecurityGroupEgress") {
		p := propsOf(r)
		if p["CidrIp"] == "0.0.0.0/0" {
			t.Errorf("%s: an IPv4 rule to anywhere, with no IPv4 route out", id)
		}
	}
	for _, sg := range resources(m, "AWS::EC2::SecurityGroup") {
		for _, e := range anySlice(propsOf(sg)["SecurityGroupEgress"]) {
			rule := e.(map[string]any)
			if rule["CidrIp"] == "0.0.0.0/0" {
				t.Errorf("%v: an IPv4 rule to anywhere, with no IPv4 route out", propsOf(sg)["GroupDescription"])
			}
			if rule["CidrIpv6"] == "::/0" {
				v6[fmt.Sprintf("%v %v", propsOf(sg)["GroupDescription"], rule["FromPort"])] = true
			}
		}
	}
	consumer := "Hourglass " + fnConsumer + " function: Redis and the services it calls only 443"
	if !v6[consumer] {
		t.Errorf("no IPv6 rule for the consumer on 443 (the provider, SNS, Secrets Manager); IPv6 rules: %v", v6)
	}
	if len(pf.nagErrors) > 0 {
		t.Errorf("cdk-nag: %v", pf.nagErrors)
	}
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// sgRules lists what the security group with logical id sg may open
// (egress) or admit (ingress), its inline rules and the rule resources
// naming it alike, each as "<peer> <from>-<to>": a peer is "sg:<logical
// id>", "pl:<logical id of what gives the prefix list>" or a CIDR. CDK's
// placeholder of a group that may open nothing (255.255.255.255/32) is
// left out.
func sgRules(t *testing.T, tpl map[string]any, sg, dir string) []string {
	t.Helper()
	inline, typ := "SecurityGroupEgress", "AWS::EC2::SecurityGroupEgress"
	peerSG := "DestinationSecurityGroupId"
	if dir == "ingress" {
		inline, typ, peerSG = "SecurityGroupIngress", "AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"
	}
	rule := func(p map[string]any) string {
		var peer string
		switch {
		case p[peerSG] != nil:
			ids, _ := named(p[peerSG])
			peer = "sg:" + strings.Join(ids, ",")
		case p["DestinationPrefixListId"] != nil:
			ids, _ := named(p["DestinationPrefixListId"])
			peer = "pl:" + strings.Join(ids, ",")
		case p["CidrIp"] != nil:
			peer = p["CidrIp"].(string)
		case p["CidrIpv6"] != nil:
			peer = p["CidrIpv6"].(string)
		default:
			t.Fatalf("%s: a rule of an unknown peer: %s", sg, mustJSON(p))
		}
		if p["IpProtocol"] != "tcp" {
			return fmt.Sprintf("%s %v", peer, p["IpProtocol"])
		}
		return fmt.Sprintf("%s %v-%v", peer, p["FromPort"], p["ToPort"])
	}
	var out []string
	group, ok := resources(tpl, "AWS::EC2::SecurityGroup")[sg]
	if !ok {
		t.Fatalf("no security group %s", sg)
	}
	for _, r := range asList(propsOf(group)[inline]) {
		if p := r.(map[string]any); p["CidrIp"] != "255.255.255.255/32" {
			out = append(out, rule(p))
		}
	}
	for _, r := range resources(tpl, typ) {
		if ids, _ := named(propsOf(r)["GroupId"]); len(ids) == 1 && ids[0] == sg {
			out = append(out, rule(propsOf(r)))
		}
	}
	slices.Sort(out)
	return out
}

// TestSecurityGroups: on every stack each function has a security group
// of its own that opens exactly what its function calls: Redis; the
// interface endpoints of the AWS services it calls (Secrets Manager for
// all, SQS for the poller, SNS for the consumer); DynamoDB by its prefix
// list, which the stack looks up at deployment; and, for the consumer
// alone, the internet on the payout provider's and the webhooks' ports.
// Redis and each endpoint admit exactly their callers. Without interface
// endpoints (the serverless profile) the functions reach those services on
// 443 through NAT, and ElastiCache Serverless on its ports 6379 and 6380.
func TestSecurityGroups(t *testing.T) {
	// The consumer's internet ports on each stack: the payout provider's,
	// finance's and the order events' webhooks'.
	internet := map[string][]int{
		"default":       {443},
		"options":       {443, 8443},        // pay.example.net:8443, the webhooks on 443
		"complete ARNs": {7443, 8443, 9443}, // orders :7443, payouts :8443, finance :9443
		"dev":           {443},
		"serverless":    {443},
	}
	for _, st := range everyStack(t) {
		t.Run(st.name, func(t *testing.T) {
			sgID := func(fn string) string { return logicalID(st.stack, st.stack.SecurityGroups[fn]) }
			redis := logicalID(st.stack, st.stack.RedisSG)
			ep := func(name string) string {
				if st.stack.EndpointSGs[name] == nil {
					return "<no " + name + " endpoint>" // the serverless profile has none
				}
				return logicalID(st.stack, st.stack.EndpointSGs[name])
			}
			lookups := resources(st.tpl, "Custom::AWS")
			if len(lookups) != 1 {
				t.Fatalf("%d AwsCustomResources, want the one DynamoDB prefix-list lookup", len(lookups))
			}
			var lookup string
			for l, r := range lookups {
				lookup = l
				create := mustJSON(propsOf(r)["Create"])
				for _, want := range []string{"DescribeManagedPrefixLists", "prefix-list-name", "com.amazonaws.", ".dynamodb"} {
					if !strings.Contains(create, want) {
						t.Errorf("the prefix-list lookup %s does not ask %q: %s", l, want, create)
					}
				}
			}
			// Redis on the replication group's port; on ElastiCache
			// Serverless, its primary and reader ports.
			from, to := redisPort, redisPort
			if st.stack.settings.Profile.RedisServerless {
				from, to = serverlessPort, serverlessReaderPort
			}
			redisRule := fmt.Sprintf("sg:%s %d-%d", redis, from, to)
			dynamo := "pl:" + lookup + " 443-443"
			want := map[string][]string{
				fnEnqueue:  {redisRule, "sg:" + ep(endpointSecrets) + " 443-443", dynamo},
				fnSeckill:  {redisRule, "sg:" + ep(endpointSecrets) + " 443-443"},
				fnPoller:   {redisRule, "sg:" + ep(endpointSecrets) + " 443-443", "sg:" + ep(endpointSQS) + " 443-443", dynamo},
				fnConsumer: {redisRule, "sg:" + ep(endpointSecrets) + " 443-443", "sg:" + ep(endpointSNS) + " 443-443", dynamo},
				fnOperator: {redisRule, "sg:" + ep(endpointSecrets) + " 443-443", dynamo},
			}
			endpoints := st.stack.settings.Profile.EndpointAZs > 0
			// Out of the VPC: IPv4 through NAT, or IPv6 alone through the
			// egress-only gateway (serverless-ipv6).
			anywhere := "0.0.0.0/0"
			if st.stack.settings.Profile.IPv6Egress {
				anywhere = "::/0"
			}
			if !endpoints {
				// No interface endpoints: every function calls Secrets
				// Manager (and SQS, SNS) on 443 through NAT, one rule.
				for _, fn := range functionNames {
					w := []string{redisRule, anywhere + " 443-443"}
					if functionReach[fn].dynamodb {
						w = append(w, dynamo)
					}
					want[fn] = w
				}
			}
			for _, port := range internet[st.name] {
				if r := fmt.Sprintf("%s %d-%d", anywhere, port, port); !slices.Contains(want[fnConsumer], r) {
					want[fnConsumer] = append(want[fnConsumer], r)
				}
			}
			fnSGs := map[string]bool{}
			for _, fn := range functionNames {
				fnSGs[sgID(fn)] = true
				if got, w := sgRules(t, st.tpl, sgID(fn), "egress"), sorted(want[fn]); !slices.Equal(got, w) {
					t.Errorf("%s may open\n  %v\nwant exactly\n  %v", fn, got, w)
				}
				if got := sgRules(t, st.tpl, sgID(fn), "ingress"); len(got) > 0 {
					t.Errorf("%s admits %v", fn, got)
				}
				fnRes := resources(st.tpl, "AWS::Lambda::Function")[logicalID(st.stack, st.stack.Functions[fn])]
				vpc, _ := propsOf(fnRes)["VpcConfig"].(map[string]any)
				if ids, _ := named(vpc["SecurityGroupIds"]); !slices.Equal(ids, []string{sgID(fn)}) {
					t.Errorf("%s runs in security groups %v, want its own %s alone", fn, ids, sgID(fn))
				}
			}
			if len(fnSGs) != len(functionNames) {
				t.Errorf("%d security groups for %d functions", len(fnSGs), len(functionNames))
			}
			admits := func(sg string, port int, fns ...string) {
				t.Helper()
				var w []string
				for _, fn := range fns {
					w = append(w, fmt.Sprintf("sg:%s %d-%d", sgID(fn), port, port))
				}
				if got := sgRules(t, st.tpl, sg, "ingress"); !slices.Equal(got, sorted(w)) {
					t.Errorf("%s admits\n  %v\nwant exactly\n  %v", sg, got, sorted(w))
				}
				if got := sgRules(t, st.tpl, sg, "egress"); len(got) > 0 {
					t.Errorf("%s may open %v", sg, got)
				}
			}
			var redisAdmits []string
			for _, fn := range functionNames {
				redisAdmits = append(redisAdmits, fmt.Sprintf("sg:%s %d-%d", sgID(fn), from, to))
			}
			if got := sgRules(t, st.tpl, redis, "ingress"); !slices.Equal(got, sorted(redisAdmits)) {
				t.Errorf("Redis admits\n  %v\nwant exactly\n  %v", got, sorted(redisAdmits))
			}
			if got := sgRules(t, st.tpl, redis, "egress"); len(got) > 0 {
				t.Errorf("Redis may open %v", got)
			}
			if endpoints {
				admits(ep(endpointSecrets), 443, functionNames...)
				admits(ep(endpointSQS), 443, fnPoller)
				admits(ep(endpointSNS), 443, fnConsumer)
			} else if len(st.stack.EndpointSGs) > 0 {
				t.Errorf("no interface endpoints, yet endpoint security groups %v", st.stack.EndpointSGs)
			}
			// Nothing else in the stack opens the internet: the consumer,
			// and without interface endpoints the functions that call AWS.
			for sg := range resources(st.tpl, "AWS::EC2::SecurityGroup") {
				if sg == sgID(fnConsumer) || !endpoints && slices.ContainsFunc(functionNames, func(fn string) bool { return sg == sgID(fn) }) {
					continue
				}
				for _, r := range sgRules(t, st.tpl, sg, "egress") {
					if strings.HasPrefix(r, "0.0.0.0/0") || strings.HasPrefix(r, "::/0") {
						t.Errorf("%s may open %s", sg, r)
					}
				}
			}
		})
	}
}

package main

import (
	"fmt"
	"slices"
	"strings"
)

// Profile is the size of a deployment: how many of the things billed by
// the hour (NAT gateways, cache nodes, endpoint network interfaces) the
// stack runs. `-c profile=prod|dev|serverless` picks one (prod when
// absent); redisNodeType and redisShards, when given, still win over the
// choice of prod and dev. profiles says what each costs and what dev and
// serverless give up.
type Profile struct {
	// Name is what -c profile takes.
	Name string
	// NatGateways: one per AZ in prod, so losing an AZ does not cut the
	// payouts of the other; one in dev and serverless, shared by both AZs.
	// None only with IPv6Egress: the consumer must reach both ElastiCache
	// (inside the VPC only) and the payout provider (outside AWS), and
	// from a private subnet only NAT routes IPv4 there.
	NatGateways int
	// IPv6Egress: a dual-stack VPC whose app subnets route IPv6 out
	// through an egress-only internet gateway (free, and no single AZ to
	// lose), the functions allowed to use it, and no NAT gateway: the
	// payout provider (and finance's and the order events' webhooks, when
	// set) must answer on IPv6, as SQS's, SNS's and Secrets Manager's
	// regional endpoints do. DynamoDB keeps its gateway endpoint.
	IPv6Egress bool
	// RedisNodeType and RedisShards are the defaults of redisNodeType and
	// redisShards; RedisReplicas is the replicas per shard (0 or 1). A
	// serverless profile has none of them.
	RedisNodeType string
	RedisShards   int
	RedisReplicas int
	// EndpointAZs is in how many AZs the interface endpoints (SQS, SNS,
	// Secrets Manager) have a network interface (each is billed by the
	// AZ-hour). 0: no interface endpoints at all; the functions reach
	// those services through the NAT gateway instead (DynamoDB keeps its
	// gateway endpoint, which is free).
	EndpointAZs int
	// RedisServerless: ElastiCache Serverless (Valkey) instead of a
	// replication group of nodes; it is spread over the AZs by itself
	// and scales by itself, up to the usage limits (cacheMaxStorageGb,
	// cacheMaxEcpuPerSecond).
	RedisServerless bool
	// PollerMemoryMB is the poller's memory. It waits on Redis and SQS
	// most of its ~70 s run, so its CPU share matters little.
	PollerMemoryMB int
	// WebhooksFirewall: a WAF web ACL in front of the providers' webhooks
	// (a rate rule per source, the allowlist of webhookSourceCidrs).
	WebhooksFirewall bool
}

// Profile names, as operators type them.
const (
	profileProd        = "prod"
	profileDev         = "dev"
	profileServerless  = "serverless"
	profileServerless6 = "serverless-ipv6"
	ctxProfile         = "profile"
)

// profiles lists what each profile runs; prod is the stack as it was
// before profiles.
//
// Fixed monthly cost, before the first request: us-east-1 on-demand list
// prices as known on 2026-12-01, 730 hours a month. List prices change:
// check https://aws.amazon.com/vpc/pricing/,
// https://aws.amazon.com/elasticache/pricing/ and
// https://aws.amazon.com/privatelink/pricing/ before relying on them.
//
//	item (price)                          prod            dev            serverless
//	NAT gateway ($0.045/h)                2 = $66         1 = $33        1 = $33
//	its public IPv4 address ($0.005/h)    2 = $7          1 = $4         1 = $4
//	Valkey nodes (r7g.large $0.1752/h,    4 x r7g.large   1 x t4g.small  none
//	  t4g.small $0.0256/h; Redis +25%)      = $512          = $19
//	ElastiCache Serverless Valkey         -               -              100 MB minimum
//	  ($0.084/GB-h, 100 MB minimum;                                        = $6.1, ECPU
//	  ECPU $0.0023 per million)                                            under $1 (a)
//	interface endpoint ($0.01/AZ-hour)    3 x 2 AZs = $44 3 x 1 AZ = $22 none
//	poller (a ~70 s run every minute,     1 GB = $41      1 GB = $41     128 MB = $5
//	  arm64 $0.0000133/GB-s)
//	KMS keys ($1/key-month)               2 = $2          2 = $2         2 = $2
//	secrets ($0.40/secret-month: 5 Redis  8 = $3.20       8 = $3.20      8 = $3.20
//	  passwords in the stack, the
//	  operator's payout signing, payout
//	  callback and payments keys; +1
//	  for each webhook set)
//	CloudWatch dashboard ($3), alarms     30 alarms on    29 on 34       31 on 36
//	  ($0.10 per metric alarmed)            37 metrics      = $6.40        = $6.60
//	                                        = $6.70
//	WAF web ACL of the webhooks ($5),     $6-7            $6-7           none
//	  its rules ($1 each: 1, 2 with
//	  webhookSourceCidrs)
//	total                                 ~$690           ~$135          ~$60
//
// serverless-ipv6 is serverless less the NAT gateway and its address:
// ~$23. make bench prices every profile from bench/profiles.json, which
// the infra tests check against these templates (bench/results.md, "What
// each profile costs").
//
// (a) The poller's rounds (one a second at most when idle, a few commands
// each) and its housekeeping every 10 s: about 10 ECPU a second, 26
// million a month, $0.06.
//
// Usage on top of all: NAT data $0.045/GB (the payout calls; in serverless
// also every SQS, SNS and Secrets Manager call), endpoint data $0.01/GB;
// per million: Lambda requests $0.20 (plus GB-seconds), HTTP API $1.00,
// REST API (webhooks) $3.50, WAF $0.60 (not in serverless), SQS $0.40, SNS
// $0.50, DynamoDB on demand $0.625 written and $0.125 read, ElastiCache
// Serverless ECPU $0.0023 and its data $0.084/GB-h; CloudWatch Logs
// $0.50/GB ingested (function logs, VPC flow logs), custom metrics $0.30
// each a month (EMF: the per-item stock metrics grow with the items on
// sale). Free tiers are left out.
//
// What dev gives up: one cache node and no replica, so a node failure or
// replacement loses the queues, the stock counts and the results written
// since the last daily snapshot (the DynamoDB ledger, when used, keeps the
// withdrawals' records for the reconciler); no Multi-AZ, and the automatic
// failover it keeps on has nothing to fail over to; one NAT gateway, so
// losing its AZ stops every payout; endpoint interfaces in one AZ, so
// losing it cuts the functions off SQS, SNS and Secrets Manager; a
// burstable node whose CPU credits run out under sustained load. It is for
// trying the system and for staging, not for real money.
//
// What serverless gives up: the choice of nodes and replicas (ElastiCache
// Serverless keeps its data in several AZs by itself); capacity that
// scales up behind a burst instead of being there before it; commands
// throttled once the cache reaches cacheMaxEcpuPerSecond, and writes
// refused at cacheMaxStorageGb; one NAT gateway, so losing its AZ stops
// every payout, and with no interface endpoints the functions also reach
// SQS, SNS and Secrets Manager through it (billed per GB); no WAF in front
// of the webhooks (their HMAC signatures, the stage's throttling and the
// function's per-source limit remain). ElastiCache Serverless also evicts
// keys with a TTL under memory pressure and refuses some commands: every
// function runs with HOURGLASS_REDIS_COMMANDS=elasticache-serverless.
// serverless-ipv6 is serverless without the NAT gateway (IPv6Egress): for
// a payout provider and webhooks that answer on IPv6. It gives up IPv4
// egress altogether: a provider without an AAAA record is unreachable.
var profiles = map[string]Profile{
	profileProd: {
		Name:             profileProd,
		NatGateways:      2,
		RedisNodeType:    "cache.r7g.large",
		RedisShards:      2,
		RedisReplicas:    1,
		EndpointAZs:      2,
		PollerMemoryMB:   1024,
		WebhooksFirewall: true,
	},
	profileDev: {
		Name:        profileDev,
		NatGateways: 1,
		// The smallest Graviton node with room for queues of a test: 1.37
		// GiB (micro has 0.5).
		RedisNodeType:    "cache.t4g.small",
		RedisShards:      1,
		RedisReplicas:    0,
		EndpointAZs:      1,
		PollerMemoryMB:   1024,
		WebhooksFirewall: true,
	},
	profileServerless: {
		Name:            profileServerless,
		NatGateways:     1,
		EndpointAZs:     0,
		RedisServerless: true,
		PollerMemoryMB:  pollerServerlessMB,
	},
	profileServerless6: {
		Name:            profileServerless6,
		NatGateways:     0,
		IPv6Egress:      true,
		EndpointAZs:     0,
		RedisServerless: true,
		PollerMemoryMB:  pollerServerlessMB,
	},
}

// pollerServerlessMB is the serverless profiles' poller: Lambda's least
// memory. make bench (section cost) measured its bootstrap at 27 MiB
// peak, 3.3 ms CPU a second idle and 36.5 µs per job handed to SQS, so
// 128 MB (0.072 of a vCPU) hands over about 1,900 jobs a second.
const pollerServerlessMB = 128

// profileNamed returns the profile named by the context value v (nil: prod).
func profileNamed(v any) (Profile, error) {
	name := profileProd
	switch v := v.(type) {
	case nil:
	case string:
		name = strings.TrimSpace(v)
	default:
		return profiles[profileProd], fmt.Errorf("context %s: want a string, got %v", ctxProfile, v)
	}
	p, ok := profiles[name]
	if !ok {
		names := make([]string, 0, len(profiles))
		for n := range profiles {
			names = append(names, n)
		}
		slices.Sort(names)
		return profiles[profileProd], fmt.Errorf("context %s: %q is not a profile (%s)", ctxProfile, name, strings.Join(names, ", "))
	}
	return p, nil
}

// applyProfile sets the profile named by the context value v and the
// defaults it gives the settings read after it.
func (s *Settings) applyProfile(v any) error {
	p, err := profileNamed(v)
	s.Profile = p
	s.RedisNodeType = p.RedisNodeType
	s.RedisShards = p.RedisShards
	return err
}

// profileUse says which profiles take the node settings (nodes) or the
// usage limits.
func profileUse(nodes bool) string {
	if nodes {
		return "it sizes the cache nodes of prod and dev; serverless runs none"
	}
	return "it limits ElastiCache Serverless, which only the serverless profile runs"
}

// MultiAZ: a replica in another AZ to fail over to (node-based profiles;
// ElastiCache Serverless spreads itself over the AZs).
func (p Profile) MultiAZ() bool { return p.RedisReplicas > 0 }

// redisCommands is HOURGLASS_REDIS_COMMANDS, the set of commands the
// functions' Redis client may send: "" (any) on nodes;
// "elasticache-serverless" on ElastiCache Serverless, which refuses some.
func (p Profile) redisCommands() string {
	if p.RedisServerless {
		return "elasticache-serverless"
	}
	return ""
}

package main

import (
	"fmt"
	"slices"
	"strings"
)

// Profile is the size of a deployment: how many of the things billed by
// the hour (NAT gateways, cache nodes, endpoint network interfaces) the
// stack runs. `-c profile=prod|dev` picks one (prod when absent);
// redisNodeType and redisShards, when given, still win over its choice.
// profiles says what each costs and what dev gives up.
type Profile struct {
	// Name is what -c profile takes.
	Name string
	// NatGateways: one per AZ in prod, so losing an AZ does not cut the
	// payouts of the other; one in dev, shared by both AZs. None is not an
	// option: the consumer must reach both ElastiCache (inside the VPC only)
	// and the payout provider (outside AWS, IPv4), and from a private
	// subnet only NAT routes to the latter.
	NatGateways int
	// RedisNodeType and RedisShards are the defaults of redisNodeType and
	// redisShards; RedisReplicas is the replicas per shard (0 or 1).
	RedisNodeType string
	RedisShards   int
	RedisReplicas int
	// EndpointAZs is in how many AZs the interface endpoints have a network
	// interface (each is billed by the AZ-hour).
	EndpointAZs int
}

// Profile names, as operators type them.
const (
	profileProd = "prod"
	profileDev  = "dev"
	ctxProfile  = "profile"
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
//	item (price)                                   prod                 dev
//	NAT gateway ($0.045/h)                         2  = $66             1 = $33
//	its public IPv4 address ($0.005/h)             2  = $7              1 = $4
//	Valkey node (r7g.large $0.1752/h,              4 x r7g.large        1 x t4g.small
//	  t4g.small $0.0256/h; Redis OSS +25%)            = $512               = $19
//	interface endpoint ($0.01 per AZ-hour)         3 x 2 AZs = $44      3 x 1 AZ = $22
//	poller (a ~70 s run every minute, 1 GB,        $41                  $41
//	  arm64 $0.0000133/GB-s)
//	KMS keys ($1/key-month), Secrets Manager       $2 + $1.60           $2 + $1.60
//	  ($0.40/secret-month: Redis AUTH, payout,
//	  webhook, finance signing keys)
//	CloudWatch dashboard ($3), alarms ($0.10       ~$5                  ~$5
//	  per metric alarmed; 18 alarms in prod)
//	WAF web ACL of the webhooks ($5), its rules    $6-7                 $6-7
//	  ($1 each: 1, 2 with webhookSourceCidrs)
//	total                                          ~$690                ~$130
//
// Usage on top of both: NAT data $0.045/GB (the payout calls), endpoint data
// $0.01/GB; per million: Lambda requests $0.20 (plus GB-seconds), HTTP API
// $1.00, REST API (webhooks) $3.50, WAF $0.60, SQS $0.40, SNS $0.50, DynamoDB
// on demand $0.625 written and $0.125 read; CloudWatch Logs $0.50/GB ingested
// (function logs, VPC flow logs), custom metrics $0.30 each a month (EMF: the
// per-item stock metrics grow with the items on sale). Free tiers are left
// out.
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
var profiles = map[string]Profile{
	profileProd: {
		Name:          profileProd,
		NatGateways:   2,
		RedisNodeType: "cache.r7g.large",
		RedisShards:   2,
		RedisReplicas: 1,
		EndpointAZs:   2,
	},
	profileDev: {
		Name:        profileDev,
		NatGateways: 1,
		// The smallest Graviton node with room for queues of a test: 1.37
		// GiB (micro has 0.5).
		RedisNodeType: "cache.t4g.small",
		RedisShards:   1,
		RedisReplicas: 0,
		EndpointAZs:   1,
	},
}

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

// MultiAZ: a replica in another AZ to fail over to.
func (p Profile) MultiAZ() bool { return p.RedisReplicas > 0 }

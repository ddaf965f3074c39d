package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/google/go-cmp/cmp"
)

// The dev profile's stacks, synthesized once beside the default fixture:
// dev as cdk.json and -c profile=dev give it, and dev with explicit
// redisNodeType and redisShards.
var (
	pfOnce sync.Once
	pf     profileFixture
)

type profileFixture struct {
	dev, override, sls, sls6             *HourglassStack
	devTpl, overrideTpl, slsTpl, sls6Tpl assertions.Template
	devMap, overrideMap, slsMap, sls6Map map[string]any
	nagErrors                            []string
	err                                  error
}

func profileStacks(t *testing.T) *profileFixture {
	t.Helper()
	stacks(t) // its temporary directory holds the stand-in code
	pfOnce.Do(func() { pf = buildProfileFixture() })
	if pf.err != nil {
		t.Fatal(pf.err)
	}
	return &pf
}

func buildProfileFixture() (f profileFixture) {
	defer func() {
		if r := recover(); r != nil {
			f.err = fmt.Errorf("synthesis: %v", r)
		}
	}()
	settings := func(extra map[string]any) (Settings, error) {
		ctx, err := fileContext("cdk.json")
		if err != nil {
			return Settings{}, err
		}
		for k, v := range extra {
			ctx[k] = v
		}
		return SettingsFrom(func(key string) any { return ctx[key] })
	}
	dev, err := settings(map[string]any{ctxProfile: "dev"})
	if err != nil {
		return profileFixture{err: err}
	}
	override, err := settings(map[string]any{ctxProfile: "dev", ctxRedisNodeType: "cache.m7g.large", ctxRedisShards: "2"})
	if err != nil {
		return profileFixture{err: err}
	}
	sls, err := settings(map[string]any{ctxProfile: "serverless"})
	if err != nil {
		return profileFixture{err: err}
	}
	sls6, err := settings(map[string]any{ctxProfile: profileServerless6})
	if err != nil {
		return profileFixture{err: err}
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(filepath.Join(fxDir, "cdk.out.profiles"))})
	code := filepath.Join(fxDir, "dist")
	if f.dev, err = NewHourglassStack(app, "HourglassDev", &HourglassStackProps{Settings: dev, CodeDir: code}); err != nil {
		return profileFixture{err: err}
	}
	if f.override, err = NewHourglassStack(app, "HourglassDevOverride", &HourglassStackProps{Settings: override, CodeDir: code}); err != nil {
		return profileFixture{err: err}
	}
	if f.sls, err = NewHourglassStack(app, "HourglassServerless", &HourglassStackProps{Settings: sls, CodeDir: code}); err != nil {
		return profileFixture{err: err}
	}
	if f.sls6, err = NewHourglassStack(app, "HourglassServerlessIPv6", &HourglassStackProps{Settings: sls6, CodeDir: code}); err != nil {
		return profileFixture{err: err}
	}
	ApplyNag(app)
	f.slsTpl = assertions.Template_FromStack(f.sls.Stack, nil)
	f.slsMap = *f.slsTpl.ToJSON()
	f.sls6Tpl = assertions.Template_FromStack(f.sls6.Stack, nil)
	f.sls6Map = *f.sls6Tpl.ToJSON()
	f.devTpl = assertions.Template_FromStack(f.dev.Stack, nil)
	f.devMap = *f.devTpl.ToJSON()
	f.overrideTpl = assertions.Template_FromStack(f.override.Stack, nil)
	f.overrideMap = *f.overrideTpl.ToJSON()
	nag := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	for _, st := range []*HourglassStack{f.dev, f.override, f.sls, f.sls6} {
		for _, m := range *assertions.Annotations_FromStack(st.Stack).FindError(jsii.String("*"), nag) {
			f.nagErrors = append(f.nagErrors, fmt.Sprintf("%s %s: %v", *st.Stack.StackName(), *m.Id, m.Entry.Data))
		}
	}
	return f
}

func TestProfileSettings(t *testing.T) {
	prod, dev, sls := profiles[profileProd], profiles[profileDev], profiles[profileServerless]
	tests := []struct {
		name    string
		ctx     map[string]any
		want    func(*Settings)
		wantErr string
	}{
		{name: "prod when absent", ctx: map[string]any{}, want: func(*Settings) {}},
		{name: "prod by name", ctx: map[string]any{"profile": "prod"}, want: func(*Settings) {}},
		{
			name: "dev", ctx: map[string]any{"profile": " dev "},
			want: func(s *Settings) { s.Profile, s.RedisNodeType, s.RedisShards = dev, "cache.t4g.small", 1 },
		},
		{
			name: "explicit values win over dev",
			ctx:  map[string]any{"profile": "dev", "redisNodeType": "cache.m7g.large", "redisShards": 3.0},
			want: func(s *Settings) { s.Profile, s.RedisNodeType, s.RedisShards = dev, "cache.m7g.large", 3 },
		},
		{
			name: "explicit values win over prod",
			ctx:  map[string]any{"redisNodeType": "cache.r7g.xlarge", "redisShards": "4"},
			want: func(s *Settings) { s.Profile, s.RedisNodeType, s.RedisShards = prod, "cache.r7g.xlarge", 4 },
		},
		{
			name: "serverless: no nodes, usage limits at their defaults", ctx: map[string]any{"profile": "serverless"},
			want: func(s *Settings) { s.Profile, s.RedisNodeType, s.RedisShards = sls, "", 0 },
		},
		{
			name: "serverless usage limits",
			ctx:  map[string]any{"profile": "serverless", "cacheMaxStorageGb": "20", "cacheMaxEcpuPerSecond": 200000.0},
			want: func(s *Settings) {
				s.Profile, s.RedisNodeType, s.RedisShards = sls, "", 0
				s.CacheMaxStorageGB, s.CacheMaxECPUPerSecond = 20, 200_000
			},
		},
		{
			name: "serverless has no nodes to size", ctx: map[string]any{"profile": "serverless", "redisNodeType": "cache.r7g.large"},
			wantErr: "context redisNodeType: the serverless profile has no use for it",
		},
		{
			name: "serverless has no shards", ctx: map[string]any{"profile": "serverless", "redisShards": "2"},
			wantErr: "context redisShards: the serverless profile has no use for it",
		},
		{
			name: "usage limits are serverless's", ctx: map[string]any{"profile": "dev", "cacheMaxStorageGb": "5"},
			wantErr: "context cacheMaxStorageGb: the dev profile has no use for it",
		},
		{
			name: "ECPU limit below ElastiCache's", ctx: map[string]any{"profile": "serverless", "cacheMaxEcpuPerSecond": "999"},
			wantErr: "context cacheMaxEcpuPerSecond: 999 is outside 1000..15000000",
		},
		{
			name: "storage limit above ElastiCache's", ctx: map[string]any{"profile": "serverless", "cacheMaxStorageGb": "5001"},
			wantErr: "context cacheMaxStorageGb: 5001 is outside 1..5000",
		},
		{name: "unknown profile", ctx: map[string]any{"profile": "staging"}, wantErr: `context profile: "staging" is not a profile (dev, prod, serverless, serverless-ipv6)`},
		{name: "not a string", ctx: map[string]any{"profile": 1.0}, wantErr: "context profile: want a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SettingsFrom(func(key string) any { return tt.ctx[key] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v; want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultSettings()
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDefaultSettingsAreProd: the defaults are the prod profile's, so the
// stack without -c profile is the stack it was before profiles.
func TestDefaultSettingsAreProd(t *testing.T) {
	d, p := DefaultSettings(), profiles[profileProd]
	want := Profile{Name: "prod", NatGateways: 2, RedisNodeType: "cache.r7g.large", RedisShards: 2, RedisReplicas: 1, EndpointAZs: 2,
		PollerMemoryMB: 1024, WebhooksFirewall: true}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("prod profile (-want +got):\n%s", diff)
	}
	if d.Profile != p || d.RedisNodeType != p.RedisNodeType || d.RedisShards != p.RedisShards {
		t.Errorf("DefaultSettings %+v are not the prod profile %+v", d, p)
	}
}

// sizeWant is what a profile's template must hold.
type sizeWant struct {
	nat, shards, replicas, endpointSubnets int
	nodeType                               string
	multiAZ                                bool
}

func checkSize(t *testing.T, st *HourglassStack, tpl assertions.Template, m map[string]any, w sizeWant) {
	t.Helper()
	count(t, tpl, "AWS::EC2::NatGateway", w.nat)
	// Every app subnet's default route goes through a NAT gateway, each
	// AZ's own when there are two.
	routes := map[string]int{}
	for _, r := range resources(m, "AWS::EC2::Route") {
		if nat, ok := propsOf(r)["NatGatewayId"]; ok {
			routes[mustJSON(nat)]++
		}
	}
	if len(routes) != w.nat || sum(routes) != 2 {
		t.Errorf("app subnet routes by NAT gateway %v; want 2 routes over %d gateways", routes, w.nat)
	}
	hasProps(t, tpl, "AWS::ElastiCache::ReplicationGroup", props{
		"ClusterMode":              "enabled",
		"CacheNodeType":            w.nodeType,
		"NumNodeGroups":            w.shards,
		"ReplicasPerNodeGroup":     w.replicas,
		"MultiAZEnabled":           w.multiAZ,
		"AutomaticFailoverEnabled": true,
	})
	eps := 0
	for id, r := range resources(m, "AWS::EC2::VPCEndpoint") {
		p := propsOf(r)
		if p["VpcEndpointType"] != "Interface" {
			continue
		}
		eps++
		if n := len(asList(p["SubnetIds"])); n != w.endpointSubnets {
			t.Errorf("%s: %d SubnetIds, want %d", id, n, w.endpointSubnets)
		}
	}
	if eps != len(interfaceEndpoints) {
		t.Errorf("%d interface endpoints, want %d", eps, len(interfaceEndpoints))
	}

	// The dashboard and the memory alarms name each node, and only the
	// nodes there are.
	var nodes []string
	for shard := 1; shard <= w.shards; shard++ {
		for node := 1; node <= 1+w.replicas; node++ {
			nodes = append(nodes, fmt.Sprintf("%s-%04d-%03d", st.redisGroupID(), shard, node))
		}
	}
	memAlarms := 0
	for id := range resources(m, "AWS::CloudWatch::Alarm") {
		if strings.HasPrefix(id, "RedisMemoryShard") {
			memAlarms++
		}
	}
	if memAlarms != w.shards {
		t.Errorf("%d Redis memory alarms, want one per shard (%d)", memAlarms, w.shards)
	}
	all := mustJSON(m["Resources"])
	for _, n := range nodes {
		if !strings.Contains(all, n) {
			t.Errorf("node %s is on no alarm or dashboard", n)
		}
	}
	absent := fmt.Sprintf("%s-%04d-%03d", st.redisGroupID(), w.shards, w.replicas+2)
	if strings.Contains(all, absent) {
		t.Errorf("the template names node %s, which does not exist", absent)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestProdProfileTemplate: without a profile, the stack is what it was:
// two NAT gateways, 2 shards of primary and replica with Multi-AZ,
// endpoints in both AZs.
func TestProdProfileTemplate(t *testing.T) {
	f := stacks(t)
	checkSize(t, f.def, f.defTpl, f.defMap, sizeWant{nat: 2, shards: 2, replicas: 1, endpointSubnets: 2, nodeType: "cache.r7g.large", multiAZ: true})
}

// TestDevProfileTemplate: one NAT gateway, one cache node (one shard, no
// replica, no Multi-AZ, automatic failover on as cluster mode requires),
// a small node, endpoints in one AZ; and cdk-nag is as quiet as on prod.
func TestDevProfileTemplate(t *testing.T) {
	f := profileStacks(t)
	checkSize(t, f.dev, f.devTpl, f.devMap, sizeWant{nat: 1, shards: 1, replicas: 0, endpointSubnets: 1, nodeType: "cache.t4g.small"})
	for _, e := range f.nagErrors {
		t.Errorf("cdk-nag: %s", e)
	}
}

// TestProfileOverrideWins: -c redisNodeType and redisShards beat dev's
// choice; the rest of dev stays.
func TestProfileOverrideWins(t *testing.T) {
	f := profileStacks(t)
	checkSize(t, f.override, f.overrideTpl, f.overrideMap, sizeWant{nat: 1, shards: 2, replicas: 0, endpointSubnets: 1, nodeType: "cache.m7g.large"})
}

// TestArgsContext: make synth's SYNTH_ARGS reach the context as -c does
// for the CLI, and anything else is refused.
func TestArgsContext(t *testing.T) {
	ctx := map[string]any{"profile": "prod", "queueShards": 4.0}
	if err := argsContext([]string{"-c", "profile=dev", "--context", "redisNodeType=cache.t4g.micro"}, ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"profile": "dev", "queueShards": 4.0, "redisNodeType": "cache.t4g.micro"}
	if diff := cmp.Diff(want, ctx); diff != "" {
		t.Errorf("context (-want +got):\n%s", diff)
	}
	for _, bad := range [][]string{{"profile=dev"}, {"-c"}, {"-c", "profile"}, {"-c", "=dev"}} {
		if err := argsContext(bad, map[string]any{}); err == nil {
			t.Errorf("argsContext(%q): no error", bad)
		}
	}
}

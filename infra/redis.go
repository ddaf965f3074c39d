package main

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticache"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/jsii-runtime-go"
)

// The engine: Valkey, the Redis OSS fork ElastiCache recommends (same
// protocol and Lua, lower price). Its parameter group family must match.
const (
	redisEngine        = "valkey"
	redisEngineVersion = "8.0"
	redisFamily        = "valkey8"
)

func (s *HourglassStack) createRedis() {
	// AUTH token: 64 letters and digits, inside ElastiCache's rules (16 to
	// 128 printable characters, none of @ " /). The secret string is the
	// token itself, not JSON.
	s.RedisAuth = awssecretsmanager.NewSecret(s.Stack, jsii.String("RedisAuthToken"), &awssecretsmanager.SecretProps{
		Description: jsii.String("Hourglass: AUTH token of the ElastiCache replication group"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(64),
			ExcludePunctuation: jsii.Bool(true),
			IncludeSpace:       jsii.Bool(false),
		},
	})
	suppress(s.RedisAuth, "AwsSolutions-SMG4",
		"The ElastiCache AUTH token has no Secrets Manager rotation Lambda: rotating it is a two-step "+
			"ModifyReplicationGroup (AuthTokenUpdateStrategy ROTATE, then SET) while clients re-read the secret, "+
			"an operator runbook in docs/deploy.md, not an automatic rotation.")

	var dataSubnets []any
	for _, id := range *s.Vpc.SelectSubnets(&awsec2.SubnetSelection{SubnetGroupName: jsii.String(subnetData)}).SubnetIds {
		dataSubnets = append(dataSubnets, id)
	}
	subnets := awselasticache.NewCfnSubnetGroup(s.Stack, jsii.String("RedisSubnets"), &awselasticache.CfnSubnetGroupProps{
		Description: jsii.String("Hourglass ElastiCache: the isolated data subnets"),
		SubnetIds:   &dataSubnets,
	})
	s.RedisParameters = awselasticache.NewCfnParameterGroup(s.Stack, jsii.String("RedisParameters"), &awselasticache.CfnParameterGroupProps{
		CacheParameterGroupFamily: jsii.String(redisFamily),
		Description:               jsii.String("Hourglass: cluster mode, and never evict (queues and stock must not vanish)"),
		Properties: &map[string]*string{
			"cluster-enabled":  jsii.String("yes"),
			"maxmemory-policy": jsii.String("noeviction"),
		},
	})

	logs := func(id string) *string {
		lg := awslogs.NewLogGroup(s.Stack, jsii.String(id), &awslogs.LogGroupProps{
			Retention:     awslogs.RetentionDays_ONE_MONTH,
			RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
		})
		suppressLogGroupGuard(lg, "ElastiCache's slow and engine logs are diagnostics for the on-call: a month covers "+
			"an investigation, and they record no withdrawal or order.")
		return lg.LogGroupName()
	}
	delivery := func(logType, group string) *awselasticache.CfnReplicationGroup_LogDeliveryConfigurationRequestProperty {
		return &awselasticache.CfnReplicationGroup_LogDeliveryConfigurationRequestProperty{
			DestinationType: jsii.String("cloudwatch-logs"),
			LogFormat:       jsii.String("json"),
			LogType:         jsii.String(logType),
			DestinationDetails: &awselasticache.CfnReplicationGroup_DestinationDetailsProperty{
				CloudWatchLogsDetails: &awselasticache.CfnReplicationGroup_CloudWatchLogsDestinationDetailsProperty{
					LogGroup: logs(group),
				},
			},
		}
	}

	// Replicas: prod has one per shard, in another AZ, to fail over to;
	// dev none. ElastiCache requires automatic failover on in cluster mode,
	// with or without replicas; Multi-AZ needs a replica.
	s.Redis = awselasticache.NewCfnReplicationGroup(s.Stack, jsii.String("Redis"), &awselasticache.CfnReplicationGroupProps{
		ReplicationGroupId:          jsii.String(s.redisGroupID()),
		ReplicationGroupDescription: jsii.String("Hourglass delay queues, flash-sale stock and results"),
		Engine:                      jsii.String(redisEngine),
		EngineVersion:               jsii.String(redisEngineVersion),
		CacheNodeType:               jsii.String(s.settings.RedisNodeType),
		ClusterMode:                 jsii.String("enabled"),
		NumNodeGroups:               jsii.Number(float64(s.settings.RedisShards)),
		ReplicasPerNodeGroup:        jsii.Number(float64(s.settings.Profile.RedisReplicas)),
		AutomaticFailoverEnabled:    jsii.Bool(true),
		MultiAzEnabled:              jsii.Bool(s.settings.Profile.MultiAZ()),
		CacheParameterGroupName:     s.RedisParameters.Ref(),
		CacheSubnetGroupName:        subnets.Ref(),
		SecurityGroupIds:            &[]*string{s.RedisSG.SecurityGroupId()},
		Port:                        jsii.Number(redisPort),
		TransitEncryptionEnabled:    jsii.Bool(true),
		TransitEncryptionMode:       jsii.String("required"),
		AtRestEncryptionEnabled:     jsii.Bool(true),
		KmsKeyId:                    s.DataKey.KeyArn(),
		// {{resolve:secretsmanager:...}}: CloudFormation reads the token;
		// it never appears in the template.
		AuthToken:                  s.RedisAuth.SecretValue().UnsafeUnwrap(),
		AutoMinorVersionUpgrade:    jsii.Bool(true),
		SnapshotRetentionLimit:     jsii.Number(7),
		SnapshotWindow:             jsii.String("02:00-03:00"),
		PreferredMaintenanceWindow: jsii.String("sun:03:30-sun:04:30"),
		LogDeliveryConfigurations: &[]any{
			delivery("slow-log", "RedisSlowLogs"),
			delivery("engine-log", "RedisEngineLogs"),
		},
	})
	if !s.settings.Profile.MultiAZ() {
		suppress(s.Redis, "AwsSolutions-AEC4",
			"The "+s.settings.Profile.Name+" profile runs no replica, to cost less: it gives up Multi-AZ and failover "+
				"on purpose, and says so (profile.go, docs/deploy.md); prod runs a replica per shard in another AZ.")
	}
	// Deleting the stack keeps a final snapshot of the queues.
	s.Redis.ApplyRemovalPolicy(awscdk.RemovalPolicy_SNAPSHOT, nil)

	for shard := 1; shard <= s.settings.RedisShards; shard++ {
		var nodes []string
		for node := 1; node <= 1+s.settings.Profile.RedisReplicas; node++ {
			nodes = append(nodes, fmt.Sprintf("%s-%04d-%03d", s.redisGroupID(), shard, node))
		}
		s.redisNodeClusters = append(s.redisNodeClusters, nodes)
	}
}

// redisURL is REDIS_URL: TLS (rediss), the configuration endpoint, cluster
// mode. The AUTH token is not in it: the functions read it from
// REDIS_AUTH_SECRET_ARN.
func (s *HourglassStack) redisURL() *string {
	return jsii.String(fmt.Sprintf("rediss://%s:%s?cluster=true",
		*s.Redis.AttrConfigurationEndPointAddress(), *s.Redis.AttrConfigurationEndPointPort()))
}

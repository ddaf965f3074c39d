package main

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticache"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/jsii-runtime-go"

	"github.com/hourglass/hourglass/shared/redisacl"
)

// The engine: Valkey, the Redis OSS fork ElastiCache recommends (same
// protocol and Lua, lower price). Its parameter group family must match.
const (
	redisEngine        = "valkey"
	redisEngineVersion = "8.0"
	redisFamily        = "valkey8"
	// serverlessMajorVersion: ElastiCache Serverless takes the major
	// version only and applies minor versions itself.
	serverlessMajorVersion = "8"
)

func (s *HourglassStack) createRedis() {
	s.createRedisUsers()

	var dataSubnets []any
	for _, id := range *s.Vpc.SelectSubnets(&awsec2.SubnetSelection{SubnetGroupName: jsii.String(subnetData)}).SubnetIds {
		dataSubnets = append(dataSubnets, id)
	}
	if s.settings.Profile.RedisServerless {
		s.createServerlessCache(dataSubnets)
		return
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
		// RBAC: a user per function (createRedisUsers), no AUTH token
		// (the two exclude each other).
		UserGroupIds:               &[]*string{s.RedisUserGroup.Ref()},
		AutoMinorVersionUpgrade:    jsii.Bool(true),
		SnapshotRetentionLimit:     jsii.Number(7),
		SnapshotWindow:             jsii.String("02:00-03:00"),
		PreferredMaintenanceWindow: jsii.String("sun:03:30-sun:04:30"),
		LogDeliveryConfigurations: &[]any{
			delivery("slow-log", "RedisSlowLogs"),
			delivery("engine-log", "RedisEngineLogs"),
		},
	})
	suppress(s.Redis, "AwsSolutions-AEC6",
		"Clients authenticate, with RBAC rather than an AUTH token: every function has its own ElastiCache user and "+
			"password (UserGroupIds; the default user is off), which the rule, written for AuthToken alone, does not "+
			"see. ElastiCache takes AuthToken or UserGroupIds, not both.")
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

// createServerlessCache makes the serverless profile's cache: ElastiCache
// Serverless (Valkey) in the data subnets, behind the Redis security
// group, encrypted at rest with the data key, TLS always (it has no
// plain-text port), with the functions' RBAC users. A Valkey cache takes a
// user group of engine redis or valkey; the group stays redis, as on
// nodes, so the users are the same in every profile. It is spread over
// the AZs and scales by itself, so there is nothing to size but the usage
// limits, which cap what it bills.
func (s *HourglassStack) createServerlessCache(subnets []any) {
	name := s.redisGroupID()
	s.RedisServerless = awselasticache.NewCfnServerlessCache(s.Stack, jsii.String("RedisServerless"), &awselasticache.CfnServerlessCacheProps{
		ServerlessCacheName: jsii.String(name),
		Description:         jsii.String("Hourglass delay queues, flash-sale stock and results (serverless profile)"),
		Engine:              jsii.String(redisEngine),
		MajorEngineVersion:  jsii.String(serverlessMajorVersion),
		SubnetIds:           &subnets,
		SecurityGroupIds:    &[]any{s.RedisSG.SecurityGroupId()},
		KmsKeyId:            s.DataKey.KeyArn(),
		// RBAC is the only access control ElastiCache Serverless has.
		UserGroupId:            s.RedisUserGroup.Ref(),
		SnapshotRetentionLimit: jsii.Number(7),
		DailySnapshotTime:      jsii.String("02:00"),
		// Deleting the stack (or replacing the cache) keeps a final
		// snapshot of the queues, as the replication group's SNAPSHOT
		// removal policy does; CloudFormation's DeletionPolicy Snapshot
		// does not apply to this resource type.
		FinalSnapshotName: jsii.String(name + "-final"),
		CacheUsageLimits: &awselasticache.CfnServerlessCache_CacheUsageLimitsProperty{
			DataStorage: &awselasticache.CfnServerlessCache_DataStorageProperty{
				Maximum: jsii.Number(float64(s.settings.CacheMaxStorageGB)),
				Unit:    jsii.String("GB"),
			},
			EcpuPerSecond: &awselasticache.CfnServerlessCache_ECPUPerSecondProperty{
				Maximum: jsii.Number(float64(s.settings.CacheMaxECPUPerSecond)),
			},
		},
	})
}

// redisURL is function fn's REDIS_URL: TLS (rediss), its Redis user, the
// configuration endpoint (or ElastiCache Serverless's endpoint, which
// speaks the cluster protocol too), cluster mode. The password is not in
// it: the function reads it from the secret REDIS_AUTH_SECRET_ID names.
func (s *HourglassStack) redisURL(fn string) *string {
	addr, port := s.redisEndpoint()
	return jsii.String(fmt.Sprintf("rediss://%s@%s:%s?cluster=true", redisacl.UserName(fn), *addr, *port))
}

// redisEndpoint is the address and port clients start from.
func (s *HourglassStack) redisEndpoint() (addr, port *string) {
	if s.RedisServerless != nil {
		return s.RedisServerless.AttrEndpointAddress(), s.RedisServerless.AttrEndpointPort()
	}
	return s.Redis.AttrConfigurationEndPointAddress(), s.Redis.AttrConfigurationEndPointPort()
}

// redisPrefix starts every Redis key (HOURGLASS_REDIS_PREFIX): the users'
// key patterns are written for it.
const redisPrefix = "hg:"

// createRedisUsers makes the replication group's RBAC users: one per
// function, its access string from package redisacl (the keys and
// commands that function uses, nothing else), its password a generated
// secret only that function may read; and a user named "default", which
// ElastiCache requires in every group, switched off, so a client that
// names no user gets nowhere.
func (s *HourglassStack) createRedisUsers() {
	group := s.redisGroupID()
	userIDs := []*string{}
	s.RedisSecrets = map[string]awssecretsmanager.Secret{}
	s.RedisUsers = map[string]awselasticache.CfnUser{}
	for _, fn := range redisacl.Functions() {
		// 64 letters and digits: inside ElastiCache's rules for a user's
		// password (16 to 128 printable characters, none of @ " /, no
		// space). The secret string is the password itself, not JSON.
		secret := awssecretsmanager.NewSecret(s.Stack, jsii.String("Redis"+fnID(fn)+"Password"), &awssecretsmanager.SecretProps{
			Description: jsii.String("Hourglass: the " + fn + " function's ElastiCache password (user " + redisacl.UserName(fn) + ")"),
			GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
				PasswordLength:     jsii.Number(64),
				ExcludePunctuation: jsii.Bool(true),
				IncludeSpace:       jsii.Bool(false),
			},
		})
		suppress(secret, "AwsSolutions-SMG4",
			"An ElastiCache user's password has no Secrets Manager rotation Lambda: rotating it is ModifyUser with "+
				"the new password added, then the secret, then ModifyUser without the old one, while the function "+
				"re-reads the secret on WRONGPASS: an operator runbook in docs/operations.md.")
		access, err := redisacl.AccessString(fn, redisPrefix)
		if err != nil {
			panic(err) // redisPrefix and the functions are constants: a test proves them
		}
		user := awselasticache.NewCfnUser(s.Stack, jsii.String("Redis"+fnID(fn)+"User"), &awselasticache.CfnUserProps{
			Engine: jsii.String("redis"),
			// Unique in the account and region, as the group's id is.
			UserId:       jsii.String(redisUserID(group, fn)),
			UserName:     jsii.String(redisacl.UserName(fn)),
			AccessString: jsii.String(access),
			// {{resolve:secretsmanager:...}}: CloudFormation reads the
			// password; it never appears in the template.
			Passwords: &[]*string{secret.SecretValue().UnsafeUnwrap()},
		})
		s.RedisSecrets[fn], s.RedisUsers[fn] = secret, user
		userIDs = append(userIDs, user.Ref())
	}
	s.RedisDefaultUser = awselasticache.NewCfnUser(s.Stack, jsii.String("RedisDefaultUser"), &awselasticache.CfnUserProps{
		Engine:             jsii.String("redis"),
		UserId:             jsii.String(redisUserID(group, "default")),
		UserName:           jsii.String("default"),
		AccessString:       jsii.String(redisacl.DefaultUser),
		NoPasswordRequired: jsii.Bool(true), // off: no password would let anyone in
	})
	userIDs = append(userIDs, s.RedisDefaultUser.Ref())
	s.RedisUserGroup = awselasticache.NewCfnUserGroup(s.Stack, jsii.String("RedisUserGroup"), &awselasticache.CfnUserGroupProps{
		Engine:      jsii.String("redis"),
		UserGroupId: jsii.String(group),
		UserIds:     &userIDs,
	})
}

// redisUserID is a user's id: the group's, then the user's part, within
// ElastiCache's 40 characters (the group id may use them all: then the
// part replaces its end; redisGroupID ends a shortened name in a hash).
func redisUserID(group, part string) string {
	part = "-" + part
	if len(group)+len(part) > redisGroupIDMax {
		group = strings.TrimRight(group[:redisGroupIDMax-len(part)], "-")
	}
	return group + part
}

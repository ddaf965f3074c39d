package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
)

// Subnet tiers: the NAT gateways live in public subnets, the functions in
// app subnets (egress through NAT, for the payout provider), ElastiCache in
// data subnets, which have no route out at all.
const (
	subnetPublic = "public"
	subnetApp    = "app"
	subnetData   = "data"
)

// redisPort is the ElastiCache port. Not Redis's default 6379: scanners try
// that first (cdk-nag AwsSolutions-AEC5).
const redisPort = 6380

// interfaceEndpoints are the AWS services the functions call from the VPC:
// the poller sends to SQS, the consumer publishes to SNS, every function reads
// a secret at cold start. DynamoDB has a gateway endpoint. CloudWatch Logs is
// not called from the VPC: Lambda ships the functions' stdout itself (and the
// metrics are EMF log lines), and SQS, SNS and Secrets Manager call KMS on
// their callers' behalf.
var interfaceEndpoints = []struct {
	id      string
	service func() awsec2.InterfaceVpcEndpointAwsService
}{
	{"SqsEndpoint", awsec2.InterfaceVpcEndpointAwsService_SQS},
	{"SnsEndpoint", awsec2.InterfaceVpcEndpointAwsService_SNS},
	{"SecretsManagerEndpoint", awsec2.InterfaceVpcEndpointAwsService_SECRETS_MANAGER},
}

func (s *HourglassStack) createKeys() {
	s.DataKey = awskms.NewKey(s.Stack, jsii.String("DataKey"), &awskms.KeyProps{
		Description:       jsii.String("Hourglass: work queue, dead-letter queue, finance topic, ElastiCache at rest"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
	})
	denyGrantsButForAWS(s.DataKey)
	s.AlarmKey = awskms.NewKey(s.Stack, jsii.String("AlarmKey"), &awskms.KeyProps{
		Description:       jsii.String("Hourglass: ops alarm topic (CloudWatch alarms publish to it)"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
	})
	denyGrantsButForAWS(s.AlarmKey)
}

// denyGrantsButForAWS lets only AWS services create grants on key
// (ElastiCache does, for the nodes' disks); no principal can hand its
// access on through a grant (cfn-guard CT.KMS.PR.3).
func denyGrantsButForAWS(key awskms.Key) {
	key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("DenyGrantsButForAWSServices"),
		Effect:     awsiam.Effect_DENY,
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings("kms:CreateGrant"),
		Resources:  jsii.Strings("*"),
		Conditions: &map[string]any{"BoolIfExists": map[string]any{
			"kms:GrantIsForAWSResource": "false",
			"aws:PrincipalIsAWSService": "false",
		}},
	}), nil)
}

func (s *HourglassStack) createNetwork() {
	flowLogs := awslogs.NewLogGroup(s.Stack, jsii.String("VpcFlowLogs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	suppressLogGroupGuard(flowLogs, "VPC flow logs of all traffic are large and diagnostic: a month covers "+
		"investigating an incident, and a year would multiply their storage for no record anyone must keep.")
	s.Vpc = awsec2.NewVpc(s.Stack, jsii.String("Vpc"), &awsec2.VpcProps{
		IpAddresses: awsec2.IpAddresses_Cidr(jsii.String("10.40.0.0/16")),
		MaxAzs:      jsii.Number(2),
		// prod: one NAT gateway per AZ, so losing an AZ does not cut the
		// payouts of the other; dev: one, shared (profile.go).
		NatGateways: jsii.Number(float64(s.settings.Profile.NatGateways)),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			// Public subnets hold the NAT gateways (their own Elastic IPs)
			// and nothing else: nothing there gets a public address by
			// default (cfn-guard CT.EC2.PR.11).
			{Name: jsii.String(subnetPublic), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(24), MapPublicIpOnLaunch: jsii.Bool(false)},
			{Name: jsii.String(subnetApp), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS, CidrMask: jsii.Number(22)},
			{Name: jsii.String(subnetData), SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED, CidrMask: jsii.Number(24)},
		},
		// Nothing uses the default security group; strip its rules so nothing can.
		RestrictDefaultSecurityGroup: jsii.Bool(true),
		FlowLogs: &map[string]*awsec2.FlowLogOptions{
			"All": {
				Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(flowLogs, nil),
				TrafficType: awsec2.FlowLogTrafficType_ALL,
			},
		},
		GatewayEndpoints: &map[string]*awsec2.GatewayVpcEndpointOptions{
			"DynamoDbEndpoint": {
				Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB(),
				Subnets: &[]*awsec2.SubnetSelection{{SubnetGroupName: jsii.String(subnetApp)}},
			},
		},
	})

	// RestrictDefaultSecurityGroup is a CDK custom resource: a Lambda
	// function outside the VPC.
	suppressGuardAll(s.Stack.Node().FindChild(jsii.String("Custom::VpcRestrictDefaultSGCustomResourceProvider")),
		"AWS::Lambda::Function", "lambda_inside_vpc_check",
		"The CDK's custom resource that strips the default security group's rules runs at deployment only and calls "+
			"the EC2 API alone; inside the VPC it would need a NAT route or an EC2 endpoint and would serve no request.")

	s.FunctionsSG = awsec2.NewSecurityGroup(s.Stack, jsii.String("FunctionsSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              s.Vpc,
		Description:      jsii.String("Hourglass Lambda functions: Redis, AWS endpoints and the payout provider only"),
		AllowAllOutbound: jsii.Bool(false),
	})
	s.RedisSG = awsec2.NewSecurityGroup(s.Stack, jsii.String("RedisSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              s.Vpc,
		Description:      jsii.String("Hourglass ElastiCache: admits the functions on the Redis port only"),
		AllowAllOutbound: jsii.Bool(false),
	})
	s.EndpointsSG = awsec2.NewSecurityGroup(s.Stack, jsii.String("EndpointsSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              s.Vpc,
		Description:      jsii.String("Hourglass VPC interface endpoints: admit the functions on HTTPS"),
		AllowAllOutbound: jsii.Bool(false),
	})

	redis := awsec2.Port_Tcp(jsii.Number(redisPort))
	https := awsec2.Port_Tcp(jsii.Number(443))
	s.RedisSG.AddIngressRule(s.FunctionsSG, redis, jsii.String("Hourglass functions to Redis"), nil)
	s.FunctionsSG.AddEgressRule(s.RedisSG, redis, jsii.String("Redis"), nil)
	s.EndpointsSG.AddIngressRule(s.FunctionsSG, https, jsii.String("Hourglass functions to AWS APIs"), nil)
	// HTTPS anywhere: the payout provider, which lives outside AWS, and
	// DynamoDB through its gateway endpoint (a prefix list route).
	port, _ := payoutPort(s.settings.PayoutURL) // checked by SettingsFrom
	s.FunctionsSG.AddEgressRule(awsec2.Peer_AnyIpv4(), awsec2.Port_Tcp(jsii.Number(float64(port))),
		jsii.String("Payout provider and DynamoDB over TLS"), nil)
	if port != 443 {
		s.FunctionsSG.AddEgressRule(awsec2.Peer_AnyIpv4(), https, jsii.String("DynamoDB over TLS"), nil)
	}

	// An endpoint's interface in each of the profile's first AZs; the
	// functions in another AZ reach it across zones (private DNS answers
	// with the interfaces there are).
	app := *s.Vpc.SelectSubnets(&awsec2.SubnetSelection{SubnetGroupName: jsii.String(subnetApp)}).Subnets
	endpointSubnets := app[:min(len(app), s.settings.Profile.EndpointAZs)]
	for _, ep := range interfaceEndpoints {
		s.Vpc.AddInterfaceEndpoint(jsii.String(ep.id), &awsec2.InterfaceVpcEndpointOptions{
			Service:           ep.service(),
			Subnets:           &awsec2.SubnetSelection{Subnets: &endpointSubnets},
			PrivateDnsEnabled: jsii.Bool(true),
			SecurityGroups:    &[]awsec2.ISecurityGroup{s.EndpointsSG},
			// Only the functions' security group, not the whole VPC.
			Open: jsii.Bool(false),
		})
	}
}

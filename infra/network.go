package main

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/customresources"
	"github.com/aws/constructs-go/constructs/v10"
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

// redisPort is the replication group's port. Not Redis's default 6379:
// scanners try that first (cdk-nag AwsSolutions-AEC5).
const redisPort = 6380

// ElastiCache Serverless listens on ports it chooses: 6379 for the
// primary endpoint, 6380 for reads from replicas (READONLY), both on the
// one endpoint address its cluster topology names.
const (
	serverlessPort       = 6379
	serverlessReaderPort = 6380
)

// redisPorts are the ports the functions reach Redis on: the replication
// group's one, or both of ElastiCache Serverless's.
func (s *HourglassStack) redisPorts() (from, to int) {
	if s.settings.Profile.RedisServerless {
		return serverlessPort, serverlessReaderPort
	}
	return redisPort, redisPort
}

// AWS services the functions call from the VPC through an interface
// endpoint, by the name functionReach uses. DynamoDB has a gateway
// endpoint. CloudWatch Logs is not called from the VPC: Lambda ships the
// functions' stdout itself (and the metrics are EMF log lines), and SQS,
// SNS and Secrets Manager call KMS on their callers' behalf.
const (
	endpointSQS     = "sqs"
	endpointSNS     = "sns"
	endpointSecrets = "secretsmanager"
)

// interfaceEndpoints are those endpoints, each with a security group of its
// own, so that a function admitted to one reaches no other. A profile
// without them (EndpointAZs 0) reaches the services through NAT.
var interfaceEndpoints = []struct {
	name, id, title string
	service         func() awsec2.InterfaceVpcEndpointAwsService
}{
	{endpointSQS, "SqsEndpoint", "SQS", awsec2.InterfaceVpcEndpointAwsService_SQS},
	{endpointSNS, "SnsEndpoint", "SNS", awsec2.InterfaceVpcEndpointAwsService_SNS},
	{endpointSecrets, "SecretsManagerEndpoint", "Secrets Manager", awsec2.InterfaceVpcEndpointAwsService_SECRETS_MANAGER},
}

// endpointTitle is the service's name for people: "Secrets Manager".
func endpointTitle(name string) string {
	for _, ep := range interfaceEndpoints {
		if ep.name == name {
			return ep.title
		}
	}
	return name
}

// awsOverNAT names the AWS services function name calls through the NAT
// gateway, in functionReach's order, when the profile has no interface
// endpoints: "Secrets Manager and SQS"; "" when it calls them through
// endpoints, or calls none.
func (s *HourglassStack) awsOverNAT(name string) string {
	if s.settings.Profile.EndpointAZs > 0 {
		return ""
	}
	var titles []string
	for _, ep := range functionReach[name].endpoints {
		titles = append(titles, endpointTitle(ep))
	}
	switch len(titles) {
	case 0:
		return ""
	case 1:
		return titles[0]
	}
	return strings.Join(titles[:len(titles)-1], ", ") + " and " + titles[len(titles)-1]
}

// reach is what one function's security group lets it open connections
// to, besides Redis, which every function uses.
type reach struct {
	// endpoints: the interface endpoints of the AWS services it calls.
	endpoints []string
	// dynamodb: the ledger's tables, through the gateway endpoint.
	dynamodb bool
	// internet: the payout provider and finance's and the order events'
	// webhooks, on their ports (allowInternetPorts).
	internet bool
}

// functionReach is each function's reach, read off its code: every
// function reads its secrets from Secrets Manager at cold start (the Redis
// AUTH token, app.OpenSecrets); the poller sends to SQS (dispatch.NewSQS);
// the consumer publishes to SNS (finance.NewSNS, the order events) and is
// the only one that calls out of AWS (payout.New, finance's and the order
// events' webhooks, all through signedpost). The poller's reconciler and
// the operator's `payouts resolve` work on the ledger and Redis alone (an
// operator looks a payout up at the provider by hand, cli payouts), and
// the flash-sale API on Redis alone.
var functionReach = map[string]reach{
	fnEnqueue:  {endpoints: []string{endpointSecrets}, dynamodb: true},
	fnSeckill:  {endpoints: []string{endpointSecrets}},
	fnPoller:   {endpoints: []string{endpointSecrets, endpointSQS}, dynamodb: true},
	fnConsumer: {endpoints: []string{endpointSecrets, endpointSNS}, dynamodb: true, internet: true},
	fnOperator: {endpoints: []string{endpointSecrets}, dynamodb: true},
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
		// payouts of the other; dev and serverless: one, shared (profile.go).
		NatGateways: jsii.Number(float64(s.settings.Profile.NatGateways)),
		// serverless-ipv6: an IPv6 block of Amazon's too, and the app
		// subnets' route out through an egress-only internet gateway.
		IpProtocol: s.ipProtocol(),
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

	s.RedisSG = awsec2.NewSecurityGroup(s.Stack, jsii.String("RedisSecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              s.Vpc,
		Description:      jsii.String("Hourglass ElastiCache: admits the security group of each function on the Redis port only"),
		AllowAllOutbound: jsii.Bool(false),
	})
	// No interface endpoints, no security groups for them.
	if s.settings.Profile.EndpointAZs > 0 {
		for _, ep := range interfaceEndpoints {
			s.EndpointSGs[ep.name] = awsec2.NewSecurityGroup(s.Stack, jsii.String(ep.id+"SecurityGroup"), &awsec2.SecurityGroupProps{
				Vpc:              s.Vpc,
				Description:      jsii.String("Hourglass " + ep.name + " VPC endpoint: admits the functions that call it on HTTPS"),
				AllowAllOutbound: jsii.Bool(false),
			})
		}
	}
	// A security group per function, each opening only what its function
	// calls (functionReach); rules between groups are resources of their
	// own, so the groups can name each other.
	from, to := s.redisPorts()
	redis := awsec2.Port_TcpRange(jsii.Number(float64(from)), jsii.Number(float64(to)))
	if from == to {
		redis = awsec2.Port_Tcp(jsii.Number(float64(from)))
	}
	https := awsec2.Port_Tcp(jsii.Number(443))
	var dynamodb awsec2.IPeer
	for _, name := range functionNames {
		r := functionReach[name]
		sg := awsec2.NewSecurityGroup(s.Stack, jsii.String(fnID(name)+"SecurityGroup"), &awsec2.SecurityGroupProps{
			Vpc:              s.Vpc,
			Description:      jsii.String("Hourglass " + name + " function: Redis and the services it calls only"),
			AllowAllOutbound: jsii.Bool(false),
		})
		s.SecurityGroups[name] = sg
		s.RedisSG.AddIngressRule(sg, redis, jsii.String("Hourglass "+name+" function to Redis"), nil)
		sg.AddEgressRule(s.RedisSG, redis, jsii.String("Redis"), nil)
		for _, ep := range r.endpoints {
			if s.EndpointSGs[ep] == nil {
				continue // through NAT (allowInternetPorts)
			}
			s.EndpointSGs[ep].AddIngressRule(sg, https, jsii.String("Hourglass "+name+" function to "+ep), nil)
			sg.AddEgressRule(s.EndpointSGs[ep], https, jsii.String(ep+" VPC endpoint"), nil)
		}
		if r.dynamodb {
			if dynamodb == nil {
				dynamodb = awsec2.Peer_PrefixList(s.dynamoDBPrefixList())
			}
			sg.AddEgressRule(dynamodb, https, jsii.String("DynamoDB through its gateway endpoint"), nil)
		}
	}
	s.allowInternetPorts()

	// An endpoint's interface in each of the profile's first AZs; the
	// functions in another AZ reach it across zones (private DNS answers
	// with the interfaces there are).
	app := *s.Vpc.SelectSubnets(&awsec2.SubnetSelection{SubnetGroupName: jsii.String(subnetApp)}).Subnets
	endpointSubnets := app[:min(len(app), s.settings.Profile.EndpointAZs)]
	if len(endpointSubnets) == 0 {
		return
	}
	for _, ep := range interfaceEndpoints {
		s.Vpc.AddInterfaceEndpoint(jsii.String(ep.id), &awsec2.InterfaceVpcEndpointOptions{
			Service:           ep.service(),
			Subnets:           &awsec2.SubnetSelection{Subnets: &endpointSubnets},
			PrivateDnsEnabled: jsii.Bool(true),
			SecurityGroups:    &[]awsec2.ISecurityGroup{s.EndpointSGs[ep.name]},
			// Only the security groups of its callers, not the whole VPC.
			Open: jsii.Bool(false),
		})
	}
}

// dynamoDBPrefixList is the id of the region's AWS-managed prefix list of
// DynamoDB (com.amazonaws.<region>.dynamodb): the addresses the gateway
// endpoint routes, so a rule to it opens DynamoDB and nothing else. AWS
// assigns the id per region, and neither the endpoint nor any
// CloudFormation attribute tells it; a context lookup would pin the
// template to one account and region at synthesis. So the stack asks EC2
// at deployment.
func (s *HourglassStack) dynamoDBPrefixList() *string {
	const field = "PrefixLists.0.PrefixListId"
	call := &customresources.AwsSdkCall{
		Service: jsii.String("EC2"),
		Action:  jsii.String("DescribeManagedPrefixLists"),
		Parameters: map[string]any{"Filters": []any{map[string]any{
			"Name":   "prefix-list-name",
			"Values": []any{awscdk.Fn_Join(jsii.String(""), jsii.Strings("com.amazonaws.", *s.Stack.Region(), ".dynamodb"))},
		}}},
		PhysicalResourceId: customresources.PhysicalResourceId_FromResponse(jsii.String(field)),
		OutputPaths:        jsii.Strings(field),
	}
	lookup := customresources.NewAwsCustomResource(s.Stack, jsii.String("DynamoDbPrefixList"), &customresources.AwsCustomResourceProps{
		OnCreate: call,
		OnUpdate: call,
		// EC2's Describe actions take no resource ARN: "*" is all they
		// can be granted on.
		Policy: customresources.AwsCustomResourcePolicy_FromSdkCalls(&customresources.SdkCallsPolicyOptions{
			Resources: customresources.AwsCustomResourcePolicy_ANY_RESOURCE(),
		}),
		InstallLatestAwsSdk: jsii.Bool(false),
	})
	suppress(lookup.Node().FindChild(jsii.String("CustomResourcePolicy")), "AwsSolutions-IAM5",
		"Resource '*' is only on ec2:DescribeManagedPrefixLists, which EC2 does not scope to resources; the "+
			"deployment-time lookup of DynamoDB's prefix list reads nothing else.", "Resource::*")
	// The CDK's one function behind every AwsCustomResource of the stack.
	provider := s.Stack.Node().FindChild(jsii.String(awsCustomResourceProvider))
	suppress(provider.Node().FindChild(jsii.String("ServiceRole")), "AwsSolutions-IAM4",
		"AWSLambdaBasicExecutionRole lets the CDK's deployment-time lookup function write its own logs; it runs "+
			"during deployments only and holds no data.",
		"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole")
	suppressGuard(provider, "lambda_inside_vpc_check",
		"The CDK's function behind the DynamoDB prefix-list lookup runs at deployment only and calls the EC2 API "+
			"alone; inside the VPC it would need a NAT route or an EC2 endpoint and would serve no request.")
	// Its log group, where the CDK makes one (@aws-cdk/aws-lambda:useCdkManagedLogGroup).
	for _, c := range *provider.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		if res, ok := c.(awscdk.CfnResource); ok && *res.CfnResourceType() == "AWS::Logs::LogGroup" {
			suppressGuard(res, guardLogKMS, guardLogKMSReason)
		}
	}
	return lookup.GetResponseField(jsii.String(field))
}

// awsCustomResourceProvider is the construct id the CDK gives the function
// behind AwsCustomResource (a singleton per stack).
const awsCustomResourceProvider = "AWS679f53fac002430cb0da5b7982bd2287"

// allowInternetPorts lets the functions that call out of AWS
// (functionReach) reach the payout provider's port and finance's and the
// order events' webhooks' ports, on any address: the internet, through the
// NAT gateways. HTTPS to AWS takes the endpoints' rules where the profile
// has interface endpoints; without them (EndpointAZs 0) the functions that
// call SQS, SNS or Secrets Manager open 443 to any address too, through
// NAT, and the rule names those services.
func (s *HourglassStack) allowInternetPorts() {
	payout, _ := payoutPort(s.settings.PayoutURL) // checked by SettingsFrom
	ports := []struct {
		port int
		desc string
	}{{payout, "Payout provider over TLS"}}
	for _, w := range []struct{ url, desc string }{
		{s.settings.FinanceWebhookURL, "Finance webhook over TLS"},
		{s.settings.OrdersWebhookURL, "Order events webhook over TLS"},
	} {
		if w.url != "" {
			port, _ := payoutPort(w.url) // checked by SettingsFrom
			ports = append(ports, struct {
				port int
				desc string
			}{port, w.desc})
		}
	}
	for _, name := range functionNames {
		var order []int
		desc := map[int]string{}
		if functionReach[name].internet {
			for _, p := range ports {
				if _, ok := desc[p.port]; !ok {
					order = append(order, p.port)
					desc[p.port] = p.desc
				}
			}
		}
		if aws := s.awsOverNAT(name); aws != "" {
			nat := aws + " through the NAT gateway (no interface endpoints)"
			if s.settings.Profile.IPv6Egress {
				nat = aws + " over IPv6 (no interface endpoints, no NAT gateway)"
			}
			if d, ok := desc[443]; ok {
				desc[443] = d + "; " + nat
			} else {
				order = append(order, 443)
				desc[443] = nat
			}
		}
		anywhere := awsec2.Peer_AnyIpv4()
		if s.settings.Profile.IPv6Egress {
			anywhere = awsec2.Peer_AnyIpv6() // IPv4 has no route out
		}
		for _, port := range order {
			s.SecurityGroups[name].AddEgressRule(anywhere, awsec2.Port_Tcp(jsii.Number(float64(port))),
				jsii.String(desc[port]), nil)
		}
	}
}

// ipProtocol is the VPC's: dual-stack for IPv6Egress, IPv4 only otherwise.
func (s *HourglassStack) ipProtocol() awsec2.IpProtocol {
	if s.settings.Profile.IPv6Egress {
		return awsec2.IpProtocol_DUAL_STACK
	}
	return awsec2.IpProtocol_IPV4_ONLY
}

package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticache"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awswafv2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/hourglass/hourglass/shared/redisacl"
)

// The four Lambda functions, named as under functions/ and dist/.
const (
	fnEnqueue  = "enqueue"
	fnSeckill  = "seckill"
	fnPoller   = "poller"
	fnConsumer = "consumer"
	// fnOperator runs the runbooks' operator commands (POST
	// /v1/admin/operator, hourglass --remote) where Redis is.
	fnOperator = "operator"
)

// functionNames lists them in a fixed order.
var functionNames = []string{fnEnqueue, fnSeckill, fnPoller, fnConsumer, fnOperator}

// HourglassStackProps configures the stack.
type HourglassStackProps struct {
	awscdk.StackProps
	Settings Settings
	// CodeDir holds <function>/function.zip for each function: dist/ after
	// `make build`, or a directory of stand-ins in tests.
	CodeDir string
}

// HourglassStack is the whole system: network, Redis, ledger tables,
// messaging, the four functions, the HTTP API and monitoring. Its fields are
// the parts tests and neighbours look at.
type HourglassStack struct {
	Stack    awscdk.Stack
	settings Settings
	codeDir  string

	Vpc awsec2.Vpc
	// SecurityGroups holds each function's own security group, by function
	// name; RedisSG admits each of them; EndpointSGs holds each interface
	// endpoint's, by service (endpointSQS, endpointSNS, endpointSecrets).
	SecurityGroups map[string]awsec2.SecurityGroup
	RedisSG        awsec2.SecurityGroup
	EndpointSGs    map[string]awsec2.SecurityGroup
	DataKey        awskms.Key
	AlarmKey       awskms.Key
	// Redis is the replication group (prod, dev); RedisServerless the
	// ElastiCache Serverless cache (serverless). One of them is nil.
	Redis           awselasticache.CfnReplicationGroup
	RedisServerless awselasticache.CfnServerlessCache
	RedisParameters awselasticache.CfnParameterGroup
	Withdrawals     awsdynamodb.Table
	Orders          awsdynamodb.Table
	Idempotency     awsdynamodb.Table
	WorkQueue       awssqs.Queue
	DeadLetterQueue awssqs.Queue
	// FinanceQueue holds every finance message for finance to read;
	// FinanceDeadLetterQueue what it or a topic subscription could not take.
	FinanceQueue           awssqs.Queue
	FinanceDeadLetterQueue awssqs.Queue
	FinanceTopic           awssns.Topic
	// OrdersTopic carries the order events; OrdersQueue holds every one for
	// downstream to read, OrdersDeadLetterQueue what it or a subscription
	// could not take.
	OrdersTopic           awssns.Topic
	OrdersQueue           awssqs.Queue
	OrdersDeadLetterQueue awssqs.Queue
	AlarmTopic            awssns.Topic
	Functions             map[string]awslambda.Function
	// Aliases are the live aliases of the functions deployed by canary
	// (deploy.go): what the API and the consumer's event source invoke.
	Aliases   map[string]awslambda.Alias
	LogGroups map[string]awslogs.LogGroup
	Api       awsapigatewayv2.HttpApi
	// Webhooks is the providers' REST API, behind WebhooksFirewall.
	Webhooks          awsapigateway.RestApi
	WebhooksFirewall  awswafv2.CfnWebACL
	Dashboard         awscloudwatch.Dashboard
	Alarms            []awscloudwatch.Alarm
	alarmByID         map[string]awscloudwatch.Alarm
	redisNodeClusters [][]string
	// indexes names each table's global secondary indexes.
	indexes map[awsdynamodb.Table][]string

	// RedisSecrets hold each function's Redis password, RedisUsers its
	// ElastiCache user (keyed by function name); RedisDefaultUser is the
	// "default" user, switched off; RedisUserGroup holds them all.
	RedisSecrets     map[string]awssecretsmanager.Secret
	RedisUsers       map[string]awselasticache.CfnUser
	RedisDefaultUser awselasticache.CfnUser
	RedisUserGroup   awselasticache.CfnUserGroup
}

// NewHourglassStack defines the stack in scope.
func NewHourglassStack(scope constructs.Construct, id string, props *HourglassStackProps) (*HourglassStack, error) {
	if props == nil || props.CodeDir == "" {
		return nil, fmt.Errorf("infra: the stack needs CodeDir, the directory of <function>/function.zip")
	}
	sp := props.StackProps
	sp.Description = cmp.Or(sp.Description, jsii.String("Hourglass: delayed withdrawals and flash sales on ElastiCache, Lambda and API Gateway"))
	s := &HourglassStack{
		Stack:          awscdk.NewStack(scope, jsii.String(id), &sp),
		settings:       props.Settings,
		codeDir:        props.CodeDir,
		Functions:      map[string]awslambda.Function{},
		SecurityGroups: map[string]awsec2.SecurityGroup{},
		EndpointSGs:    map[string]awsec2.SecurityGroup{},
		LogGroups:      map[string]awslogs.LogGroup{},
		indexes:        map[awsdynamodb.Table][]string{},
	}
	for _, name := range s.settings.Placeholders() {
		awscdk.Annotations_Of(s.Stack).AddWarningV2(jsii.String("hourglass:placeholder-"+name),
			jsii.String(fmt.Sprintf("context %s is a placeholder: this template serves no one, and cdk deploy refuses it (pass -c %s=...)", name, name)), nil)
	}
	s.createKeys()
	s.createNetwork()
	s.createRedis()
	s.createTables()
	s.createMessaging()
	if err := s.createFunctions(); err != nil {
		return nil, err
	}
	s.createApi()
	s.createWebhooks()
	s.createSchedule()
	s.createMonitoring()
	if err := s.createDeployments(); err != nil {
		return nil, err
	}
	s.createOutputs()
	return s, nil
}

// codePath is where function name's deployment package lies.
func (s *HourglassStack) codePath(name string) string {
	return filepath.Join(s.codeDir, name, "function.zip")
}

// redisGroupID is the replication group's name: fixed (not generated) so
// the dashboard and alarms can name its nodes, which ElastiCache calls
// <group>-<shard 0001..>-<node 001..>.
func (s *HourglassStack) redisGroupID() string {
	return redisGroupID(*s.Stack.StackName())
}

// redisGroupIDMax leaves room in ElastiCache's 40 characters for nothing
// else; node ids (<group>-0001-001) may be longer than the group id.
const redisGroupIDMax = 40

// redisGroupID derives a valid ElastiCache replication group id from a
// stack name, so that each stack of an account and region has its own:
// 1 to 40 lower-case letters, digits and single hyphens, starting with a
// letter, not ending in a hyphen. A name that had to be shortened or
// changed ends in a hash of the whole name, so two such stacks still differ.
func redisGroupID(stack string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(stack) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case !strings.HasSuffix(b.String(), "-") && b.Len() > 0:
			b.WriteByte('-')
		}
	}
	id := strings.TrimRight(b.String(), "-")
	if id == "" || id[0] < 'a' || id[0] > 'z' {
		id = strings.TrimRight("hg-"+id, "-")
	}
	if id == strings.ToLower(stack) && len(id) <= redisGroupIDMax {
		return id
	}
	sum := sha256.Sum256([]byte(stack))
	suffix := "-" + hex.EncodeToString(sum[:])[:8]
	id = strings.TrimRight(id[:min(len(id), redisGroupIDMax-len(suffix))], "-")
	return id + suffix
}

func (s *HourglassStack) createOutputs() {
	out := func(id, desc string, value *string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Value: value, Description: jsii.String(desc)})
	}
	out("ApiUrl", "Base URL of the HTTP API", s.Api.ApiEndpoint())
	out("WebhooksUrl", "Base URL of the providers' webhooks (REST API"+behindWAF(s.settings.Profile)+"): append v1/webhooks/payouts or v1/webhooks/payments",
		s.Webhooks.Url())
	out("WorkQueueUrl", "SQS work queue (poller -> consumer)", s.WorkQueue.QueueUrl())
	out("DeadLetterQueueUrl", "Jobs the consumer failed 5 times", s.DeadLetterQueue.QueueUrl())
	out("FinanceQueueUrl", "Every finance message, as published to the finance topic: finance reads it here", s.FinanceQueue.QueueUrl())
	out("FinanceDeadLetterQueueUrl", "Finance messages a subscription could not deliver or finance failed to take 5 times",
		s.FinanceDeadLetterQueue.QueueUrl())
	out("FinanceTopicArn", "Processed payouts for finance (subscribe e-mail, SQS or HTTPS)", s.FinanceTopic.TopicArn())
	out("OrdersTopicArn", "Order events for stock, SMS and shipping (subscribe SQS or HTTPS)", s.OrdersTopic.TopicArn())
	out("OrdersQueueUrl", "Every order event, as published to the orders topic: downstream reads it here", s.OrdersQueue.QueueUrl())
	out("OrdersDeadLetterQueueUrl", "Order events a subscription could not deliver or downstream failed to take 5 times",
		s.OrdersDeadLetterQueue.QueueUrl())
	out("AlarmTopicArn", "Ops alarms", s.AlarmTopic.TopicArn())
	endpointDesc := "ElastiCache cluster-mode configuration endpoint (TLS)"
	if s.RedisServerless != nil {
		endpointDesc = "ElastiCache Serverless endpoint (TLS, cluster protocol)"
	}
	addr, port := s.redisEndpoint()
	out("RedisConfigurationEndpoint", endpointDesc, jsii.String(fmt.Sprintf("%s:%s", *addr, *port)))
	for _, fn := range redisacl.Functions() {
		out("Redis"+fnID(fn)+"SecretArn", "Secrets Manager secret holding the password of the "+fn+
			" function's ElastiCache user "+redisacl.UserName(fn), s.RedisSecrets[fn].SecretArn())
	}
	for _, name := range functionNames {
		out(fnID(name)+"LogGroup", "Log group of the "+name+" function (aws logs tail --follow)", s.LogGroups[name].LogGroupName())
	}
	// The addresses the payout provider (and finance's or the order events'
	// webhook) sees the functions' calls come from: providers allowlist them.
	for i, sn := range *s.Vpc.PublicSubnets() {
		if eip, ok := sn.Node().TryFindChild(jsii.String("EIP")).(awsec2.CfnEIP); ok {
			out(fmt.Sprintf("NatPublicIp%d", i+1), "Public IP of a NAT gateway: the functions' outbound calls come from it (allowlist it at the provider)",
				eip.AttrPublicIp())
		}
	}
	out("DashboardUrl", "CloudWatch dashboard", jsii.String(fmt.Sprintf(
		"https://%s.console.aws.amazon.com/cloudwatch/home?region=%s#dashboards:name=%s",
		*s.Stack.Region(), *s.Stack.Region(), *s.Dashboard.DashboardName())))
}

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
)

const (
	// pollerTimeout and pollerMargin: the poller loops until pollerMargin
	// before its deadline, so each run lasts about 70 s and a new one starts
	// every 60 s: consecutive runs overlap and the queue is never unwatched.
	pollerTimeout = 75 * time.Second
	pollerMargin  = 5 * time.Second
	// payoutTimeout bounds one provider call (PAYOUT_TIMEOUT, which the
	// stack sets); payoutAttempt is the documented worst case of one payout
	// attempt, which no call outlives: 2 x PAYOUT_TIMEOUT + 5 s.
	payoutTimeout = 10 * time.Second
	payoutAttempt = 2*payoutTimeout + 5*time.Second
	// consumerTimeout bounds one batch of up to 10 jobs, which run
	// concurrently: an attempt, then its ledger write and finance's message
	// (each bounded by its own deadline of a few seconds), with a margin
	// for a cold start and a slow Redis.
	consumerTimeout   = payoutAttempt + 20*time.Second
	consumerBatchSize = 10
	// consumerBatchWindow: how long the event source gathers a batch before
	// invoking the consumer; none, jobs are due already.
	consumerBatchWindow = 0 * time.Second
	// workVisibility is the work queue's visibility timeout (messaging.go).
	workVisibility = visibilityFactor * consumerTimeout
	// reconcileGrace (HOURGLASS_RECONCILE_GRACE): how long a job is out of
	// Redis once the poller handed it to the work queue, at most: the batch
	// window, then up to maxReceiveCount receives, each hiding the message
	// for the visibility timeout, before the dead-letter queue takes it.
	// The reconciler leaves it that long past its time, so that a job SQS
	// still holds is neither sent twice nor counted as a repair:
	// 5 x 270 s (6 x the consumer's 45 s) + 0 = 22 min 30 s.
	reconcileGrace = maxReceiveCount*workVisibility + consumerBatchWindow
	// apiTimeout bounds a request; API Gateway gives up at 30 s.
	apiTimeout = 10 * time.Second
	// operatorTimeout: an operator command gets 25 s (cli.OperatorDeadline),
	// under API Gateway's 30 s, so it answers with what it printed; the
	// rest is a cold start's (the Redis secret, the connection).
	operatorTimeout = 30 * time.Second
	// logRetention of the functions' logs.
	logRetention = awslogs.RetentionDays_THREE_MONTHS
)

// eniActions are the network-interface permissions a Lambda function in a
// VPC needs (those of the AWS-managed AWSLambdaVPCAccessExecutionRole). EC2
// does not scope the Describe calls to resources, so they name "*", as
// X-Ray's actions do (xrayActions): the only "*" in the functions' roles.
var eniActions = []string{
	"ec2:CreateNetworkInterface",
	"ec2:DescribeNetworkInterfaces",
	"ec2:DescribeSubnets",
	"ec2:DeleteNetworkInterface",
	"ec2:AssignPrivateIpAddresses",
	"ec2:UnassignPrivateIpAddresses",
}

// secretActions read a secret: the functions call GetSecretValue only
// (shared/secrets).
var secretActions = []string{"secretsmanager:GetSecretValue"}

// xrayActions send a function's trace segments (Tracing ACTIVE): the
// actions of the AWS-managed AWSXRayDaemonWriteAccess that Lambda uses.
var xrayActions = []string{"xray:PutTraceSegments", "xray:PutTelemetryRecords"}

// allow adds one statement to fn's role.
func allow(fn awslambda.Function, actions []string, resources ...*string) {
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	}))
}

type functionSpec struct {
	name, description string
	memoryMB          float64
	timeout           time.Duration
	env               map[string]*string
	reserved          int
}

// secretGrant is the resource IAM evaluates a GetSecretValue of id (an
// operator's secret, by name or complete ARN, passed to the function as it
// is) against: the secret's complete ARN, which for a name is the name, a
// hyphen and the six random characters Secrets Manager appended. The name is
// never turned into a partial ARN: Secrets Manager would take a partial ARN
// whose name ends in a hyphen and six characters ("-secret") for a complete
// one, which this grant does not match.
func (s *HourglassStack) secretGrant(id string) *string {
	if strings.HasPrefix(id, "arn:") {
		return jsii.String(id)
	}
	return jsii.String(fmt.Sprintf("arn:%s:secretsmanager:%s:%s:secret:%s-??????",
		*s.Stack.Partition(), *s.Stack.Region(), *s.Stack.Account(), id))
}

// adminFunctions are the functions serving an IAM-authorized route.
func adminFunctions() map[string]bool {
	fns := map[string]bool{}
	for _, r := range routes {
		if r.access == admin {
			fns[r.fn] = true
		}
	}
	return fns
}

func (s *HourglassStack) createFunctions() error {
	consumerEnv := map[string]*string{
		"PAYOUT_URL":                jsii.String(s.settings.PayoutURL),
		"PAYOUT_TIMEOUT":            jsii.String(payoutTimeout.String()),
		"PAYOUT_SIGNING_SECRET_ID":  jsii.String(s.settings.PayoutSecretName),
		"PAYOUT_LOOKUP":             jsii.String(strconv.FormatBool(s.settings.PayoutLookup)),
		"PAYOUT_IDEMPOTENCY_WINDOW": jsii.String(s.settings.PayoutIdempotencyWindow),
		"FINANCE_TOPIC_ARN":         s.FinanceTopic.TopicArn(),
		// The consumer runs the order events' outbox.
		"ORDERS_TOPIC_ARN": s.OrdersTopic.TopicArn(),
	}
	if u := s.settings.FinanceWebhookURL; u != "" {
		consumerEnv["FINANCE_WEBHOOK_URL"] = jsii.String(u)
		consumerEnv["FINANCE_SIGNING_SECRET_ID"] = jsii.String(s.settings.FinanceSecretName)
	}
	if u := s.settings.OrdersWebhookURL; u != "" {
		consumerEnv["ORDERS_WEBHOOK_URL"] = jsii.String(u)
		consumerEnv["ORDERS_SIGNING_SECRET_ID"] = jsii.String(s.settings.OrdersSecretName)
	}
	specs := []functionSpec{
		{
			name: fnEnqueue, memoryMB: 512, timeout: apiTimeout, reserved: s.settings.EnqueueReservedConcurrency,
			description: "Withdrawal API: create, list, get, reschedule, cancel; the payout and payment providers' callbacks; operator stats; health",
			env: map[string]*string{
				"HOURGLASS_JWT_SCOPE":        jsii.String(s.settings.JWTScope),
				"PAYOUT_WEBHOOK_SECRET_ID":   jsii.String(s.settings.PayoutWebhookSecretName),
				"PAYMENTS_WEBHOOK_SECRET_ID": jsii.String(s.settings.PaymentsSecretName),
			},
		},
		{
			// More memory is more CPU: admissions come in bursts.
			name: fnSeckill, memoryMB: 1024, timeout: apiTimeout, reserved: s.settings.SeckillReservedConcurrency,
			description: "Flash-sale API: preheat, item state, purchase admission, purchase result",
			env:         map[string]*string{"HOURGLASS_JWT_SCOPE": jsii.String(s.settings.JWTScope)},
		},
		{
			// Runs may overlap (each outlasts the minute between starts), and
			// more than two may when Redis is slow: the delay queue's leases
			// make that safe, so a reservation is only an operator's cap.
			// Its memory is the profile's (serverless: 128 MB; it mostly
			// waits on Redis and SQS).
			name: fnPoller, memoryMB: float64(s.settings.Profile.PollerMemoryMB), timeout: pollerTimeout, reserved: s.settings.PollerReservedConcurrency,
			description: "Claims due jobs from the Redis delay queues and sends them to the work queue",
			env: map[string]*string{
				"WORK_QUEUE_URL":            s.WorkQueue.QueueUrl(),
				"HOURGLASS_POLLER_MARGIN":   jsii.String(pollerMargin.String()),
				"HOURGLASS_RECONCILE_GRACE": jsii.String(reconcileGrace.String()),
			},
		},
		{
			name: fnConsumer, memoryMB: 512, timeout: consumerTimeout,
			description: "Runs due jobs: payouts through the provider, finance messages, flash-sale orders",
			env:         consumerEnv,
		},
		{
			// A handful of operators; no reservation: it must never take
			// concurrency the API, the poller or the consumer need.
			name: fnOperator, memoryMB: 512, timeout: operatorTimeout,
			description: "Runs the runbooks' operator commands (payouts, reconcile, stats, dead, peek) for the operator roles",
			// reconcile by hand gives SQS the poller's grace.
			env: map[string]*string{"HOURGLASS_RECONCILE_GRACE": jsii.String(reconcileGrace.String())},
		},
	}
	admins := adminFunctions()
	for i := range specs {
		if admins[specs[i].name] {
			specs[i].env["HOURGLASS_ADMIN_ROLE_ARNS"] = jsii.String(strings.Join(s.settings.AdminRoleARNs, ","))
		}
	}
	if len(s.settings.AdminRoleARNs) == 0 {
		awscdk.Annotations_Of(s.Stack).AddWarningV2(jsii.String("hourglass:no-admin-roles"),
			jsii.String("context adminRoleArns is empty: the admin routes (GET /v1/admin/stats, PUT /v1/seckill/items/{item_id}, "+
				"POST /v1/admin/operator) "+
				"will refuse every caller (pass -c adminRoleArns=arn:aws:iam::<account>:role/<operators>)"), nil)
	}
	for _, spec := range specs {
		if _, err := os.Stat(s.codePath(spec.name)); err != nil {
			return fmt.Errorf("infra: %s's code: %w (run make build first)", spec.name, err)
		}
		s.Functions[spec.name] = s.newFunction(spec)
	}

	// Each role reaches only what its function uses, with actions spelled
	// out (the CDK's grant helpers add kms:ReEncrypt*, GenerateDataKey* and
	// index/* wildcards these functions do not need).
	enqueue, poller, consumer := s.Functions[fnEnqueue], s.Functions[fnPoller], s.Functions[fnConsumer]
	// Each function reads its own Redis user's password, no other's.
	for name, fn := range s.Functions {
		allow(fn, secretActions, s.RedisSecrets[name].SecretArn())
	}
	// The ledger (HOURGLASS_LEDGER=dynamodb): each function's own actions
	// on each table and index it uses (ledgerUse); the flash-sale API works
	// on Redis alone. The operator's AUTH secret is granted above; nothing
	// else (no queue, topic or key).
	for _, name := range functionNames {
		s.allowLedger(s.Functions[name], name)
	}
	allow(poller, []string{"sqs:SendMessage"}, s.WorkQueue.QueueArn())
	allow(consumer, []string{"sns:Publish"}, s.FinanceTopic.TopicArn(), s.OrdersTopic.TopicArn())
	// SQS and SNS encrypt with the data key on the sender's behalf.
	for _, fn := range []awslambda.Function{poller, consumer} {
		allow(fn, []string{"kms:GenerateDataKey", "kms:Decrypt"}, s.DataKey.KeyArn())
	}
	// The operator's secrets, each to the one function that reads it: the
	// payout signing key (and finance's, and the order events' webhook's)
	// to the consumer; the keys of the payout and payment providers'
	// callbacks, which reach the withdrawal API, to enqueue.
	allow(consumer, secretActions, s.secretGrant(s.settings.PayoutSecretName))
	if s.settings.FinanceWebhookURL != "" {
		allow(consumer, secretActions, s.secretGrant(s.settings.FinanceSecretName))
	}
	if s.settings.OrdersWebhookURL != "" {
		allow(consumer, secretActions, s.secretGrant(s.settings.OrdersSecretName))
	}
	allow(enqueue, secretActions, s.secretGrant(s.settings.PayoutWebhookSecretName))
	allow(enqueue, secretActions, s.secretGrant(s.settings.PaymentsSecretName))

	s.createAliases()
	s.invoked(fnConsumer).AddEventSource(awslambdaeventsources.NewSqsEventSource(s.WorkQueue, &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(consumerBatchSize),
		MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(consumerBatchWindow.Seconds())),
		ReportBatchItemFailures: jsii.Bool(true),
		MaxConcurrency:          jsii.Number(float64(s.settings.ConsumerMaxConcurrency)),
	}))
	return nil
}

// baseEnv is what every function reads; function name's own Redis user.
func (s *HourglassStack) baseEnv(name string) map[string]*string {
	env := map[string]*string{
		"HOURGLASS_AUTH":              jsii.String("jwt"),
		"REDIS_URL":                   s.redisURL(name),                 // its own Redis user
		"REDIS_AUTH_SECRET_ID":        s.RedisSecrets[name].SecretArn(), // its password; a complete ARN
		"HOURGLASS_REDIS_PREFIX":      jsii.String(redisPrefix),         // the users' key patterns' prefix
		"HOURGLASS_QUEUE_SHARDS":      jsii.String(strconv.Itoa(s.settings.QueueShards)),
		"HOURGLASS_LEDGER":            jsii.String("dynamodb"),
		"HOURGLASS_WITHDRAWALS_TABLE": s.Withdrawals.TableName(),
		"HOURGLASS_ORDERS_TABLE":      s.Orders.TableName(),
		"HOURGLASS_IDEMPOTENCY_TABLE": s.Idempotency.TableName(),
		"HOURGLASS_LOG_LEVEL":         jsii.String("info"),
	}
	// ElastiCache Serverless refuses some commands: the client refuses
	// them first, with a clear error, instead of the cache in production.
	if c := s.settings.Profile.redisCommands(); c != "" {
		env["HOURGLASS_REDIS_COMMANDS"] = jsii.String(c)
	}
	return env
}

func (s *HourglassStack) newFunction(spec functionSpec) awslambda.Function {
	logs := awslogs.NewLogGroup(s.Stack, jsii.String(fnID(spec.name)+"Logs"), &awslogs.LogGroupProps{
		Retention:     logRetention,
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
	s.LogGroups[spec.name] = logs
	suppressLogGroupGuard(logs, "Function logs serve debugging and on-call (request ids, outcomes, no secrets): three "+
		"months covers an investigation; the record of each withdrawal and order is the ledger and the finance feed.")
	// An own role instead of the AWS-managed execution policies: those grant
	// logs:CreateLogGroup and PutLogEvents on every log group ("*"); this one
	// writes to its own group only. Inline, so the function cannot be
	// created before its role can make its network interfaces.
	role := awsiam.NewRole(s.Stack, jsii.String(fnID(spec.name)+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Hourglass " + spec.name + " function"),
		InlinePolicies: &map[string]awsiam.PolicyDocument{
			"logs": awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &[]awsiam.PolicyStatement{
				awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
					Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
					Resources: &[]*string{logs.LogGroupArn()},
				}),
			}}),
			"vpc-network-interfaces": awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &[]awsiam.PolicyStatement{
				awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
					Actions:   jsii.Strings(eniActions...),
					Resources: jsii.Strings("*"),
				}),
			}}),
		},
	})
	suppress(role, "AwsSolutions-IAM5",
		"Resource '*' is only on the VPC network-interface actions Lambda needs to attach the function to its "+
			"subnets (those of AWSLambdaVPCAccessExecutionRole); EC2 does not scope ec2:Describe* to resources.",
		"Resource::*")

	env := s.baseEnv(spec.name)
	for k, v := range spec.env {
		env[k] = v
	}
	props := &awslambda.FunctionProps{
		Description:    jsii.String(spec.description),
		Runtime:        awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:   awslambda.Architecture_ARM_64(),
		Handler:        jsii.String("bootstrap"),
		Code:           awslambda.Code_FromAsset(jsii.String(s.codePath(spec.name)), nil),
		MemorySize:     jsii.Number(spec.memoryMB),
		Timeout:        awscdk.Duration_Seconds(jsii.Number(spec.timeout.Seconds())),
		Environment:    &env,
		Role:           role,
		Vpc:            s.Vpc,
		VpcSubnets:     &awsec2.SubnetSelection{SubnetGroupName: jsii.String(subnetApp)},
		SecurityGroups: &[]awsec2.ISecurityGroup{s.SecurityGroups[spec.name]},
		// serverless-ipv6: outbound IPv6 through the egress-only gateway.
		Ipv6AllowedForDualStack: s.ipv6Allowed(),
		LogGroup:                logs,
		LoggingFormat:           awslambda.LoggingFormat_JSON,
		// The functions log JSON lines (log/slog) and filter by
		// HOURGLASS_LOG_LEVEL themselves; Lambda drops DEBUG lines as well,
		// should a function be set lower, and passes the EMF metric lines,
		// which have no level and so count as INFO.
		ApplicationLogLevelV2: awslambda.ApplicationLogLevel_INFO,
		SystemLogLevelV2:      awslambda.SystemLogLevel_INFO,
		// Traces of the synchronous hops (API Gateway, the function, its
		// AWS calls); the CDK adds xrayActions to the role.
		Tracing: awslambda.Tracing_ACTIVE,
	}
	if spec.reserved > 0 {
		props.ReservedConcurrentExecutions = jsii.Number(float64(spec.reserved))
	}
	if spec.name == fnPoller {
		// A failed or throttled run is not retried: the next one starts
		// within the minute, and a late retry would only crowd it.
		props.RetryAttempts = jsii.Number(0)
		props.MaxEventAge = awscdk.Duration_Seconds(jsii.Number(60))
	}
	fn := awslambda.NewFunction(s.Stack, jsii.String(fnID(spec.name)), props)
	if policy, ok := role.Node().TryFindChild(jsii.String("DefaultPolicy")).(awsiam.Policy); ok {
		suppress(policy, "AwsSolutions-IAM5",
			"Resource '*' is only on xray:PutTraceSegments and xray:PutTelemetryRecords, which X-Ray does not scope "+
				"to resources (as in AWSXRayDaemonWriteAccess); the function's active tracing sends its segments with them.",
			"Resource::*")
	}
	return fn
}

// ipv6Allowed lets the functions send IPv6 out of a dual-stack VPC
// (serverless-ipv6); nil leaves the property out of the other templates.
func (s *HourglassStack) ipv6Allowed() *bool {
	if !s.settings.Profile.IPv6Egress {
		return nil
	}
	return jsii.Bool(true)
}

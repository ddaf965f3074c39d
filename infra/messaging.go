package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"
)

const (
	// maxReceiveCount: deliveries of one job message before SQS moves it to
	// the dead-letter queue. Payout retries do not count: the consumer
	// re-schedules those in Redis and the message succeeds.
	maxReceiveCount = 5
	// visibilityFactor: AWS's advice for Lambda event sources, a visibility
	// timeout of at least six times the function timeout, so retries of a
	// throttled batch do not redeliver messages still being worked on.
	visibilityFactor = 6
)

// Retention of the queues.
var (
	// deadLetterRetention: SQS's maximum. A message keeps its first enqueue
	// time when it is dead-lettered, so a dead letter has at least 14 - 4
	// days left to be looked at and redriven.
	deadLetterRetention = awscdk.Duration_Days(jsii.Number(14))
	// workRetention: a job message nobody took for 4 days expires. That
	// loses nothing: the ledger (DynamoDB) still holds the withdrawal as
	// scheduled or retrying, due long ago and in no Redis queue, and the
	// poller's reconciler (ledger.Dynamo.Reconcile) adds its job back; a
	// flash-sale purchase whose order job is gone is re-enqueued or, voided
	// first, released by the compensation pass (seckill.Compensation).
	workRetention = awscdk.Duration_Days(jsii.Number(4))
	// subscriberRetention: finance's copy of the payouts, and downstream's
	// of the order events, live as long as SQS allows.
	subscriberRetention = awscdk.Duration_Days(jsii.Number(14))
)

// queue is an SQS queue encrypted with the data key, reachable over TLS
// only, and kept when the stack is deleted (it may hold jobs or finance's
// messages).
func (s *HourglassStack) queue(id string, props awssqs.QueueProps) awssqs.Queue {
	props.Encryption = awssqs.QueueEncryption_KMS
	props.EncryptionMasterKey = s.DataKey
	props.EnforceSSL = jsii.Bool(true)
	props.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	return awssqs.NewQueue(s.Stack, jsii.String(id), &props)
}

// deadLetterQueue is a queue that says it is one (cfn-guard CT.SQS.PR.1
// wants a redrive policy or a redrive-allow policy on every queue):
// allowAll is SQS's default; byQueue naming its source would be a cycle.
func (s *HourglassStack) deadLetterQueue(id string) awssqs.Queue {
	return s.queue(id, awssqs.QueueProps{
		RetentionPeriod:    deadLetterRetention,
		RedriveAllowPolicy: &awssqs.RedriveAllowPolicy{RedrivePermission: awssqs.RedrivePermission_ALLOW_ALL},
	})
}

func (s *HourglassStack) createMessaging() {
	s.DeadLetterQueue = s.deadLetterQueue("DeadLetterQueue")
	s.WorkQueue = s.queue("WorkQueue", awssqs.QueueProps{
		RetentionPeriod:   workRetention,
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(visibilityFactor * consumerTimeout.Seconds())),
		DeadLetterQueue:   &awssqs.DeadLetterQueue{Queue: s.DeadLetterQueue, MaxReceiveCount: jsii.Number(maxReceiveCount)},
	})

	// SNS encrypts what it sends to the subscriber queues below with the
	// data key. The key policy cannot name the topics, which are encrypted
	// with the same key (a dependency cycle): it names the account, like the
	// alarm key's; the queue policies name the topics.
	s.letServiceUseKey(s.DataKey, "SnsToSubscriberQueues", "sns.amazonaws.com", "kms:Decrypt", "kms:GenerateDataKey")
	s.FinanceTopic = awssns.NewTopic(s.Stack, jsii.String("FinanceTopic"), &awssns.TopicProps{
		DisplayName: jsii.String("Hourglass processed payouts"),
		MasterKey:   s.DataKey,
		EnforceSSL:  jsii.Bool(true),
	})
	s.FinanceQueue, s.FinanceDeadLetterQueue = s.durableSubscriber(s.FinanceTopic, "Finance")
	if e := s.settings.FinanceEmail; e != "" {
		s.FinanceTopic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(e), &awssnssubscriptions.EmailSubscriptionProps{
			DeadLetterQueue: s.FinanceDeadLetterQueue,
		}))
	}
	// Order events (order.created, order.paid, order.expired,
	// payment.refund_required) for stock, SMS and shipping, which subscribe
	// to the topic or read OrdersQueue.
	s.OrdersTopic = awssns.NewTopic(s.Stack, jsii.String("OrdersTopic"), &awssns.TopicProps{
		DisplayName: jsii.String("Hourglass order events"),
		MasterKey:   s.DataKey,
		EnforceSSL:  jsii.Bool(true),
	})
	s.OrdersQueue, s.OrdersDeadLetterQueue = s.durableSubscriber(s.OrdersTopic, "Orders")
	s.letRead(s.FinanceQueue, "FinanceReaders", s.settings.FinanceReaderARNs)
	s.letRead(s.OrdersQueue, "OrdersReaders", s.settings.OrdersReaderARNs)

	s.AlarmTopic = awssns.NewTopic(s.Stack, jsii.String("AlarmTopic"), &awssns.TopicProps{
		DisplayName: jsii.String("Hourglass ops alarms"),
		MasterKey:   s.AlarmKey,
		EnforceSSL:  jsii.Bool(true),
	})
	// An alarm's publish is authorized by the topic policy alone (CloudWatch
	// is no IAM principal of ours), and EnforceSSL's policy holds only a
	// Deny: without this statement every alarm action fails and no one is
	// paged. The conditions keep it to this account's alarms. CloudWatch
	// then encrypts into the topic only if the key lets it too.
	s.AlarmTopic.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsPublish"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sns:Publish"),
		Resources:  &[]*string{s.AlarmTopic.TopicArn()},
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"aws:SourceAccount": s.Stack.Account()},
			"ArnLike":      map[string]any{"aws:SourceArn": s.alarmARNs()},
		},
	}))
	s.letServiceUseKey(s.AlarmKey, "CloudWatchAlarmsPublish", "cloudwatch.amazonaws.com", "kms:Decrypt", "kms:GenerateDataKey*")
	if e := s.settings.AlarmEmail; e != "" {
		s.AlarmTopic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(e), nil))
	} else {
		awscdk.Annotations_Of(s.Stack).AddWarningV2(jsii.String("hourglass:no-alarm-email"),
			jsii.String("context alarmEmail is empty: the alarms publish to AlarmTopic and no one is paged "+
				"(pass -c alarmEmail=oncall@example.com, or subscribe your pager to the AlarmTopicArn output)"), nil)
	}
}

// durableSubscriber gives a topic's readers a durable path: SNS drops a
// message published to a topic no one has confirmed a subscription to, so a
// queue (<name>Queue) subscribed by the stack itself keeps every one (raw,
// the message as published) until its reader takes it. The subscription
// redrives what SNS cannot deliver to <name>DeadLetterQueue, which is also
// the queue's own dead-letter queue and must be the redrive target of every
// other subscription to the topic.
func (s *HourglassStack) durableSubscriber(topic awssns.Topic, name string) (queue, dlq awssqs.Queue) {
	dlq = s.deadLetterQueue(name + "DeadLetterQueue")
	queue = s.queue(name+"Queue", awssqs.QueueProps{
		RetentionPeriod: subscriberRetention,
		DeadLetterQueue: &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(maxReceiveCount)},
	})
	// SNS may send to the queue from its topic only (the dead-letter
	// queue's permission comes with each subscription). For that reason the
	// subscription is made here, not by awssnssubscriptions.SqsSubscription,
	// whose key statement names the topic (see SnsToSubscriberQueues).
	queue.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("sns.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sqs:SendMessage"),
		Resources:  &[]*string{queue.QueueArn()},
		Conditions: &map[string]any{
			"ArnEquals": map[string]any{"aws:SourceArn": topic.TopicArn()},
		},
	}))
	awssns.NewSubscription(s.Stack, jsii.String(name+"QueueSubscription"), &awssns.SubscriptionProps{
		Topic:              topic,
		Protocol:           awssns.SubscriptionProtocol_SQS,
		Endpoint:           queue.QueueArn(),
		RawMessageDelivery: jsii.Bool(true),
		DeadLetterQueue:    dlq,
	})
	return queue, dlq
}

// alarmARNs matches the ARN of every CloudWatch alarm of this account in
// this region (the alarms' names are CloudFormation's, made at deploy).
func (s *HourglassStack) alarmARNs() *string {
	return jsii.String("arn:" + *s.Stack.Partition() + ":cloudwatch:" + *s.Stack.Region() + ":" + *s.Stack.Account() + ":alarm:*")
}

// letRead lets roles read queue: take, delete and hold its messages, and
// decrypt them with the data key, through SQS only (kms:ViaService). The
// key statement's sid names the readers.
func (s *HourglassStack) letRead(queue awssqs.Queue, sid string, roles []string) {
	if len(roles) == 0 {
		return
	}
	var principals []awsiam.IPrincipal
	for _, r := range roles {
		principals = append(principals, awsiam.NewArnPrincipal(jsii.String(r)))
	}
	queue.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(sid),
		Principals: &principals,
		Actions:    jsii.Strings(readerActions...),
		Resources:  &[]*string{queue.QueueArn()},
	}))
	s.DataKey.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(sid),
		Principals: &principals,
		Actions:    jsii.Strings("kms:Decrypt"),
		Resources:  jsii.Strings("*"),
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"kms:ViaService": "sqs." + *s.Stack.Region() + ".amazonaws.com"},
		},
	}), nil)
}

// readerActions are what a reader of a subscriber queue does.
var readerActions = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}

// letServiceUseKey lets an AWS service use key on behalf of this account's
// resources only (aws:SourceAccount): the statement sid names the purpose.
func (s *HourglassStack) letServiceUseKey(key awskms.Key, sid, service string, actions ...string) {
	key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String(sid),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String(service), nil)},
		Actions:    jsii.Strings(actions...),
		Resources:  jsii.Strings("*"), // in a key policy, "*" is this key
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"aws:SourceAccount": s.Stack.Account()},
		},
	}), nil)
}

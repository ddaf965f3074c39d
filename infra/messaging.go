package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
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

func (s *HourglassStack) createMessaging() {
	retention := awscdk.Duration_Days(jsii.Number(14)) // SQS's maximum
	s.DeadLetterQueue = awssqs.NewQueue(s.Stack, jsii.String("DeadLetterQueue"), &awssqs.QueueProps{
		Encryption:          awssqs.QueueEncryption_KMS,
		EncryptionMasterKey: s.DataKey,
		EnforceSSL:          jsii.Bool(true),
		RetentionPeriod:     retention,
	})
	s.WorkQueue = awssqs.NewQueue(s.Stack, jsii.String("WorkQueue"), &awssqs.QueueProps{
		Encryption:          awssqs.QueueEncryption_KMS,
		EncryptionMasterKey: s.DataKey,
		EnforceSSL:          jsii.Bool(true),
		// The poller acks a job in Redis once SQS holds it: from then on SQS
		// is where it lives, so keep it as long as SQS can.
		RetentionPeriod:   retention,
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(visibilityFactor * consumerTimeout.Seconds())),
		DeadLetterQueue:   &awssqs.DeadLetterQueue{Queue: s.DeadLetterQueue, MaxReceiveCount: jsii.Number(maxReceiveCount)},
	})

	s.FinanceTopic = awssns.NewTopic(s.Stack, jsii.String("FinanceTopic"), &awssns.TopicProps{
		DisplayName: jsii.String("Hourglass processed payouts"),
		MasterKey:   s.DataKey,
		EnforceSSL:  jsii.Bool(true),
	})
	if e := s.settings.FinanceEmail; e != "" {
		s.FinanceTopic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(e), nil))
	}

	s.AlarmTopic = awssns.NewTopic(s.Stack, jsii.String("AlarmTopic"), &awssns.TopicProps{
		DisplayName: jsii.String("Hourglass ops alarms"),
		MasterKey:   s.AlarmKey,
		EnforceSSL:  jsii.Bool(true),
	})
	// CloudWatch publishes alarms into the encrypted topic only if the key
	// lets it; the condition keeps it to this account's alarms.
	s.AlarmKey.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsPublish"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey*"),
		Resources:  jsii.Strings("*"), // in a key policy, "*" is this key
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"aws:SourceAccount": s.Stack.Account()},
		},
	}), nil)
	if e := s.settings.AlarmEmail; e != "" {
		s.AlarmTopic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(e), nil))
	}
}

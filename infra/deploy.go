package main

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscodedeploy"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"
)

// liveAlias is the alias that serves traffic: the API's integrations and
// the consumer's event source invoke it, never $LATEST, so a deploy
// publishes a version and CodeDeploy moves the alias to it step by step.
const liveAlias = "live"

// canaried are the functions deployed behind a canary, with the alarms
// that roll a deploy back: the API functions on the API's 5xx and their own
// errors (enqueue on the webhooks' 5xx too); the consumer on its errors and on payouts failing wholesale. The
// poller is not: it is invoked by its schedule on $LATEST, as a new poller
// overlapping the old one is safe (leases) and a broken one pages through
// PollerNotRunningAlarm and PollerFailuresAlarm.
var canaried = map[string][]string{
	fnEnqueue:  {"ApiServerErrorsAlarm", "WebhooksServerErrorsAlarm", "EnqueueErrorsAlarm"},
	fnSeckill:  {"ApiServerErrorsAlarm", "SeckillErrorsAlarm"},
	fnConsumer: {"ConsumerErrorsAlarm", "PayoutFailuresAlarm"},
}

// canaryConfig: 10 % of the invocations for 5 minutes, then all of them.
var canaryConfig = awscodedeploy.LambdaDeploymentConfig_CANARY_10PERCENT_5MINUTES

// createAliases gives each canaried function its live alias on the
// version this deploy publishes.
func (s *HourglassStack) createAliases() {
	s.Aliases = map[string]awslambda.Alias{}
	for _, name := range functionNames {
		if _, ok := canaried[name]; !ok {
			continue
		}
		fn := s.Functions[name]
		s.Aliases[name] = awslambda.NewAlias(s.Stack, jsii.String(fnID(name)+"Live"), &awslambda.AliasProps{
			AliasName:   jsii.String(liveAlias),
			Version:     fn.CurrentVersion(),
			Description: jsii.String("What serves " + name + "'s traffic; CodeDeploy shifts it to each new version"),
		})
	}
}

// invoked is what the rest of the stack invokes for a function: its live
// alias, or the function itself when it has none.
func (s *HourglassStack) invoked(name string) awslambda.IFunction {
	if a, ok := s.Aliases[name]; ok {
		return a
	}
	return s.Functions[name]
}

// createDeployments puts each alias under a CodeDeploy deployment group
// that shifts 10 % of the traffic to a new version for 5 minutes and rolls
// back when one of the function's alarms fires, or the deploy fails or is
// stopped.
func (s *HourglassStack) createDeployments() error {
	app := awscodedeploy.NewLambdaApplication(s.Stack, jsii.String("Deployments"), &awscodedeploy.LambdaApplicationProps{})
	for _, name := range functionNames {
		ids, ok := canaried[name]
		if !ok {
			continue
		}
		var alarms []interfacesawscloudwatch.IAlarmRef
		for _, id := range ids {
			a, ok := s.alarmByID[id]
			if !ok {
				return fmt.Errorf("infra: %s's deployment rolls back on %s, which the stack does not define", name, id)
			}
			alarms = append(alarms, a)
		}
		group := awscodedeploy.NewLambdaDeploymentGroup(s.Stack, jsii.String(fnID(name)+"Deployment"), &awscodedeploy.LambdaDeploymentGroupProps{
			Application:      app,
			Alias:            s.Aliases[name],
			DeploymentConfig: canaryConfig(),
			Alarms:           &alarms,
			AutoRollback: &awscodedeploy.AutoRollbackConfig{
				FailedDeployment:  jsii.Bool(true),
				StoppedDeployment: jsii.Bool(true),
				DeploymentInAlarm: jsii.Bool(true),
			},
		})
		suppress(group.Role(), "AwsSolutions-IAM4",
			"AWSCodeDeployRoleForLambdaLimited is AWS's own policy for CodeDeploy on Lambda (update the alias, read the "+
				"alarms, invoke hooks named CodeDeployHook_*), which the CDK attaches to every Lambda deployment group.",
			"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSCodeDeployRoleForLambdaLimited")
	}
	return nil
}

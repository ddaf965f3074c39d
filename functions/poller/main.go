// Command poller is the Lambda that EventBridge starts every minute. It polls
// the delay queues until shortly before its deadline (so consecutive
// invocations overlap and there is never a gap), sending due jobs to SQS.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/dispatch"
)

func main() {
	a := app.ForLambda("REDIS_URL", "WORK_QUEUE_URL")
	awsCfg, err := app.AWSConfig(context.Background())
	if err != nil {
		app.Fatal(a.Log, "aws", err)
	}
	d, err := dispatch.NewSQS(sqs.NewFromConfig(awsCfg), a.Config.WorkQueueURL)
	if err != nil {
		app.Fatal(a.Log, "work queue", err)
	}
	// SQS holds a job once it accepts it, so the poller acks it then.
	p, err := a.Poller(d, true)
	if err != nil {
		app.Fatal(a.Log, "poller", err)
	}
	lambda.Start(p.Handler(a.Config.PollerMargin))
}

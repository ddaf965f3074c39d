// Command poller is the Lambda that EventBridge starts every minute. It polls
// the delay queues until shortly before its deadline (so consecutive
// invocations overlap and there is never a gap), sending due jobs to SQS.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/dispatch"
)

func main() {
	cfg, err := config.Load(config.Lambda)
	log := app.NewLogger(os.Stdout, cfg.SlogLevel())
	if err != nil {
		app.Fatal(log, "bad configuration", err)
	}
	if err := cfg.Require("WORK_QUEUE_URL"); err != nil {
		app.Fatal(log, "bad configuration", err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		app.Fatal(log, "redis", err)
	}
	a, err := app.New(cfg, log, rdb)
	if err != nil {
		app.Fatal(log, "wiring", err)
	}
	awsCfg, err := app.AWSConfig(context.Background())
	if err != nil {
		app.Fatal(log, "aws", err)
	}
	d, err := dispatch.NewSQS(sqs.NewFromConfig(awsCfg), cfg.WorkQueueURL)
	if err != nil {
		app.Fatal(log, "work queue", err)
	}
	p, err := a.Poller(d, true)
	if err != nil {
		app.Fatal(log, "poller", err)
	}
	lambda.Start(p.Handler(cfg.PollerMargin))
}

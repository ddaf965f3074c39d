// Command consumer is the SQS-triggered Lambda that runs due jobs: it pays
// withdrawals out through the provider and tells finance of each outcome,
// reporting partial batch failures so only failed messages come back.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
)

func main() {
	cfg, err := config.Load(config.Lambda)
	log := app.NewLogger(os.Stdout, cfg.SlogLevel())
	if err != nil {
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
	provider, err := a.Provider(false)
	if err != nil {
		app.Fatal(log, "payout provider", err)
	}
	notifier, err := a.Notifier(context.Background(), os.Stdout, false)
	if err != nil {
		app.Fatal(log, "finance", err)
	}
	proc, err := a.Processor(provider, notifier)
	if err != nil {
		app.Fatal(log, "payout step", err)
	}
	// In AWS the poller acks a job once SQS holds it; SQS redelivers.
	lambda.Start(a.Consumer(proc, false).Handle)
}

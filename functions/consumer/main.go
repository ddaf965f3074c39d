// Command consumer is the SQS-triggered Lambda that runs due jobs: it pays
// withdrawals out through the provider and tells finance of each outcome,
// reporting partial batch failures so only failed messages come back.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/app"
)

func main() {
	// Finance's and the order events' webhooks, when set, need their
	// signing keys' secrets too (config.CheckDeployed).
	a := app.ForLambda("REDIS_URL", "PAYOUT_URL", "PAYOUT_SIGNING_SECRET_ID")
	provider, err := a.Provider(false)
	if err != nil {
		app.Fatal(a.Log, "payout provider", err)
	}
	notifier, err := a.Notifier(context.Background(), os.Stdout, false)
	if err != nil {
		app.Fatal(a.Log, "finance", err)
	}
	proc, err := a.Processor(provider, notifier)
	if err != nil {
		app.Fatal(a.Log, "payout step", err)
	}
	// In AWS the poller acks a job once SQS holds it; SQS redelivers.
	lambda.Start(a.Consumer(proc, false).Handle)
}

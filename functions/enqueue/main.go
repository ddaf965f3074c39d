// Command enqueue is the withdrawal API Lambda: API Gateway HTTP API events in,
// withdrawals into the ledger and the delay queue. It also serves the operator
// stats and the health check.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/app"
)

func main() {
	// The providers' callbacks are authenticated with keys from Secrets
	// Manager only: a cold start without them fails.
	lambda.Start(app.ForLambda("REDIS_URL", "PAYOUT_WEBHOOK_SECRET_ID", "PAYMENTS_WEBHOOK_SECRET_ID").WithdrawalAPI())
}

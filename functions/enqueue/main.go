// Command enqueue is the withdrawal API Lambda: API Gateway HTTP API events in,
// withdrawals into the ledger and the delay queue. It also serves the operator
// stats and the health check.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/app"
)

func main() {
	lambda.Start(app.ForLambda("REDIS_URL").WithdrawalAPI())
}

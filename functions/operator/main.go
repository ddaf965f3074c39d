// Command operator is the Lambda that runs the operator commands of the
// runbooks (payouts unresolved|resolve, reconcile, stats, dead, peek) in
// the functions' network, where Redis is: POST /v1/admin/operator, IAM-
// authorized and pinned to the operator roles; `hourglass --remote` calls it.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/internal/cli"
	"github.com/hourglass/hourglass/shared/app"
)

func main() {
	a := app.ForLambda("REDIS_URL")
	lambda.Start(a.OperatorAPI(cli.OperatorDeadline, cli.Operator{App: a, Log: a.Log}.Register))
}

// Command enqueue is the withdrawal API Lambda: API Gateway HTTP API events in,
// withdrawals into the ledger and the delay queue. It also serves the operator
// stats and the health check.
package main

import (
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
	lambda.Start(a.Router().Serve)
}

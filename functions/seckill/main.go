// Command seckill is the flash-sale API Lambda: admin preheat, public item
// state, purchase admission (one Lua script on one slot) and the buyer's own
// purchase. Each container remembers items it saw sold out or ended and
// refuses them without asking Redis.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/app"
)

func main() {
	lambda.Start(app.ForLambda("REDIS_URL").SeckillAPI())
}

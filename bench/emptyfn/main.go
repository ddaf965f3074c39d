// Command emptyfn is a Lambda function that answers every API Gateway v2
// event with a 202 and does nothing else: under the emulator, its CPU per
// invoke is what aws-lambda-go's runtime client costs a Go function, the
// floor under every handler (make bench builds and runs it).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

var accepted = []byte(`{"statusCode":202,"body":""}`)

type handler struct{}

func (handler) Invoke(context.Context, []byte) ([]byte, error) { return accepted, nil }

func main() { lambda.Start(handler{}) }

package httpapi

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/aws/aws-lambda-go/events"
	gojson "github.com/goccy/go-json"
)

// Invoke makes the router a lambda.Handler, so that a function's main
// passes it to lambda.Start as it is: the event's JSON in, the response's
// JSON out, exactly as lambda.NewHandler(rt.Serve) would read and write them
// (encoding/json, HTML left unescaped, no trailing newline), without the
// library's reflection. Both ways go through github.com/goccy/go-json, a
// drop-in for encoding/json several times cheaper on these events; an event
// it refuses is left to encoding/json, which then decides (it reads one
// value and ignores what follows, as lambda.NewHandler does). The fuzz
// targets of lambda_internal_test.go hold both ways to encoding/json.
func (rt *Router) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	ev, err := decodeEvent(payload)
	if err != nil {
		return nil, err
	}
	resp, err := rt.Serve(ctx, ev)
	if err != nil {
		return nil, err
	}
	return encodeResponse(&resp)
}

// decodeEvent reads payload as lambda.NewHandler reads an event.
func decodeEvent(payload []byte) (events.APIGatewayV2HTTPRequest, error) {
	var ev events.APIGatewayV2HTTPRequest
	if gojson.Unmarshal(payload, &ev) == nil {
		return ev, nil
	}
	ev = events.APIGatewayV2HTTPRequest{}
	err := json.NewDecoder(bytes.NewReader(payload)).Decode(&ev)
	return ev, err
}

// encodeResponse writes r as lambda.NewHandler writes a response.
func encodeResponse(r *events.APIGatewayV2HTTPResponse) ([]byte, error) {
	return gojson.MarshalWithOption(r, gojson.DisableHTMLEscape())
}

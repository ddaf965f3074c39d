// Package apievent builds API Gateway HTTP API (payload format 2.0) events
// as the Lambda runtime hands them to a function: JSON bytes, with what API
// Gateway puts in production (its headers, the caller's bearer token, the
// JWT authorizer's claims in requestContext.authorizer.jwt.claims). For the
// benchmarks of the handler path (make bench, go test -bench), which send a
// new caller on every request and must not spend the time they measure on
// building the event: each call appends to a buffer the caller reuses.
package apievent

import (
	"strconv"
	"strings"
)

// token stands for the bearer token the app sends: API Gateway passes the
// Authorization header on to the function after its authorizer checked it,
// so every event carries one this long (a Cognito access token is ~1 KB).
var token = "eyJraWQiOiJrMSIsImFsZyI6IlJTMjU2In0." + strings.Repeat("eyJzdWIiOiJ1c2VyLTEyMyJ9", 24) + "." +
	strings.Repeat("c2lnbmF0dXJl", 29)

// Purchase appends to dst the event of POST
// /v1/seckill/items/{item}/purchases by user (its JWT sub), without a body
// (one unit, the common case), with requestID as API Gateway's request id.
func Purchase(dst []byte, item, user, requestID string) []byte {
	return appendEvent(dst, "POST", "/v1/seckill/items/"+item+"/purchases", "POST /v1/seckill/items/{item_id}/purchases", user, requestID, "", "item_id", item, "")
}

// CreateBody is the body of the withdrawal creates.
const CreateBody = `{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`

// Create appends to dst the event of POST /v1/withdrawals by user with
// Idempotency-Key key and CreateBody.
func Create(dst []byte, user, key, requestID string) []byte {
	return appendEvent(dst, "POST", "/v1/withdrawals", "POST /v1/withdrawals", user, requestID, key, "", "", CreateBody)
}

func appendEvent(b []byte, method, path, routeKey, user, requestID, idemKey, param, value, body string) []byte {
	b = append(b, `{"version":"2.0","routeKey":`...)
	b = strconv.AppendQuote(b, routeKey)
	b = append(b, `,"rawPath":`...)
	b = strconv.AppendQuote(b, path)
	b = append(b, `,"rawQueryString":"","headers":{"accept":"application/json","accept-encoding":"gzip","authorization":"Bearer `...)
	b = append(b, token...)
	b = append(b, '"')
	if body != "" {
		b = append(b, `,"content-length":"`...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, `","content-type":"application/json"`...)
	} else {
		b = append(b, `,"content-length":"0"`...)
	}
	b = append(b, `,"host":"abc123.execute-api.us-east-1.amazonaws.com"`...)
	if idemKey != "" {
		b = append(b, `,"idempotency-key":`...)
		b = strconv.AppendQuote(b, idemKey)
	}
	b = append(b, `,"user-agent":"hourglass-app/1.0 (iOS 19.1)","x-amzn-trace-id":"Root=1-674c5a2e-`...)
	b = append(b, requestID...)
	b = append(b, `","x-forwarded-for":"203.0.113.7","x-forwarded-port":"443","x-forwarded-proto":"https"}`...)
	b = append(b, `,"requestContext":{"accountId":"123456789012","apiId":"abc123","authorizer":{"jwt":{"claims":{`...)
	b = append(b, `"aud":"hourglass-app","auth_time":"1795946000","client_id":"hourglass-app","exp":"1795949600",`...)
	b = append(b, `"iat":"1795946000","iss":"https://cognito-idp.us-east-1.amazonaws.com/us-east-1_AbCdEfGhI","jti":"`...)
	b = append(b, requestID...)
	b = append(b, `","scope":"hourglass/user","sub":`...)
	b = strconv.AppendQuote(b, user)
	b = append(b, `,"token_use":"access","username":`...)
	b = strconv.AppendQuote(b, user)
	b = append(b, `},"scopes":["hourglass/user"]}},"domainName":"abc123.execute-api.us-east-1.amazonaws.com","domainPrefix":"abc123",`...)
	b = append(b, `"http":{"method":`...)
	b = strconv.AppendQuote(b, method)
	b = append(b, `,"path":`...)
	b = strconv.AppendQuote(b, path)
	b = append(b, `,"protocol":"HTTP/1.1","sourceIp":"203.0.113.7","userAgent":"hourglass-app/1.0 (iOS 19.1)"},"requestId":`...)
	b = strconv.AppendQuote(b, requestID)
	b = append(b, `,"routeKey":`...)
	b = strconv.AppendQuote(b, routeKey)
	b = append(b, `,"stage":"$default","time":"29/Nov/2026:10:00:00 +0000","timeEpoch":1795946400000}`...)
	if param != "" {
		b = append(b, `,"pathParameters":{`...)
		b = strconv.AppendQuote(b, param)
		b = append(b, ':')
		b = strconv.AppendQuote(b, value)
		b = append(b, '}')
	}
	if body != "" {
		b = append(b, `,"body":`...)
		b = strconv.AppendQuote(b, body)
	}
	b = append(b, `,"isBase64Encoded":false}`...)
	return b
}

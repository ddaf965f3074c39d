package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"

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
//
// It serves the HTTP API's events (payload format 2.0) and the REST API's
// Lambda proxy events (format 1.0: the providers' webhooks, behind WAF,
// infra/webhooks.go), answering each in its own format.
func (rt *Router) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	ev, proxy, err := decodeRequest(payload)
	if err != nil {
		return nil, err
	}
	resp, err := rt.Serve(ctx, ev)
	if err != nil {
		return nil, err
	}
	if proxy {
		r := proxyResponse(&resp)
		return encodeProxyResponse(&r)
	}
	return encodeResponse(&resp)
}

// decodeRequest reads payload as an HTTP API event, or, when it is none,
// as a REST API proxy event turned into the one the router serves (proxy
// true). An HTTP API event names version 2.0 and costs one decoding; a
// proxy event names its method at the top (httpMethod), where no HTTP API
// event has one; anything else is read as decodeEvent reads it.
func decodeRequest(payload []byte) (ev events.APIGatewayV2HTTPRequest, proxy bool, err error) {
	ev, err = decodeEvent(payload)
	if err == nil && ev.Version == "2.0" {
		return ev, false, nil
	}
	if p, perr := decodeJSON[events.APIGatewayProxyRequest](payload); perr == nil && p.HTTPMethod != "" {
		return fromProxyRequest(&p), true, nil
	}
	return ev, false, err
}

// decodeEvent reads payload as lambda.NewHandler reads an event.
func decodeEvent(payload []byte) (events.APIGatewayV2HTTPRequest, error) {
	return decodeJSON[events.APIGatewayV2HTTPRequest](payload)
}

// decodeJSON reads payload into a T as encoding/json's Decoder reads it.
func decodeJSON[T any](payload []byte) (T, error) {
	var v T
	if gojson.Unmarshal(payload, &v) == nil {
		return v, nil
	}
	var w T // what go-json left half-filled must not show through
	err := json.NewDecoder(bytes.NewReader(payload)).Decode(&w)
	return w, err
}

// fromProxyRequest is the HTTP API event API Gateway would have sent for
// the request p describes: headers with lower-case names, each name's
// values joined with commas, the Cookie header as cookies; query
// parameters likewise joined. The authorizer is left out on purpose: the
// REST API authenticates no one (its routes are the providers' webhooks,
// signed), so its events reach the router anonymous, and a user or admin
// route refuses them whatever their requestContext claims.
func fromProxyRequest(p *events.APIGatewayProxyRequest) events.APIGatewayV2HTTPRequest {
	rc := &p.RequestContext
	headers, cookies := joinHeaders(p.Headers, p.MultiValueHeaders)
	query, raw := joinQuery(p.QueryStringParameters, p.MultiValueQueryStringParameters)
	routeKey := ""
	if p.Resource != "" {
		routeKey = p.HTTPMethod + " " + p.Resource
	}
	return events.APIGatewayV2HTTPRequest{
		Version:               "1.0",
		RouteKey:              routeKey,
		RawPath:               p.Path,
		RawQueryString:        raw,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        p.PathParameters,
		StageVariables:        p.StageVariables,
		Body:                  p.Body,
		IsBase64Encoded:       p.IsBase64Encoded,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     routeKey,
			AccountID:    rc.AccountID,
			Stage:        rc.Stage,
			RequestID:    rc.RequestID,
			APIID:        rc.APIID,
			DomainName:   rc.DomainName,
			DomainPrefix: rc.DomainPrefix,
			Time:         rc.RequestTime,
			TimeEpoch:    rc.RequestTimeEpoch,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    p.HTTPMethod,
				Path:      p.Path,
				Protocol:  rc.Protocol,
				SourceIP:  rc.Identity.SourceIP,
				UserAgent: rc.Identity.UserAgent,
			},
		},
	}
}

// joinHeaders folds a proxy event's headers into an HTTP API event's: the
// multi-value ones when there are any (the single-value map holds only the
// last of each), names lower-cased, values joined with commas in the order
// they came, names differing only in case merged in sorted order; Cookie
// values split into cookies.
func joinHeaders(single map[string]string, multi map[string][]string) (map[string]string, []string) {
	if len(multi) == 0 {
		multi = make(map[string][]string, len(single))
		for k, v := range single {
			multi[k] = []string{v}
		}
	}
	if len(multi) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(multi))
	var cookies []string
	for _, k := range sortedKeys(multi) {
		name := strings.ToLower(k)
		if name == "cookie" {
			for _, v := range multi[k] {
				for c := range strings.SplitSeq(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						cookies = append(cookies, c)
					}
				}
			}
			continue
		}
		for _, v := range multi[k] {
			if prev, ok := out[name]; ok {
				out[name] = prev + "," + v
			} else {
				out[name] = v
			}
		}
	}
	return out, cookies
}

// joinQuery folds a proxy event's query parameters into an HTTP API
// event's, and writes the query string they came from (API Gateway passes
// the REST API only the decoded values).
func joinQuery(single map[string]string, multi map[string][]string) (map[string]string, string) {
	if len(multi) == 0 {
		multi = make(map[string][]string, len(single))
		for k, v := range single {
			multi[k] = []string{v}
		}
	}
	if len(multi) == 0 {
		return nil, ""
	}
	out := make(map[string]string, len(multi))
	var raw strings.Builder
	for _, k := range sortedKeys(multi) {
		out[k] = strings.Join(multi[k], ",")
		for _, v := range multi[k] {
			if raw.Len() > 0 {
				raw.WriteByte('&')
			}
			raw.WriteString(url.QueryEscape(k) + "=" + url.QueryEscape(v))
		}
	}
	return out, raw.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// proxyResponse is r as a REST API proxy integration takes it: the same
// fields, less cookies, which it knows only as Set-Cookie headers.
func proxyResponse(r *events.APIGatewayV2HTTPResponse) events.APIGatewayProxyResponse {
	out := events.APIGatewayProxyResponse{
		StatusCode: r.StatusCode, Headers: r.Headers, MultiValueHeaders: r.MultiValueHeaders,
		Body: r.Body, IsBase64Encoded: r.IsBase64Encoded,
	}
	if len(r.Cookies) > 0 {
		mv := make(map[string][]string, len(r.MultiValueHeaders)+1)
		for k, v := range r.MultiValueHeaders {
			mv[k] = v
		}
		mv["Set-Cookie"] = append(slices.Clone(mv["Set-Cookie"]), r.Cookies...)
		out.MultiValueHeaders = mv
	}
	return out
}

// encodeResponse writes r as lambda.NewHandler writes a response.
func encodeResponse(r *events.APIGatewayV2HTTPResponse) ([]byte, error) {
	return gojson.MarshalWithOption(r, gojson.DisableHTMLEscape())
}

// encodeProxyResponse writes r as lambda.NewHandler writes a response.
func encodeProxyResponse(r *events.APIGatewayProxyResponse) ([]byte, error) {
	return gojson.MarshalWithOption(r, gojson.DisableHTMLEscape())
}

// Package localstack runs Hourglass on one machine: an HTTP server that turns
// requests into API Gateway v2 events for the same handlers Lambda runs, the
// poller loop, and an in-process stand-in for SQS feeding the consumer.
package localstack

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/httpapi"
)

// APIHandler is a Lambda HTTP API handler.
type APIHandler func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Gateway is an http.Handler playing API Gateway (HTTP API, payload 2.0) in
// front of an APIHandler.
type Gateway struct {
	Handler APIHandler
	Log     *slog.Logger
	// Route, if set, names the route template of a request ("" for none);
	// Observe, if set, hears of every answer by that name, with its status
	// and how long it took. Templates, not paths: ids must not become
	// labels.
	Route   func(method, path string) string
	Observe func(route string, status int, took time.Duration)
}

func (g Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.Observe != nil {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		w = rec
		defer func() { g.Observe(g.routeOf(r), rec.status, time.Since(start)) }()
	}
	// Read one byte past the handler's limit so it can answer 413 itself.
	body, err := io.ReadAll(io.LimitReader(r.Body, httpapi.MaxBody+1))
	if err != nil {
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	resp, err := g.Handler(r.Context(), Event(r, body))
	if err != nil {
		g.Log.Error("handler failed", "error", err.Error())
		http.Error(w, `{"message":"Internal Server Error"}`, http.StatusInternalServerError)
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		w.Header().Add("Set-Cookie", c)
	}
	out := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if out, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			g.Log.Error("handler returned bad base64", "error", err.Error())
			http.Error(w, `{"message":"Internal Server Error"}`, http.StatusInternalServerError)
			return
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// routeOf is "METHOD /template" of r, or "METHOD (no route)".
func (g Gateway) routeOf(r *http.Request) string {
	if g.Route != nil {
		if p := g.Route(r.Method, r.URL.EscapedPath()); p != "" {
			return r.Method + " " + p
		}
	}
	return r.Method + " (no route)"
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Event builds the API Gateway v2 event of an HTTP request, as API Gateway
// does: lower-case header names, repeated values joined by commas, a binary
// body base64-encoded.
func Event(r *http.Request, body []byte) events.APIGatewayV2HTTPRequest {
	headers := make(map[string]string, len(r.Header))
	for k, vs := range r.Header {
		if strings.EqualFold(k, "Cookie") {
			continue
		}
		headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	if r.Host != "" {
		headers["host"] = r.Host
	}
	var query map[string]string
	if q := r.URL.Query(); len(q) > 0 {
		query = make(map[string]string, len(q))
		for k, vs := range q {
			query[k] = strings.Join(vs, ",")
		}
	}
	var cookies []string
	for _, c := range r.Cookies() {
		cookies = append(cookies, c.String())
	}
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	now := time.Now().UTC()
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              "$default",
		RawPath:               r.URL.EscapedPath(),
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:   "$default",
			AccountID:  "local",
			Stage:      "$default",
			RequestID:  requestID(),
			APIID:      "local",
			DomainName: r.Host,
			Time:       now.Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:  now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  ip,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if utf8.Valid(body) {
		ev.Body = string(body)
	} else {
		ev.Body = base64.StdEncoding.EncodeToString(body)
		ev.IsBase64Encoded = true
	}
	return ev
}

func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/httpapi"
)

// fuzzRouter is the whole API on a miniredis, configured from vars as
// newStack does (jwt mode unless vars say otherwise), with every rate limit
// on so the limiter parses what it is given too.
func fuzzRouter(f *testing.F, m *miniredis.Miniredis, vars map[string]string) *httpapi.Router {
	f.Helper()
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		if name, _, _ := strings.Cut(ct.Field(i).Tag.Get("env"), ","); name != "" {
			f.Setenv(name, "")
			_ = os.Unsetenv(name)
		}
	}
	f.Setenv("REDIS_URL", "redis://"+m.Addr())
	f.Setenv("HOURGLASS_AUTH", "jwt")
	f.Setenv("HOURGLASS_ADMIN_ROLE_ARNS", fixtureAdminRole)
	f.Setenv("HOURGLASS_RATE_PURCHASE_USER", "1000/s")
	f.Setenv("HOURGLASS_RATE_PURCHASE_SOURCE", "1000/s")
	f.Setenv("HOURGLASS_RATE_WITHDRAWAL_USER", "1000/s")
	f.Setenv("HOURGLASS_RATE_WITHDRAWAL_SOURCE", "1000/s")
	for k, v := range vars {
		f.Setenv(k, v)
	}
	cfg, err := config.Load(config.Local)
	if err != nil {
		f.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = rdb.Close() })
	a, err := app.New(cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), rdb)
	if err != nil {
		f.Fatal(err)
	}
	return a.Router()
}

// fuzzStatuses is every status the API answers on purpose. 500 is not one:
// no input may reach an internal error.
var fuzzStatuses = map[int]bool{200: true, 202: true, 400: true, 401: true, 403: true, 404: true, 405: true,
	409: true, 410: true, 413: true, 415: true, 422: true, 429: true, 503: true}

// checkFuzzResponse holds what every answer to any input must be.
func checkFuzzResponse(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
	t.Helper()
	if !fuzzStatuses[resp.StatusCode] {
		t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
	}
	if !json.Valid([]byte(resp.Body)) {
		t.Fatalf("body is not JSON: %q", resp.Body)
	}
	if resp.StatusCode >= 400 {
		var p struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Status != resp.StatusCode || p.Code == "" ||
			resp.Headers["Content-Type"] != "application/problem+json" {
			t.Fatalf("%d is not a problem: %s", resp.StatusCode, resp.Body)
		}
		if (resp.StatusCode == 429 || resp.StatusCode == 503) && resp.Headers["Retry-After"] == "" {
			t.Fatalf("%d without Retry-After", resp.StatusCode)
		}
	}
}

// FuzzServe runs arbitrary Lambda payloads through the Lambda library into
// the router, in jwt and in dev mode: any payload that decodes as an API
// Gateway event gets a deliberate answer (never a panic, an invoke error or
// a 500), JSON, a problem with a code when it is an error.
func FuzzServe(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "..", "events", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		if strings.Contains(name, "consumer") || strings.Contains(name, "poller") {
			continue
		}
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		// The same event as the local stack would send it in dev mode.
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			f.Fatal(err)
		}
		ev.RequestContext.Authorizer = nil
		ev.Headers["x-user-id"] = "fuzz-user"
		ev.Headers["x-admin-token"] = "fuzz-admin"
		dev, _ := json.Marshal(ev)
		f.Add(dev)
	}
	f.Add([]byte(`{"rawPath":"/v1/withdrawals","requestContext":{"http":{"method":"GET"}},"headers":{"x-user-id":"u"},"queryStringParameters":{"limit":"0","cursor":"!!"}}`))
	f.Add([]byte(`{"rawPath":"/v1/withdrawals","requestContext":{"http":{"method":"POST","sourceIp":"::1"}},"headers":{"x-user-id":"u","content-type":"application/json; charset=utf-8","idempotency-key":"k"},"body":"e30=","isBase64Encoded":true}`))
	f.Add([]byte(`{"rawPath":"//v1//seckill/items/%2e%2e/purchases","requestContext":{"http":{"method":"POST"}},"headers":{"x-user-id":"\u0000"}}`))
	f.Add([]byte(`{}`))

	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	jwt := lambda.NewHandler(fuzzRouter(f, m, nil))
	dev := lambda.NewHandler(fuzzRouter(f, m, map[string]string{"HOURGLASS_AUTH": "dev", "HOURGLASS_ADMIN_TOKEN": "fuzz-admin"}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		var ev events.APIGatewayV2HTTPRequest
		decodable := json.NewDecoder(bytes.NewReader(payload)).Decode(&ev) == nil
		for _, h := range []lambda.Handler{jwt, dev} {
			out, err := h.Invoke(context.Background(), payload)
			if !decodable {
				continue // the Lambda library refuses it before we see it
			}
			if err != nil {
				t.Fatalf("invoke error %v", err)
			}
			var resp events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatalf("response %s: %v", out, err)
			}
			checkFuzzResponse(t, resp)
		}
	})
}

// FuzzRequestParts builds dev-mode requests from a method, a path (ids), a
// query string (limit, cursor), a user and a body, as the local stack or
// API Gateway would hand them over.
func FuzzRequestParts(f *testing.F) {
	for _, s := range []struct{ method, path, query, user, body string }{
		{"GET", "/v1/withdrawals", "limit=20", "u", ""},
		{"GET", "/v1/withdrawals", "limit=100&cursor=d2RfMDFLQjZZMFozTTVROFIyVDRWNlc4WDBZMVo", "u", ""},
		{"GET", "/v1/withdrawals", "limit=-1&cursor=%FF", "u", ""},
		{"GET", "/v1/withdrawals", "limit=1e2", "u", ""},
		{"GET", "/v1/withdrawals", "limit=99999999999999999999", "u", ""},
		{"GET", "/v1/withdrawals/wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "", "u", ""},
		{"DELETE", "/v1/withdrawals/wd_", "", "u", ""},
		{"DELETE", "/v1/withdrawals/wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "", "", ""},
		{"POST", "/v1/withdrawals", "", "u", `{"amount":"1","currency":"USD","destination":"d","delay_seconds":5}`},
		{"PUT", "/v1/seckill/items/phone-1", "", "", `{"stock":5,"ends_at":"2099-01-01T00:00:00Z"}`},
		{"POST", "/v1/seckill/items/phone-1/purchases", "", "u", `{"quantity":1}`},
		{"GET", "/v1/seckill/items/phone-1/purchases/me", "", "u", ""},
		{"GET", "/v1/seckill/items/phone-1", "", "", ""},
		{"GET", "/v1/admin/stats", "", "", ""},
		{"PATCH", "/healthz", "", "", ""},
	} {
		f.Add(s.method, s.path, s.query, s.user, s.body)
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	rt := fuzzRouter(f, m, map[string]string{"HOURGLASS_AUTH": "dev", "HOURGLASS_ADMIN_TOKEN": "fuzz-admin"})
	f.Fuzz(func(t *testing.T, method, path, query, user, body string) {
		ev := events.APIGatewayV2HTTPRequest{
			Version: "2.0", RouteKey: "$default", RawPath: path, RawQueryString: query,
			Headers: map[string]string{"content-type": "application/json", "idempotency-key": "fuzz-key",
				"x-user-id": user, "x-admin-token": "fuzz-admin"},
			Body: body,
			RequestContext: events.APIGatewayV2HTTPRequestContext{
				RequestID: "fuzz", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
					Method: method, Path: path, SourceIP: "203.0.113.7"},
			},
		}
		if q, err := url.ParseQuery(query); err == nil && len(q) > 0 {
			ev.QueryStringParameters = map[string]string{}
			for k, vs := range q {
				ev.QueryStringParameters[k] = strings.Join(vs, ",")
			}
		}
		resp, err := rt.Serve(context.Background(), ev)
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		checkFuzzResponse(t, resp)
	})
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/httpapi"
)

// An error a handler returns is logged with the request's id, so the line
// joins the request line (and, for a create, the withdrawal's later lines).
func TestErrorLinesCarryTheRequestID(t *testing.T) {
	var buf bytes.Buffer
	rt := httpapi.NewRouter(httpapi.Auth{Mode: httpapi.AuthDev}, slog.New(slog.NewJSONHandler(&buf, nil)), 0)
	rt.Handle(http.MethodGet, "/boom", httpapi.Public, false, func(context.Context, *httpapi.Request) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{}, errors.New("boom")
	})
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/boom", RequestContext: events.APIGatewayV2HTTPRequestContext{
		RequestID: "req-9", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: http.MethodGet, Path: "/boom"},
	}}
	if resp, _ := rt.Serve(context.Background(), ev); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d", resp.StatusCode)
	}
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("want the error line and the request line, got %s", buf.Bytes())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		if m["request_id"] != "req-9" {
			t.Errorf("line without the request id: %s", l)
		}
	}
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	gojson "github.com/goccy/go-json"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/apievent"
)

// lambdaDecode reads payload as lambda.NewHandler does.
func lambdaDecode(payload []byte) (events.APIGatewayV2HTTPRequest, error) {
	var ev events.APIGatewayV2HTTPRequest
	err := json.NewDecoder(bytes.NewReader(payload)).Decode(&ev)
	return ev, err
}

// lambdaEncode writes r as lambda.NewHandler does.
func lambdaEncode(t testing.TB, r events.APIGatewayV2HTTPResponse) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// apiEvents are the HTTP events of events/ and of the benchmarks.
func apiEvents(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{
		"bench purchase": apievent.Purchase(nil, "phone-2026", "user-1", "req-1"),
		"bench create":   apievent.Create(nil, "user-1", "key-1", "req-1"),
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"rawPath"`)) {
			out[filepath.Base(f)] = b
		}
	}
	return out
}

// TestDecodeEvent: every HTTP event of events/ and of the benchmarks is
// read by go-json itself (not left to encoding/json), into exactly what
// encoding/json reads.
func TestDecodeEvent(t *testing.T) {
	for name, raw := range apiEvents(t) {
		t.Run(name, func(t *testing.T) {
			want, err := lambdaDecode(raw)
			if err != nil {
				t.Fatal(err)
			}
			var got events.APIGatewayV2HTTPRequest
			if err := gojson.Unmarshal(raw, &got); err != nil {
				t.Fatalf("go-json refuses an event API Gateway sends: %v", err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("go-json differs from encoding/json (-want +got):\n%s", d)
			}
		})
	}
}

// checkDecode: decodeEvent takes what encoding/json takes, refuses what it
// refuses, and reads the same.
func checkDecode(t *testing.T, raw []byte) {
	t.Helper()
	want, werr := lambdaDecode(raw)
	got, gerr := decodeEvent(raw)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("decodeEvent(%q): %v, encoding/json: %v", raw, gerr, werr)
	}
	if d := cmp.Diff(want, got); werr == nil && d != "" {
		t.Fatalf("decodeEvent(%q) differs from encoding/json (-want +got):\n%s", raw, d)
	}
}

// TestDecodeEventOddities: what API Gateway does not send (trailing data,
// keys in another case, nulls, escapes, bytes past ASCII or invalid UTF-8,
// numbers out of range) ends as encoding/json ends it.
func TestDecodeEventOddities(t *testing.T) {
	for _, raw := range []string{
		``, `null`, `[]`, `{"rawPath":"/a"} {}`, `{"rawPath":"/a"} x`, `{"RawPath":"/a"}`, `{"RAWPATH":"/a","rawPath":"/b"}`,
		`{"rawPath":null}`, `{"rawPath":"\u0041"}`, `{"rawPath":"\ud800"}`,
		`{"rawPath":"é"}`, `{"rawPath":"a` + "\xff" + `"}`, `{"rawPath":"a` + "\x01" + `"}`, `{"unknown":1}`, `{"requestContext":{"timeEpoch":1.5}}`,
		`{"requestContext":{"timeEpoch":01}}`, `{"requestContext":{"timeEpoch":99999999999999999999}}`,
		`{"requestContext":{"authorizer":{"lambda":{}}}}`, `{"isBase64Encoded":truex}`, `{"headers":{"a":1}}`,
		`{"headers":{"a":"1"},"headers":{"b":"2"}}`, `{"headers":{"a":"1"},"headers":null}`,
		`{"requestContext":{"authorizer":{"iam":{"cognitoIdentity":{"amr":null}}}}}`, `{"rawPath":"a",}`, `{"cookies":["a",]}`, `{"rawPath" "a"}`,
	} {
		checkDecode(t, []byte(raw))
	}
}

// FuzzDecodeEvent: whatever the payload, decodeEvent ends as encoding/json
// ends it, and whatever go-json takes, encoding/json reads the same.
func FuzzDecodeEvent(f *testing.F) {
	for _, raw := range apiEvents(f) {
		f.Add(raw)
	}
	f.Add([]byte(`{"headers":{"a":"1"},"headers":{"b":"2"},"cookies":[],"requestContext":{"authorizer":{},"timeEpoch":-0}}`))
	f.Add([]byte(`{"body":"{\"a\":\"\\\/\b\f\n\r\t\"}","requestContext":{"authorizer":{"jwt":{}},"authorizer":{"jwt":{"scopes":[]}}}}`))
	f.Add([]byte(`{"RawPath":"/a","rawpath":"é\xff","body":"\ud800"} {}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkDecode(t, raw)
	})
}

// FuzzAppendResponse: a response is written byte for byte as
// lambda.NewHandler writes it.
func FuzzAppendResponse(f *testing.F) {
	f.Add(202, "Content-Type", "application/json", `{"purchase_id":"p_1","status":"reserved"}`, false, "")
	f.Add(400, "Retry-After", "<1> & \u2028", "\"\\\b\f\n\r\t\x00\x1f\x7f \xff\u2029 é 😀", true, "a=b")
	f.Add(0, "", "", "", false, "\x80")
	f.Fuzz(func(t *testing.T, status int, key, value, body string, b64 bool, cookie string) {
		for _, r := range []events.APIGatewayV2HTTPResponse{
			{StatusCode: status, Headers: map[string]string{key: value, "X-Request-Id": body, strings.ToLower(key): cookie}, Body: body, IsBase64Encoded: b64},
			{StatusCode: status, Body: body, Cookies: []string{cookie, value}, MultiValueHeaders: map[string][]string{key: {value, body}, "b": nil, "c": {}}},
			{StatusCode: status, Headers: map[string]string{}, Cookies: []string{}, MultiValueHeaders: map[string][]string{}},
		} {
			got, err := encodeResponse(&r)
			if want := lambdaEncode(t, r); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("encodeResponse(%+v)\n got %s %v\nwant %s", r, got, err, want)
			}
		}
	})
}

// BenchmarkDecodeEvent and BenchmarkEncodeResponse hold go-json against
// encoding/json on the purchase event of the handler benchmark and its
// answer, in one run:
//
//	go test -run '^$' -bench 'DecodeEvent|EncodeResponse' -benchmem ./shared/httpapi/
func BenchmarkDecodeEvent(b *testing.B) {
	raw := apievent.Purchase(nil, "bench-item", "user-12345", "req-12345")
	for _, c := range []struct {
		name   string
		decode func([]byte) (events.APIGatewayV2HTTPRequest, error)
	}{{"go-json", decodeEvent}, {"encoding-json", lambdaDecode}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodeResponse(b *testing.B) {
	r := events.APIGatewayV2HTTPResponse{StatusCode: 202,
		Headers: map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "X-Request-Id": "req-12345"},
		Body:    `{"purchase_id":"p_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z","item_id":"bench-item","status":"reserved","quantity":1}`}
	for _, c := range []struct {
		name   string
		encode func(*events.APIGatewayV2HTTPResponse) ([]byte, error)
	}{{"go-json", encodeResponse}, {"encoding-json", func(r *events.APIGatewayV2HTTPResponse) ([]byte, error) { return lambdaEncode(b, *r), nil }}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.encode(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// lambdaDecodeRequest is decodeRequest on encoding/json alone: what the
// two readings of a payload must come to.
func lambdaDecodeRequest(payload []byte) (events.APIGatewayV2HTTPRequest, bool, error) {
	ev, err := lambdaDecode(payload)
	if err == nil && ev.Version == "2.0" {
		return ev, false, nil
	}
	var p events.APIGatewayProxyRequest
	if json.NewDecoder(bytes.NewReader(payload)).Decode(&p) == nil && p.HTTPMethod != "" {
		return fromProxyRequest(&p), true, nil
	}
	return ev, false, err
}

// proxyEvents are the REST API events of events/ (payload format 1.0).
func proxyEvents(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"httpMethod"`)) {
			out[filepath.Base(f)] = b
		}
	}
	if len(out) == 0 {
		t.Fatal("events/ holds no REST API event")
	}
	return out
}

// TestDecodeProxyEvent: the REST API's payout callback becomes the HTTP
// API's, field by field, as API Gateway v2 would have sent it.
func TestDecodeProxyEvent(t *testing.T) {
	raw := proxyEvents(t)["webhook-payout-rest.json"]
	got, proxy, err := decodeRequest(raw)
	if err != nil || !proxy {
		t.Fatalf("decodeRequest: proxy %t, %v", proxy, err)
	}
	var p events.APIGatewayProxyRequest
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	want := events.APIGatewayV2HTTPRequest{
		Version:        "1.0",
		RouteKey:       "POST /v1/webhooks/payouts",
		RawPath:        "/v1/webhooks/payouts",
		RawQueryString: "",
		Headers: map[string]string{
			"content-type": "application/json", "host": "rst456.execute-api.eu-west-1.amazonaws.com",
			"user-agent": "payout-provider/2.3", "x-amzn-trace-id": "Root=1-6929c120-0123456789abcdef01234567",
			"x-forwarded-for": "198.51.100.20", "x-forwarded-port": "443", "x-forwarded-proto": "https",
			"x-hourglass-signature": "t=1795946400,v1=0000000000000000000000000000000000000000000000000000000000000000",
		},
		Body: p.Body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: "POST /v1/webhooks/payouts", AccountID: "123456789012", Stage: "webhooks", RequestID: "req-1",
			APIID: "rst456", DomainName: "rst456.execute-api.eu-west-1.amazonaws.com", DomainPrefix: "rst456",
			Time: "29/Nov/2026:10:00:00 +0000", TimeEpoch: 1795946400000,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: "POST", Path: "/v1/webhooks/payouts", Protocol: "HTTP/1.1",
				SourceIP: "198.51.100.20", UserAgent: "payout-provider/2.3",
			},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the REST API's event, read (-want +got):\n%s", d)
	}
}

// TestProxyEventFolding: repeated headers and query parameters are joined
// with commas as API Gateway v2 joins them, names differing in case merge,
// the Cookie header becomes cookies, and an authorizer's claims never
// reach the router.
func TestProxyEventFolding(t *testing.T) {
	raw := []byte(`{"httpMethod":"GET","path":"/v1/withdrawals","resource":"/v1/withdrawals",
		"headers":{"X-A":"2","Cookie":"b=2"},
		"multiValueHeaders":{"X-A":["1","2"],"x-a":["3"],"Cookie":["a=1; b=2"],"Accept":["*/*"]},
		"queryStringParameters":{"limit":"5"},
		"multiValueQueryStringParameters":{"limit":["5","6"],"cursor":["a b&c"]},
		"requestContext":{"authorizer":{"claims":{"sub":"mallory"},"principalId":"mallory"},"identity":{"sourceIp":"203.0.113.9"}}}`)
	got, proxy, err := decodeRequest(raw)
	if err != nil || !proxy {
		t.Fatalf("decodeRequest: proxy %t, %v", proxy, err)
	}
	if d := cmp.Diff(map[string]string{"x-a": "1,2,3", "accept": "*/*"}, got.Headers); d != "" {
		t.Errorf("headers (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"a=1", "b=2"}, got.Cookies); d != "" {
		t.Errorf("cookies (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"limit": "5,6", "cursor": "a b&c"}, got.QueryStringParameters); d != "" {
		t.Errorf("query (-want +got):\n%s", d)
	}
	if want := "cursor=a+b%26c&limit=5&limit=6"; got.RawQueryString != want {
		t.Errorf("raw query %q, want %q", got.RawQueryString, want)
	}
	if got.RequestContext.Authorizer != nil || got.RequestContext.HTTP.SourceIP != "203.0.113.9" {
		t.Errorf("authorizer %+v, source %q: want none, 203.0.113.9", got.RequestContext.Authorizer, got.RequestContext.HTTP.SourceIP)
	}
	// Without multi-value maps, the single-value ones serve.
	got, _, _ = decodeRequest([]byte(`{"httpMethod":"POST","headers":{"Content-Type":"a"},"queryStringParameters":{"q":"1"}}`))
	if got.Headers["content-type"] != "a" || got.QueryStringParameters["q"] != "1" || got.RawQueryString != "q=1" {
		t.Errorf("single-value maps: %+v %+v %q", got.Headers, got.QueryStringParameters, got.RawQueryString)
	}
}

// checkDecodeRequest: decodeRequest ends as its encoding/json reading
// ends, on either format.
func checkDecodeRequest(t *testing.T, raw []byte) {
	t.Helper()
	want, wproxy, werr := lambdaDecodeRequest(raw)
	got, gproxy, gerr := decodeRequest(raw)
	if (werr == nil) != (gerr == nil) || wproxy != gproxy {
		t.Fatalf("decodeRequest(%q): proxy %t, %v; encoding/json: proxy %t, %v", raw, gproxy, gerr, wproxy, werr)
	}
	if d := cmp.Diff(want, got); werr == nil && d != "" {
		t.Fatalf("decodeRequest(%q) differs from encoding/json (-want +got):\n%s", raw, d)
	}
}

// TestDecodeRequestOddities: the shapes between the two formats.
func TestDecodeRequestOddities(t *testing.T) {
	for _, raw := range []string{
		``, `{}`, `{"httpMethod":""}`, `{"httpMethod":"GET"}`, `{"version":"2.0","httpMethod":"GET"}`,
		`{"version":"1.0","httpMethod":"GET","path":"/healthz"}`, `{"httpMethod":1}`, `{"httpMethod":"GET","multiValueHeaders":{"a":"1"}}`,
		`{"httpMethod":"GET","requestContext":{"http":1}}`, `{"HTTPMETHOD":"GET"}`, `{"httpMethod":"GET"} x`,
		`{"httpMethod":"GET","multiValueHeaders":{"a":null,"b":[]},"multiValueQueryStringParameters":{"q":null}}`,
		`{"httpMethod":"GET","requestContext":{"authorizer":{"n":1e999}}}`,
	} {
		checkDecodeRequest(t, []byte(raw))
	}
}

// FuzzDecodeRequest: whatever the payload, in either format, decodeRequest
// ends as encoding/json would have it end.
func FuzzDecodeRequest(f *testing.F) {
	for _, raw := range apiEvents(f) {
		f.Add(raw)
	}
	for _, raw := range proxyEvents(f) {
		f.Add(raw)
	}
	f.Add([]byte(`{"httpMethod":"GET","multiValueHeaders":{"X-A":["1","2"],"x-a":["3"],"Cookie":["a=1; b=2"]},"multiValueQueryStringParameters":{"q":["1","2"]}}`))
	f.Add([]byte(`{"httpMethod":"POST","headers":{"a":"1"},"headers":null,"requestContext":{"identity":{"sourceIp":"\ud800"}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkDecodeRequest(t, raw)
	})
}

// lambdaEncodeProxy writes r as lambda.NewHandler does.
func lambdaEncodeProxy(t testing.TB, r events.APIGatewayProxyResponse) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// TestProxyResponse: the REST API gets the router's answer in the fields
// it reads, cookies as Set-Cookie headers, never a cookies field.
func TestProxyResponse(t *testing.T) {
	r := events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"},
		MultiValueHeaders: map[string][]string{"Set-Cookie": {"z=0"}}, Body: `{"a":"<b>"}`, Cookies: []string{"a=1", "b=2"}}
	p := proxyResponse(&r)
	got, err := encodeProxyResponse(&p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"statusCode":200,"headers":{"Content-Type":"application/json"},"multiValueHeaders":{"Set-Cookie":["z=0","a=1","b=2"]},"body":"{\"a\":\"<b>\"}"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if len(r.MultiValueHeaders["Set-Cookie"]) != 1 {
		t.Errorf("proxyResponse changed the router's response: %v", r.MultiValueHeaders)
	}
}

// FuzzEncodeProxyResponse: a REST API response is written byte for byte
// as lambda.NewHandler writes it.
func FuzzEncodeProxyResponse(f *testing.F) {
	f.Add(202, "Content-Type", "application/json", `{"withdrawal_id":"wd_1","status":"paid"}`, false, "")
	f.Add(400, "Retry-After", "<1> & \u2028", "\"\\\b\f\n\r\t\x00\x1f\x7f \xff\u2029 é 😀", true, "a=b")
	f.Fuzz(func(t *testing.T, status int, key, value, body string, b64 bool, cookie string) {
		for _, v2 := range []events.APIGatewayV2HTTPResponse{
			{StatusCode: status, Headers: map[string]string{key: value}, Body: body, IsBase64Encoded: b64},
			{StatusCode: status, Body: body, Cookies: []string{cookie, value}, MultiValueHeaders: map[string][]string{key: {value, body}, "b": nil}},
		} {
			r := proxyResponse(&v2)
			got, err := encodeProxyResponse(&r)
			if want := lambdaEncodeProxy(t, r); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("encodeProxyResponse(%+v)\n got %s %v\nwant %s", r, got, err, want)
			}
		}
	})
}

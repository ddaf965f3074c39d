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

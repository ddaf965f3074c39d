package httpapi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
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

// TestDecodeEvent: every HTTP event of events/ is read by the router's own
// decoder, into exactly what encoding/json reads.
func TestDecodeEvent(t *testing.T) {
	for name, raw := range apiEvents(t) {
		t.Run(name, func(t *testing.T) {
			want, err := lambdaDecode(raw)
			if err != nil {
				t.Fatal(err)
			}
			var got events.APIGatewayV2HTTPRequest
			if !decodeEvent(raw, &got) {
				t.Fatal("decodeEvent gave up on an event API Gateway sends")
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("decodeEvent differs from encoding/json (-want +got):\n%s", d)
			}
		})
	}
}

// TestDecodeEventGivesUp: what the decoder does not know for certain is
// left to encoding/json.
func TestDecodeEventGivesUp(t *testing.T) {
	for _, raw := range []string{
		``, `null`, `[]`, `{"rawPath":"/a"} {}`, `{"RawPath":"/a"}`, `{"rawPath":null}`, `{"rawPath":"\u0041"}`,
		`{"rawPath":"é"}`, `{"rawPath":"a` + "\x01" + `"}`, `{"unknown":1}`, `{"requestContext":{"timeEpoch":1.5}}`,
		`{"requestContext":{"timeEpoch":01}}`, `{"requestContext":{"timeEpoch":99999999999999999999}}`,
		`{"requestContext":{"authorizer":{"lambda":{}}}}`, `{"isBase64Encoded":truex}`, `{"headers":{"a":1}}`,
		`{"requestContext":{"authorizer":{"iam":{"cognitoIdentity":{"amr":null}}}}}`, `{"rawPath":"a",}`, `{"cookies":["a",]}`, `{"rawPath" "a"}`,
	} {
		var ev events.APIGatewayV2HTTPRequest
		if decodeEvent([]byte(raw), &ev) {
			t.Errorf("decodeEvent(%q) took it: %+v", raw, ev)
		}
	}
}

// FuzzDecodeEvent: whatever the decoder takes, encoding/json reads the same.
func FuzzDecodeEvent(f *testing.F) {
	for _, raw := range apiEvents(f) {
		f.Add(raw)
	}
	f.Add([]byte(`{"headers":{"a":"1"},"headers":{"b":"2"},"cookies":[],"requestContext":{"authorizer":{},"timeEpoch":-0}}`))
	f.Add([]byte(`{"body":"{\"a\":\"\\\/\b\f\n\r\t\"}","requestContext":{"authorizer":{"jwt":{}},"authorizer":{"jwt":{"scopes":[]}}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got events.APIGatewayV2HTTPRequest
		if !decodeEvent(raw, &got) {
			return
		}
		want, err := lambdaDecode(raw)
		if err != nil {
			t.Fatalf("decodeEvent took %q, encoding/json refuses it: %v", raw, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("decodeEvent(%q) differs from encoding/json (-want +got):\n%s", raw, d)
		}
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
			if got, want := appendResponse(nil, &r), lambdaEncode(t, r); !bytes.Equal(got, want) {
				t.Fatalf("appendResponse(%+v)\n got %s\nwant %s", r, got, want)
			}
		}
	})
}

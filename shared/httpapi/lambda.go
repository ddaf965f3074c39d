package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Invoke makes the router a lambda.Handler, so that a function's main
// passes it to lambda.Start as it is: the event's JSON in, the response's
// JSON out, exactly as lambda.NewHandler(rt.Serve) would read and write them
// (encoding/json, HTML left unescaped), without reflection. The events API
// Gateway sends are read by a decoder of their own shape, several times
// cheaper than encoding/json's; anything it does not know for certain (an
// unknown or oddly cased key, a null, a \u escape, a byte past ASCII) is left
// to encoding/json, which then decides: the result is always the one
// encoding/json gives.
func (rt *Router) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var ev events.APIGatewayV2HTTPRequest
	if !decodeEvent(payload, &ev) {
		ev = events.APIGatewayV2HTTPRequest{}
		// As lambda.NewHandler reads it: one value, what follows ignored.
		if err := json.NewDecoder(bytes.NewReader(payload)).Decode(&ev); err != nil {
			return nil, err
		}
	}
	resp, err := rt.Serve(ctx, ev)
	if err != nil {
		return nil, err
	}
	return appendResponse(make([]byte, 0, 160+len(resp.Body)+64*len(resp.Headers)), &resp), nil
}

// eventDecoder reads the JSON of an API Gateway v2 HTTP event. Every method
// returns false where it gives up, and the caller falls back to
// encoding/json.
type eventDecoder struct {
	b []byte
	i int
}

// decodeEvent fills ev from payload and reports whether it could.
func decodeEvent(payload []byte, ev *events.APIGatewayV2HTTPRequest) bool {
	d := eventDecoder{b: payload}
	if !d.object(func(key []byte) bool {
		switch string(key) {
		case "version":
			return d.str(&ev.Version)
		case "routeKey":
			return d.str(&ev.RouteKey)
		case "rawPath":
			return d.str(&ev.RawPath)
		case "rawQueryString":
			return d.str(&ev.RawQueryString)
		case "cookies":
			return d.strings(&ev.Cookies)
		case "headers":
			return d.strMap(&ev.Headers)
		case "queryStringParameters":
			return d.strMap(&ev.QueryStringParameters)
		case "pathParameters":
			return d.strMap(&ev.PathParameters)
		case "stageVariables":
			return d.strMap(&ev.StageVariables)
		case "requestContext":
			return d.requestContext(&ev.RequestContext)
		case "body":
			return d.str(&ev.Body)
		case "isBase64Encoded":
			return d.boolean(&ev.IsBase64Encoded)
		}
		return false
	}) {
		return false
	}
	d.space()
	return d.i == len(d.b)
}

func (d *eventDecoder) requestContext(rc *events.APIGatewayV2HTTPRequestContext) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "routeKey":
			return d.str(&rc.RouteKey)
		case "accountId":
			return d.str(&rc.AccountID)
		case "stage":
			return d.str(&rc.Stage)
		case "requestId":
			return d.str(&rc.RequestID)
		case "apiId":
			return d.str(&rc.APIID)
		case "domainName":
			return d.str(&rc.DomainName)
		case "domainPrefix":
			return d.str(&rc.DomainPrefix)
		case "time":
			return d.str(&rc.Time)
		case "timeEpoch":
			return d.int64(&rc.TimeEpoch)
		case "http":
			h := &rc.HTTP
			return d.object(func(key []byte) bool {
				switch string(key) {
				case "method":
					return d.str(&h.Method)
				case "path":
					return d.str(&h.Path)
				case "protocol":
					return d.str(&h.Protocol)
				case "sourceIp":
					return d.str(&h.SourceIP)
				case "userAgent":
					return d.str(&h.UserAgent)
				}
				return false
			})
		case "authorizer":
			if rc.Authorizer == nil {
				rc.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}
			}
			a := rc.Authorizer
			return d.object(func(key []byte) bool {
				switch string(key) {
				case "jwt":
				case "iam":
					if a.IAM == nil {
						a.IAM = &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{}
					}
					return d.iam(a.IAM)
				default:
					return false // lambda: left to encoding/json
				}
				if a.JWT == nil {
					a.JWT = &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{}
				}
				j := a.JWT
				return d.object(func(key []byte) bool {
					switch string(key) {
					case "claims":
						return d.strMap(&j.Claims)
					case "scopes":
						return d.strings(&j.Scopes)
					}
					return false
				})
			})
		}
		return false // authentication (mTLS) and anything new
	})
}

func (d *eventDecoder) iam(iam *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "accessKey":
			return d.str(&iam.AccessKey)
		case "accountId":
			return d.str(&iam.AccountID)
		case "callerId":
			return d.str(&iam.CallerID)
		case "principalOrgId":
			return d.str(&iam.PrincipalOrgID)
		case "userArn":
			return d.str(&iam.UserARN)
		case "userId":
			return d.str(&iam.UserID)
		case "cognitoIdentity":
			c := &iam.CognitoIdentity
			return d.object(func(key []byte) bool {
				switch string(key) {
				case "amr":
					return d.strings(&c.AMR)
				case "identityId":
					return d.str(&c.IdentityID)
				case "identityPoolId":
					return d.str(&c.IdentityPoolID)
				}
				return false
			})
		}
		return false
	})
}

func (d *eventDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and reports whether c comes next, consuming it.
func (d *eventDecoder) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling member with each key (valid only during
// the call) to read its value.
func (d *eventDecoder) object(member func(key []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		key, ok := d.raw(nil)
		if !ok || !d.next(':') || !member(key) {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next('}')
	}
}

// raw reads a string into buf, or as a slice of the input when it has no
// escapes.
func (d *eventDecoder) raw(buf []byte) ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c == '\\':
			return d.escaped(append(buf, d.b[start:d.i]...))
		case c < 0x20 || c >= utf8.RuneSelf:
			// Control characters are errors; bytes past ASCII may need
			// encoding/json's repair of bad UTF-8.
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// escaped reads the rest of a string from its first backslash on.
func (d *eventDecoder) escaped(out []byte) ([]byte, bool) {
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return out, true
		case c == '\\':
			if d.i+1 >= len(d.b) {
				return nil, false
			}
			switch e := d.b[d.i+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			default: // \u, and errors
				return nil, false
			}
			d.i += 2
			continue
		case c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
		out = append(out, c)
		d.i++
	}
	return nil, false
}

func (d *eventDecoder) str(dst *string) bool {
	var scratch [64]byte
	s, ok := d.raw(scratch[:0])
	if ok {
		*dst = string(s)
	}
	return ok
}

func (d *eventDecoder) strMap(dst *map[string]string) bool {
	m := *dst
	if m == nil {
		m = make(map[string]string, 8)
		*dst = m
	}
	return d.object(func(key []byte) bool {
		var scratch [64]byte
		v, ok := d.raw(scratch[:0])
		if !ok {
			return false
		}
		m[intern(key)] = intern(v)
		return true
	})
}

// interned are the header names, claim names and values that every event
// repeats: read as these constants, they cost no allocation.
var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"accept", "accept-encoding", "accept-language", "authorization", "content-length", "content-type", "cookie",
		"host", "idempotency-key", "if-match", "origin", "referer", "user-agent", "x-amzn-trace-id",
		"x-forwarded-for", "x-forwarded-port", "x-forwarded-proto", "x-request-id",
		"application/json", "*/*", "gzip", "gzip, deflate, br", "443", "https", "0",
		"aud", "auth_time", "client_id", "cognito:groups", "cognito:username", "email", "event_id", "exp", "iat",
		"iss", "jti", "nbf", "origin_jti", "scope", "scp", "sub", "token_use", "username", "version",
		"access", "id",
	} {
		m[s] = s
	}
	return m
}()

func intern(b []byte) string {
	if s, ok := interned[string(b)]; ok {
		return s
	}
	return string(b)
}

func (d *eventDecoder) strings(dst *[]string) bool {
	if !d.next('[') {
		return false
	}
	out := []string{}
	if !d.next(']') {
		for {
			var s string
			if !d.str(&s) {
				return false
			}
			out = append(out, s)
			if d.next(',') {
				continue
			}
			if !d.next(']') {
				return false
			}
			break
		}
	}
	*dst = out
	return true
}

func (d *eventDecoder) boolean(dst *bool) bool {
	d.space()
	switch {
	case bytes.HasPrefix(d.b[d.i:], []byte("true")):
		*dst, d.i = true, d.i+4
	case bytes.HasPrefix(d.b[d.i:], []byte("false")):
		*dst, d.i = false, d.i+5
	default:
		return false
	}
	return d.delimited()
}

// int64 reads an integer as encoding/json writes one: no fraction, no
// exponent, no leading zero.
func (d *eventDecoder) int64(dst *int64) bool {
	d.space()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i-digits > 1) || !d.delimited() {
		return false
	}
	n, err := strconv.ParseInt(string(d.b[start:d.i]), 10, 64)
	if err != nil {
		return false
	}
	*dst = n
	return true
}

// delimited reports whether a literal ends where a value may end.
func (d *eventDecoder) delimited() bool {
	if d.i == len(d.b) {
		return true
	}
	switch d.b[d.i] {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// appendResponse appends r as encoding/json encodes it with HTML left
// unescaped, as lambda.NewHandler does.
func appendResponse(b []byte, r *events.APIGatewayV2HTTPResponse) []byte {
	b = append(b, `{"statusCode":`...)
	b = strconv.AppendInt(b, int64(r.StatusCode), 10)
	b = append(b, `,"headers":`...)
	b = appendStringMap(b, r.Headers)
	b = append(b, `,"multiValueHeaders":`...)
	if r.MultiValueHeaders == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, k := range sortedKeys(r.MultiValueHeaders) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendStrings(b, r.MultiValueHeaders[k])
		}
		b = append(b, '}')
	}
	b = append(b, `,"body":`...)
	b = appendString(b, r.Body)
	if r.IsBase64Encoded {
		b = append(b, `,"isBase64Encoded":true`...)
	}
	b = append(b, `,"cookies":`...)
	b = appendStrings(b, r.Cookies)
	return append(b, '}')
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	var stack [8]string // a response's few headers, sorted without allocating
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

func appendStrings(b []byte, s []string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, v)
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// appendString is encoding/json's string encoding with HTML left
// unescaped: quotes, backslashes and control characters escaped, bad UTF-8
// as U+FFFD, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

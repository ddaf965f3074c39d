// Package httpapi is the HTTP edge of Hourglass over API Gateway (HTTP API,
// payload format 2.0) events: routing, identity, request checks, and the
// mapping of domain outcomes to responses and RFC 9457 problems. The same
// router serves Lambda and the local stack.
package httpapi

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/validation"
)

// MaxBody is the largest request body accepted.
const MaxBody = 16 << 10

// Access says who may call a route.
type Access int

// Access levels.
const (
	Public Access = iota
	User
	Admin
)

// AuthMode selects how identity is read.
type AuthMode string

// Auth modes.
const (
	// AuthJWT: in AWS the user is the JWT "sub" claim the authorizer checked,
	// and admin routes are authorized by IAM before they reach us, then
	// pinned here to the operator roles (Auth.AdminRoles).
	AuthJWT AuthMode = "jwt"
	// AuthDev: locally the user is the X-User-Id header and admin routes need
	// X-Admin-Token.
	AuthDev AuthMode = "dev"
)

// Auth configures identity.
type Auth struct {
	Mode       AuthMode
	AdminToken string
	// Scope, in jwt mode, is the scope an access token needs for the user
	// routes (HOURGLASS_JWT_SCOPE); empty checks none.
	Scope string
	// AdminRoles, in jwt mode, are the IAM roles whose sessions may call the
	// admin routes (HOURGLASS_ADMIN_ROLE_ARNS); none refuses every call.
	AdminRoles []AdminRole
}

// Request is what a handler sees of an event.
type Request struct {
	Event  *events.APIGatewayV2HTTPRequest
	Params map[string]string
	// UserID is the caller on User routes.
	UserID string
	Body   []byte
}

// Header returns a request header, whatever its case.
func (r *Request) Header(name string) string { return header(r.Event, name) }

// Query returns a query-string parameter.
func (r *Request) Query(name string) string { return r.Event.QueryStringParameters[name] }

// HandlerFunc handles a routed request. An error becomes a problem response:
// a *Problem as it is, others through the router's error mappers.
type HandlerFunc func(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error)

// ErrorMapper turns a domain error into a problem, or returns nil.
type ErrorMapper func(error) *Problem

type route struct {
	method   string
	segments []string
	pattern  string
	access   Access
	jsonBody bool
	handler  HandlerFunc
}

// Router routes API Gateway v2 HTTP events.
type Router struct {
	auth    Auth
	log     *slog.Logger
	timeout time.Duration
	routes  []route
	mappers []ErrorMapper
}

// NewRouter returns an empty router. Each request gets timeout to finish.
func NewRouter(auth Auth, log *slog.Logger, timeout time.Duration) *Router {
	if log == nil {
		log = slog.Default()
	}
	return &Router{auth: auth, log: log, timeout: timeout}
}

// Handle adds a route. pattern is a path whose "{name}" segments are
// parameters. With jsonBody, a non-empty body must be application/json.
func (rt *Router) Handle(method, pattern string, access Access, jsonBody bool, h HandlerFunc) {
	rt.routes = append(rt.routes, route{
		method: method, pattern: pattern, segments: strings.Split(strings.Trim(pattern, "/"), "/"),
		access: access, jsonBody: jsonBody, handler: h,
	})
}

// MapErrors adds a domain error mapper.
func (rt *Router) MapErrors(m ErrorMapper) { rt.mappers = append(rt.mappers, m) }

// Routes lists "METHOD /pattern" of every route.
func (rt *Router) Routes() []string {
	out := make([]string, len(rt.routes))
	for i, r := range rt.routes {
		out[i] = r.method + " " + r.pattern
	}
	return out
}

// Serve is the Lambda handler: it always answers with a response, never an
// error, so API Gateway never turns a failure into a bare 500.
func (rt *Router) Serve(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	start := time.Now()
	if rt.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.timeout)
		defer cancel()
	}
	// A create stores the id with its record: every later step about that
	// withdrawal or order logs it (see package correlation).
	ctx = correlation.With(ctx, ev.RequestContext.RequestID)
	resp, pattern := rt.serve(ctx, &ev)
	if resp.Headers == nil {
		resp.Headers = map[string]string{}
	}
	if id := ev.RequestContext.RequestID; id != "" {
		resp.Headers["X-Request-Id"] = id
	}
	rt.log.LogAttrs(ctx, slog.LevelInfo, "request",
		slog.String("request_id", ev.RequestContext.RequestID),
		slog.String("method", ev.RequestContext.HTTP.Method),
		slog.String("route", pattern),
		slog.Int("status", resp.StatusCode),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	)
	return resp, nil
}

func (rt *Router) serve(ctx context.Context, ev *events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, string) {
	method := ev.RequestContext.HTTP.Method
	path := cmp.Or(ev.RawPath, ev.RequestContext.HTTP.Path)
	r, params, allow := rt.match(method, path)
	if r == nil {
		if len(allow) > 0 {
			p := NewProblem(http.StatusMethodNotAllowed, CodeMethodNotAllowed, method+" is not served here")
			p.Allow = strings.Join(allow, ", ")
			return p.response(), path
		}
		return NewProblem(http.StatusNotFound, CodeNotFound, "no such resource").response(), path
	}
	req := &Request{Event: ev, Params: params}
	if p := rt.authorize(r.access, req); p != nil {
		return p.response(), r.pattern
	}
	body, p := readBody(ev, r.jsonBody)
	if p != nil {
		return p.response(), r.pattern
	}
	req.Body = body
	resp, err := r.handler(ctx, req)
	if err != nil {
		return rt.problem(ctx, err).response(), r.pattern
	}
	return resp, r.pattern
}

// Pattern returns the pattern of the route that serves method on path, as
// Serve logs it, or "" when none does: a label of bounded cardinality (ids
// stay parameters) for figures per route.
func (rt *Router) Pattern(method, path string) string {
	if r, _, _ := rt.match(method, path); r != nil {
		return r.pattern
	}
	return ""
}

func (rt *Router) match(method, path string) (*route, map[string]string, []string) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var allow []string
	for i := range rt.routes {
		r := &rt.routes[i]
		params, ok := matchSegments(r.segments, segs)
		if !ok {
			continue
		}
		if r.method != method {
			allow = append(allow, r.method)
			continue
		}
		return r, params, nil
	}
	return nil, nil, allow
}

func matchSegments(pattern, segs []string) (map[string]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	var params map[string]string
	for i, p := range pattern {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segs[i] == "" {
				return nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[p[1:len(p)-1]] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}

// maxUserID bounds an identity; anything longer is not one we issued.
const maxUserID = 256

func (rt *Router) authorize(access Access, req *Request) *Problem {
	switch access {
	case User:
		var id string
		if rt.auth.Mode == AuthDev {
			id = req.Header("x-user-id")
		} else if a := req.Event.RequestContext.Authorizer; a != nil && a.JWT != nil {
			id = a.JWT.Claims["sub"]
		}
		if id == "" || len(id) > maxUserID || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return NewProblem(http.StatusUnauthorized, CodeUnauthenticated, "no valid user identity on the request")
		}
		if rt.auth.Mode != AuthDev {
			if p := scopeProblem(req.Event.RequestContext.Authorizer.JWT, rt.auth.Scope); p != nil {
				return p
			}
		}
		req.UserID = id
	case Admin:
		if rt.auth.Mode == AuthDev {
			tok := req.Header("x-admin-token")
			if tok == "" {
				return NewProblem(http.StatusUnauthorized, CodeUnauthenticated, "admin routes need the X-Admin-Token header")
			}
			if rt.auth.AdminToken == "" || !SameSecret(tok, rt.auth.AdminToken) {
				return NewProblem(http.StatusForbidden, CodeForbidden, "the admin token is not valid")
			}
			return nil
		}
		// IAM authorization happens in API Gateway; a request without IAM
		// context did not pass through it.
		a := req.Event.RequestContext.Authorizer
		if a == nil || a.IAM == nil {
			return NewProblem(http.StatusForbidden, CodeForbidden, "admin routes need IAM authorization")
		}
		return adminRoleProblem(a.IAM, rt.auth.AdminRoles)
	}
	return nil
}

func readBody(ev *events.APIGatewayV2HTTPRequest, jsonBody bool) ([]byte, *Problem) {
	if len(ev.Body) > MaxBody*4/3+4 { // no need to decode what is far too large
		return nil, tooLarge()
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			p := NewProblem(http.StatusBadRequest, CodeValidationFailed, "the request breaks the rules listed in errors")
			p.Errors = []validation.Field{{Field: "body", Message: "is marked base64 but is not valid base64"}}
			return nil, p
		}
	}
	if len(body) > MaxBody {
		return nil, tooLarge()
	}
	if jsonBody && len(body) > 0 {
		// The type every client sends is checked without parsing it (and
		// the map of parameters the parse allocates).
		ct := header(ev, "content-type")
		if ct == "application/json" {
			return body, nil
		}
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, NewProblem(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
				"send the body as Content-Type: application/json")
		}
	}
	return body, nil
}

func tooLarge() *Problem {
	return NewProblem(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
		fmt.Sprintf("the body must be at most %d bytes", MaxBody))
}

func (rt *Router) problem(ctx context.Context, err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var verr *validation.Error
	if errors.As(err, &verr) {
		p := NewProblem(http.StatusBadRequest, CodeValidationFailed, "the request breaks the rules listed in errors")
		p.Errors = verr.Errors
		return p
	}
	for _, m := range rt.mappers {
		if p := m(err); p != nil {
			return p
		}
	}
	if Unavailable(err) {
		correlation.Logger(rt.log, correlation.ID(ctx)).WarnContext(ctx, "dependency unavailable", "error", err.Error())
		p := NewProblem(http.StatusServiceUnavailable, CodeUnavailable, "a dependency is unavailable; retry shortly")
		p.RetryAfter = 1
		return p
	}
	correlation.Logger(rt.log, correlation.ID(ctx)).ErrorContext(ctx, "internal error", "error", err.Error())
	return NewProblem(http.StatusInternalServerError, CodeInternal, "an internal error occurred")
}

// header reads a header by name whatever its case: API Gateway lowercases
// names, other callers may not. Callers pass names in lower case, which
// then cost no lowering.
func header(ev *events.APIGatewayV2HTTPRequest, name string) string {
	if v, ok := ev.Headers[strings.ToLower(name)]; ok {
		return v
	}
	for k, v := range ev.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// JSON is a response with v as its JSON body.
func JSON(status int, v any) (events.APIGatewayV2HTTPResponse, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("httpapi: encode response: %w", err)
	}
	return RawJSON(status, body), nil
}

// RawJSON is a response with an encoded JSON body.
func RawJSON(status int, body []byte) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"},
		Body:       string(body),
	}
}

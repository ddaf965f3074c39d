package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// fixtureID is the withdrawal id the get and cancel fixtures carry; tests
// put a real one in its place.
const fixtureID = "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z"

// fixtureUser is the JWT sub of the withdrawal fixtures.
const fixtureUser = "user-123"

// ---- Redis backends and the app under test ----

type backend struct {
	name  string
	start func(t *testing.T) (redisURL string, srv *redistest.Server)
}

var backends = []backend{
	{"redis-server", func(t *testing.T) (string, *redistest.Server) {
		s := redistest.Start(t)
		return s.URL(), s
	}},
	{"miniredis", func(t *testing.T) (string, *redistest.Server) {
		return "redis://" + miniredis.RunT(t).Addr(), nil
	}},
}

// eachBackend runs fn once on a real redis-server and once on miniredis.
func eachBackend(t *testing.T, fn func(t *testing.T, redisURL string)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			u, _ := b.start(t)
			fn(t, u)
		})
	}
}

// lockedBuffer collects log lines written from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stack is the app wired from the environment, as a Lambda main wires it.
type stack struct {
	cfg config.Config
	app *app.App
	rdb redis.UniversalClient
	rt  *httpapi.Router
	h   lambda.Handler
	log *lockedBuffer
}

// newStack configures Hourglass through its environment (jwt auth unless vars
// say otherwise) and builds the app on redisURL.
func newStack(t *testing.T, redisURL string, vars map[string]string) *stack {
	t.Helper()
	// Only what the test sets counts, not the shell's or CI's environment.
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		if name, _, _ := strings.Cut(ct.Field(i).Tag.Get("env"), ","); name != "" {
			t.Setenv(name, "")
			_ = os.Unsetenv(name)
		}
	}
	t.Setenv("REDIS_URL", redisURL)
	t.Setenv("HOURGLASS_AUTH", "jwt")
	// The operator role of the admin fixtures (their caller is a session of
	// hourglass-operator in 123456789012); the path is not in a session's ARN.
	t.Setenv("HOURGLASS_ADMIN_ROLE_ARNS", fixtureAdminRole)
	for k, v := range vars {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Local)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &lockedBuffer{}
	a, err := app.New(cfg, slog.New(slog.NewJSONHandler(logs, nil)), rdb)
	if err != nil {
		t.Fatalf("app: %v", err)
	}
	rt := a.Router()
	return &stack{cfg: cfg, app: a, rdb: rdb, rt: rt, h: lambda.NewHandler(rt), log: logs}
}

var devMode = map[string]string{"HOURGLASS_AUTH": "dev", "HOURGLASS_ADMIN_TOKEN": "test-admin-token"}

// invoke runs one raw Lambda payload through the handler, as the runtime does.
func (s *stack) invoke(t *testing.T, payload []byte) events.APIGatewayV2HTTPResponse {
	t.Helper()
	out, err := s.h.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("decode response %s: %v", out, err)
	}
	return resp
}

// ---- events ----

// rawFixture reads events/<name>.json.
func rawFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "events", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawFixtureFor is a get or cancel fixture naming withdrawal id in rawPath,
// requestContext.http.path and pathParameters.
func rawFixtureFor(t *testing.T, name, id string) []byte {
	t.Helper()
	raw := rawFixture(t, name)
	if n := bytes.Count(raw, []byte(fixtureID)); n != 3 {
		t.Fatalf("%s names %s %d times, want 3 (rawPath, http.path, pathParameters)", name, fixtureID, n)
	}
	return bytes.ReplaceAll(raw, []byte(fixtureID), []byte(id))
}

type mod func(ev *events.APIGatewayV2HTTPRequest)

// event decodes a fixture (for id, if not empty) and applies mods.
func event(t *testing.T, name, id string, mods ...mod) events.APIGatewayV2HTTPRequest {
	t.Helper()
	raw := rawFixture(t, name)
	if id != "" {
		raw = rawFixtureFor(t, name, id)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	for _, m := range mods {
		m(&ev)
	}
	return ev
}

// payload is event, encoded.
func payload(t *testing.T, name, id string, mods ...mod) []byte {
	t.Helper()
	b, err := json.Marshal(event(t, name, id, mods...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sub makes the JWT sub claim user.
func sub(user string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		if ev.RequestContext.Authorizer == nil {
			ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}
		}
		if ev.RequestContext.Authorizer.JWT == nil {
			ev.RequestContext.Authorizer.JWT = &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{}
		}
		claims := map[string]string{}
		for k, v := range ev.RequestContext.Authorizer.JWT.Claims {
			claims[k] = v
		}
		claims["sub"] = user
		ev.RequestContext.Authorizer.JWT.Claims = claims
	}
}

// withClaims replaces the JWT claims.
func withClaims(claims map[string]string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims},
		}
	}
}

func noAuthorizer(ev *events.APIGatewayV2HTTPRequest) { ev.RequestContext.Authorizer = nil }

// devUser is the dev-mode identity: X-User-Id, and no authorizer.
func devUser(user string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		noAuthorizer(ev)
		ev.Headers["x-user-id"] = user
	}
}

// header sets a header under exactly name (API Gateway lowercases; the local
// stack may not).
func header(name, value string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.Headers[name] = value }
}

func withoutHeader(name string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) { delete(ev.Headers, name) }
}

func key(k string) mod { return header("idempotency-key", k) }

func body(s string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.Body, ev.IsBase64Encoded = s, false }
}

func base64Body(b []byte) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(b), true
	}
}

// route points the event at method and path.
func route(method, path string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		ev.RawPath = path
		ev.RequestContext.HTTP.Method = method
		ev.RequestContext.HTTP.Path = path
		ev.RouteKey = "$default"
		ev.RequestContext.RouteKey = "$default"
		ev.PathParameters = nil
	}
}

// query sets the query string from name, value pairs.
func query(kv ...string) mod {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		q := url.Values{}
		ev.QueryStringParameters = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
			ev.QueryStringParameters[kv[i]] = kv[i+1]
		}
		ev.RawQueryString = q.Encode()
	}
}

// ---- responses ----

var apiTime = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

var viewFields = []string{
	"amount", "attempts", "created_at", "currency", "destination", "due_at", "id", "last_error", "payout_id",
	"status", "updated_at",
}

// decodeStrict decodes body into v, refusing unknown fields, and returns
// the body's top-level field names, sorted.
func decodeStrict(t *testing.T, body string, v any) []string {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, body)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, body)
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// wantView checks a withdrawal body: every SPEC field, times in API format.
func wantView(t *testing.T, body string) httpapi.View {
	t.Helper()
	var v httpapi.View
	if diff := cmp.Diff(viewFields, decodeStrict(t, body, &v)); diff != "" {
		t.Errorf("withdrawal fields (-want +got):\n%s", diff)
	}
	for name, ts := range map[string]string{"due_at": v.DueAt, "created_at": v.CreatedAt, "updated_at": v.UpdatedAt} {
		if !apiTime.MatchString(ts) {
			t.Errorf("%s = %q, want RFC 3339 UTC with milliseconds", name, ts)
		}
	}
	return v
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(clock.APILayout, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return ts
}

func wantStatus(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, resp.Body)
	}
}

// wantJSON checks a success response: status and content type.
func wantJSON(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int) {
	t.Helper()
	wantStatus(t, resp, status)
	if ct := resp.Headers["Content-Type"]; ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

// create posts the create fixture with mods and wants 202.
func (s *stack) create(t *testing.T, mods ...mod) (httpapi.View, events.APIGatewayV2HTTPResponse) {
	t.Helper()
	resp := s.invoke(t, payload(t, "withdrawal-create", "", mods...))
	wantJSON(t, resp, 202)
	v := wantView(t, resp.Body)
	if loc := resp.Headers["Location"]; loc != "/v1/withdrawals/"+v.ID {
		t.Errorf("Location %q, want /v1/withdrawals/%s", loc, v.ID)
	}
	return v, resp
}

type listBody struct {
	Items      []httpapi.View `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

func (s *stack) list(t *testing.T, mods ...mod) listBody {
	t.Helper()
	resp := s.invoke(t, payload(t, "withdrawal-list", "", mods...))
	wantJSON(t, resp, 200)
	var l listBody
	decodeStrict(t, resp.Body, &l)
	if l.Items == nil {
		t.Errorf("items is %s, want a list", resp.Body)
	}
	return l
}

func ids(vs []httpapi.View) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.ID
	}
	return out
}

// problem is an RFC 9457 body as SPEC.md shapes it.
type problem struct {
	Type   string             `json:"type"`
	Title  string             `json:"title"`
	Status int                `json:"status"`
	Detail string             `json:"detail"`
	Code   string             `json:"code"`
	Errors []validation.Field `json:"errors"`
}

// want describes an expected problem response.
type want struct {
	status int
	code   string
	// fields are the names the errors list must hold, in order.
	fields []string
	// allow is the expected Allow header, as a set; retryAfter wants a
	// positive Retry-After.
	allow      []string
	retryAfter bool
}

func checkProblem(t *testing.T, resp events.APIGatewayV2HTTPResponse, w want) problem {
	t.Helper()
	if resp.StatusCode != w.status {
		t.Errorf("status %d, want %d; body %s", resp.StatusCode, w.status, resp.Body)
	}
	if ct := resp.Headers["Content-Type"]; ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	names := decodeStrict(t, resp.Body, &p)
	if diff := cmp.Diff([]string{"code", "detail", "errors", "status", "title", "type"}, names); diff != "" {
		t.Errorf("problem fields (-want +got):\n%s", diff)
	}
	if u, err := url.Parse(p.Type); err != nil || u.Scheme == "" || !strings.HasSuffix(p.Type, w.code) {
		t.Errorf("type %q, want a URI naming %s", p.Type, w.code)
	}
	if p.Title == "" || p.Title != httpapi.Title(w.code) || p.Title == w.code {
		t.Errorf("title %q, want the human title of %s", p.Title, w.code)
	}
	if p.Status != w.status {
		t.Errorf("status field %d, want %d", p.Status, w.status)
	}
	if p.Detail == "" {
		t.Error("detail is empty")
	}
	if p.Code != w.code {
		t.Errorf("code %q, want %q", p.Code, w.code)
	}
	if p.Errors == nil {
		t.Errorf("errors is %s, want a list", resp.Body)
	}
	got := make([]string, len(p.Errors))
	for i, e := range p.Errors {
		got[i] = e.Field
		if e.Message == "" {
			t.Errorf("errors[%d] (%s) has no message", i, e.Field)
		}
	}
	if diff := cmp.Diff(w.fields, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("error fields (-want +got):\n%s", diff)
	}
	allow := resp.Headers["Allow"]
	var gotAllow []string
	if allow != "" {
		gotAllow = strings.Split(allow, ", ")
	}
	if diff := cmp.Diff(w.allow, gotAllow, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("Allow %q (-want +got):\n%s", allow, diff)
	}
	ra, hasRA := resp.Headers["Retry-After"]
	if w.retryAfter {
		if n, err := strconv.Atoi(ra); err != nil || n < 1 {
			t.Errorf("Retry-After %q, want a positive number of seconds", ra)
		}
	} else if hasRA {
		t.Errorf("Retry-After %q on a %d", ra, w.status)
	}
	return p
}

// snapshot is the whole keyspace, every key with its type and value.
func snapshot(t *testing.T, rdb redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	if int(n) != len(keys) {
		t.Fatalf("DBSIZE %d but KEYS lists %d", n, len(keys))
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatalf("TYPE %s: %v", k, err)
		}
		var v any
		switch typ {
		case "hash":
			v, err = rdb.HGetAll(ctx, k).Result()
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "set":
			var m []string
			m, err = rdb.SMembers(ctx, k).Result()
			slices.Sort(m)
			v = m
		case "list":
			v, err = rdb.LRange(ctx, k, 0, -1).Result()
		}
		if err != nil {
			t.Fatalf("read %s %s: %v", typ, k, err)
		}
		out[k] = typ + " " + fmt.Sprint(v)
	}
	return out
}

func wantUnchanged(t *testing.T, before, after map[string]string) {
	t.Helper()
	if diff := cmp.Diff(before, after, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the keyspace changed (-before +after):\n%s", diff)
	}
}

// ---- tests ----

// TestFixtures drives every withdrawal and operator fixture through the
// Lambda handler, as API Gateway would send it.
func TestFixtures(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)

		t.Log("GET /healthz")
		resp := s.invoke(t, rawFixture(t, "healthz"))
		wantJSON(t, resp, 200)
		if diff := cmp.Diff(`{"status":"ok"}`, resp.Body); diff != "" {
			t.Errorf("healthz body (-want +got):\n%s", diff)
		}
		if id := resp.Headers["X-Request-Id"]; id != "req-1" {
			t.Errorf("X-Request-Id %q, want the event's req-1", id)
		}

		t.Log("POST /v1/withdrawals")
		before := time.Now().Truncate(time.Millisecond)
		resp = s.invoke(t, rawFixture(t, "withdrawal-create"))
		wantJSON(t, resp, 202)
		created := wantView(t, resp.Body)
		after := time.Now()
		if loc := resp.Headers["Location"]; loc != "/v1/withdrawals/"+created.ID {
			t.Errorf("Location %q, want /v1/withdrawals/%s", loc, created.ID)
		}
		if _, ok := resp.Headers["Idempotent-Replayed"]; ok {
			t.Error("a first create says Idempotent-Replayed")
		}
		if !strings.HasPrefix(created.ID, "wd_") {
			t.Errorf("id %q", created.ID)
		}
		createdAt := parseTime(t, created.CreatedAt)
		if createdAt.Before(before) || createdAt.After(after) {
			t.Errorf("created_at %s outside the request [%s, %s]", created.CreatedAt, before, after)
		}
		want := httpapi.View{
			ID: created.ID, Status: withdrawal.Scheduled, Amount: "125.50", Currency: "CNY", Destination: "bank_6222",
			DueAt: clock.Format(createdAt.Add(1800 * time.Second)), CreatedAt: created.CreatedAt, UpdatedAt: created.CreatedAt,
		}
		if diff := cmp.Diff(want, created); diff != "" {
			t.Errorf("created withdrawal (-want +got):\n%s", diff)
		}

		t.Log("GET /v1/withdrawals/{id}")
		resp = s.invoke(t, rawFixtureFor(t, "withdrawal-get", created.ID))
		wantJSON(t, resp, 200)
		if diff := cmp.Diff(created, wantView(t, resp.Body)); diff != "" {
			t.Errorf("get (-created +got):\n%s", diff)
		}

		t.Log("GET /v1/withdrawals")
		second, _ := s.create(t, key("second"))
		third, _ := s.create(t, key("third"), body(`{"amount":"7","currency":"JPY","destination":"acct-9","delay_seconds":60}`))
		if third.Amount != "7" || third.Currency != "JPY" {
			t.Errorf("JPY withdrawal %+v", third)
		}
		resp = s.invoke(t, rawFixture(t, "withdrawal-list"))
		wantJSON(t, resp, 200)
		var page listBody
		decodeStrict(t, resp.Body, &page)
		if diff := cmp.Diff([]httpapi.View{third, second, created}, page.Items); diff != "" {
			t.Errorf("list, newest first (-want +got):\n%s", diff)
		}
		if page.NextCursor != "" {
			t.Errorf("next_cursor %q on the only page", page.NextCursor)
		}
		first := s.list(t, query("limit", "2"))
		if diff := cmp.Diff([]string{third.ID, second.ID}, ids(first.Items)); diff != "" {
			t.Errorf("page 1 (-want +got):\n%s", diff)
		}
		if first.NextCursor == "" {
			t.Fatal("no next_cursor after a full page")
		}
		last := s.list(t, query("limit", "2", "cursor", first.NextCursor))
		if diff := cmp.Diff([]string{created.ID}, ids(last.Items)); diff != "" {
			t.Errorf("page 2 (-want +got):\n%s", diff)
		}
		if last.NextCursor != "" {
			t.Errorf("next_cursor %q on the last page", last.NextCursor)
		}

		t.Log("GET /v1/admin/stats with IAM authorization, jwt mode")
		wantStats(t, s, rawFixture(t, "admin-stats"), map[string]any{"due": 3.0, "due_now": 0.0, "oldest_due_lag_ms": 0.0, "inflight": 0.0, "dead": 0.0})

		t.Log("DELETE /v1/withdrawals/{id}")
		resp = s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", created.ID))
		wantJSON(t, resp, 200)
		cancelled := wantView(t, resp.Body)
		if cancelled.Status != withdrawal.Cancelled {
			t.Errorf("status %q after cancel, want cancelled", cancelled.Status)
		}
		if parseTime(t, cancelled.UpdatedAt).Before(createdAt) {
			t.Errorf("updated_at %s before created_at %s", cancelled.UpdatedAt, created.CreatedAt)
		}
		if diff := cmp.Diff(created, cancelled, cmpopts.IgnoreFields(httpapi.View{}, "Status", "UpdatedAt")); diff != "" {
			t.Errorf("cancel changed more than status and updated_at (-created +cancelled):\n%s", diff)
		}
		resp = s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", created.ID))
		wantJSON(t, resp, 200)
		if diff := cmp.Diff(cancelled, wantView(t, resp.Body)); diff != "" {
			t.Errorf("cancelling again (-first +again):\n%s", diff)
		}
		resp = s.invoke(t, rawFixtureFor(t, "withdrawal-get", created.ID))
		wantJSON(t, resp, 200)
		if diff := cmp.Diff(cancelled, wantView(t, resp.Body)); diff != "" {
			t.Errorf("get after cancel (-cancel +get):\n%s", diff)
		}
		wantStats(t, s, rawFixture(t, "admin-stats"), map[string]any{"due": 2.0, "due_now": 0.0, "oldest_due_lag_ms": 0.0, "inflight": 0.0, "dead": 0.0})
	})
}

// wantStats checks GET /v1/admin/stats answers exactly SPEC's shape with
// queue counters withdrawals.
func wantStats(t *testing.T, s *stack, payload []byte, withdrawals map[string]any) {
	t.Helper()
	resp := s.invoke(t, payload)
	wantJSON(t, resp, 200)
	var got map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &got); err != nil {
		t.Fatalf("stats body: %v\n%s", err, resp.Body)
	}
	empty := map[string]any{"due": 0.0, "due_now": 0.0, "oldest_due_lag_ms": 0.0, "inflight": 0.0, "dead": 0.0}
	want := map[string]any{"queues": map[string]any{"withdrawals": withdrawals, seckill.EventsQueue: empty}, "items": map[string]any{}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestStatsTotalOverShards(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, map[string]string{"HOURGLASS_QUEUE_SHARDS": "4"})
		shards := map[int]bool{}
		for i := range 8 {
			user := fmt.Sprintf("user-%d", i)
			shards[s.app.Withdrawals.ShardFor(user)] = true
			s.create(t, sub(user))
		}
		if len(shards) < 2 {
			t.Fatalf("the users landed on %d shard(s); the test needs several", len(shards))
		}
		due, _ := s.create(t, sub("user-now"), key("now"), body(`{"amount":"1.00","currency":"USD","destination":"d","delay_seconds":0}`))
		time.Sleep(5 * time.Millisecond)
		resp := s.invoke(t, rawFixture(t, "admin-stats"))
		wantJSON(t, resp, 200)
		var got struct {
			Queues map[string]map[string]int64 `json:"queues"`
			Items  map[string]any              `json:"items"`
		}
		decodeStrict(t, resp.Body, &got)
		w := got.Queues["withdrawals"]
		lag := w["oldest_due_lag_ms"]
		maxLag := time.Since(parseTime(t, due.DueAt)).Milliseconds()
		if lag < 5 || lag > maxLag {
			t.Errorf("oldest_due_lag_ms %d, want 5..%d", lag, maxLag)
		}
		want := map[string]map[string]int64{"withdrawals": {"due": 9, "due_now": 1, "oldest_due_lag_ms": lag, "inflight": 0, "dead": 0},
			seckill.EventsQueue: {"due": 0, "due_now": 0, "oldest_due_lag_ms": 0, "inflight": 0, "dead": 0}}
		if diff := cmp.Diff(want, got.Queues); diff != "" {
			t.Errorf("queues (-want +got):\n%s", diff)
		}
	})
}

func TestListPaging(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		var all []string
		for i := range 5 {
			v, _ := s.create(t, key(fmt.Sprint("k", i)))
			all = append([]string{v.ID}, all...) // newest first
		}
		s.create(t, sub("someone-else"))
		for _, limit := range []int{1, 2, 3, 5, 100} {
			t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
				var got []string
				cursor := ""
				for pages := 1; ; pages++ {
					if pages > 10 {
						t.Fatal("paging does not end")
					}
					q := []string{"limit", strconv.Itoa(limit)}
					if cursor != "" {
						q = append(q, "cursor", cursor)
					}
					p := s.list(t, query(q...))
					if len(p.Items) > limit {
						t.Fatalf("page of %d items, limit %d", len(p.Items), limit)
					}
					got = append(got, ids(p.Items)...)
					if p.NextCursor == "" {
						break
					}
					cursor = p.NextCursor
				}
				if diff := cmp.Diff(all, got); diff != "" {
					t.Errorf("withdrawals over all pages, newest first (-want +got):\n%s", diff)
				}
			})
		}
		t.Run("default limit", func(t *testing.T) {
			p := s.list(t, query())
			if diff := cmp.Diff(all, ids(p.Items)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
		t.Run("no withdrawals", func(t *testing.T) {
			p := s.list(t, sub("nobody"))
			if len(p.Items) != 0 || p.NextCursor != "" {
				t.Errorf("list of a new user: %+v", p)
			}
		})
	})
}

// TestCreateAccepts covers request spellings that must be accepted.
func TestCreateAccepts(t *testing.T) {
	padded := func(n int) string {
		b := `{"amount":"10.00","currency":"EUR","destination":"pad","delay_seconds":60}`
		return b + strings.Repeat(" ", n-len(b))
	}
	future := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Millisecond)
	u, _ := backends[0].start(t)
	for _, tc := range []struct {
		name string
		dev  bool
		mods []mod
		// who reads the withdrawal back.
		who      mod
		checkDue func(t *testing.T, v httpapi.View)
	}{
		{name: "base64-encoded body", mods: []mod{base64Body([]byte(`{"amount":"1.50","currency":"USD","destination":"b64","delay_seconds":5}`))}},
		{name: "content type with charset", mods: []mod{header("content-type", "application/json; charset=utf-8")}},
		{name: "content type in capitals", mods: []mod{header("content-type", "Application/JSON")}},
		{name: "header names not lowercased", mods: []mod{
			withoutHeader("content-type"), header("Content-Type", "application/json"),
			withoutHeader("idempotency-key"), header("Idempotency-Key", "mixed-case"),
		}},
		{name: "body of exactly 16 KiB", mods: []mod{body(padded(httpapi.MaxBody))}},
		{name: "base64 body of exactly 16 KiB", mods: []mod{base64Body([]byte(padded(httpapi.MaxBody)))}},
		{
			name: "process_at",
			mods: []mod{body(`{"amount":"3","currency":"CNY","destination":"at","process_at":"` + future.Format(time.RFC3339Nano) + `"}`)},
			checkDue: func(t *testing.T, v httpapi.View) {
				if v.DueAt != clock.Format(future) {
					t.Errorf("due_at %s, want %s", v.DueAt, clock.Format(future))
				}
			},
		},
		{
			name: "default delay",
			mods: []mod{body(`{"amount":"3","currency":"CNY","destination":"default"}`)},
			checkDue: func(t *testing.T, v httpapi.View) {
				if d := parseTime(t, v.DueAt).Sub(parseTime(t, v.CreatedAt)); d != 30*time.Minute {
					t.Errorf("due_at - created_at = %s, want the default 30m", d)
				}
			},
		},
		{name: "dev mode", dev: true, mods: []mod{devUser("dev-user")}, who: devUser("dev-user")},
		{name: "dev mode, X-User-Id not lowercased", dev: true, mods: []mod{noAuthorizer, header("X-User-Id", "dev-user-2")}, who: devUser("dev-user-2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string(nil)
			if tc.dev {
				vars = devMode
			}
			s := newStack(t, u, vars)
			v, _ := s.create(t, append([]mod{key(tc.name)}, tc.mods...)...)
			if tc.checkDue != nil {
				tc.checkDue(t, v)
			}
			var who []mod
			if tc.who != nil {
				who = append(who, tc.who)
			}
			resp := s.invoke(t, payload(t, "withdrawal-get", v.ID, who...))
			wantJSON(t, resp, 200)
			if diff := cmp.Diff(v, wantView(t, resp.Body)); diff != "" {
				t.Errorf("read back (-created +got):\n%s", diff)
			}
		})
	}
}

func TestIdempotency(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		first, firstResp := s.create(t, key("pay-once"))

		before := snapshot(t, s.rdb)
		for _, tc := range []struct {
			name string
			mods []mod
		}{
			{"same request", []mod{key("pay-once")}},
			{"same content, other spelling", []mod{key("pay-once"),
				body(`{ "destination":"bank_6222", "delay_seconds":1800, "currency":"CNY", "amount":"125.5" }`)}},
			{"base64 of the same body", []mod{key("pay-once"),
				base64Body([]byte(`{"amount": "125.50", "currency": "CNY", "destination": "bank_6222", "delay_seconds": 1800}`))}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, resp := s.create(t, tc.mods...)
				if resp.Body != firstResp.Body {
					t.Errorf("replay body differs:\n first %s\nreplay %s", firstResp.Body, resp.Body)
				}
				if got := resp.Headers["Idempotent-Replayed"]; got != "true" {
					t.Errorf("Idempotent-Replayed %q, want true", got)
				}
				if resp.Headers["Location"] != firstResp.Headers["Location"] {
					t.Errorf("Location %q, first %q", resp.Headers["Location"], firstResp.Headers["Location"])
				}
			})
		}
		wantUnchanged(t, before, snapshot(t, s.rdb))

		t.Run("keys are per user", func(t *testing.T) {
			other, resp := s.create(t, key("pay-once"), sub("user-456"))
			if other.ID == first.ID {
				t.Errorf("another user's request with the same key got withdrawal %s", first.ID)
			}
			if _, ok := resp.Headers["Idempotent-Replayed"]; ok {
				t.Error("another user's first request is a replay")
			}
		})
		t.Run("a replay after cancel answers the first response", func(t *testing.T) {
			wantJSON(t, s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", first.ID)), 200)
			_, resp := s.create(t, key("pay-once"))
			if resp.Body != firstResp.Body || resp.Headers["Idempotent-Replayed"] != "true" {
				t.Errorf("replay %v %s", resp.Headers, resp.Body)
			}
		})
	})
}

func TestOtherUsersWithdrawalsAreInvisible(t *testing.T) {
	for _, shards := range []string{"1", "4"} {
		t.Run("shards="+shards, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, redisURL string) {
				s := newStack(t, redisURL, map[string]string{"HOURGLASS_QUEUE_SHARDS": shards})
				mine, _ := s.create(t)
				before := snapshot(t, s.rdb)
				for _, tc := range []struct {
					name    string
					payload []byte
				}{
					{"get", payload(t, "withdrawal-get", mine.ID, sub("user-456"))},
					{"cancel", payload(t, "withdrawal-cancel", mine.ID, sub("user-456"))},
				} {
					checkProblem(t, s.invoke(t, tc.payload), want{status: 404, code: "not_found"})
				}
				if l := s.list(t, sub("user-456")); len(l.Items) != 0 {
					t.Errorf("user-456 lists %v", ids(l.Items))
				}
				wantUnchanged(t, before, snapshot(t, s.rdb))
				resp := s.invoke(t, rawFixtureFor(t, "withdrawal-get", mine.ID))
				wantJSON(t, resp, 200)
				if v := wantView(t, resp.Body); v.Status != withdrawal.Scheduled {
					t.Errorf("after another user's cancel: %s, want scheduled", v.Status)
				}
			})
		})
	}
}

// problemCase is a request that must be refused. req may prepare state
// (through the API or the ledger) before it returns the payload; the
// keyspace after that must not change.
type problemCase struct {
	name string
	dev  bool
	req  func(t *testing.T, s *stack) []byte
	want want
}

// fixed returns a problemCase request of a fixture with mods.
func fixed(name, id string, mods ...mod) func(t *testing.T, s *stack) []byte {
	return func(t *testing.T, _ *stack) []byte { return payload(t, name, id, mods...) }
}

// whileProcessing is a request of fixture for a withdrawal (made with
// Idempotency-Key k) that the payout step has.
func whileProcessing(fixture, k string) func(t *testing.T, s *stack) []byte {
	return func(t *testing.T, s *stack) []byte {
		v, _ := s.create(t, key(k), body(`{"amount":"5","currency":"CNY","destination":"d","delay_seconds":0}`))
		begin(t, s, fixtureUser, v.ID)
		return rawFixtureFor(t, fixture, v.ID)
	}
}

// resched is a reschedule of a withdrawal of the fixture's user with body b.
func resched(b string, mods ...mod) func(t *testing.T, s *stack) []byte {
	return func(t *testing.T, s *stack) []byte {
		v, _ := s.create(t, key("resched-"+strconv.Itoa(int(time.Now().UnixNano()))))
		return payload(t, "withdrawal-reschedule", v.ID, append([]mod{body(b)}, mods...)...)
	}
}

func withBody(b string, mods ...mod) func(t *testing.T, s *stack) []byte {
	return fixed("withdrawal-create", "", append([]mod{body(b), key("validation")}, mods...)...)
}

func problemCases() []problemCase {
	unauthenticated := want{status: 401, code: "unauthenticated"}
	notFound := want{status: 404, code: "not_found"}
	tooLarge := want{status: 413, code: "payload_too_large"}
	unsupported := want{status: 415, code: "unsupported_media_type"}
	invalid := func(fields ...string) want { return want{status: 400, code: "validation_failed", fields: fields} }
	const ok = `{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	tooFar := time.Now().Add(31 * 24 * time.Hour).UTC().Format(time.RFC3339)
	someoneElses := func(name string) func(t *testing.T, s *stack) []byte {
		return func(t *testing.T, s *stack) []byte {
			v, _ := s.create(t, key("mine-"+name))
			return payload(t, name, v.ID, sub("user-456"))
		}
	}

	cases := []problemCase{
		// 401: no identity.
		{name: "dev: create without X-User-Id", dev: true, req: fixed("withdrawal-create", ""), want: unauthenticated},
		{name: "dev: list without X-User-Id", dev: true, req: fixed("withdrawal-list", ""), want: unauthenticated},
		{name: "dev: get without X-User-Id", dev: true, req: fixed("withdrawal-get", ""), want: unauthenticated},
		{name: "dev: cancel without X-User-Id", dev: true, req: fixed("withdrawal-cancel", ""), want: unauthenticated},
		{name: "dev: empty X-User-Id", dev: true, req: fixed("withdrawal-create", "", devUser("")), want: unauthenticated},
		{name: "dev: X-User-Id with a newline", dev: true, req: fixed("withdrawal-list", "", devUser("user\n1")), want: unauthenticated},
		{name: "dev: X-User-Id of 257 bytes", dev: true, req: fixed("withdrawal-list", "", devUser(strings.Repeat("u", 257))), want: unauthenticated},
		{name: "jwt: create without authorizer", req: fixed("withdrawal-create", "", noAuthorizer), want: unauthenticated},
		{name: "jwt: list without authorizer", req: fixed("withdrawal-list", "", noAuthorizer), want: unauthenticated},
		{name: "jwt: get without authorizer", req: fixed("withdrawal-get", "", noAuthorizer), want: unauthenticated},
		{name: "jwt: cancel without authorizer", req: fixed("withdrawal-cancel", "", noAuthorizer), want: unauthenticated},
		{name: "jwt: claims without sub", req: fixed("withdrawal-create", "", withClaims(map[string]string{"iss": "https://auth.example.com/"})), want: unauthenticated},
		{name: "jwt: X-User-Id is not trusted", req: fixed("withdrawal-create", "", devUser(fixtureUser)), want: unauthenticated},

		// 404.
		{name: "unknown route", req: fixed("withdrawal-list", "", route("GET", "/v1/nothing")), want: notFound},
		{name: "unknown nested route", req: fixed("withdrawal-list", "", route("GET", "/v1/withdrawals/a/b")), want: notFound},
		{name: "root", req: fixed("healthz", "", route("GET", "/")), want: notFound},
		{name: "someone else's withdrawal: get", req: someoneElses("withdrawal-get"), want: notFound},
		{name: "someone else's withdrawal: cancel", req: someoneElses("withdrawal-cancel"), want: notFound},
		{name: "get a garbage id", req: fixed("withdrawal-get", "garbage"), want: notFound},
		{name: "get wd_ and garbage", req: fixed("withdrawal-get", "wd_garbage"), want: notFound},
		{name: "get an id that does not exist", req: fixed("withdrawal-get", fixtureID), want: notFound},
		{name: "cancel a garbage id", req: fixed("withdrawal-cancel", "garbage"), want: notFound},
		{name: "cancel an id that does not exist", req: fixed("withdrawal-cancel", fixtureID), want: notFound},

		// 405.
		{name: "PUT /v1/withdrawals", req: fixed("withdrawal-create", "", route("PUT", "/v1/withdrawals")),
			want: want{status: 405, code: "method_not_allowed", allow: []string{"GET", "POST"}}},
		{name: "PUT /v1/withdrawals/{id}", req: fixed("withdrawal-get", "", route("PUT", "/v1/withdrawals/"+fixtureID)),
			want: want{status: 405, code: "method_not_allowed", allow: []string{"DELETE", "GET", "PATCH"}}},
		{name: "POST /healthz", req: fixed("healthz", "", route("POST", "/healthz")),
			want: want{status: 405, code: "method_not_allowed", allow: []string{"GET"}}},
		{name: "DELETE /v1/admin/stats", req: fixed("admin-stats", "", route("DELETE", "/v1/admin/stats")),
			want: want{status: 405, code: "method_not_allowed", allow: []string{"GET"}}},

		// 413.
		{name: "body of 16 KiB + 1", req: withBody(ok + strings.Repeat(" ", httpapi.MaxBody+1-len(ok))), want: tooLarge},
		{name: "body of 1 MiB", req: withBody(strings.Repeat("x", 1<<20)), want: tooLarge},
		{name: "base64 body of 16 KiB + 1", req: fixed("withdrawal-create", "",
			base64Body([]byte(ok+strings.Repeat(" ", httpapi.MaxBody+1-len(ok))))), want: tooLarge},
		{name: "base64 body of 1 MiB", req: fixed("withdrawal-create", "", base64Body(bytes.Repeat([]byte("x"), 1<<20))), want: tooLarge},

		// 415.
		{name: "text/plain", req: withBody(ok, header("content-type", "text/plain")), want: unsupported},
		{name: "no content type", req: withBody(ok, withoutHeader("content-type")), want: unsupported},
		{name: "application/xml", req: withBody(ok, header("content-type", "application/xml")), want: unsupported},
		{name: "json look-alike", req: withBody(ok, header("content-type", "application/jsonp")), want: unsupported},
		{name: "unparsable content type", req: withBody(ok, header("content-type", "application/json; =")), want: unsupported},

		// 400.
		{name: "no Idempotency-Key", req: fixed("withdrawal-create", "", withoutHeader("idempotency-key")), want: invalid("Idempotency-Key")},
		{name: "empty Idempotency-Key", req: fixed("withdrawal-create", "", key("")), want: invalid("Idempotency-Key")},
		{name: "Idempotency-Key of 256", req: fixed("withdrawal-create", "", key(strings.Repeat("k", 256))), want: invalid("Idempotency-Key")},
		{name: "Idempotency-Key not ASCII", req: fixed("withdrawal-create", "", key("clé")), want: invalid("Idempotency-Key")},
		{name: "no Idempotency-Key and a bad amount", req: fixed("withdrawal-create", "", withoutHeader("idempotency-key"),
			body(`{"amount":"0","currency":"CNY","destination":"bank_6222"}`)), want: invalid("Idempotency-Key", "amount")},
		{name: "empty body", req: withBody(""), want: invalid("body")},
		{name: "bad JSON", req: withBody(`{"amount":`), want: invalid("body")},
		{name: "JSON array", req: withBody(`[]`), want: invalid("body")},
		{name: "JSON null", req: withBody(`null`), want: invalid("body")},
		{name: "two JSON objects", req: withBody(ok + ok), want: invalid("body")},
		{name: "empty object", req: withBody(`{}`), want: invalid("amount", "currency", "destination")},
		{name: "unknown field", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","memo":"x"}`), want: invalid("memo")},
		{name: "amount zero", req: withBody(`{"amount":"0","currency":"CNY","destination":"d"}`), want: invalid("amount")},
		{name: "amount negative", req: withBody(`{"amount":"-1","currency":"CNY","destination":"d"}`), want: invalid("amount")},
		{name: "amount a number", req: withBody(`{"amount":125.5,"currency":"CNY","destination":"d"}`), want: invalid("amount")},
		{name: "amount exponent", req: withBody(`{"amount":"1e3","currency":"CNY","destination":"d"}`), want: invalid("amount")},
		{name: "CNY with 3 decimals", req: withBody(`{"amount":"1.234","currency":"CNY","destination":"d"}`), want: invalid("amount")},
		{name: "JPY with decimals", req: withBody(`{"amount":"1.5","currency":"JPY","destination":"d"}`), want: invalid("amount")},
		{name: "amount over the maximum", req: withBody(`{"amount":"1000000.01","currency":"USD","destination":"d"}`), want: invalid("amount")},
		{name: "currency not accepted", req: withBody(`{"amount":"1","currency":"GBP","destination":"d"}`), want: invalid("currency")},
		{name: "currency lowercase", req: withBody(`{"amount":"1","currency":"cny","destination":"d"}`), want: invalid("currency")},
		{name: "destination with a space", req: withBody(`{"amount":"1","currency":"CNY","destination":"bank 1"}`), want: invalid("destination")},
		{name: "destination of 65", req: withBody(`{"amount":"1","currency":"CNY","destination":"` + strings.Repeat("d", 65) + `"}`), want: invalid("destination")},
		{name: "delay negative", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","delay_seconds":-1}`), want: invalid("delay_seconds")},
		{name: "delay over 30 days", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","delay_seconds":2592001}`), want: invalid("delay_seconds")},
		{name: "delay fractional", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","delay_seconds":1.5}`), want: invalid("delay_seconds")},
		{name: "delay a string", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","delay_seconds":"60"}`), want: invalid("delay_seconds")},
		{name: "process_at in the past", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","process_at":"` + past + `"}`), want: invalid("process_at")},
		{name: "process_at too far", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","process_at":"` + tooFar + `"}`), want: invalid("process_at")},
		{name: "process_at not RFC 3339", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","process_at":"tomorrow"}`), want: invalid("process_at")},
		{name: "delay and process_at", req: withBody(`{"amount":"1","currency":"CNY","destination":"d","delay_seconds":1,"process_at":"` + tooFar + `"}`), want: invalid("process_at")},
		{name: "everything wrong", req: withBody(`{"amount":"x","currency":"XXX","destination":"","extra":1}`), want: invalid("extra", "currency", "amount", "destination")},
		{name: "bad base64", req: fixed("withdrawal-create", "", func(ev *events.APIGatewayV2HTTPRequest) { ev.Body, ev.IsBase64Encoded = "%%%", true }), want: invalid("body")},
		{name: "list limit 0", req: fixed("withdrawal-list", "", query("limit", "0")), want: invalid("limit")},
		{name: "list limit 101", req: fixed("withdrawal-list", "", query("limit", "101")), want: invalid("limit")},
		{name: "list limit not a number", req: fixed("withdrawal-list", "", query("limit", "ten")), want: invalid("limit")},
		{name: "list limit empty", req: fixed("withdrawal-list", "", query("limit", "")), want: invalid("limit")},
		{name: "list cursor garbage", req: fixed("withdrawal-list", "", query("cursor", "!!not-a-cursor")), want: invalid("cursor")},
		{name: "list cursor of base64 garbage", req: fixed("withdrawal-list", "", query("cursor", base64.RawURLEncoding.EncodeToString([]byte("x")))), want: invalid("cursor")},

		// Idempotency.
		{
			name: "same key, other body",
			req: func(t *testing.T, s *stack) []byte {
				s.create(t, key("conflict"))
				return payload(t, "withdrawal-create", "", key("conflict"), body(`{"amount":"999.00","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`))
			},
			want: want{status: 422, code: "idempotency_conflict"},
		},
		{
			name: "same key, other delay",
			req: func(t *testing.T, s *stack) []byte {
				s.create(t, key("conflict-delay"))
				return payload(t, "withdrawal-create", "", key("conflict-delay"), body(`{"amount":"125.50","currency":"CNY","destination":"bank_6222"}`))
			},
			want: want{status: 422, code: "idempotency_conflict"},
		},
		{
			name: "same key while the first is in flight",
			req: func(t *testing.T, s *stack) []byte {
				ev := event(t, "withdrawal-create", "", key("in-flight"))
				reserve(t, s, fixtureUser, "in-flight", ev.Body)
				return payload(t, "withdrawal-create", "", key("in-flight"))
			},
			want: want{status: 409, code: "idempotency_in_flight", retryAfter: true},
		},
		{
			name: "same key in flight with another body",
			req: func(t *testing.T, s *stack) []byte {
				reserve(t, s, fixtureUser, "in-flight-2", `{"amount":"1","currency":"CNY","destination":"other"}`)
				return payload(t, "withdrawal-create", "", key("in-flight-2"))
			},
			want: want{status: 422, code: "idempotency_conflict"},
		},

		// Cancel.
		{
			name: "cancel while processing",
			req:  whileProcessing("withdrawal-cancel", "processing"),
			want: want{status: 409, code: "not_cancellable"},
		},

		// Reschedule.
		{name: "dev: reschedule without X-User-Id", dev: true, req: fixed("withdrawal-reschedule", ""), want: unauthenticated},
		{name: "jwt: reschedule without authorizer", req: fixed("withdrawal-reschedule", "", noAuthorizer), want: unauthenticated},
		{name: "someone else's withdrawal: reschedule", req: someoneElses("withdrawal-reschedule"), want: notFound},
		{name: "reschedule a garbage id", req: fixed("withdrawal-reschedule", "garbage"), want: notFound},
		{name: "reschedule an id that does not exist", req: fixed("withdrawal-reschedule", fixtureID), want: notFound},
		{name: "reschedule an id that does not exist, If-Match *", req: fixed("withdrawal-reschedule", fixtureID, header("if-match", "*")), want: notFound},
		{name: "reschedule: body of 16 KiB + 1", req: resched(`{"delay_seconds":1}` + strings.Repeat(" ", httpapi.MaxBody)), want: tooLarge},
		{name: "reschedule: text/plain", req: resched(`{"delay_seconds":1}`, header("content-type", "text/plain")), want: unsupported},
		{name: "reschedule: empty body", req: resched(``), want: invalid("body")},
		{name: "reschedule: bad JSON", req: resched(`{"delay_seconds":`), want: invalid("body")},
		{name: "reschedule: empty object", req: resched(`{}`), want: invalid("delay_seconds")},
		{name: "reschedule: unknown field", req: resched(`{"delay_seconds":1,"amount":"1"}`), want: invalid("amount")},
		{name: "reschedule: delay negative", req: resched(`{"delay_seconds":-1}`), want: invalid("delay_seconds")},
		{name: "reschedule: delay over 30 days", req: resched(`{"delay_seconds":2592001}`), want: invalid("delay_seconds")},
		{name: "reschedule: delay fractional", req: resched(`{"delay_seconds":0.5}`), want: invalid("delay_seconds")},
		{name: "reschedule: process_at in the past", req: resched(`{"process_at":"` + past + `"}`), want: invalid("process_at")},
		{name: "reschedule: process_at too far", req: resched(`{"process_at":"` + tooFar + `"}`), want: invalid("process_at")},
		{name: "reschedule: process_at not RFC 3339", req: resched(`{"process_at":"tomorrow"}`), want: invalid("process_at")},
		{name: "reschedule: delay and process_at", req: resched(`{"delay_seconds":1,"process_at":"` + tooFar + `"}`), want: invalid("process_at")},
		{name: "reschedule: If-Match not an entity tag", req: resched(`{"delay_seconds":1}`, header("if-match", "abc")), want: invalid("If-Match")},
		{name: "reschedule: If-Match a list", req: resched(`{"delay_seconds":1}`, header("if-match", `"a", "b"`)), want: invalid("If-Match")},
		{name: "reschedule: bad If-Match and body", req: resched(`{"delay_seconds":-1}`, header("if-match", `"a`)), want: invalid("delay_seconds", "If-Match")},
		{
			name: "reschedule while processing",
			req:  whileProcessing("withdrawal-reschedule", "resched-processing"),
			want: want{status: 409, code: "not_reschedulable"},
		},
		{
			name: "reschedule a cancelled one",
			req: func(t *testing.T, s *stack) []byte {
				v, _ := s.create(t, key("resched-cancelled"))
				wantJSON(t, s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", v.ID)), 200)
				return rawFixtureFor(t, "withdrawal-reschedule", v.ID)
			},
			want: want{status: 409, code: "not_reschedulable"},
		},
		{
			name: "reschedule with a stale ETag",
			req: func(t *testing.T, s *stack) []byte {
				v, resp := s.create(t, key("resched-stale"))
				stale := resp.Headers["ETag"]
				wantJSON(t, s.invoke(t, payload(t, "withdrawal-reschedule", v.ID, body(`{"delay_seconds":60}`))), 200)
				return payload(t, "withdrawal-reschedule", v.ID, header("if-match", stale))
			},
			want: want{status: 412, code: "precondition_failed"},
		},
		{
			name: "reschedule with a weak ETag",
			req: func(t *testing.T, s *stack) []byte {
				v, resp := s.create(t, key("resched-weak"))
				return payload(t, "withdrawal-reschedule", v.ID, header("if-match", "W/"+resp.Headers["ETag"]))
			},
			want: want{status: 412, code: "precondition_failed"},
		},
		{
			name: "reschedule with another withdrawal's ETag",
			req: func(t *testing.T, s *stack) []byte {
				v, _ := s.create(t, key("resched-other-1"))
				_, other := s.create(t, key("resched-other-2"))
				return payload(t, "withdrawal-reschedule", v.ID, header("if-match", other.Headers["ETag"]))
			},
			want: want{status: 412, code: "precondition_failed"},
		},

		// Admin routes.
		{name: "dev: stats without X-Admin-Token", dev: true, req: fixed("admin-stats", ""), want: unauthenticated},
		{name: "dev: stats with a wrong token", dev: true, req: fixed("admin-stats", "", header("x-admin-token", "wrong")),
			want: want{status: 403, code: "forbidden"}},
		{name: "dev: stats with a token prefix", dev: true, req: fixed("admin-stats", "", header("x-admin-token", "test-admin")),
			want: want{status: 403, code: "forbidden"}},
		{name: "dev: stats with a user id only", dev: true, req: fixed("admin-stats", "", devUser("user-1")), want: unauthenticated},
		{name: "jwt: stats without IAM", req: fixed("admin-stats", "", noAuthorizer), want: want{status: 403, code: "forbidden"}},
		{name: "jwt: stats with a user's JWT", req: fixed("admin-stats", "", withClaims(map[string]string{"sub": fixtureUser})),
			want: want{status: 403, code: "forbidden"}},
		{name: "jwt: stats with X-Admin-Token", req: fixed("admin-stats", "", noAuthorizer, header("x-admin-token", "dev-admin")),
			want: want{status: 403, code: "forbidden"}},
	}
	return cases
}

// reserve plants an unfinished reservation of key for body, as a create
// that is still running would hold it.
func reserve(t *testing.T, s *stack, user, key, body string) {
	t.Helper()
	now := time.Now()
	rules, err := s.cfg.WithdrawalRules()
	if err != nil {
		t.Fatal(err)
	}
	req, err := httpapi.ParseWithdrawal(rules, []byte(body))
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	st, err := s.app.Ledger.Reserve(context.Background(), withdrawal.Reservation{
		Key:         withdrawal.IdemKey{UserID: user, Key: key, Shard: s.app.Withdrawals.ShardFor(user)},
		Fingerprint: req.Fingerprint(),
		ID:          withdrawal.NewID(now),
		Now:         now,
		LockUntil:   now.Add(time.Minute),
		ExpiresAt:   now.Add(24 * time.Hour),
	})
	if err != nil || st.Phase != withdrawal.KeyAcquired {
		t.Fatalf("reserve: %+v %v", st, err)
	}
}

// begin hands withdrawal id to the payout step, as a consumer would.
func begin(t *testing.T, s *stack, user, id string) {
	t.Helper()
	now := time.Now()
	w, start, err := s.app.Ledger.Begin(context.Background(),
		withdrawal.Ref{Shard: s.app.Withdrawals.ShardFor(user), ID: id},
		withdrawal.Begin{Attempt: withdrawal.NewAttemptID(now), Now: now, Until: now.Add(time.Minute)})
	if err != nil || start != withdrawal.StartAttempt || w.Status != withdrawal.Processing {
		t.Fatalf("begin: %v %v %v", w.Status, start, err)
	}
}

// TestProblems checks every refusal: status, problem body, headers, and that
// nothing was written.
func TestProblems(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		jwt := newStack(t, redisURL, nil)
		dev := newStack(t, redisURL, devMode)
		for _, tc := range problemCases() {
			t.Run(tc.name, func(t *testing.T) {
				s := jwt
				if tc.dev {
					s = dev
				}
				p := tc.req(t, s)
				before := snapshot(t, s.rdb)
				checkProblem(t, s.invoke(t, p), tc.want)
				wantUnchanged(t, before, snapshot(t, s.rdb))
			})
		}
	})
}

func TestCancelWhileProcessingLeavesItProcessing(t *testing.T) {
	u, _ := backends[0].start(t)
	s := newStack(t, u, nil)
	v, _ := s.create(t, body(`{"amount":"5","currency":"CNY","destination":"d","delay_seconds":0}`))
	begin(t, s, fixtureUser, v.ID)
	p := checkProblem(t, s.invoke(t, rawFixtureFor(t, "withdrawal-cancel", v.ID)), want{status: 409, code: "not_cancellable"})
	if !strings.Contains(p.Detail, "processing") {
		t.Errorf("detail %q does not say the withdrawal is processing", p.Detail)
	}
	resp := s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID))
	wantJSON(t, resp, 200)
	if got := wantView(t, resp.Body); got.Status != withdrawal.Processing || got.Attempts != 1 {
		t.Errorf("after a refused cancel: status %s, attempts %d; want processing, 1", got.Status, got.Attempts)
	}
}

func TestAdminStatsAuthorized(t *testing.T) {
	u, _ := backends[0].start(t)
	for _, tc := range []struct {
		name string
		vars map[string]string
		mods []mod
	}{
		{"jwt: IAM", nil, nil},
		{"dev: right token", devMode, []mod{header("x-admin-token", "test-admin-token")}},
		{"dev: right token, header not lowercased", devMode, []mod{header("X-Admin-Token", "test-admin-token")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, u, tc.vars)
			wantStats(t, s, payload(t, "admin-stats", "", tc.mods...),
				map[string]any{"due": 0.0, "due_now": 0.0, "oldest_due_lag_ms": 0.0, "inflight": 0.0, "dead": 0.0})
		})
	}
}

// TestRedisDown stops Redis under a running app: requests answer 503 at
// once, nothing is half-written, and the same app recovers when Redis is
// back.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAOF())
	s := newStack(t, srv.URL(), nil)
	kept, _ := s.create(t, key("before-the-crash"))
	before := snapshot(t, s.rdb)

	srv.Kill()
	unavailable := want{status: 503, code: "unavailable", retryAfter: true}
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"create", payload(t, "withdrawal-create", "", key("during-the-outage"))},
		{"list", rawFixture(t, "withdrawal-list")},
		{"get", rawFixtureFor(t, "withdrawal-get", kept.ID)},
		{"cancel", rawFixtureFor(t, "withdrawal-cancel", kept.ID)},
		{"stats", rawFixture(t, "admin-stats")},
		{"healthz", rawFixture(t, "healthz")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			resp := s.invoke(t, tc.payload)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("answered after %s; a dead Redis must fail fast", took)
			}
			checkProblem(t, resp, unavailable)
		})
	}
	if strings.Contains(s.log.String(), `"msg":"internal error"`) {
		t.Errorf("an outage was logged as an internal error:\n%s", s.log.String())
	}

	srv.Restart()
	wantUnchanged(t, before, snapshot(t, s.rdb))
	wantJSON(t, s.invoke(t, rawFixture(t, "healthz")), 200)
	resp := s.invoke(t, rawFixtureFor(t, "withdrawal-get", kept.ID))
	wantJSON(t, resp, 200)
	if diff := cmp.Diff(kept, wantView(t, resp.Body)); diff != "" {
		t.Errorf("withdrawal accepted before the crash (-created +after restart):\n%s", diff)
	}
	fresh, _ := s.create(t, key("after-the-restart"))
	resp = s.invoke(t, rawFixtureFor(t, "withdrawal-get", fresh.ID))
	wantJSON(t, resp, 200)
	if diff := cmp.Diff(fresh, wantView(t, resp.Body)); diff != "" {
		t.Errorf("withdrawal created after the restart (-created +got):\n%s", diff)
	}
	if l := s.list(t); len(l.Items) != 2 {
		t.Errorf("list after the restart: %v, want 2 withdrawals", ids(l.Items))
	}
}

// TestRedisHangs points the app at a server that accepts connections and
// never answers: requests must still end in 503, within the request timeout.
func TestRedisHangs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	s := newStack(t, "redis://"+l.Addr().String(), nil)
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"create", rawFixture(t, "withdrawal-create")},
		{"healthz", rawFixture(t, "healthz")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			resp := s.invoke(t, tc.payload)
			took := time.Since(start)
			t.Logf("answered after %s", took)
			if took > 6*time.Second {
				t.Errorf("answered after %s, past the 5s request timeout", took)
			}
			checkProblem(t, resp, want{status: 503, code: "unavailable", retryAfter: true})
		})
	}
}

// TestRedisOutOfMemory fills Redis past maxmemory (noeviction, as in
// production): writes are refused, reads still work.
func TestRedisOutOfMemory(t *testing.T) {
	srv := redistest.Start(t)
	s := newStack(t, srv.URL(), nil)
	v, _ := s.create(t)
	if err := s.rdb.Do(context.Background(), "CONFIG", "SET", "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, s.rdb)
	t.Run("create", func(t *testing.T) {
		resp := s.invoke(t, payload(t, "withdrawal-create", "", key("oom")))
		checkProblem(t, resp, want{status: 503, code: "unavailable", retryAfter: true})
	})
	t.Run("get", func(t *testing.T) {
		wantJSON(t, s.invoke(t, rawFixtureFor(t, "withdrawal-get", v.ID)), 200)
	})
	wantUnchanged(t, before, snapshot(t, s.rdb))
}

// TestConcurrentCreates releases many requests at once: with one key exactly
// one withdrawal is made and every answer is it or "in flight"; with
// distinct keys every request makes its own.
func TestConcurrentCreates(t *testing.T) {
	const n = 16
	run := func(s *stack, payloads [][]byte) []events.APIGatewayV2HTTPResponse {
		out := make([]events.APIGatewayV2HTTPResponse, n)
		errs := make([]error, n)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			// A Lambda handler reuses its encode buffer (the runtime sends
			// one event at a time); the router is shared as a warm Lambda
			// process would share it across its invocations.
			h := lambda.NewHandler(s.rt)
			go func() {
				defer wg.Done()
				<-gate
				raw, err := h.Invoke(context.Background(), payloads[i])
				if err == nil {
					err = json.Unmarshal(raw, &out[i])
				}
				errs[i] = err
			}()
		}
		close(gate)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		return out
	}

	t.Run("one key", func(t *testing.T) {
		u, _ := backends[0].start(t)
		s := newStack(t, u, nil)
		p := rawFixture(t, "withdrawal-create")
		resps := run(s, slices.Repeat([][]byte{p}, n))
		made := map[string]bool{}
		for _, r := range resps {
			switch r.StatusCode {
			case 202:
				made[r.Headers["Location"]] = true
			case 409:
				checkProblem(t, r, want{status: 409, code: "idempotency_in_flight", retryAfter: true})
			default:
				t.Errorf("status %d: %s", r.StatusCode, r.Body)
			}
		}
		if len(made) != 1 {
			t.Errorf("202s name %d withdrawals, want 1: %v", len(made), made)
		}
		if l := s.list(t); len(l.Items) != 1 {
			t.Errorf("the user has %d withdrawals, want 1", len(l.Items))
		}
	})
	t.Run("distinct keys", func(t *testing.T) {
		u, _ := backends[0].start(t)
		s := newStack(t, u, nil)
		payloads := make([][]byte, n)
		for i := range payloads {
			payloads[i] = payload(t, "withdrawal-create", "", key(fmt.Sprint("key-", i)))
		}
		made := map[string]bool{}
		for _, r := range run(s, payloads) {
			wantStatus(t, r, 202)
			made[r.Headers["Location"]] = true
		}
		if len(made) != n {
			t.Errorf("%d distinct withdrawals, want %d", len(made), n)
		}
		if l := s.list(t, query("limit", "100")); len(l.Items) != n {
			t.Errorf("the user has %d withdrawals, want %d", len(l.Items), n)
		}
	})
}

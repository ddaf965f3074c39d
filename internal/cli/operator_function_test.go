package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/httpapi"
)

// operatorRole is the operator role events/admin-operator.json's session
// assumed.
const operatorRole = "arn:aws:iam::123456789012:role/hourglass-operator"

// lockedBuffer is a log the handler writes while a test reads it.
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

// operatorFunction is the operator function as functions/operator wires
// it, in jwt mode with roles as HOURGLASS_ADMIN_ROLE_ARNS, on a spawned
// redis-server; its log is returned too.
func operatorFunction(t *testing.T, roles string) (*httpapi.Router, *lockedBuffer) {
	t.Helper()
	rs := redistest.Start(t)
	t.Setenv("REDIS_URL", rs.URL())
	t.Setenv("HOURGLASS_AUTH", "jwt")
	t.Setenv("HOURGLASS_ADMIN_ROLE_ARNS", roles)
	cfg, err := config.Load(config.Local)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &lockedBuffer{}
	a, err := app.New(cfg, app.NewLogger(logs, cfg.SlogLevel()), rdb)
	if err != nil {
		t.Fatal(err)
	}
	return a.OperatorAPI(OperatorDeadline, Operator{App: a, Log: a.Log}.Register), logs
}

// operatorEvent is events/admin-operator.json with body as its body.
func operatorEvent(t *testing.T, body string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "events", "admin-operator.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	if body != "" {
		ev.Body = body
	}
	return ev
}

// invoke runs ev through the router as Lambda does (raw JSON in, raw JSON
// out) and returns the response.
func invoke(t *testing.T, rt *httpapi.Router, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	out, err := rt.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func commandResult(t *testing.T, resp events.APIGatewayV2HTTPResponse) OperatorResult {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", resp.StatusCode, resp.Body)
	}
	var r OperatorResult
	if err := json.Unmarshal([]byte(resp.Body), &r); err != nil {
		t.Fatalf("%v: %s", err, resp.Body)
	}
	return r
}

func problemCode(t *testing.T, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	var p struct{ Code string }
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatalf("%v: %s", err, resp.Body)
	}
	return p.Code
}

// TestOperatorFunctionRunsOperatorCommands: an operator command runs on
// the function's app and its output and exit code come back; the log line
// names the caller, the command and its exit code.
func TestOperatorFunctionRunsOperatorCommands(t *testing.T) {
	rt, logs := operatorFunction(t, operatorRole)
	caller := "arn:aws:sts::123456789012:assumed-role/hourglass-operator/ops"

	r := commandResult(t, invoke(t, rt, operatorEvent(t, "")))
	if r.ExitCode != 0 || r.Stdout == "" {
		t.Fatalf("payouts unresolved: %+v", r)
	}

	r = commandResult(t, invoke(t, rt, operatorEvent(t, `{"args":["stats","--json"]}`)))
	var snap struct {
		Queues map[string]json.RawMessage `json:"queues"`
	}
	if r.ExitCode != 0 || json.Unmarshal([]byte(r.Stdout), &snap) != nil || snap.Queues["withdrawals"] == nil {
		t.Fatalf("stats --json: %+v", r)
	}

	// A command that fails answers 200 with its exit code and complaint.
	r = commandResult(t, invoke(t, rt, operatorEvent(t, `{"args":["peek","nosuch"]}`)))
	if r.ExitCode != exitFailure || !strings.Contains(r.Stderr, `no queue "nosuch"`) {
		t.Errorf("peek nosuch: %+v", r)
	}
	r = commandResult(t, invoke(t, rt, operatorEvent(t, `{"args":["dead","list","--nosuch"]}`)))
	if r.ExitCode != exitUsage || !strings.Contains(r.Stderr, "--nosuch") {
		t.Errorf("dead list --nosuch: %+v", r)
	}
	// payouts resolve reaches the ledger (and would name the IAM caller as who resolved it).
	r = commandResult(t, invoke(t, rt, operatorEvent(t, `{"args":["payouts","resolve","w_nosuch","--revision","1","--failed","no record"]}`)))
	if r.ExitCode != exitFailure || !strings.Contains(r.Stderr, "no withdrawal w_nosuch") {
		t.Errorf("payouts resolve: %+v", r)
	}

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "operator command" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 5 {
		t.Fatalf("%d operator command log lines, want 5:\n%s", len(lines), logs)
	}
	first, _ := json.Marshal(lines[0]["args"])
	if lines[0]["caller"] != caller || string(first) != `["payouts","unresolved"]` || lines[0]["exit_code"] != 0.0 ||
		lines[0]["level"] != "INFO" {
		t.Errorf("log line %v, want the caller %s, the args and exit code 0 at INFO", lines[0], caller)
	}
	if lines[2]["exit_code"] != 1.0 {
		t.Errorf("log line %v, want exit code 1", lines[2])
	}
}

// TestOperatorFunctionRefuses: only operator commands, only well-formed
// bodies, only the operator roles; nothing runs otherwise, and a refused
// command's arguments (sign's, say) never reach the log.
func TestOperatorFunctionRefuses(t *testing.T) {
	rt, logs := operatorFunction(t, operatorRole)
	for _, c := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"serve", `{"args":["serve"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"sign", `{"args":["sign","--secret","s3cr3t-value"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"a secret first", `{"args":["--secret=s3cr3t-value","sign"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"preheat", `{"args":["preheat","phone","--stock","1"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"withdrawals", `{"args":["withdrawals","show","w1"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"help", `{"args":["help"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"payouts alone", `{"args":["payouts"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"a flag first", `{"args":["--remote","https://x","stats"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"stats --watch", `{"args":["stats","--watch"]}`, 400, httpapi.CodeNotOperatorCommand},
		{"no args", `{"args":[]}`, 400, httpapi.CodeValidationFailed},
		{"unknown field", `{"args":["stats"],"env":{"REDIS_URL":"x"}}`, 400, httpapi.CodeValidationFailed},
		{"not an object", `["stats"]`, 400, httpapi.CodeValidationFailed},
		{"too many words", `{"args":["stats"` + strings.Repeat(`,"x"`, maxOperatorArgs) + `]}`, 400, httpapi.CodeValidationFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := invoke(t, rt, operatorEvent(t, c.body))
			if resp.StatusCode != c.status || problemCode(t, resp) != c.code {
				t.Errorf("%d %s, want %d %s", resp.StatusCode, resp.Body, c.status, c.code)
			}
		})
	}
	if strings.Contains(logs.String(), "s3cr3t-value") {
		t.Errorf("a refused command's argument reached the log:\n%s", logs)
	}
	if !strings.Contains(logs.String(), `"msg":"operator command refused"`) || strings.Contains(logs.String(), `"msg":"operator command",`) {
		t.Errorf("want refusals logged and nothing run:\n%s", logs)
	}

	t.Run("another role", func(t *testing.T) {
		ev := operatorEvent(t, `{"args":["stats"]}`)
		ev.RequestContext.Authorizer.IAM.UserARN = "arn:aws:sts::123456789012:assumed-role/hourglass-deployer/ci"
		if resp := invoke(t, rt, ev); resp.StatusCode != 403 || problemCode(t, resp) != httpapi.CodeForbidden {
			t.Errorf("%d %s, want 403 forbidden", resp.StatusCode, resp.Body)
		}
	})
	t.Run("no IAM context", func(t *testing.T) {
		ev := operatorEvent(t, `{"args":["stats"]}`)
		ev.RequestContext.Authorizer = nil
		if resp := invoke(t, rt, ev); resp.StatusCode != 403 {
			t.Errorf("%d %s, want 403", resp.StatusCode, resp.Body)
		}
	})
	t.Run("no operator role configured", func(t *testing.T) {
		none, _ := operatorFunction(t, "")
		if resp := invoke(t, none, operatorEvent(t, "")); resp.StatusCode != 403 || problemCode(t, resp) != httpapi.CodeAdminNotConfigured {
			t.Errorf("%d %s, want 403 admin_not_configured", resp.StatusCode, resp.Body)
		}
	})
}

// TestRemote: hourglass --remote sends the command to the operator route
// signed with SigV4 (service execute-api, the API's region) and prints the
// command's output with its exit code; refusals print the problem and exit
// 1, or 2 when the command line was refused. The server is the operator
// function itself behind a stand-in for API Gateway's IAM authorizer.
func TestRemote(t *testing.T) {
	rt, _ := operatorFunction(t, operatorRole)
	var (
		mu     sync.Mutex
		bodies []string
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDOPERATOR/") ||
			!strings.Contains(auth, "/eu-west-1/execute-api/aws4_request") || r.Header.Get("X-Amz-Date") == "" ||
			r.Header.Get("X-Amz-Security-Token") != "session-token" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"message":"Forbidden"}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(body))
		mu.Unlock()
		ev := operatorEvent(t, string(body))
		ev.RawPath, ev.RequestContext.HTTP.Path, ev.RequestContext.HTTP.Method = r.URL.Path, r.URL.Path, r.Method
		ev.Headers["content-type"] = r.Header.Get("Content-Type")
		resp, _ := rt.Serve(r.Context(), ev)
		for k, v := range resp.Headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.WriteString(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDOPERATOR")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "operator-secret")
	t.Setenv("AWS_SESSION_TOKEN", "session-token")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv(remoteEnv, "")
	// The test server's certificate, trusted as a real API's would be.
	old := http.DefaultTransport
	http.DefaultTransport = srv.Client().Transport
	t.Cleanup(func() { http.DefaultTransport = old })

	cli := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
	out, errOut, code := cli("--remote", srv.URL+"/", "stats", "--json")
	if code != 0 || !strings.Contains(out, `"withdrawals"`) {
		t.Fatalf("--remote stats --json: exit %d\n%s\n%s", code, out, errOut)
	}
	if len(bodies) != 1 || bodies[0] != `{"args":["stats","--json"]}` {
		t.Errorf("bodies sent %q", bodies)
	}
	// The command's exit code and stderr pass through.
	if _, errOut, code := cli("--remote="+srv.URL, "peek", "nosuch"); code != 1 || !strings.Contains(errOut, `no queue "nosuch"`) {
		t.Errorf("--remote peek nosuch: exit %d, stderr %s", code, errOut)
	}
	// HOURGLASS_REMOTE sends operator commands only.
	t.Setenv(remoteEnv, srv.URL)
	if _, errOut, code := cli("payouts", "unresolved"); code != 0 {
		t.Errorf("HOURGLASS_REMOTE payouts unresolved: exit %d, %s", code, errOut)
	}
	if len(bodies) != 3 {
		t.Errorf("%d calls, want 3", len(bodies))
	}
	t.Setenv(remoteEnv, "")
	// Refused here, before any call: not an operator command.
	if _, errOut, code := cli("--remote", srv.URL, "serve"); code != exitUsage || !strings.Contains(errOut, "only the operator commands") {
		t.Errorf("--remote serve: exit %d, %s", code, errOut)
	}
	if _, errOut, code := cli("--remote", srv.URL, "stats", "--watch=true"); code != exitUsage || !strings.Contains(errOut, "--watch") {
		t.Errorf("--remote stats --watch: exit %d, %s", code, errOut)
	}
	if _, errOut, code := cli("--remote", "http://example.com", "stats"); code != exitUsage || !strings.Contains(errOut, "ApiUrl") {
		t.Errorf("--remote http://: exit %d, %s", code, errOut)
	}
	// Refused by the function: a problem, printed, exit 2 for a bad command line.
	if _, errOut, code := cli("--remote", srv.URL, "stats", strings.Repeat("x", maxOperatorArgLen+1)); code != exitUsage ||
		!strings.Contains(errOut, "400 validation_failed") {
		t.Errorf("an oversized argument: exit %d, %s", code, errOut)
	}
	// Refused by API Gateway (no valid signature): exit 1, its answer printed.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDOTHER")
	if _, errOut, code := cli("--remote", srv.URL, "stats"); code != exitFailure || !strings.Contains(errOut, "403 Forbidden") {
		t.Errorf("an unsigned caller: exit %d, %s", code, errOut)
	}
	if len(bodies) != 4 {
		t.Errorf("%d calls reached the function, want 4", len(bodies))
	}
}

package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/encoding/cbor"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/sqsfake"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/consumer"
)

// The fakes' identities: the user the access token stands for, the AWS
// credentials smoke signs with, and the name of the alarm it must set.
const (
	smokeToken     = "eyJ.smoke-access-token.sig"
	smokeUser      = "smoke-user"
	smokeAccessKey = "AKIDSMOKETEST"
	smokeSecretKey = "smoke-secret-key"
	smokeRegion    = "eu-west-1"
	dlqAlarmName   = "Hourglass-DeadLetterQueueAlarm1A2B3C4D-XYZ"
)

// fakeGateway stands for API Gateway in front of `hourglass serve`: the
// JWT authorizer (the access token becomes X-User-Id) and IAM
// authorization (a SigV4 signature it verifies with the fake credentials
// becomes the dev admin token). What it saw is recorded.
type fakeGateway struct {
	t     *testing.T
	URL   string
	mu    sync.Mutex
	seen  []string // "METHOD path auth", auth one of bearer, sigv4, none
	proxy *httputil.ReverseProxy
}

func newFakeGateway(t *testing.T, backend string) *fakeGateway {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGateway{t: t, proxy: httputil.NewSingleHostReverseProxy(u)}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	authz := r.Header.Get("Authorization")
	r.Header.Del("X-User-Id") // only the authorizer says who the user is
	r.Header.Del("X-Admin-Token")
	kind := "none"
	switch {
	case strings.HasPrefix(authz, "Bearer "):
		kind = "bearer"
		if strings.TrimPrefix(authz, "Bearer ") != smokeToken {
			http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		r.Header.Set("X-User-Id", smokeUser)
	case strings.HasPrefix(authz, "AWS4-HMAC-SHA256 "):
		kind = "sigv4"
		if err := verifySigV4(r, body); err != nil {
			g.t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, `{"message":"Forbidden"}`, http.StatusForbidden)
			return
		}
		r.Header.Set("X-Admin-Token", "dev-admin")
	}
	r.Header.Del("Authorization")
	g.mu.Lock()
	g.seen = append(g.seen, r.Method+" "+r.URL.Path+" "+kind)
	g.mu.Unlock()
	g.proxy.ServeHTTP(w, r)
}

func (g *fakeGateway) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

// verifySigV4 signs the request again, with the headers it names, at the
// time it names, as the fake credentials for execute-api in smokeRegion,
// and wants the same signature.
var credRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/\d{8}/([^/]+)/([^/]+)/aws4_request, SignedHeaders=([^,]+), Signature=[0-9a-f]{64}$`)

func verifySigV4(r *http.Request, body []byte) error {
	authz := r.Header.Get("Authorization")
	m := credRe.FindStringSubmatch(authz)
	if m == nil {
		return fmt.Errorf("authorization %q is no SigV4 signature", authz)
	}
	if m[1] != smokeAccessKey || m[2] != smokeRegion || m[3] != "execute-api" {
		return fmt.Errorf("signed by %s for %s in %s; want %s, execute-api, %s", m[1], m[3], m[2], smokeAccessKey, smokeRegion)
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return err
	}
	again, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	for h := range strings.SplitSeq(m[4], ";") {
		if h != "host" && h != "content-length" && h != "x-amz-date" {
			again.Header.Set(h, r.Header.Get(h))
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: smokeAccessKey, SecretAccessKey: smokeSecretKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), "execute-api", smokeRegion, at); err != nil {
		return err
	}
	if got := again.Header.Get("Authorization"); got != authz {
		return fmt.Errorf("signature does not verify:\n got  %s\n want %s", authz, got)
	}
	return nil
}

// fakeCloudFormation answers DescribeStacks and ListStackResources in the
// query protocol (form-encoded requests, XML answers) for the stacks it
// holds: name -> outputs. ListStackResources answers in two pages.
type fakeCloudFormation struct {
	URL    string
	stacks map[string]map[string]string
	mu     sync.Mutex
	calls  []string
}

func newFakeCloudFormation(t *testing.T, stacks map[string]map[string]string) *fakeCloudFormation {
	t.Helper()
	f := &fakeCloudFormation{stacks: stacks}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeCloudFormation) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Header.Get("Authorization") == "" || r.Form.Get("Version") != "2010-05-15" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	action, name := r.Form.Get("Action"), r.Form.Get("StackName")
	f.mu.Lock()
	f.calls = append(f.calls, action+" "+name)
	f.mu.Unlock()
	outs, ok := f.stacks[name]
	w.Header().Set("Content-Type", "text/xml")
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>Sender</Type>`+
			`<Code>ValidationError</Code><Message>Stack with id %s does not exist</Message></Error><RequestId>r1</RequestId></ErrorResponse>`, html.EscapeString(name))
		return
	}
	var b strings.Builder
	switch action {
	case "DescribeStacks":
		b.WriteString(`<DescribeStacksResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><DescribeStacksResult><Stacks><member>`)
		fmt.Fprintf(&b, `<StackName>%s</StackName><StackId>arn:aws:cloudformation:%s:123456789012:stack/%s/1</StackId>`, name, smokeRegion, name)
		b.WriteString(`<CreationTime>2026-12-01T00:00:00Z</CreationTime><StackStatus>CREATE_COMPLETE</StackStatus><Outputs>`)
		for k, v := range outs {
			fmt.Fprintf(&b, `<member><OutputKey>%s</OutputKey><OutputValue>%s</OutputValue></member>`, k, html.EscapeString(v))
		}
		b.WriteString(`</Outputs></member></Stacks></DescribeStacksResult><ResponseMetadata><RequestId>r2</RequestId></ResponseMetadata></DescribeStacksResponse>`)
	case "ListStackResources":
		res := func(logical, physical, typ string) string {
			return fmt.Sprintf(`<member><LogicalResourceId>%s</LogicalResourceId><PhysicalResourceId>%s</PhysicalResourceId>`+
				`<ResourceType>%s</ResourceType><ResourceStatus>CREATE_COMPLETE</ResourceStatus>`+
				`<LastUpdatedTimestamp>2026-12-01T00:00:00Z</LastUpdatedTimestamp></member>`, logical, physical, typ)
		}
		page, next := "", ""
		if r.Form.Get("NextToken") == "" {
			page = res("DeadLetterQueueAgeAlarm9F8E7D6C", "Hourglass-DeadLetterQueueAgeAlarm9F8E7D6C-ABC", "AWS::CloudWatch::Alarm") +
				res("DeadLetterQueue1111AAAA", "https://sqs/dlq", "AWS::SQS::Queue")
			next = "<NextToken>page-2</NextToken>"
		} else {
			page = res("DeadLetterQueueAlarm1A2B3C4D", dlqAlarmName, "AWS::CloudWatch::Alarm") +
				res("PollerFailuresAlarm0000FFFF", "Hourglass-PollerFailuresAlarm0000FFFF-DEF", "AWS::CloudWatch::Alarm")
		}
		fmt.Fprintf(&b, `<ListStackResourcesResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><ListStackResourcesResult>`+
			`<StackResourceSummaries>%s</StackResourceSummaries>%s</ListStackResourcesResult>`+
			`<ResponseMetadata><RequestId>r3</RequestId></ResponseMetadata></ListStackResourcesResponse>`, page, next)
	default:
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	_, _ = io.WriteString(w, b.String())
}

func (f *fakeCloudFormation) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// fakeCloudWatch answers SetAlarmState in the protocol the SDK speaks to
// CloudWatch (Smithy RPC v2 CBOR) and records each call's input.
type fakeCloudWatch struct {
	URL  string
	mu   sync.Mutex
	sets []map[string]string
}

func newFakeCloudWatch(t *testing.T) *fakeCloudWatch {
	t.Helper()
	f := &fakeCloudWatch{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/service/GraniteServiceVersion20100801/operation/SetAlarmState" ||
			r.Header.Get("Smithy-Protocol") != "rpc-v2-cbor" || r.Header.Get("Authorization") == "" {
			t.Errorf("CloudWatch: unexpected %s %s %v", r.Method, r.URL.Path, r.Header)
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		v, err := cbor.Decode(raw)
		m, ok := v.(cbor.Map)
		if err != nil || !ok {
			t.Errorf("CloudWatch: body %x is no CBOR map: %v", raw, err)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		in := map[string]string{}
		for k, v := range m {
			if s, ok := v.(cbor.String); ok {
				in[k] = string(s)
			}
		}
		f.mu.Lock()
		f.sets = append(f.sets, in)
		f.mu.Unlock()
		w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeCloudWatch) Sets() []map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]string(nil), f.sets...)
}

// smokeAWS points the AWS SDK of this process at the fakes, with the fake
// credentials and region, and nothing from the machine's AWS settings.
func smokeAWS(t *testing.T, cfn, cw, sqsURL string) {
	t.Helper()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": smokeAccessKey, "AWS_SECRET_ACCESS_KEY": smokeSecretKey, "AWS_SESSION_TOKEN": "",
		"AWS_REGION": smokeRegion, "AWS_PROFILE": "", "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "",
		"AWS_ENDPOINT_URL_CLOUDFORMATION": cfn, "AWS_ENDPOINT_URL_CLOUDWATCH": cw, "AWS_ENDPOINT_URL_SQS": sqsURL,
		"HOURGLASS_REMOTE": "",
	} {
		t.Setenv(k, v)
	}
}

// hourglassOutputs are the outputs of a deployed stack whose API is api.
func hourglassOutputs(api string) map[string]string {
	return map[string]string{
		"ApiUrl":             api,
		"WorkQueueUrl":       sqsfake.QueueURL,
		"DeadLetterQueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/hourglass-dlq",
		"AlarmTopicArn":      "arn:aws:sns:eu-west-1:123456789012:hourglass-alarms",
		"ConsumerLogGroup":   "/aws/lambda/hourglass-consumer",
	}
}

// TestSmokeAgainstTheLocalStack runs `hourglass smoke` against `hourglass
// serve` on a real redis-server, behind a fake API Gateway, with
// CloudFormation, CloudWatch and SQS faked in their own protocols, and
// checks every step happened where it lands: the two withdrawals in the
// ledger with their due times, the item preheated and its one unit
// bought, a message on the work queue that the real consumer fails until
// it is dead-lettered, the right alarm set to ALARM; and that the
// checklist names what was created, and the token is never printed.
func TestSmokeAgainstTheLocalStack(t *testing.T) {
	rs := redistest.Start(t)
	s := serve(t, proctest.FreeAddr(t), map[string]string{"REDIS_URL": rs.URL()})
	gw := newFakeGateway(t, s.base)
	cfn := newFakeCloudFormation(t, map[string]map[string]string{"Hourglass": hourglassOutputs(gw.URL)})
	cw := newFakeCloudWatch(t)
	q := sqsfake.New(t)
	q.Attributes = map[string]string{
		"VisibilityTimeout": "270",
		"RedrivePolicy":     `{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:123456789012:hourglass-dlq","maxReceiveCount":5}`,
	}
	smokeAWS(t, cfn.URL, cw.URL, q.URL)
	t.Setenv(smokeTokenEnv, smokeToken)

	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"smoke", "--stack", "Hourglass", "--json"}, nil, &out, &errb); code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	if strings.Contains(out.String()+errb.String(), smokeToken) {
		t.Fatal("the token was printed")
	}
	var rep smokeReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report %s: %v", out.String(), err)
	}

	// The withdrawals, as the ledger holds them, read as their user.
	if len(rep.Withdrawals) != 2 {
		t.Fatalf("withdrawals %+v", rep.Withdrawals)
	}
	cfg, err := config.Load(config.Local) // the defaults the stack keeps
	if err != nil {
		t.Fatal(err)
	}
	if smokeFar <= cfg.RedisHorizon {
		t.Fatalf("smoke's far delay %s is not beyond the Redis horizon %s", smokeFar, cfg.RedisHorizon)
	}
	for i, want := range []struct {
		role  string
		delay time.Duration
	}{{"near", time.Minute}, {"far", smokeFar}} {
		w := rep.Withdrawals[i]
		got := s.do(http.MethodGet, "/v1/withdrawals/"+w.ID, smokeUser, nil, "")
		if got.status != http.StatusOK || got.body["status"] != "scheduled" || w.Role != want.role {
			t.Fatalf("%s withdrawal %s: %d %s", want.role, w.ID, got.status, got.raw)
		}
		due, _ := time.Parse(time.RFC3339Nano, got.body["due_at"].(string))
		created, _ := time.Parse(time.RFC3339Nano, got.body["created_at"].(string))
		if due.Sub(created) != want.delay || got.body["due_at"] != w.DueAt {
			t.Errorf("%s withdrawal due %s after its creation (report: %s), want %s", want.role, due.Sub(created), w.DueAt, want.delay)
		}
	}

	// The sale: preheated with one unit, which the user bought.
	if !strings.HasPrefix(rep.ItemID, "smoke-") || rep.PurchaseID == "" {
		t.Fatalf("item %q purchase %q", rep.ItemID, rep.PurchaseID)
	}
	mine := s.do(http.MethodGet, "/v1/seckill/items/"+rep.ItemID+"/purchases/me", smokeUser, nil, "")
	if mine.status != http.StatusOK || mine.body["purchase_id"] != rep.PurchaseID {
		t.Fatalf("purchases/me: %d %s", mine.status, mine.raw)
	}
	if item := s.do(http.MethodGet, "/v1/seckill/items/"+rep.ItemID, "", nil, ""); item.body["stock_left"] != float64(0) {
		t.Errorf("item after the purchase: %s", item.raw)
	}
	wantCalls := []string{
		"GET /healthz none",
		"POST /v1/withdrawals bearer",
		"POST /v1/withdrawals bearer",
		"PUT /v1/seckill/items/" + rep.ItemID + " sigv4",
		"POST /v1/seckill/items/" + rep.ItemID + "/purchases bearer",
	}
	if got := gw.requests(); strings.Join(got, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("the gateway saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantCalls, "\n"))
	}

	// The forced failure: on the work queue, and the consumer fails it on
	// every receive until it is dead-lettered.
	reqs := q.Requests()
	if len(reqs) != 1 || reqs[0].QueueUrl != sqsfake.QueueURL || len(reqs[0].Entries) != 1 {
		t.Fatalf("work queue requests %+v", reqs)
	}
	if f := rep.Forced; f == nil || f.MaxReceives != 5 || f.DeadLetterAfterSeconds != 5*270 || f.MessageID == "" {
		t.Fatalf("forced failure %+v", rep.Forced)
	}
	src := &sqsfake.EventSource{
		Queue:    q,
		Function: lambda.NewHandler(consumer.New(consumer.Config{Logger: slog.New(slog.DiscardHandler)}).Handle),
		// Each receive at once: the test does not wait out a visibility timeout.
		MaxReceives: 5, Visibility: time.Nanosecond,
	}
	for range 5 {
		q.Release(rep.Forced.MessageID)
		if n, err := src.Poll(context.Background()); n != 1 || err != nil {
			t.Fatalf("poll: %d %v", n, err)
		}
	}
	if dead := src.Dead(); len(dead) != 1 || dead[0].MessageId != rep.Forced.MessageID || src.ItemFailures.Load() != 5 {
		t.Fatalf("dead %+v after %d item failures", dead, src.ItemFailures.Load())
	}

	// The alarm: the stack's DeadLetterQueueAlarm (found on the second
	// page of the stack's resources), set to ALARM.
	sets := cw.Sets()
	if len(sets) != 1 || sets[0]["AlarmName"] != dlqAlarmName || sets[0]["StateValue"] != "ALARM" || !strings.Contains(sets[0]["StateReason"], rep.Run) {
		t.Fatalf("SetAlarmState calls %v", sets)
	}
	if rep.Alarm == nil || rep.Alarm.Name != dlqAlarmName {
		t.Errorf("report's alarm %+v", rep.Alarm)
	}
	if got := strings.Join(cfn.Calls(), ", "); got != "DescribeStacks Hourglass, ListStackResources Hourglass, ListStackResources Hourglass" {
		t.Errorf("CloudFormation calls: %s", got)
	}

	// The checklist names every id.
	checks := strings.Join(rep.Checks, "\n")
	for _, id := range []string{dlqAlarmName, rep.Withdrawals[0].ID, rep.Withdrawals[1].ID, rep.PurchaseID, rep.ItemID, rep.Forced.MessageID, `"smoke_test":"` + rep.Run,
		hourglassOutputs("")["DeadLetterQueueUrl"], hourglassOutputs("")["AlarmTopicArn"], hourglassOutputs("")["ConsumerLogGroup"], "purge-queue", "paid", "scheduled", "e-mail"} {
		if !strings.Contains(checks, id) {
			t.Errorf("the checks do not name %q:\n%s", id, checks)
		}
	}

	// The same run for people: a line per step, then the numbered checks.
	out.Reset()
	errb.Reset()
	if code := Run(context.Background(), []string{"smoke", "--stack", "Hourglass"}, nil, &out, &errb); code != exitOK {
		t.Fatalf("text run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	text := out.String()
	if strings.Count(text, "\nok  ") != 7 || !strings.Contains(text, "check by hand\n 1. the alarm e-mail") || strings.Contains(text, smokeToken) {
		t.Errorf("text report:\n%s", text)
	}

	// A report that cannot be written fails the run: its ids would be lost.
	errb.Reset()
	if code := Run(context.Background(), []string{"smoke", "--stack", "Hourglass", "--json"}, nil, brokenPipe{}, &errb); code != exitFailure ||
		!strings.Contains(errb.String(), "broken pipe") {
		t.Errorf("report to a broken pipe: exit %d, stderr %s", code, errb.String())
	}
}

// TestSmokeRefusals: what smoke refuses before it creates anything, and
// what it says; the token is never printed.
func TestSmokeRefusals(t *testing.T) {
	api := newFakeGateway(t, "http://127.0.0.1:1") // never reached
	partial := hourglassOutputs(api.URL)
	delete(partial, "WorkQueueUrl")
	plain := hourglassOutputs("http://api.example.com")
	cfn := newFakeCloudFormation(t, map[string]map[string]string{"Partial": partial, "Plain": plain})
	cw := newFakeCloudWatch(t)
	q := sqsfake.New(t)
	smokeAWS(t, cfn.URL, cw.URL, q.URL)

	for _, tc := range []struct {
		name  string
		token string
		args  []string
		code  int
		want  string
		calls int // CloudFormation calls made
	}{
		{"no token", "", []string{"--stack", "Hourglass"}, exitUsage, "no user access token: set HOURGLASS_SMOKE_TOKEN", 0},
		{"no stack", smokeToken, nil, exitUsage, "--stack is required", 0},
		{"Bearer in the token", "Bearer " + smokeToken, []string{"--stack", "Hourglass"}, exitUsage, "without \"Bearer \"", 0},
		{"far before near", smokeToken, []string{"--stack", "Hourglass", "--far", "30s"}, exitUsage, "--far (30s) must be later", 0},
		{"stack not found", smokeToken, []string{"--stack", "Nope"}, exitUsage, `stack "Nope" not found in eu-west-1`, 1},
		{"an output missing", smokeToken, []string{"--stack", "Partial"}, exitFailure, "stack Partial has no output WorkQueueUrl", 1},
		{"token over plain http", smokeToken, []string{"--stack", "Plain"}, exitFailure, "the token goes only over https", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(smokeTokenEnv, tc.token)
			before := len(cfn.Calls())
			var out, errb bytes.Buffer
			code := Run(context.Background(), append([]string{"smoke"}, tc.args...), nil, &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, want %d; stderr %q, want %q", code, tc.code, errb.String(), tc.want)
			}
			if got := len(cfn.Calls()) - before; got != tc.calls {
				t.Errorf("%d CloudFormation calls, want %d", got, tc.calls)
			}
			if strings.Contains(out.String()+errb.String(), smokeToken) {
				t.Error("the token was printed")
			}
		})
	}
	if len(cw.Sets()) != 0 || len(q.Requests()) != 0 || len(api.requests()) != 0 {
		t.Errorf("a refused smoke did something: alarms %v, queue %v, API %v", cw.Sets(), q.Requests(), api.requests())
	}
}

// TestSmokeRefusedToken: an access token the authorizer refuses stops the
// run at the first user call and says what the token must be.
func TestSmokeRefusedToken(t *testing.T) {
	rs := redistest.Start(t)
	s := serve(t, proctest.FreeAddr(t), map[string]string{"REDIS_URL": rs.URL()})
	gw := newFakeGateway(t, s.base)
	cfn := newFakeCloudFormation(t, map[string]map[string]string{"Hourglass": hourglassOutputs(gw.URL)})
	cw := newFakeCloudWatch(t)
	q := sqsfake.New(t)
	smokeAWS(t, cfn.URL, cw.URL, q.URL)
	t.Setenv(smokeTokenEnv, "an-id-token-perhaps")

	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"smoke", "--stack", "Hourglass"}, nil, &out, &errb); code != exitFailure {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "401") || !strings.Contains(errb.String(), "docs/deploy.md#cognito") ||
		strings.Contains(out.String()+errb.String(), "an-id-token-perhaps") {
		t.Errorf("stderr: %s", errb.String())
	}
	if len(cw.Sets()) != 0 || len(q.Requests()) != 0 {
		t.Errorf("went on after the refusal: alarms %v, queue %v", cw.Sets(), q.Requests())
	}
}
